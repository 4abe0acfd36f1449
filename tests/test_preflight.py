"""A broken toolchain stops a sweep before its first config: one line naming the fault and its fix, the doctor's help
line, exit 2, no rows and nothing cached; once the environment is fixed the same sweep (no --rebuild) compiles.

The real nvcc and the real CUTLASS headers (flashinfer's bundled copy, or a copy of it made of symlinks with one
folder left out). The configs' own compiles use the tiny describe harness (tests/_tiny_harness.py): the subject is
the toolchain check, which compiles CUTLASS's headers itself whatever the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.families import FAMILIES, expand_configs

from _cutlass_copy import cutlass_root, tree_without_util
from _tiny_harness import tiny_smem_bytes, write_tiny_harness

pytestmark = pytest.mark.nvcc

HELP = "help: run `tileprobe doctor`"


def sweep(tmp_path: Path, tile: str, out: Path, **env) -> subprocess.CompletedProcess:
    harness = write_tiny_harness(tmp_path / "harness")
    return subprocess.run([sys.executable, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target",
                           "rtx-pro-6000", "--static-only", "--tiles", tile, "--schedules", "cooperative",
                           "--epilogue", "no-c", "--jobs", "1", "--cache-dir", str(tmp_path / "cache"),
                           "--out", str(out), "--json"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TILEPROBE_HARNESS_DIR": str(harness), **env})


def built_entries(cache: Path) -> list[str]:
    """Build and description entries in a cache (not the preflight's own pass marker, not lock files)."""
    if not cache.is_dir():
        return []
    found = [p.name for p in cache.iterdir() if p.is_dir() and p.name not in ("preflight", "described")]
    found += [p.name for p in (cache / "described").glob("*")] if (cache / "described").is_dir() else []
    return found


def _tile(rng) -> str:
    supported = [c for c in expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a") if not c.unsupported_reason]
    return rng.choice(sorted({str(c.tile) for c in supported}))


def assert_stopped(proc: subprocess.CompletedProcess, out: Path, cache: Path, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1] == HELP, proc.stderr
    assert lines[0].startswith("tileprobe: error: ") and "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (out / "results.jsonl").exists() and not (out / "run.json").exists()
    assert built_entries(cache) == []


def test_a_cutlass_tree_without_tools_util_include_stops_the_sweep_then_the_fixed_tree_fits(tmp_path, rng):
    """Before: every config a compile-error row, exit 0, the failures cached. Now: exit 2 with one line; pointing
    TILEPROBE_CUTLASS_DIR at the complete tree then sizes the same tile, with no --rebuild."""
    broken = tree_without_util(tmp_path / "cutlass-copy")
    tile = _tile(rng)
    out = tmp_path / "out"
    proc = sweep(tmp_path, tile, out, TILEPROBE_CUTLASS_DIR=str(broken))
    assert_stopped(proc, out, tmp_path / "cache", "tools/util/include", str(broken), "TILEPROBE_CUTLASS_DIR")

    fixed = sweep(tmp_path, tile, out, TILEPROBE_CUTLASS_DIR=str(cutlass_root()))
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    rows = [json.loads(line) for line in fixed.stdout.splitlines() if line.startswith("{")]
    m, n, k = (int(x) for x in tile.removesuffix("B").split("x"))
    assert rows and all(r["verdict"] == "fits" and r["smem_bytes"] == tiny_smem_bytes(m, n, k) for r in rows), rows


def test_a_bogus_nvcc_prepend_flag_stops_the_sweep(tmp_path, rng):
    flag = f"--bogus-{rng.getrandbits(32):x}"
    out = tmp_path / "out"
    proc = sweep(tmp_path, _tile(rng), out, NVCC_PREPEND_FLAGS=flag)
    assert_stopped(proc, out, tmp_path / "cache", flag, "NVCC_PREPEND_FLAGS")
