"""Provenance is never lost: --resume refuses rows made another way (family, toolchain, evidence mode) and rewrites
nothing; rotated rows keep their run.json; a second sweep into a folder being written refuses. Run as a user would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.results import provenance

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "results" / "static"


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=600)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != provenance.LOCK_NAME}


def _one_line_refusal(p, needle: str) -> None:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr


def _copy(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copytree(STATIC / name, out)
    return out


def _cases(tmp_path: Path, rng) -> list[tuple[Path, list[str], str]]:
    pred = tmp_path / "pred"
    p = tileprobe("sweep", "--predict-only", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--tiles",
                  "128x128x128", "--out", str(pred), "--json")
    assert p.returncode == 0, p.stderr
    sized = _copy(tmp_path, "rtx-pro-6000__sm120-nvfp4")
    fi = _copy(tmp_path, "rtx-pro-6000__flashinfer-moe")
    old_cutlass = _copy(tmp_path, "rtx-pro-6000__sm120-nvfp4__cutlass-4.2.0")
    t = ["--target", "rtx-pro-6000", "--static-only", "--resume"]
    return [
        (pred, ["sweep", "--family", "sm120-nvfp4", "--tiles", "128x128x128", *t], "evidence predicted -> sized"),
        (pred, ["sweep", "--family", "sm120-nvfp4", "--tiles", "128x128x128", "--compile", *t],
         "evidence predicted -> compiled"),
        (sized, ["sweep", "--family", "sm120-nvfp4", "--predict-only", *t], "evidence sized -> predicted"),
        (sized, ["sweep", "--family", "sm120-nvfp4", "--compile", *t], "evidence sized -> compiled"),
        (fi, ["sweep", "--family", rng.choice(["sm120-nvfp4", "vllm-moe"]), *t], "family flashinfer-moe -> "),
        (old_cutlass, ["sweep", "--family", "sm120-nvfp4", *t], "CUTLASS 4.2.0 -> 4.5.0"),
    ]


def test_resume_refuses_rows_made_another_way_and_rewrites_nothing(tmp_path, rng):
    for out, args, needle in _cases(tmp_path, rng):
        before = _snapshot(out)
        p = tileprobe(*args, "--out", str(out))
        _one_line_refusal(p, needle)
        assert "nothing was written" in p.stderr
        assert _snapshot(out) == before, (out, args)


def test_resume_with_the_same_setup_still_adds_rows(tmp_path):
    out = tmp_path / "pred"
    base = ["sweep", "--predict-only", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--out", str(out),
            "--json"]
    assert tileprobe(*base, "--tiles", "128x128x128").returncode == 0
    p = tileprobe(*base, "--tiles", "128x128x128,128x256x128", "--resume")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert len({r["config"] for r in rows}) == len(rows) == 4  # two tiles x two epilogues, none twice


def test_rotated_rows_keep_their_run_json(tmp_path, rng):
    out = tmp_path / "o"
    tiles = rng.sample(["128x128x128", "128x256x128", "256x128x128", "128x64x128"], 3)
    runs = []
    for i, t in enumerate(tiles):
        p = tileprobe("sweep", "--predict-only", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--tiles",
                      ",".join(tiles[: i + 1]), "--out", str(out), "--json")
        assert p.returncode == 0, p.stderr
        runs.append(((out / "run.json").read_text(), (out / "results.jsonl").read_text()))
    # The first run's rows and run.json are .1, the second's .2, the last run's are current: each pair together.
    for n, (meta, rows) in enumerate(runs[:-1], 1):
        assert (out / f"run.json.{n}").read_text() == meta and (out / f"results.jsonl.{n}").read_text() == rows
        assert json.loads(meta)["configs"] == len(rows.splitlines())
    assert (out / "run.json").read_text() == runs[-1][0]
    assert not (out / "run.json.3").exists()


def test_a_second_sweep_into_a_folder_being_written_refuses(tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    held = provenance.lock(out)  # another run holds the folder
    try:
        p = tileprobe("sweep", "--predict-only", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--tiles",
                      "128x128x128", "--out", str(out))
        _one_line_refusal(p, "being written by another tileprobe run")
        assert not (out / "results.jsonl").exists() and not (out / "run.json").exists()
    finally:
        held.release()
    p = tileprobe("sweep", "--predict-only", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--tiles",
                  "128x128x128", "--out", str(out))
    assert p.returncode == 0, p.stderr  # released: the folder is free again


@pytest.mark.parametrize("text", ["{not json", ""])
def test_resume_over_an_unreadable_run_json_refuses(tmp_path, text):
    out = _copy(tmp_path, "rtx-pro-6000__sm120-nvfp4")
    (out / "run.json").write_text(text)
    before = _snapshot(out)
    p = tileprobe("sweep", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000", "--static-only", "--resume",
                  "--out", str(out))
    _one_line_refusal(p, "provenance is unknown")
    assert _snapshot(out) == before
