"""The launch guard: its committed H200 proof holds to the byte, what `inspect` reads equals what the H200's driver
reported for the same source and nvcc, the Python guard refuses what it cannot answer with one clear error, and on a
GPU the C++ guard equals the real launch at every request (gpu marker)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe import guard
from tileprobe.binary.cubin import kernels, max_threads_for
from tileprobe.binary.elf import images_in
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule

ROOT = Path(__file__).resolve().parents[2]
PROOF = ROOT / "results" / "guard" / "h200" / "proof.json"
SWEEP_SRC = ROOT / "tools" / "guard_proof" / "limit_sweep.cu"
GUARD_DATA = ROOT / "tests" / "data" / "guard"
_driver = LazyModule("cuda.bindings.driver")
_triton = LazyModule("triton")


def proof() -> dict:
    return json.loads(PROOF.read_text())


def test_committed_proof_flips_at_the_guards_byte(tmp_path):
    """Every request from 0 to 2 KiB past the limit (C++), and every byte near the bound (Python, CUfunction and
    CUkernel): the launch ran exactly up to opt-in - static, the byte after failed, the guard said the same.
    And the header as it is now (not only the record): host-compiled against the stand-in runtime
    (tests/data/guard/cuda_runtime.h) and given each recorded kernel's static bytes and the H200's opt-in, it must
    allow the last request that ran there and refuse the first that failed."""
    p = proof()
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    exe = tmp_path / "guard_devices"
    subprocess.run([cxx, "-std=c++17", f"-I{GUARD_DATA}", f"-I{guard.include_dir()}",
                    str(GUARD_DATA / "guard_devices.cpp"), "-o", str(exe)], check=True, capture_output=True,
                   timeout=300)
    for s in p["cpp"]["sweeps"]:
        for request, ran in ((s["real_last_ran"], True), (s["real_first_failed"], False)):
            out = subprocess.run([str(exe), "0", "1", str(request), str(s["static"]), str(s["optin"])],
                                 capture_output=True, text=True, timeout=60, check=True).stdout
            now = json.loads(out.splitlines()[0])  # asked about the current device
            assert now["fits"] is ran and now["max_dynamic"] == s["real_last_ran"], (s["kernel"], request, now)
    optin = p["cpp"]["device"]["optin"]
    assert p["cpp"]["device"]["device"] == "NVIDIA H200" and optin == 232448
    sweeps = p["cpp"]["sweeps"]
    assert {s["static"] for s in sweeps} == {0, 112, 4096, 12352, 49152}
    for s in sweeps:
        bound = optin - s["static"]
        assert s["requests_tried"] == optin + 2049 == s["agree"], s  # every byte, every one agreeing
        assert s["guard_last_fit"] == s["real_last_ran"] == bound and s["real_first_failed"] == bound + 1, s
        assert s["launched_and_ran"] == bound + 1 and s["disagreements"] == [] and s["launched_without_marker"] == 0
    py = p["python"]["sweeps"]
    assert {x["handle"] for x in py} == {"CUfunction", "CUkernel"}
    for s in py:
        assert s["real_last_ran"] == s["guard_max_dynamic"] == s["optin"] - s["static"], s
        assert s["real_first_failed"] == s["guard_max_dynamic"] + 1 and not s["disagreements"], s
    for c in p["triton"]["configs"]:
        assert c["agree"] and c["guard"] == (c["shared"] + c["static"] <= optin), c
    assert {c["guard"] for c in p["triton"]["configs"]} == {True, False}
    row = p["row_example"]
    assert row["run"][-2].startswith(f"kv_len={row['inspect_solved_kv_len']}: launched")
    assert row["run"][-1].startswith(f"kv_len={row['inspect_solved_kv_len'] + 1}: n/a")


def test_max_threads_rule_matches_the_h200_driver():
    """The driver's maxThreadsPerBlock for every register count the proof recorded (8 to 102 registers)."""
    seen = set()
    for k in proof()["inspect_vs_driver"]["kernels"]:
        d = k["driver"]
        bound = 384 if k["kernel"] == "bounded" else None
        assert max_threads_for(d["numRegs"], bound) == d["maxThreadsPerBlock"], k
        seen.add(d["maxThreadsPerBlock"])
    assert {512, 896, 1024, 384} <= seen


@pytest.mark.nvcc
def test_inspect_equals_the_h200_driver_for_the_same_build(tmp_path, nvcc_path):
    """limit_sweep.cu built here with the same nvcc as on the H200: inspect's static bytes, registers, local bytes and
    max threads equal the cudaFuncGetAttributes values recorded there, for each kernel."""
    p = proof()
    here = subprocess.run([nvcc_path, "--version"], capture_output=True, text=True, timeout=60).stdout
    if p["build"]["nvcc"] not in here:
        pytest.skip(f"the proof was built with {p['build']['nvcc']}; this nvcc differs")
    exe = tmp_path / "limit_sweep"
    subprocess.run([nvcc_path, "-O2", f"-I{guard.include_dir()}", "-gencode", "arch=compute_90a,code=sm_90a", "-o",
                    str(exe), str(SWEEP_SRC)], check=True, capture_output=True, timeout=600)
    found = {k.demangled.split("(")[0].removeprefix("void "): k for im in images_in(exe) for k in kernels(im)}
    for k in p["inspect_vs_driver"]["kernels"]:
        got = found[k["kernel"]]
        assert (got.static_smem, got.registers, got.stack_frame, got.max_threads) == (
            k["driver"]["sharedSizeBytes"], k["driver"]["numRegs"], k["driver"]["localSizeBytes"],
            k["driver"]["maxThreadsPerBlock"]), k


