"""tileprobe/guard.h answers for the device it is asked about: the static bytes (cudaFuncGetAttributes, which the
runtime answers for the current device) and the opt-in limit both from that device, and the caller's current device
left as it was. Without a GPU: the header host-compiled against a stand-in runtime that keeps per-device values and
the current device as the runtime does (tests/data/guard/cuda_runtime.h), and compiled by the real nvcc; on GPUs
(gpu marker), compared with the runtime on each device and with launches at the guard's byte."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tileprobe import guard

DATA = Path(__file__).resolve().parents[1] / "data" / "guard"
OPTINS = (232448, 101376, 101376 - 1024, 166912)


def _rows(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_each_answer_comes_from_the_device_asked_about(tmp_path, rng):
    """Devices whose images differ in static bytes and whose opt-in limits differ; the current device is not the one
    asked about. main took the static bytes from the current device (and its allow_dynamic_smem had no device)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    exe = tmp_path / "guard_devices"
    p = subprocess.run([cxx, "-std=c++17", f"-I{DATA}", f"-I{guard.include_dir()}", str(DATA / "guard_devices.cpp"),
                        "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    count = rng.randint(2, 4)
    statics = rng.sample([0, 112, 4096, 12352, 49152, 65536], count)
    optins = [rng.choice(OPTINS) for _ in range(count)]
    current = rng.randrange(count)
    dynamic = rng.choice([optins[0] - statics[0], optins[-1] - statics[-1] + 1, rng.randrange(0, 232448)])
    args = [str(current), str(count), str(dynamic)] + [str(x) for pair in zip(statics, optins) for x in pair]
    rows = _rows(subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [r["asked"] for r in rows] == list(range(-1, count + 1))
    for r in rows:
        assert r["current_after_fit"] == r["current_after_set"] == current, r
        if r["asked"] == count:  # no such device: an error, not an answer
            assert r["error"] != 0 and not r["fits"] and r["set_error"] != 0, r
            continue
        d = current if r["asked"] < 0 else r["asked"]
        assert r["error"] == 0 and r["device"] == d, r
        assert (r["static"], r["optin"]) == (statics[d], optins[d]), (r, statics, optins)
        assert r["fits"] == (statics[d] + dynamic <= optins[d]), r
        assert r["max_dynamic"] == max(0, optins[d] - statics[d]), r
        assert r["set_error"] == 0 and r["set_on"] == d, r


def _nvcc_build(nvcc_path: str, src: Path, exe: Path, arch: list[str]) -> None:
    p = subprocess.run([nvcc_path, "-O2", f"-I{guard.include_dir()}", *arch, "-o", str(exe), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.nvcc
def test_the_header_compiles_with_nvcc(tmp_path, nvcc_path):
    """The real nvcc and CUDA runtime headers: the device-taking calls compile and link."""
    _nvcc_build(nvcc_path, DATA / "guard_devices_gpu.cu", tmp_path / "g", ["-gencode", "arch=compute_90a,code=sm_90a"])
    assert (tmp_path / "g").is_file()


@pytest.mark.gpu
@pytest.mark.nvcc
def test_on_gpus_the_guard_equals_each_device_and_its_launch(tmp_path, nvcc_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi")
    exe = tmp_path / "g"
    _nvcc_build(nvcc_path, DATA / "guard_devices_gpu.cu", exe, ["-arch=native"])
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    rows = _rows(p.stdout)
    assert rows, p.stdout
    for r in rows:
        assert r["error"] == 0 and r["static"] == r["own_static"] >= 4096 and r["optin"] == r["own_optin"], r
        assert r["current_after_fit"] == r["current_after_set"] == 0, r
        assert r["set_top"] and r["ran_top"] and not r["ran_over"], r
