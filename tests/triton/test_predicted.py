"""Predictor first (tileprobe/triton/predicted.py): check-configs, export triton-configs and sweep --family triton-moe
answer a launch from the predictor where it is exact (evidence `predicted`, the bytes in predicted_smem_bytes) and
compile only the others (which carry `prediction: cannot predict: ...`); --verify N compiles a seeded sample of N
predicted launches and fails naming each mismatch; --compile-all compiles every launch.

On main 4ab904d every launch was compiled (evidence `compiled`, no prediction column filled, no --verify or
--compile-all option): each test here fails there. A small synthetic vLLM config file named for the RTX PRO 6000
(sm_120a, where the predictor's rule was checked), entries drawn per run; compiles share the session cache except
where a test counts them (then a fresh --cache-dir, one or two compiles).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileprobe import cli
from tileprobe import sweep as sw
from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import vllm
from tileprobe.errors import UsageError
from tileprobe.predict import triton_moe as predict_tm
from tileprobe.targets import DEVICE_NAMES
from tileprobe.triton import audit, predicted
from tileprobe.triton.sweep import TritonOptions, engine_kernel_source

SESSION_CACHE = os.environ.get("TILEPROBE_TEST_CACHE")


def _need_engine():
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))


def _predictable(rng) -> dict:
    """bf16, a K row of at least 64 B, 2..4 stages: inside the rule's checked scope."""
    return {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
            "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": rng.choice([1, 16]),
            "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4])}


def _file(tmp_path: Path, rng, entries: list[dict]) -> tuple[Path, list[int]]:
    dev = rng.choice(DEVICE_NAMES["rtx-pro-6000"])
    f = tmp_path / "in" / vllm.config_file_name(128, 768, tc.scheme("bf16"), dev)
    f.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted(rng.sample([1, 2, 4, 8, 16, 32, 64, 128, 256], len(entries)))
    f.write_text(json.dumps({str(k): e for k, e in zip(keys, entries)}))
    return f, keys


def _check(f: Path, cache, policy=predicted.Policy(), out=None):
    return audit.run(f, "vllm", None, None, out, 2, cache, 2048, False, "test", policy)


def _compiles(cache: Path) -> int:
    """fused_moe_kernel launches compiled into the cache (not preflight's probe kernel)."""
    return sum("MUL_ROUTED_WEIGHT" in p.read_text() for p in Path(cache).glob("triton/*/*/result.json"))


def test_predicted_rows_say_predicted_and_the_rest_is_compiled_with_the_reason(tmp_path, rng):
    """Two entries the rule covers and one it does not (a BLOCK_SIZE_K 16 loop whose buffers are smaller than the
    output tile: the epilogue's layout is not the rule's): the first two are answered without a compile (evidence
    predicted, the bytes the predictor's and in predicted_smem_bytes); the third is compiled (evidence compiled) and
    says why it was not predicted; run.json's evidence mode says mixed."""
    _need_engine()
    outgrown = {"BLOCK_SIZE_M": rng.choice([64, 128]), "BLOCK_SIZE_N": rng.choice([64, 128]), "BLOCK_SIZE_K": 16,
                "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}
    entries = [_predictable(rng), _predictable(rng), outgrown]
    rng.shuffle(entries)
    f, keys = _file(tmp_path, rng, entries)
    cache = tmp_path / "cache"
    res = _check(f, cache, out=tmp_path / "out")
    assert len(res.rows) == 6  # vLLM: both GEMMs of each entry
    by_key = dict(zip(keys, entries))
    for r in res.rows:
        e = by_key[r["batch"]]
        if e is outgrown:
            assert r["evidence"] == "compiled" and r["predicted_smem_bytes"] is None, r
            assert r["prediction"].startswith("cannot predict: ") and "outgrows" in r["prediction"], r
        else:
            n, k = (int(r["gemm_n"]), int(r["gemm_k"]))
            want = predict_tm.predict("vllm 0.33.0", "bf16", e, 120, installed().version, n, k,
                                      kernel_sha256=engine_kernel_source("vllm", None)[1].sha256)
            assert r["evidence"] == "predicted" and r["smem_bytes"] == r["predicted_smem_bytes"] == want, r
            assert r["regs_per_thread"] is None and "not compiled" in r["reason"], r
    assert _compiles(cache) == 2  # the outgrown entry's two GEMMs, nothing else
    meta = json.loads((tmp_path / "out" / "run.json").read_text())
    assert meta["evidence_mode"] == "mixed" and meta["answers"]["cannot_predict"] == 2, meta


def test_verify_compiles_n_predicted_launches_and_they_agree(tmp_path, rng):
    _need_engine()
    f, keys = _file(tmp_path, rng, [_predictable(rng) for _ in range(3)])
    n = rng.choice([1, 2])
    cache = tmp_path / "cache"
    seed = rng.randrange(2**31)
    res = _check(f, cache, predicted.Policy(verify=n, seed=seed))
    assert _compiles(cache) == n, res.answers  # counted in the cache: N distinct launches, nothing else
    # the draws can hold an entry over the limit (64x128x128 at 4 stages: 147456 B): exit 1 for it, never a mismatch
    assert res.mismatches == [] and res.exit_code() == (1 if res.over else 0)
    assert res.answers["verify_seed"] == seed and res.answers["verified"] == n
    compiled = [r for r in res.rows if r["evidence"] == "compiled"]
    assert compiled and all(r["prediction"] == "exact" and r["smem_bytes"] == r["predicted_smem_bytes"]
                            for r in compiled), compiled
    again = _check(f, cache, predicted.Policy(verify=n, seed=seed))  # the same seed draws the same sample
    assert [r["evidence"] for r in again.rows] == [r["evidence"] for r in res.rows]


def test_a_planted_mismatch_exits_1_naming_the_launch(tmp_path, rng, monkeypatch):
    """A stand-in predictor that is off by a few bytes: --verify compiles the sample, and each sampled launch is one
    MISMATCH line (launch, predicted, compiled); exit 1."""
    _need_engine()
    f, keys = _file(tmp_path, rng, [_predictable(rng)])
    off = rng.choice([-16, 16, 1024])
    real = predict_tm.predict
    monkeypatch.setattr(predict_tm, "predict", lambda *a, **kw: real(*a, **kw) + off)
    result = CliRunner().invoke(cli.app, ["check-configs", str(f), "--engine", "vllm", "--hidden", "2048",
                                          "--verify", "2", "--jobs", "2"] +
                                (["--cache-dir", SESSION_CACHE] if SESSION_CACHE else []))
    assert result.exit_code == 1, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("MISMATCH ")]
    assert len(lines) == 2, result.output  # one entry, both GEMMs sampled
    for line, gemm in zip(sorted(lines), ("down", "gate_up")):
        assert f"{f.name} [M={keys[0]}] {gemm} on rtx-pro-6000: predicted " in line, line
        pred, got = (int(x.split()[0]) for x in line.split("predicted ")[1].split(", compiled "))
        assert pred - got == off, line


def test_compile_all_compiles_every_launch(tmp_path, rng):
    _need_engine()
    f, keys = _file(tmp_path, rng, [_predictable(rng) for _ in range(2)])
    res = _check(f, SESSION_CACHE, predicted.Policy(compile_all=True))
    assert {r["evidence"] for r in res.rows} == {"compiled"} and len(res.rows) == 4
    assert all(r["prediction"] == "exact" and r["regs_per_thread"] is not None for r in res.rows), res.rows
    assert res.answers["policy"] == "compile-all" and res.answers["predicted"] == 0


def test_verify_and_compile_all_together_are_one_line(tmp_path, rng):
    f, _ = _file(tmp_path, rng, [_predictable(rng)])
    result = CliRunner().invoke(cli.app, ["check-configs", str(f), "--verify", str(rng.randint(1, 9)),
                                          "--compile-all"])
    assert result.exit_code != 0 and isinstance(result.exception, UsageError), result.output
    assert "--compile-all" in str(result.exception)


def test_export_answers_from_the_predictor_and_verify_catches_a_planted_mismatch(tmp_path, rng, monkeypatch):
    """An export of an over-limit entry: the original and the substitute search are predicted (nothing compiled
    without --verify); with a planted wrong predictor, --verify 1 stops it naming the launch, nothing written."""
    _need_engine()
    big = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 8,
           "num_stages": rng.choice([4, 5])}  # (s - 1) * (64*128 + 128*256) * 2 >= 245760 B > 101376
    f, keys = _file(tmp_path, rng, [big])
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    args = ["export", "triton-configs", str(f.parent), "--engine", "vllm", "--target", "rtx-pro-6000", "--out",
            str(out), "--hidden", "2048", "--cache-dir", str(cache), "--jobs", "2"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    rec = next(iter(prov["files"].values()))["entries"][str(keys[0])]
    assert not rec["kept"] and rec["original_evidence"] == rec["substitute_evidence"] == "predicted", rec
    assert rec["substitute_bytes"] <= 101376 < rec["original_bytes"] and _compiles(cache) == 0
    assert prov["evidence"] == "predicted, not timed"
    real = predict_tm.predict
    monkeypatch.setattr(predict_tm, "predict", lambda *a, **kw: real(*a, **kw) + 64)
    out2 = tmp_path / "out2"
    result = CliRunner().invoke(cli.app, args[:8] + [str(out2)] + args[9:] + ["--verify", "1"])
    assert result.exit_code == 1 and not out2.exists(), result.output
    lines = [x for x in result.output.splitlines() if x.startswith("MISMATCH ")]
    assert len(lines) == 1 and f"{f.name} [M={keys[0]}]" in lines[0] and _compiles(cache) == 1, result.output


def test_sweep_takes_verify_and_compile_all_for_triton_moe_only(tmp_path, rng):
    """The driver validates the options per family (Family.options): a CUTLASS family refuses them in one line."""
    opt = rng.choice([["--verify", str(rng.randint(1, 9))], ["--compile-all"]])
    result = CliRunner().invoke(cli.app, ["sweep", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000",
                                          "--out", str(tmp_path / "o"), *opt])
    assert isinstance(result.exception, UsageError) and opt[0] in str(result.exception), result.output
    assert "does not apply to --family sm120-nvfp4" in str(result.exception)


def test_sweep_predictor_first_rows_carry_the_prediction(tmp_path, rng):
    """sweep --family triton-moe at one M: each launch is predicted (bytes = predicted_smem_bytes) or compiled with
    the prediction beside it; --verify 1 compiles one predicted launch, whose prediction is exact."""
    _need_engine()
    opts = sw.SweepOptions(family="triton-moe", target="rtx-pro-6000", out=tmp_path / "o", jobs=2,
                           cache_dir=SESSION_CACHE, static_only=True,
                           workload={"presets": ["qwen3-30b-a3b"], "batches": [rng.choice([1, 2, 4, 8, 16])],
                                     "seed": rng.randrange(2**31)},
                           triton=TritonOptions(engine="vllm", device_names=[rng.choice(DEVICE_NAMES["rtx-pro-6000"])],
                                                verify=1))
    rows = sw.run(opts, cli.console)
    assert rows and all(r["prediction"] for r in rows), rows
    for r in rows:
        if r["evidence"] == "predicted":
            assert r["smem_bytes"] == r["predicted_smem_bytes"] and r["prediction"] == "not measured", r
        else:
            assert r["evidence"] == "compiled" and (r["prediction"] == "exact" or
                                                    r["prediction"].startswith("cannot predict: ")), r
    meta = json.loads((tmp_path / "o" / "run.json").read_text())
    assert meta["answers"]["verified"] == 1 and meta["evidence_mode"] in ("mixed", "compiled"), meta
