"""A broken build-cache entry is rebuilt with one warning line: a truncated meta.json, a missing build.log, an "ok"
entry whose binary is gone. Never a traceback, never a row that points at a binary that does not exist. Real nvcc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.nvcc

TILE = "128x128x128"


def _sweep(cache: Path, out: Path):
    return subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target",
                           "rtx-pro-6000", "--static-only", "--tiles", TILE, "--epilogue", "no-c", "--schedules",
                           "cooperative", "--jobs", "1", "--cache-dir", str(cache), "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=1200)


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
    cache = tmp_path / "cache"
    first = _sweep(cache, tmp_path / "o0")
    assert first.returncode == 0, first.stderr
    want = _sizes(tmp_path / "o0")
    (entry,) = [p for p in cache.iterdir() if p.is_dir() and (p / "meta.json").is_file()]
    faults = [_break_truncated_meta, _break_missing_log, _break_binary_gone]
    rng.shuffle(faults)
    for i, fault in enumerate(faults, 1):
        fault(entry)
        p = _sweep(cache, tmp_path / f"o{i}")
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
    again = _sweep(cache, tmp_path / "again")
    assert again.returncode == 0 and "warning: build cache entry" not in again.stderr
