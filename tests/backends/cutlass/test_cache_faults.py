"""A broken build-cache entry is rebuilt with one warning line: a truncated meta.json, a missing build.log, an "ok"
entry whose binary is gone. Never a traceback, never a row that points at a binary that does not exist.

The subject is the cache, not CUTLASS: the sweep (the real CLI, the real nvcc) builds a tiny describe harness
(TILEPROBE_HARNESS_DIR) that prints a description of the config from its TP_CFG numbers, so each of the four builds
takes a second or two instead of a CUTLASS parse. The numbers it prints differ per tile (a random one per run), so a
row that came from a stale or another entry would show. tests/backends/cutlass/test_split_build.py holds the split
run entry's own faults (its kernel.cubin or kernel.log gone)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.backends.cutlass import described
from tileprobe.families import FAMILIES, expand_configs

from _tiny_harness import tiny_smem_bytes, write_tiny_harness

pytestmark = pytest.mark.nvcc



def _sweep(harness: Path, tile: str, cache: Path, out: Path):
    env = dict(os.environ, TILEPROBE_HARNESS_DIR=str(harness))
    return subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target",
                           "rtx-pro-6000", "--static-only", "--tiles", tile, "--epilogue", "no-c", "--schedules",
                           "cooperative", "--jobs", "1", "--cache-dir", str(cache), "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=600, env=env)


def _sizes(out: Path) -> list[tuple]:
    rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    return [(r["config"], r["verdict"], r["smem_bytes"], r["stages"]) for r in rows]


def _break_truncated_meta(entry: Path) -> None:
    text = (entry / "meta.json").read_text()
    (entry / "meta.json").write_text(text[: len(text) // 2])


def _break_missing_log(entry: Path) -> None:
    (entry / "build.log").unlink()


def _break_binary_gone(entry: Path) -> None:
    assert json.loads((entry / "meta.json").read_text())["ok"] is True
    (entry / "harness").unlink()


def test_broken_cache_entries_are_rebuilt_with_one_warning(tmp_path, rng):
    harness = write_tiny_harness(tmp_path / "harness")
    supported = [c for c in expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a")
                 if not c.unsupported_reason and c.schedule == "cooperative" and c.epilogue == "no-c"]
    t = rng.choice(supported).tile  # a tile the family launches (others are refused before any build)
    tm, tn, tk = t.m, t.n, t.k
    tile = f"{tm}x{tn}x{tk}"
    cache = tmp_path / "cache"
    sweep = lambda out: _sweep(harness, tile, cache, out)  # noqa: E731
    first = sweep(tmp_path / "o0")
    assert first.returncode == 0, first.stderr
    want = _sizes(tmp_path / "o0")
    # The tiny harness's own numbers: nvcc built it and the sweep read its output.
    assert [(w[1], w[2], w[3]) for w in want] == [("fits", tiny_smem_bytes(tm, tn, tk), 2)], want
    (entry,) = [p for p in cache.iterdir() if p.is_dir() and (p / "meta.json").is_file()]
    kept = cache / described.DESCRIBED
    assert len(list(kept.glob("*.json"))) == 1  # the config's sizes, kept beside its build (described.py)
    faults = [_break_truncated_meta, _break_missing_log, _break_binary_gone]
    rng.shuffle(faults)
    for i, fault in enumerate(faults, 1):
        fault(entry)
        shutil.rmtree(kept)  # the sizes record would serve the row without reading the build entry under test
        p = sweep(tmp_path / f"o{i}")
        said = p.stdout + p.stderr
        assert p.returncode == 0, (fault.__name__, said)
        assert "Traceback" not in said, (fault.__name__, said)
        warnings = [l for l in p.stderr.splitlines() if "warning: build cache entry" in l]
        assert len(warnings) == 1 and entry.name in warnings[0] and "rebuilding" in warnings[0], (fault.__name__,
                                                                                              p.stderr)
        assert _sizes(tmp_path / f"o{i}") == want, fault.__name__
        # Repaired: a whole entry again, and the next sweep uses it silently.
        assert (entry / "harness").is_file() and (entry / "build.log").is_file()
        assert json.loads((entry / "meta.json").read_text())["ok"] is True
    shutil.rmtree(kept)
    again = sweep(tmp_path / "again")
    assert again.returncode == 0 and "warning: build cache entry" not in again.stderr
