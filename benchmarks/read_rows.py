"""How much does checking every row on read cost? Load every committed results folder (resultset.load: each line
against the row schema with schema.row_problems, results.csv against results.jsonl), a few times, and compare with
validating the same rows through jsonschema (schema.errors), which readers do not use because of its cost.

PYTHONPATH=. python3 benchmarks/read_rows.py [--runs 3] [--no-save]
Appends one JSON record to results/benchmarks/read_rows.jsonl.
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

from tileprobe.results import schema
from tileprobe.results.resultset import load

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    folders = sorted(p.parent for p in (ROOT / "results").rglob("results.jsonl"))
    rows = [json.loads(line) for f in folders for line in (f / "results.jsonl").read_text().splitlines()]
    loads, fast, slow = [], [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        for f in folders:
            load(f)
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert not any(schema.row_problems(r) for r in rows)
        fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert not any(schema.errors("row", r) for r in rows)
        slow.append(time.perf_counter() - t0)
    rec = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node(),
           "cpus": os.cpu_count(), "folders": len(folders), "rows": len(rows), "runs": args.runs,
           "load_all_s_median": round(statistics.median(loads), 3),
           "row_problems_us_per_row": round(1e6 * statistics.median(fast) / len(rows), 1),
           "jsonschema_us_per_row": round(1e6 * statistics.median(slow) / len(rows), 1)}
    print(json.dumps(rec))
    if not args.no_save:
        out = ROOT / "results" / "benchmarks" / "read_rows.jsonl"
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
