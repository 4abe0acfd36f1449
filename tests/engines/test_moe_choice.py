"""`export triton-configs` follows the engine's MoE choice: when vLLM's own MoE oracle (walked from its wheel under
the target's stand-in device) runs another backend for the model's experts, the command says the folder does not
take effect, names what runs and the engine line, and how to make it take effect; when the Triton fused MoE runs,
it says nothing of the kind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.triton


def _export(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tileprobe", "export", "triton-configs", "--target", "rtx-pro-6000",
                           "--out", str(tmp_path / "out"), "--jobs", "1", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})


def test_a_folder_the_engine_does_not_read_for_the_model_says_so(tmp_path, rng):
    try:
        vllm = find_engine("vllm")
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    workload = rng.choice(["qwen3-30b-a3b", "qwen3-235b-a22b", "glm-4.5-air"])
    p = _export(tmp_path, "--engine", "vllm", "--workload", workload, "--quant", "bf16")
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("NOT USED: ")]
    assert len(lines) == 1 and "FLASHINFER_CUTLASS" in lines[0] and "--moe-backend triton" in lines[0], p.stdout
    file, line = re.search(r"\(([\w/.]+\.py):(\d+)\)", lines[0]).groups()
    assert "flashinfer" in file and "_supports_" in vllm.read_text(file).splitlines()[int(line) - 1], lines[0]
    # fp8 [128, 128] blocks: vLLM's fp8 oracle keeps the Triton fused MoE on sm_120: no such line
    q = _export(tmp_path, "--engine", "vllm", "--workload", rng.choice(["deepseek-v3", "kimi-k2"]), "--quant",
                "fp8-block")
    assert q.returncode == 0 and "NOT USED" not in q.stdout, (q.stdout[-2000:], q.stderr)
