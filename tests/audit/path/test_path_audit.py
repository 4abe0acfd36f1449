"""The audit's forward pass end to end (a subprocess, as a user runs it): every kernel on the path is a row with a
verdict, a kernel no family answers is `unanswered` (never absent, never a pass), the exit code follows the
documented contract (0 all answered and fit, 1 a kernel fails, 3 some unanswered), and the engine's own
tensor-parallel rules refuse a split before any kernel is looked at (one line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.audit.path import forward
from tileprobe.audit.path.call import CompiledAnswer, Context, Part
from tileprobe.audit.path.families import sgl_kernel
from tileprobe.engines import locate
from tileprobe.errors import UsageError
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tileprobe", "audit", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def test_a_tp_split_the_engine_refuses_is_one_line_exit_2_naming_its_line(request, rng):
    engine = rng.choice(["vllm", "sglang"])
    src = request.getfixturevalue(engine)
    heads = ATTENTION_PRESETS["qwen3-30b-a3b"].heads  # 32 heads, 4 KV heads
    tp = rng.choice([t for t in range(3, 32) if heads % t])
    p = _cli("--engine", engine, "--model", "qwen3-30b-a3b", "--target", "rtx-pro-6000", "--tp", tp)
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr and f"--tp {tp}" in lines[0], p.stderr
    where = lines[0].rsplit("(", 1)[1].rstrip(")")
    file, line = where.rsplit(":", 1)
    assert "divide" in src.read_text(file).splitlines()[int(line) - 1] or \
        "divisible" in src.read_text(file).splitlines()[int(line) - 1], where


def test_every_kernel_on_the_path_is_a_row_and_unanswered_never_exits_0(sglang, tmp_path, rng):
    """SGLang's default path for an MoE model: flashinfer attention, its Triton fused MoE, sgl_kernel norms, cuBLAS
    linears. cuBLAS cannot be answered, so the audit exits 3 on rtx-pro-6000 (nothing fails there) and names each
    unanswered kernel; on GB10 sgl_kernel's common_ops has no sm_121 code, so it exits 1 with a FAIL line each."""
    pin = sgl_kernel.pinned(Context(PROFILES["rtx-pro-6000"], sglang, tmp_path))
    try:
        locate.find_release(sgl_kernel.DIST, pin)
    except UsageError as exc:  # the norms' answers read its wheel (tileprobe engines fetch sglang-kernel==<pin>)
        pytest.skip(f"the sglang-kernel release {sglang.label()} pins is not here: {exc}")
    target = rng.choice(["rtx-pro-6000", "dgx-spark-gb10"])
    out = tmp_path / "out"
    p = _cli("--engine", "sglang", "--model", "qwen3-30b-a3b", "--target", target, "--batch", rng.randint(1, 64),
             "--out", out, "--jobs", 1)
    assert "Traceback" not in p.stderr, p.stderr
    rows = [r for r in _rows(out) if r["family"] == "compiled-audit"]
    layers = {r["layer"] for r in rows}
    assert {"attention (full)", "moe experts", "linear qkv", "lm_head", "input norm"} <= layers, layers
    unanswered = [r for r in rows if r["verdict"] == "unanswered"]
    assert unanswered and all(r["library"].startswith("cuBLAS") or "flashinfer" in r["library"] or
                              r["reason"] for r in unanswered)
    assert len([ln for ln in p.stdout.splitlines() if ln.startswith("UNANSWERED ")]) == len(unanswered)
    no_code = [r for r in rows if r["verdict"] == "no-code"]
    norms = [r for r in rows if r["library"].startswith("sglang-kernel") and "norm" in r["layer"]]
    assert norms
    if target == "dgx-spark-gb10":
        assert all(r in no_code for r in norms) and "sm_121" in norms[0]["arch_answer"]
        assert p.returncode == 1 and len([ln for ln in p.stdout.splitlines() if ln.startswith("FAIL ")]) == \
            len(no_code), p.stdout[-3000:]
    else:
        assert not no_code and all(r["verdict"] == "fits" and "sm_120a SASS" in r["arch_answer"] for r in norms)
        # only cuBLAS is left: sgl_kernel's rotary and SiLU-and-mul launches pass 0 dynamic bytes (quoted)
        assert all(r["library"].startswith("cuBLAS") for r in unanswered), [r["layer"] for r in unanswered]
        (rope,) = [r for r in rows if r["layer"].startswith("rotary")]
        assert rope["verdict"] == "fits" and "dynamic 0 B" in rope["reason"], rope
        assert p.returncode == 3, p.stdout[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert f"{len(unanswered)} unanswered" in last and f"{len(no_code)} no code" in last, last


def test_verdict_order_a_failing_part_wins_over_an_unanswered_one(rng):
    target = PROFILES[rng.choice(["rtx-pro-6000", "dgx-spark-gb10", "h100"])]
    ok, no, unknown = Part("x", True, "read"), Part("x", False, "read"), Part("x", None)
    over = target.smem_optin + rng.randint(1, 4096)
    cases = [((no, ok, ok, None), Verdict.NO_CODE), ((ok, no, unknown, None), Verdict.REFUSED),
             ((unknown, ok, ok, over), Verdict.SMEM_OVER_LIMIT), ((ok, unknown, ok, None), Verdict.UNANSWERED),
             ((ok, ok, ok, target.smem_optin), Verdict.FITS)]
    for (arch, gate, size, smem), want in cases:
        assert CompiledAnswer("k", arch, gate, size, smem_bytes=smem).verdict(target) is want


def test_the_forward_pass_names_every_layer_kind_and_phase(rng):
    model = ATTENTION_PRESETS[rng.choice(["qwen3-30b-a3b", "gpt-oss-120b"])]
    target = PROFILES["rtx-pro-6000"]
    calls = forward.calls("vllm", "vllm 0.33.0", model, target, 1, "FLASH_ATTN", "vllm/platforms/cuda.py:1",
                          "FLASHINFER_CUTLASS (FlashInferExperts)", "x.py:1", False, model.moe.hidden)
    layers = [(c.layer, c.phase) for c in calls]
    for w in model.windows():
        name = "attention (full)" if w is None else f"attention (sliding {w})"
        assert (name, "prefill") in layers and (name, "decode") in layers
    fams = {c.layer: c.family for c in calls}
    assert fams["moe experts"] == "flashinfer-cutlass-moe" and fams["linear qkv"] == "cublas"
    assert fams["input norm"] == "inductor" and fams["kv-cache write"] == "vllm-custom-op"
    assert all(c.family == "fa2" for c in calls if c.layer.startswith("attention"))
