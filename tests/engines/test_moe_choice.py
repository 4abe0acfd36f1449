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


def _check(path, *args):
    return subprocess.run([sys.executable, "-m", "tileprobe", "check-configs", str(path), "--engine", "vllm",
                           "--jobs", "1", *args], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})


def test_check_configs_says_whether_the_engine_reads_the_files_for_the_model(tmp_path, rng):
    """check-configs --model M --target T: the same NOT USED line (vLLM runs FlashInfer's CUTLASS MoE for a bf16
    Qwen3 on sm_120, so the checked files are not read); without --model it says the answer depends on the model,
    and counts nothing as not checked for it."""
    try:
        vllm = find_engine("vllm")
    except UsageError as exc:
        pytest.skip(f"no vllm wheel: {exc}")
    shipped = [n for n in vllm.files_under("vllm/model_executor/layers/fused_moe/configs")
               if re.search(r"E=128,N=768,device_name=[^,]*\.json$", n)]
    if not shipped:
        pytest.skip("no E=128,N=768 bf16 config in the wheel")
    f = tmp_path / "cfg" / "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    f.parent.mkdir()
    f.write_text(vllm.read_text(rng.choice(shipped)))
    p = _check(f.parent, "--target", "rtx-pro-6000", "--model", rng.choice(["qwen3-30b-a3b", "qwen3-235b-a22b"]))
    notes = [ln for ln in p.stdout.splitlines() if ln.startswith("note: NOT USED: ")]
    assert len(notes) == 1 and "FLASHINFER_CUTLASS" in notes[0] and "--moe-backend triton" in notes[0], p.stdout
    assert "(0 not checked;" in p.stdout.splitlines()[-1], p.stdout[-600:]
    q = _check(f.parent)
    assert "NOT USED" not in q.stdout and "pass --model" in q.stdout, q.stdout[-1500:]
    bad = _check(f.parent, "--target", "rtx-pro-6000", "--model", str(tmp_path / "nope.json"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
