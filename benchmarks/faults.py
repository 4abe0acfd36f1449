"""Fault evidence on a GPU: one corrupted tile, a sticky illegal address at point k, a hang — through the real CLI.

Runs three small sweeps with TILEPROBE_FAULT set (see cutlass_harness/PROTOCOL.md) and checks, from the rows:
- corrupt:K:G  -> point K is `incorrect` and its reason names group G; every other point is `ok`;
- sticky:K     -> point K is `launch-error` (illegal address); every other point is `ok` (a fresh process ran the
                  points after K);
- hang:K       -> point K is `timeout`; every other point is `ok`;
and that no row is lost (one row per point). Prints and saves faults.json. Run on the GPU machine:
PYTHONPATH=. python3 benchmarks/faults.py --save DIR
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sweep(out: Path, fault: str, seed: int, tile: str, extra: list[str]) -> tuple[list[dict], float]:
    cmd = [sys.executable, "-m", "tileprobe", "sweep", "--tiles", tile, "--schedules", "cooperative", "--workload",
           "deepseek-v3", "--batch", "1,8,32", "--seed", str(seed), "--out", str(out), "--gpus", "0", *extra]
    env = dict(os.environ, TILEPROBE_FAULT=fault, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    (out / "sweep.log").write_text(" ".join(cmd) + f"\nTILEPROBE_FAULT={fault}\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-800:]}")
    rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("workload") and r.get("gemm")], time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save", type=Path, required=True)
    ap.add_argument("--tile", default="128x128x128")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "big"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    k_sticky, k_hang = rng.randrange(1, 5), rng.randrange(1, 5)
    k_corrupt, group = rng.randrange(2, 6), rng.randrange(0, 8)  # batch >= 8 points hold >= 8 active experts
    record = {"seed": args.seed, "tile": args.tile, "cases": {}}
    ok = True
    for name, fault, k, extra in (("corrupt", f"corrupt:{k_corrupt}:{group}", k_corrupt, []),
                                  ("sticky", f"sticky:{k_sticky}", k_sticky, []),
                                  ("hang", f"hang:{k_hang}", k_hang, ["--run-timeout", "30"])):
        out = args.save / name
        out.mkdir(parents=True, exist_ok=True)
        rows, secs = sweep(out, fault, args.seed, args.tile, extra)
        by_id = {r["point_id"]: r for r in rows}
        expect = {"corrupt": "incorrect", "sticky": "launch-error", "hang": "timeout"}[name]
        hit = by_id.get(k, {})
        checks = {
            "one_row_per_point": len(rows) == len(by_id) == 6,
            "fault_point_verdict": hit.get("verdict") == expect,
            "others_ok": all(r["verdict"] == "ok" for i, r in by_id.items() if i != k),
        }
        if name == "corrupt":
            checks["names_group"] = f"worst in group {group} " in (hit.get("reason") or "") and hit.get("bad_groups") == 1
        if name == "sticky":
            checks["illegal_address"] = "illegal" in (hit.get("reason") or "").lower()
        record["cases"][name] = {"fault": fault, "point": k, "seconds": round(secs, 1), "checks": checks,
                                 "fault_row": {c: hit.get(c) for c in ("verdict", "reason", "rel_err", "bad_elements",
                                                                       "bad_groups", "worst_group", "worst_ratio")},
                                 "verdicts": {i: r["verdict"] for i, r in sorted(by_id.items())}}
        ok &= all(checks.values())
    record["all_checks_pass"] = ok
    text = json.dumps(record, indent=1)
    print(text)
    (args.save / "faults.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
