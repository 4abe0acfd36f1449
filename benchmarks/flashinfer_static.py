"""Static sweep of the whole flashinfer-moe family for SM120 targets: cold (empty build cache) and warm, on this
machine; writes the committed results and appends a record to results/benchmarks/flashinfer_static.jsonl.

    PYTHONPATH=. python3 benchmarks/flashinfer_static.py [--jobs N]

Targets: rtx-pro-6000 (cold, then warm), rtx-5090 and dgx-spark-gb10 (sm_121a: a separate cold build).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sweep(target: str, out: Path, cache: Path, jobs: int) -> float:
    cmd = [sys.executable, "-m", "tileprobe", "sweep", "--family", "flashinfer-moe", "--target", target,
           "--static-only", "--out", str(out), "--cache-dir", str(cache), "--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    secs = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr[-800:]}")
    return secs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "static")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="tileprobe-fi-cache-"))
    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(), "jobs": args.jobs}
    try:
        folder = args.out / "rtx-pro-6000__flashinfer-moe"
        shutil.rmtree(folder, ignore_errors=True)
        rec["cold_rtx-pro-6000_s"] = round(sweep("rtx-pro-6000", folder, cache, args.jobs), 1)
        warm = args.out.parent / ".warm-check"
        rec["warm_rtx-pro-6000_s"] = round(sweep("rtx-pro-6000", warm, cache, args.jobs), 1)
        shutil.rmtree(warm, ignore_errors=True)
        rec["rtx-5090_s (same sm_120a builds)"] = round(
            sweep("rtx-5090", args.out / "rtx-5090__flashinfer-moe", cache, args.jobs), 1)
        rec["cold_dgx-spark-gb10_s (sm_121a)"] = round(
            sweep("dgx-spark-gb10", args.out / "dgx-spark-gb10__flashinfer-moe", cache, args.jobs), 1)
        rows = [json.loads(l) for l in (folder / "results.jsonl").read_text().splitlines()]
        rec["configs"] = len(rows)
        rec["verdicts"] = {v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(rec, indent=1))
    with open(ROOT / "results" / "benchmarks" / "flashinfer_static.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
