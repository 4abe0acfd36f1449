"""`tileprobe autotune --kernel-args`: a launch argument that is none of the stand-in forms (a misspelt pointer
dtype, a tl. name that is no dtype, a bare word) is bad input, one line naming it, exit 2; main compiled every config
with it, printed each as the kernel's compile error and exited 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[3]
KERNEL = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2),
                          triton.Config({"BLOCK": 128}, num_warps=4, num_stages=3)], key=["n"])
@triton.jit
def copy_kernel(x_ptr, y_ptr, n, scale, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, (x * scale).to(OUT_DTYPE), mask=offs < n)
'''


@pytest.mark.triton
def test_a_misspelt_kernel_argument_is_one_line_and_exit_2(tmp_path, rng):
    (tmp_path / "k.py").write_text(KERNEL)
    good = {"x_ptr": "*fp32", "y_ptr": "*bf16", "n": rng.choice([1000, 4096]), "scale": 0.5,
            "OUT_DTYPE": "tl.bfloat16"}
    name, typo = rng.choice([("x_ptr", "*fp23"), ("y_ptr", "bf16"), ("OUT_DTYPE", "tl.bflaot16"),
                             ("OUT_DTYPE", "tl.program_id"), ("scale", [0.5])])
    (tmp_path / "args.json").write_text(json.dumps({**good, name: typo}))
    p = subprocess.run([sys.executable, "-m", "tileprobe", "autotune", "--kernel", f"{tmp_path / 'k.py'}:copy_kernel",
                        "--kernel-args", str(tmp_path / "args.json"), "--target", "rtx-pro-6000", "--jobs", "1",
                        "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert p.returncode == 2, (name, typo, p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr and f"{name}=" in lines[0], p.stderr
    assert "compile error" not in p.stdout, p.stdout
