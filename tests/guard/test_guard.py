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
_driver = LazyModule("cuda.bindings.driver")
_triton = LazyModule("triton")


def proof() -> dict:
    return json.loads(PROOF.read_text())


def test_committed_proof_flips_at_the_guards_byte():
    """Every request from 0 to 2 KiB past the limit (C++), and every byte near the bound (Python, CUfunction and
    CUkernel): the launch ran exactly up to opt-in - static, the byte after failed, the guard said the same."""
    p = proof()
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


@pytest.mark.skipif(_triton.missing() is not None, reason="needs triton (pip install triton)")
def test_triton_kernel_offline_on_each_sm120_target(rng):
    """A Triton kernel compiled for sm_120 on this machine (no driver): the guard reads its static bytes from the cubin
    and answers against each SM120 profile; its request is what Triton itself would request."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def copy_rows(x, y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs) * 2)

    block = rng.choice([256, 512, 1024])
    src = ASTSource(copy_rows, {"x": "*fp32", "y": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": block})
    ck = triton.compile(src, target=GPUTarget("cuda", 120, 32))
    for target in ("rtx-pro-6000", "rtx-5090"):
        f = guard.fits(ck, device=target)
        assert f.dynamic_bytes == ck.metadata.shared and f.optin_bytes == 101376
        assert bool(f) == (f.static_bytes + f.dynamic_bytes <= 101376)


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
