"""How long does the build-cache key take now that it hashes the contents of every engine include folder?

For the flashinfer-moe family (the installed flashinfer, or --flashinfer-dir): the key of one config, first in a
fresh process (every header read: the in-process memo is empty; the OS page cache may be warm), then --runs times
more (every header stat'ed, none read unless it changed). Prints and appends one JSON record to
results/benchmarks/cache_key_speed.jsonl.

PYTHONPATH=. python3 benchmarks/cache_key_speed.py [--runs 20] [--flashinfer-dir DIR] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from tileprobe.backends.cutlass import build
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--flashinfer-dir", default=None)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    if a.flashinfer_dir:
        os.environ["TILEPROBE_FLASHINFER_DIR"] = a.flashinfer_dir
    fam = FAMILIES["flashinfer-moe"]
    cfg = next(c for c in expand_configs(fam, fam.archs[0]) if c.unsupported_reason is None)
    req = build.BuildRequest("describe", (cfg,), with_device=False)
    cutlass, nvcc = find_cutlass(fam.cutlass_root()), find_nvcc()
    dirs = req.include_dirs()
    files = sum(len(files) for d in dirs for _, _, files in os.walk(d))
    t0 = time.perf_counter()
    key = build.cache_key(req, cutlass, nvcc)
    first = time.perf_counter() - t0
    runs = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        assert build.cache_key(req, cutlass, nvcc) == key
        runs.append(time.perf_counter() - t0)
    rec = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": os.cpu_count(),
           "machine": platform.machine(), "python": platform.python_version(), "config": cfg.name,
           "include_dirs": len(dirs), "files": files, "first_s": round(first, 4),
           "runs": a.runs, "median_s": round(statistics.median(runs), 4), "max_s": round(max(runs), 4)}
    line = json.dumps(rec)
    print(line)
    if not a.no_save:
        out = ROOT / "results" / "benchmarks" / "cache_key_speed.jsonl"
        with open(out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
