"""Benchmark: cold and warm static sweeps of the default sm120-nvfp4 set (no GPU needed).

Cold = an empty build cache; warm = the same sweep again. Prints the figures and appends them, with the machine,
nvcc and CUTLASS versions, to results/benchmarks/static_sweep.jsonl. Targets (issue): cold <= 120 s, warm <= 5 s on
the 2-core CI machine. Run: python benchmarks/static_sweep.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sweep(cache: Path, out: Path) -> float:
    cmd = [sys.executable, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000",
           "--static-only", "--out", str(out), "--cache-dir", str(cache), "--json"]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    took = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"sweep failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1, help="cold/warm pairs to run")
    args = ap.parse_args()
    colds, warms = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cache, out = Path(tmp) / "cache", Path(tmp) / "out"
            colds.append(sweep(cache, out))
            warms.append(sweep(cache, out))
            rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    sys.path.insert(0, str(ROOT))
    from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc

    cut, nvcc = find_cutlass(), find_nvcc()
    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "machine": platform.machine(), "configs": len(rows), "cold_s_median": round(statistics.median(colds), 1),
           "warm_s_median": round(statistics.median(warms), 2), "cold_s": [round(c, 1) for c in colds],
           "warm_s": [round(w, 2) for w in warms], "nvcc": nvcc.version_text,
           "cutlass": f"{cut.version} ({cut.source}, {cut.tree_hash})", "targets": {"cold_s": 120, "warm_s": 5}}
    print(json.dumps(rec, indent=1))
    dest = ROOT / "results" / "benchmarks"
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "static_sweep.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
