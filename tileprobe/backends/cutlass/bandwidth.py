"""Reference memory bandwidths of one GPU through cuda-python (no torch), measured in a child process.

`measure(i)` runs `python -m tileprobe.backends.cutlass.bandwidth_probe --gpu i`, which prints one JSON line: device-to-device copy GB/s
(cuMemcpyDtoDAsync, bytes read + written) and read GB/s of a streaming kernel compiled with NVRTC (bytes read), each
the median of CUDA-event timings. Any failure comes back as error text in the dict, never as a made-up number."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

GiB = 1024**3


def failed(gpu_index: int, error: str) -> dict:
    return {"gpu_index": gpu_index, "copy_gbps": None, "read_gbps": None, "l2_bytes": None, "method": None,
            "error": error}


def parse_output(stdout: str, stderr: str = "", returncode: int | None = 0) -> dict:
    """The child's last JSON line as a dict; a dict with only `error` when there is none."""
    for line in reversed([ln.strip() for ln in (stdout or "").splitlines() if ln.strip().startswith("{")]):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            return d
    tail = (stderr or "").strip().splitlines()
    why = tail[-1] if tail else "no output"
    return failed(None, f"bandwidth probe exited with code {returncode} and no result: {why}")


def measure(gpu_index: int, timeout_s: float = 180.0) -> dict:
    """copy_gbps, read_gbps (median GB/s; None on failure), l2_bytes, method and error (None, or what failed)."""
    cmd = [sys.executable, "-m", "tileprobe.backends.cutlass.bandwidth_probe", "--gpu", str(int(gpu_index))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                           env=_child_env())
    except subprocess.TimeoutExpired:
        return failed(gpu_index, f"bandwidth probe timed out after {timeout_s:g} s")
    except OSError as exc:
        return failed(gpu_index, f"bandwidth probe could not start: {exc}")
    return parse_output(p.stdout, p.stderr, p.returncode) | {"gpu_index": gpu_index}


def _child_env() -> dict:
    """The child's environment: CUDA_HOME defaults to the toolkit of the nvcc on PATH, so cuda-python finds libnvrtc
    there when neither CUDA_HOME nor CUDA_PATH is set."""
    env = dict(os.environ)
    nvcc = shutil.which("nvcc")
    if nvcc and not (env.get("CUDA_HOME") or env.get("CUDA_PATH")):
        root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        if any(os.path.isdir(os.path.join(root, lib)) for lib in ("lib64", "lib")):
            env["CUDA_HOME"] = root
    return env
