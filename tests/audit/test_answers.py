"""tileprobe.audit.answers through `tileprobe audit`: predictor first. A launch a stated rule answers (vLLM's
fused_moe_kernel) is `predicted`, any other is `sized` by Triton's own allocation, and both give the bytes of the
whole compile (`--compile-all`, whose rows carry the rule's bytes as `exact` or `cannot predict: why`); `--verify N`
compiles a sample and a wrong rule is named in a MISMATCH line with exit 1, the rows still written. Random model
shape, batch and sequence length each run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileprobe import cli
from tileprobe.backends.triton import allocate
from tileprobe.predict import triton_moe as rule

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]


def _rows(out) -> dict:
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()]
    return {r["config"]: r for r in rows if r["verdict"] != "not-selected" and r["family"] == "triton-audit"}


def _audit(*args):
    return CliRunner().invoke(cli.app, ["audit", *map(str, args)], catch_exceptions=False)


def _moe_model(rng, tmp_path):
    """A Kimi-K2-like config.json (fp8 [128, 128] blocks: vLLM runs its Triton fused MoE on sm_120) of random size."""
    experts = rng.choice([16, 64, 128, 256])
    doc = {"model_type": "deepseek_v3", "hidden_size": 128 * rng.randint(8, 56), "num_attention_heads": 16,
           "num_key_value_heads": 16, "head_dim": 128, "n_routed_experts": experts,
           "num_experts_per_tok": rng.randint(2, 8), "moe_intermediate_size": 128 * rng.randint(2, 16),
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def test_predicted_and_sized_rows_are_the_compiles_bytes(vllm, rng, tmp_path):
    if allocate.unavailable():
        pytest.skip(allocate.unavailable())
    model = _moe_model(rng, tmp_path)
    common = ("--engine", "vllm", "--model", model, "--target", "rtx-pro-6000", "--batch", rng.randint(1, 64),
              "--seq-len", rng.randint(64, 4096), "--jobs", 1)
    first = _audit(*common, "--out", tmp_path / "first")
    full = _audit(*common, "--out", tmp_path / "full", "--compile-all")
    assert first.exit_code in (0, 1, 3) and full.exit_code == first.exit_code, (first.output, full.output)
    answered, compiled = _rows(tmp_path / "first"), _rows(tmp_path / "full")
    assert answered.keys() == compiled.keys() and answered
    for key, r in answered.items():
        c = compiled[key]
        assert (r["smem_bytes"], r["verdict"]) == (c["smem_bytes"], c["verdict"]), (r, c)
        assert c["evidence"] == "compiled" and c["regs_per_thread"], c
        if r["predicted_smem_bytes"] is not None:  # a stated rule's (fused_moe_kernel's, the attention kernels')
            assert r["evidence"] == "predicted" and r["prediction"] == "not measured", r
            assert c["prediction"] == "exact" and c["predicted_smem_bytes"] == c["smem_bytes"], c
        else:
            assert r["evidence"] == "sized" and r["regs_per_thread"] is None, r
            assert r["prediction"].startswith("cannot predict: ") and c["prediction"] == r["prediction"], (r, c)
    kinds = {r["evidence"] for r in answered.values()}
    assert "predicted" in kinds, answered  # fused_moe_kernel's launches of this shape are the rule's
    meta = json.loads((tmp_path / "first" / "run.json").read_text())["answers"]
    assert meta["predicted"] + meta["sized"] == len(answered) and meta["compiled"] == 0, meta


def test_verify_names_a_wrong_rule_and_keeps_the_rows(vllm, rng, tmp_path, monkeypatch):
    model = _moe_model(rng, tmp_path)
    real = rule.predict
    off = 16 * rng.randint(1, 64)
    monkeypatch.setattr(rule, "predict", lambda *a, **k: real(*a, **k) + off)
    out = tmp_path / "out"
    res = _audit("--engine", "vllm", "--model", model, "--target", "rtx-pro-6000", "--batch", rng.randint(1, 64),
                 "--out", out, "--jobs", 1, "--kernel", "vllm-fused-moe-decode", "--verify", 1000)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("MISMATCH ")]
    assert res.exit_code == 1 and lines, res.output
    for ln in lines:
        said, got = (int(x) for x in ln.split("predicted ")[1].replace(" B, compiled ", " ").split(" B")[0].split())
        assert "fused_moe_kernel" in ln and said - got == off, ln
    rows = _rows(out)
    assert rows and all(r["evidence"] == "compiled" for r in rows.values())  # every sampled row carries its compile
    assert all(r["prediction"].startswith("MODEL ERROR") for r in rows.values() if r["predicted_smem_bytes"])


def test_verify_with_compile_all_is_one_line():
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "sglang", "--model", "qwen3-30b-a3b",
                        "--verify", "3", "--compile-all"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "--compile-all" in lines[0], (p.returncode, p.stderr)
