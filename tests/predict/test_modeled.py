"""The model in the sweep: --predict-only needs no nvcc and says `predicted`; compiled rows carry the prediction
beside the measurement; explain answers from the model."""

import json
import os
import subprocess
import sys

import pytest
from _session_draw import modeled_tile_and_schedule

from tileprobe.predict import modeled
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results.rows import StaticInfo
from tileprobe.backends.cutlass.toolchain import find_cutlass


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
def test_compiled_rows_carry_an_exact_prediction(tmp_path):
    """A random tile and schedule (the session's draw: tests/_session_draw.py), both epilogues, sized by nvcc. The
    static probe's module unit (test_static_probe.py) sizes the same two configs, so in a session that built it
    first the sweep is served its sizes (a config sized in any unit is not compiled again: described.py)."""
    tile, sched = modeled_tile_and_schedule()
    print("tile", tile, "schedule", sched)
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--static-only", "--tiles", tile, "--schedules",
                        sched, "--epilogue", "no-c,with-c", "--out", str(tmp_path / "o"), "--json"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["prediction"] == "exact" for r in rows), [r["prediction"] for r in rows]
    assert all(r["predicted_smem_bytes"] == r["smem_bytes"] and r["evidence"] == "sized" for r in rows)


def test_explain_an_engine_tactic_shows_every_variant_beside_the_committed_sizes():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
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

    root = Path(__file__).resolve().parents[2]
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


# flashinfer-moe: predictions stand for the engine's own tree -------------------------------------------------------

def _engine_tree():
    from tileprobe.engines.flashinfer import find_flashinfer
    from tileprobe.errors import UsageError

    try:
        return find_flashinfer()
    except UsageError as exc:
        pytest.skip(str(exc))


def _cutlass_stand_in(path, version: str, rng):
    """A headers-only CUTLASS tree that says `version` (another tree than any engine bundles)."""
    major, minor, patch = version.split(".")
    inc = path / "include" / "cutlass"
    inc.mkdir(parents=True)
    (inc / "version.h").write_text(f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n"
                                   f"#define CUTLASS_PATCH {patch}\n// {rng.getrandbits(64):x}\n")
    (path / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    return path


def _committed_measured(label: str) -> dict:
    """config key -> the committed rtx-pro-6000 flashinfer-moe row nvcc measured for release `label`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = {}
    for path in root.glob("results/static/rtx-pro-6000__flashinfer-moe*/results.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["engine"] == label and r["evidence"] == "sized":
                out[r["config"]] = r
    return out


@pytest.mark.parametrize("global_version", ["4.2.0", "4.5.0"])
def test_flashinfer_moe_predict_only_uses_the_engines_own_cutlass(tmp_path, rng, global_version):
    """A global CUTLASS (TILEPROBE_CUTLASS_DIR) of another version, or another 4.5.0 tree, is not what flashinfer-moe
    compiles: --predict-only predicts for, and its rows and run.json name, the engine's bundled CUTLASS; the predicted
    sizes are the ones nvcc measured for that release (committed rows)."""
    tree = _engine_tree()
    other = _cutlass_stand_in(tmp_path / "cutlass", global_version, rng)
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "flashinfer-moe", "--target",
                        "rtx-pro-6000", "--predict-only", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, PATH="/usr/bin:/bin", TILEPROBE_CUTLASS_DIR=str(other)))
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    meta = json.loads((tmp_path / "o" / "run.json").read_text())["toolchain"]
    assert rows and all(r["engine"] == tree.label() and r["cutlass_source"] == f"{tree.label()}'s bundled copy"
                        and r["cutlass_hash"] == meta["cutlass_hash"] and r["cutlass_version"] == "4.5.0"
                        for r in rows), {r["cutlass_source"] for r in rows}
    assert meta["cutlass_source"] == f"{tree.label()}'s bundled copy"
    assert meta["cutlass_hash"] != find_cutlass(other).tree_hash
    assert meta.get("engine") == tree.label() and meta["cutlass_dir"].startswith(str(tree.root))
    measured = _committed_measured(tree.label())
    if not measured:
        pytest.skip(f"no committed rtx-pro-6000 rows measured with {tree.label()}")
    both = [r for r in rows if r["config"] in measured and r["predicted_smem_bytes"] is not None]
    assert both and all(r["cutlass_hash"] == measured[r["config"]]["cutlass_hash"] for r in both)
    assert all((r["predicted_stages"], r["predicted_smem_bytes"]) == (measured[r["config"]]["stages"],
               measured[r["config"]]["smem_bytes"]) for r in both)


def _fake_flashinfer(tmp_path, version: str, cutlass) -> "Path":
    """A flashinfer-shaped folder: the real MoE sources tileprobe reads, `cutlass` as its bundled CUTLASS."""
    import shutil

    from tileprobe.engines import flashinfer as ef

    real = _engine_tree().root
    root = tmp_path / "site" / "flashinfer"
    for rel in (ef.HEURISTIC, ef.DISPATCH, ef.TRAITS):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real / rel, root / rel)
    (root / "data" / "csrc" / "nv_internal" / "tensorrt_llm" / "cutlass_extensions" / "include").mkdir(parents=True)
    (root / "data" / "cutlass").symlink_to(cutlass, target_is_directory=True)
    meta = tmp_path / "site" / f"flashinfer_python-{version}.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return root


@pytest.mark.parametrize("what", ["unchecked release", "checked release, other CUTLASS tree"])
def test_flashinfer_moe_predict_only_refuses_a_tree_it_was_not_checked_against(tmp_path, rng, what):
    """The rules are keyed by the engine release (and its bundled CUTLASS tree) they were checked against: an
    unchecked release with the very same CUTLASS, or a checked release whose CUTLASS is another tree, is
    CannotPredict: one line, exit 2, never a guess from the CUTLASS version."""
    real = _engine_tree()
    if what == "unchecked release":
        version = f"0.{rng.randrange(8, 40)}.{rng.randrange(10)}"
        fake = _fake_flashinfer(tmp_path, version, real.root / "data" / "cutlass")
        needle = f"flashinfer {version}"
    else:
        fake = _fake_flashinfer(tmp_path, real.version, _cutlass_stand_in(tmp_path / "cutlass", "4.5.0", rng))
        needle = "bundled CUTLASS tree"
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "flashinfer-moe", "--target",
                        "rtx-pro-6000", "--predict-only", "--flashinfer-dir", str(fake), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, PATH="/usr/bin:/bin"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot predict" in p.stderr and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