def test_guard_refuses_what_it_cannot_answer():
    with pytest.raises(UsageError, match="cannot guard a object"):
        guard.fits(object(), 1024, device="h200")
    with pytest.raises(UsageError, match="unknown target"):
        guard.fits(object(), 1024, device="rtx-9090")
    with pytest.raises(UsageError, match="say how many dynamic bytes"):
        guard.fits(object())
    if _driver.missing() is None:
        with pytest.raises(UsageError, match="offline target needs the kernel's cubin"):
            guard.fits(_driver.CUfunction(), 1024, device="rtx-pro-6000")


def test_include_prints_the_header_folder():
    p = subprocess.run([sys.executable, "-m", "tileprobe", "include"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    header = Path(p.stdout.strip()) / "tileprobe" / "guard.h"
    assert header.is_file() and "cudaDevAttrMaxSharedMemoryPerBlockOptin" in header.read_text()


@pytest.mark.triton
@pytest.mark.skipif(_triton.missing() is not None, reason="needs triton (pip install triton)")
def test_triton_kernel_offline_on_each_sm120_target():
    """A pipelined tl.dot kernel (128x256x64 bf16 tiles) compiled for sm_120 on this machine (no driver) at 3 and 4
    stages: the first's shared memory fits an SM120 GPU's 101376 B, the second's does not (its operand buffers alone
    are (stages - 1) * (BM*BK + BK*BN) * 2 = 3 * (128*64 + 64*256) * 2 = 147456 B): the guard reads the static bytes from the cubin, takes the
    request Triton itself makes (metadata.shared, > 0) and its answer flips where the compiler's bytes cross the limit,
    and at the byte for an explicit request. (The old kernel here had metadata.shared == 0: always fits.)"""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def mm(a, b, c, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        a_ptrs = a + rm[:, None] * K + rk[None, :]
        b_ptrs = b + rk[:, None] * BN + rn[None, :]
        for _ in range(0, tl.cdiv(K, BK)):
            acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
            a_ptrs += BK
            b_ptrs += BK * BN
        tl.store(c + rm[:, None] * BN + rn[None, :], acc.to(tl.bfloat16))

    def build(stages):
        sig = {"a": "*bf16", "b": "*bf16", "c": "*bf16", "K": "i32", "BM": "constexpr", "BN": "constexpr",
               "BK": "constexpr"}
        aligned = {(i,): [["tt.divisibility", 16]] for i in range(4)}  # as the binder marks torch tensors, K % 16 == 0
        src = ASTSource(mm, sig, {"BM": 128, "BN": 256, "BK": 64}, aligned)
        return triton.compile(src, target=GPUTarget("cuda", 120, 32), options={"num_stages": stages, "num_warps": 8})

    small, big = build(3), build(4)  # 128x256x64: 2 and 3 buffered stages
    limit = 101376
    assert 0 < small.metadata.shared <= limit < 147456 <= big.metadata.shared, (small.metadata.shared,
                                                                                 big.metadata.shared)
    for target in ("rtx-pro-6000", "rtx-5090"):
        for ck in (small, big):
            f = guard.fits(ck, device=target)
            assert f.dynamic_bytes == ck.metadata.shared > 0 and f.optin_bytes == limit
            assert bool(f) == (f.static_bytes + ck.metadata.shared <= limit), (target, f)
        assert guard.fits(small, device=target) and not guard.fits(big, device=target)
        edge = limit - guard.fits(big, 0, device=target).static_bytes
        assert guard.fits(big, edge, device=target) and not guard.fits(big, edge + 1, device=target)
        assert guard.max_dynamic_smem(big, device=target) == edge


@pytest.mark.gpu
@pytest.mark.nvcc
def test_cpp_guard_equals_the_launch_at_every_byte(tmp_path, nvcc_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi")
    exe = tmp_path / "limit_sweep"
    subprocess.run([nvcc_path, "-O2", f"-I{guard.include_dir()}", "-arch=native", "-o", str(exe), str(SWEEP_SRC)],
                   check=True, capture_output=True, timeout=600)
    out = subprocess.run([str(exe), "1"], capture_output=True, text=True, timeout=600, check=True).stdout
    sweeps = [json.loads(line) for line in out.splitlines() if line.startswith('{"kernel"')]
    assert len(sweeps) == 5
    for s in sweeps:
        assert s["agree"] == s["requests_tried"] and s["real_last_ran"] == s["guard_max_dynamic"], s
