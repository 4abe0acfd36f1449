"""The Triton backend with the real compiler (triton 3.8.0, CPU only): a small pipelined matmul kernel compiled for
sm_120 and sm_90 with Triton's own binder; sizes, the launch check's verdict, the cache, errors, parallel compiles."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("triton")

from tileprobe.backends.triton import toolchain  # noqa: E402
from tileprobe.backends.triton.compile import (KernelJob, TritonBuild, TritonCompileError,  # noqa: E402
                                               compile_job, compile_many)
from tileprobe.backends.triton.source import extract  # noqa: E402
from tileprobe.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.triton

KERNEL_FILE = '''
import os, sys  # module-level code the kernel does not use is left out
import triton
import triton.language as tl

SCALE = tl.constexpr(2.0)
UNUSED = os.getcwd()


@triton.jit
def _scale(x):
    return x * SCALE


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, _scale(acc).to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def broken_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)
'''
SRC = extract(KERNEL_FILE, "mm_kernel", "test kernel")


def mm_job(bm: int, bn: int, bk: int, stages: int, warps: int = 4, cc: int = 120, k: int = 4096) -> KernelJob:
    args = ("*bf16", "*bf16", "*bf16", 4096, 4096, k, k, 1, 4096, 1, 4096, 1)
    kwargs = (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("num_warps", warps), ("num_stages", stages))
    return KernelJob(SRC, args, kwargs, cc)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("triton-cache")


@pytest.fixture(scope="session")
def tile():
    r = random.Random()
    t = r.choice([(64, 64, 64), (64, 128, 64), (128, 64, 64), (128, 128, 32)])
    print(f"tile {t}")
    return t


@pytest.fixture(scope="session")
def builds(cache, tile):
    """Two stage counts of one random tile for sm_120, and the 3-stage one for sm_90 (compiled once a session)."""
    jobs = [mm_job(*tile, 2), mm_job(*tile, 4), mm_job(*tile, 3, cc=90)]
    return compile_many(jobs, 2, cache)


def test_extract_keeps_the_kernel_its_helpers_and_constants():
    assert "def mm_kernel" in SRC.text and "def _scale" in SRC.text and "SCALE = tl.constexpr" in SRC.text
    assert "broken_kernel" not in SRC.text and "UNUSED" not in SRC.text
    with pytest.raises(UsageError, match="no top-level function 'nope'"):
        extract(KERNEL_FILE, "nope", "test kernel")


def test_installed_is_the_engines_release():
    inst = toolchain.require_triton()
    assert inst.version == toolchain.ENGINE_TRITON and inst.cuobjdump.is_file()


def test_another_release_is_refused_unless_asked(monkeypatch):
    monkeypatch.setattr(toolchain, "installed", lambda: toolchain.TritonInstall("3.6.0", toolchain.Path("/x")))
    monkeypatch.delenv("TILEPROBE_ANY_TRITON", raising=False)
    with pytest.raises(UsageError, match="these bytes would be triton 3.6.0's"):
        toolchain.require_triton()
    assert toolchain.require_triton(any_triton=True).version == "3.6.0"


def test_sizes_come_from_the_compiled_kernel(builds, tile):
    two, four, sm90 = builds
    for b in builds:
        assert isinstance(b, TritonBuild), b
        assert b.triton_version == toolchain.ENGINE_TRITON and b.regs and b.regs > 0 and b.spills is not None
    assert (two.arch, four.arch, sm90.arch) == ("sm120", "sm120", "sm90")
    assert (two.num_stages, four.num_stages, two.num_warps) == (2, 4, 4)
    # more stages buffer more tiles of A and B: the compiler's own number grows with them
    assert four.shared > two.shared > 0


def test_verdict_is_triton_launch_check(builds):
    b = builds[1]
    assert b.fits(b.shared) is None
    over = b.fits(b.shared - 1)
    assert over.required == b.shared and over.limit == b.shared - 1
    assert over.text.startswith(f"out of resource: shared memory, Required: {b.shared}, Hardware limit: "
                                f"{b.shared - 1}")


def test_cache_answers_the_second_time(cache, tile, builds):
    again = compile_job(mm_job(*tile, 4), cache)
    assert again.cached and again.shared == builds[1].shared and again.regs == builds[1].regs
    other = compile_job(mm_job(*tile, 4), cache, rebuild=True)
    assert not other.cached and other.shared == builds[1].shared


def test_compile_failure_is_one_line(cache):
    src = extract(KERNEL_FILE, "broken_kernel", "test kernel")
    got = compile_job(KernelJob(src, ("*fp32",), (("BLOCK", 64),), 120), cache)
    assert isinstance(got, TritonCompileError)
    assert "\n" not in got.line and "undefined_name" in got.line


AUTOTUNED = KERNEL_FILE.replace("@triton.jit\ndef mm_kernel", '''@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def mm_kernel''')


def test_autotune_configs_sized_for_the_target(cache):
    from tileprobe.backends.triton.autotune import read_args, size_autotune, verdict_lines

    src = extract(AUTOTUNED, "mm_kernel", "autotuned test kernel")
    k = random.choice([1024, 4096, 7168])
    args = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": 4096, "N": 4096, "K": k, "stride_am": k,
            "stride_ak": 1, "stride_bk": 4096, "stride_bn": 1, "stride_cm": 4096, "stride_cn": 1}
    sized, notes = size_autotune(src, args, 120, 2, cache)
    small, big = (s.build for s in sized)
    assert small.shared < 101376 < big.shared and notes == []
    lines, left = verdict_lines(sized, 101376, "rtx-pro-6000")
    assert [s.config["BLOCK_N"] for s in left] == [64]
    assert f"out of resource: shared memory, Required: {big.shared}, Hardware limit: 101376" in lines[1]
    # on a 232448 B GPU both fit (the compiler's number, not a formula): the autotuner keeps both
    assert len(verdict_lines(sized, max(big.shared, small.shared), "h200")[1]) == 2
    with pytest.raises(UsageError, match="missing launch argument"):
        size_autotune(src, {k: v for k, v in args.items() if k != "K"}, 120, 1, cache)
    with pytest.raises(UsageError, match="--kernel-args FILE is needed"):
        read_args(None, None)


def test_the_launch_check_compares_metadata_shared():
    """What the verdict rests on, read from the installed Triton: the first launch compares metadata.shared with the
    device's opt-in limit (CompiledKernel._init_handles), and the nvidia backend sets it from ttg.shared."""
    root = toolchain.require_triton().root
    compiler = (root / "compiler" / "compiler.py").read_text()
    init = compiler[compiler.index("def _init_handles"):]
    init = init[:init.index("\n    def ", 10)]
    assert "if self.metadata.shared > max_shared:" in init
    assert 'OutOfResources(self.metadata.shared, max_shared, "shared memory")' in init
    assert "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN" in (root / "backends" / "nvidia" / "driver.c").read_text()
    assert 'metadata["shared"] = src.get_int_attr("ttg.shared")' in (
        root / "backends" / "nvidia" / "compiler.py").read_text()


def test_on_result_hands_over_every_job_once_as_its_build_is_known(cache, tile, builds):
    """compile_many's per-result callback (what progress counts): every job index once, with the build returned for
    it; the cached ones before any compile; a repeated job under each of its indices; misses from the workers."""
    cached = mm_job(*tile, 2)  # compiled by the `builds` fixture
    misses = [mm_job(*tile, 3, warps=8), mm_job(*tile, 2, warps=8)]  # compiled by no other test
    jobs = [misses[0], cached, misses[1], cached, misses[0]]
    seen: list[tuple[int, object]] = []
    out = compile_many(jobs, 2, cache, on_result=lambda i, b: seen.append((i, b)))
    assert sorted(i for i, _ in seen) == list(range(len(jobs))), seen
    assert all(b is out[i] for i, b in seen)
    assert [i for i, _ in seen[:2]] == [1, 3] and all(b.cached for _, b in seen[:2])
    assert not any(b.cached for _, b in seen[2:]) and out[0] is out[4]
