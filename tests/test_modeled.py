"""The model in the sweep: --predict-only needs no nvcc and says `predicted`; compiled rows carry the prediction
beside the measurement; explain answers from the model."""

import json
import os
import subprocess
import sys

import pytest

from tileprobe import modeled
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.rows import StaticInfo


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PATH="/usr/bin:/bin"))  # no nvcc on PATH


def test_predict_only_needs_no_nvcc_and_expands_ranges(tmp_path, rng):
    n_hi = rng.choice([128, 256])
    p = tileprobe("sweep", "--predict-only", "--tiles", f"128,256x32..{n_hi}:32x128", "--out", str(tmp_path / "o"),
                  "--json")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * (n_hi // 32) * 2  # 2 M values x N in 32..n_hi step 32 x 1 K x (cooperative, pingpong)
    sized = [r for r in rows if r["verdict"] in ("fits", "smem-over-limit")]
    assert sized and all(r["evidence"] == "predicted" and "predicted, not compiled" in r["reason"] for r in sized)
    assert all(r["nvcc_version"] is None for r in rows)


def test_predict_only_refuses_what_it_cannot_predict(tmp_path):
    # every family has rules now; a CUTLASS release none was verified on (a headers-only stand-in saying 4.4.0) is
    # what the model must refuse
    inc = tmp_path / "cutlass" / "include" / "cutlass"
    inc.mkdir(parents=True)
    (inc / "version.h").write_text("#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 4\n#define CUTLASS_PATCH 0\n")
    p = tileprobe("sweep", "--predict-only", "--cutlass-dir", str(tmp_path / "cutlass"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "cannot predict" in p.stderr and "Traceback" not in p.stderr


def test_explain_from_the_model_says_so():
    p = tileprobe("explain", "128x32x64B", "--predict-only")
    assert p.returncode == 0, p.stderr
    assert "evidence: predicted" in p.stdout and "SharedStorage" in p.stdout


@pytest.mark.nvcc
def test_compiled_rows_carry_an_exact_prediction(tmp_path, rng):
    tile = rng.choice(["128x64x128", "128x128x128", "128x256x64B", "256x128x128"])
    sched = rng.choice(["cooperative", "pingpong"])
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--static-only", "--tiles", tile, "--schedules",
                        sched, "--epilogue", "no-c,with-c", "--out", str(tmp_path / "o"), "--json"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["prediction"] == "exact" for r in rows), [r["prediction"] for r in rows]
    assert all(r["predicted_smem_bytes"] == r["smem_bytes"] and r["evidence"] == "sized" for r in rows)


def test_explain_an_engine_tactic_shows_every_variant_beside_the_committed_sizes():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    rows = [json.loads(l) for l in (root / "results/static/rtx-pro-6000__flashinfer-moe/results.jsonl")
            .read_text().splitlines()]
    mine = [r for r in rows if r["tactic"] == "CtaShape128x256x64B" and r["dtypes"] == "nvfp4xnvfp4"]
    p = tileprobe("explain", "CtaShape128x256x64B", "--family", "flashinfer-moe", "--target", "rtx-pro-6000",
                  "--epilogue", "finalize", "--predict-only")
    assert p.returncode == 0, p.stderr
    for r in mine:
        gemm = "gemm2 (finalize)" if r["epilogue"] == "finalize" else "gemm1 (default)"
        line = next(l for l in p.stdout.splitlines() if f"nvfp4xnvfp4 {gemm} swap {'on' if r['swap_ab'] else 'off'}" in l)
        assert f"{r['smem_bytes']} B" in line and ("OVER" in line) == (r["verdict"] == "smem-over-limit")


def test_no_committed_static_row_has_a_model_error():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    checked = 0
    for path in root.glob("results/static/*/results.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("prediction"):
                checked += 1
                assert not r["prediction"].startswith("MODEL ERROR"), (path.parent.name, r["config"], r["prediction"])
    assert checked >= 144 + 3 * 80


def test_a_large_sweep_does_not_compile_what_the_model_says_cannot_fit(tmp_path, rng):
    """--model-skip with an nvcc that cannot compile anything: the over-limit configs still get their rows, from the
    model (evidence predicted), because nothing needed compiling."""
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\nexit 1\n")
    fake.chmod(0o755)
    k = rng.choice([384, 512])
    p = tileprobe("sweep", "--static-only", "--tiles", f"256x256x{k}", "--schedules", "cooperative,pingpong",
                  "--epilogue", "no-c,with-c", "--model-skip", "--nvcc", str(fake), "--cache-dir", str(tmp_path / "c"),
                  "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["verdict"] == "smem-over-limit" and r["evidence"] == "predicted" for r in rows)
    assert all("predicted, not compiled" in r["reason"] for r in rows)


def test_predict_only_rows_are_not_measured_never_exact(tmp_path, rng):
    """--predict-only compares the model with nothing: its rows say `not measured`, never `exact`."""
    tiles = ",".join(rng.sample(["128x128x128", "128x256x128", "256x128x128", "128x64x128", "256x256x256"], 3))
    p = tileprobe("sweep", "--predict-only", "--tiles", tiles, "--epilogue", "no-c,with-c", "--out",
                  str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["evidence"] in ("predicted", "none") for r in rows)
    assert not [r["prediction"] for r in rows if "exact" in r["prediction"]]
    assert all(r["prediction"].startswith("not measured") for r in rows), {r["prediction"] for r in rows}


def test_columns_compare_only_what_was_measured(rng):
    cfg = rng.choice(expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a", ["128x128x128", "128x256x128"]))
    m = modeled.model(cfg, "4.5.0")
    same = dict(stages=m.stages, smem_bytes=m.smem_bytes)
    assert modeled.columns(cfg, "4.5.0", StaticInfo(**same))["prediction"] == "exact"  # measured, equal
    assert modeled.columns(cfg, "4.5.0", StaticInfo(**same, predicted=True))["prediction"] == "not measured"
    off = dict(stages=m.stages, smem_bytes=m.smem_bytes + 1024 * rng.randint(1, 8))
    assert modeled.columns(cfg, "4.5.0", StaticInfo(**off))["prediction"].startswith("MODEL ERROR")
