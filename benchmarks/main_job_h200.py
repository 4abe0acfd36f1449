"""Benchmark on a GPU (run on the lent H200): the main job, `tileprobe sweep` with no options (the default sm90-fp8
set on deepseek-v3 decode), cold cache, before and after a change, in one call.

Each checkout (--before DIR, --after DIR; default: this one) runs the same command with its own empty build cache
and the same seed (same routing and data), from a fresh results folder; --warm also repeats the after sweep on its
warm cache. Recorded per sweep: wall seconds, run.json's phase split, row, verdict and evidence counts. Compared:
the set of rows (config x point), each row's verdict, each row's evidence (a difference is listed, never hidden), and
the best tile per point with the two medians. Prints the record and appends it to
results/benchmarks/main_job_h200.jsonl (or --record PATH).

Run (device): PYTHONPATH=. python3 benchmarks/main_job_h200.py --before OLD_CHECKOUT --after NEW_CHECKOUT --warm
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_commit(checkout: Path) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or None


def sweep(checkout: Path, work: Path, cache: Path, seed: int, extra: list[str]) -> dict:
    """One `tileprobe sweep` run from `checkout`'s sources; its wall time, phases and rows."""
    env = dict(os.environ, TILEPROBE_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH")) if p))
    work.mkdir(parents=True, exist_ok=True)
    out = work / "tileprobe-results"
    cmd = [sys.executable, "-m", "tileprobe", "sweep", *extra, "--seed", str(seed), "--out", str(out)]
    start = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    (work / "sweep.log").write_text(p.stdout + p.stderr)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {(p.stdout + p.stderr)[-800:]}", "wall_s": round(wall, 1)}
    run = json.loads((out / "run.json").read_text())
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return {"wall_s": round(wall, 1), "phases": run.get("phases"),
            "rows": len(rows), "toolchain": run.get("toolchain"), "target": run.get("target"),
            "verdicts": dict(collections.Counter(r["verdict"] for r in rows)),
            "evidence": dict(collections.Counter(r["evidence"] for r in rows)), "_rows": rows}


def row_id(r: dict) -> tuple:
    return (r["config"], r.get("workload"), r.get("gemm"), r.get("batch"), r.get("point_id"))


def compare(a: list[dict], b: list[dict]) -> dict:
    """Rows, verdicts and evidence of sweep b against sweep a; best tile per point and its median in each."""
    ra, rb = {row_id(r): r for r in a}, {row_id(r): r for r in b}
    verdict_diff = [f"{k}: {ra[k]['verdict']} -> {rb[k]['verdict']}" for k in ra if k in rb
                    and ra[k]["verdict"] != rb[k]["verdict"]]
    evidence_diff = collections.Counter(f"{ra[k]['verdict']}: {ra[k]['evidence']} -> {rb[k]['evidence']}"
                                        for k in ra if k in rb and ra[k]["evidence"] != rb[k]["evidence"])
    sizes_diff = [str(k) for k in ra if k in rb and ra[k].get("smem_bytes") != rb[k].get("smem_bytes")]

    def best(rows: dict) -> dict:
        out: dict = {}
        for r in rows.values():
            if r.get("verdict") == "ok" and r.get("us_median"):
                key = f"{r['workload']}/{r['gemm']}/{r['batch']}"
                if key not in out or r["us_median"] < out[key]["us_median"]:
                    out[key] = r
        return out

    ba, bb = best(ra), best(rb)
    tiles = {}
    for k in ba:
        if k in bb:
            same = rb.get(row_id(ba[k]))  # sweep a's winner, as sweep b measured it
            tiles[k] = {"a": f"{ba[k]['tile']}/{ba[k]['schedule']}", "b": f"{bb[k]['tile']}/{bb[k]['schedule']}",
                        "a_us": ba[k]["us_median"], "b_us": bb[k]["us_median"],
                        "a_winner_in_b_us": same.get("us_median") if same else None}
    med = [abs(ra[k]["us_median"] - rb[k]["us_median"]) / ra[k]["us_median"] * 100 for k in ra
           if k in rb and ra[k].get("us_median") and rb[k].get("us_median")]
    med.sort()
    return {"same_row_set": set(ra) == set(rb), "only_before": len(set(ra) - set(rb)),
            "only_after": len(set(rb) - set(ra)), "verdict_differences": verdict_diff[:20],
            "evidence_differences": dict(evidence_diff), "smem_bytes_differences": sizes_diff[:20],
            "us_median_diff_pct": {"median": round(med[len(med) // 2], 2) if med else None,
                                   "p90": round(med[int(len(med) * 0.9)], 2) if med else None,
                                   "max": round(med[-1], 2) if med else None, "rows": len(med)},
            "best_tile_per_point": tiles,
            "best_tiles_agree": sum(v["a"] == v["b"] for v in tiles.values()), "points": len(tiles)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="checkout of the code before the change")
    ap.add_argument("--after", type=Path, default=ROOT, help="checkout of the code after the change")
    ap.add_argument("--seed", type=int, default=None, help="routing and data seed of both sweeps (default: random)")
    ap.add_argument("--warm", action="store_true", help="also repeat the after sweep on its warm cache")
    ap.add_argument("--save", type=Path, help="copy each sweep's results.jsonl + run.json + log here")
    ap.add_argument("--record", type=Path, default=ROOT / "results" / "benchmarks" / "main_job_h200.jsonl")
    ap.add_argument("--before-commit", help="commit of --before, where that copy has no .git")
    ap.add_argument("--after-commit", help="commit of --after, where that copy has no .git")
    ap.add_argument("--sweep-args", default="", help="extra sweep options for both (a dry run of this script on a "
                                                       "machine without a GPU); empty for the main job")
    args = ap.parse_args()
    extra = args.sweep_args.split()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") % 2**31
    tmp = Path(tempfile.mkdtemp(prefix="tp-main-"))
    runs = {}
    # the after sweep first: each gets its own empty cache, and the CUTLASS headers are read once by either
    runs["after_cold"] = sweep(args.after.resolve(), tmp / "after_cold", tmp / "cache_after", seed, extra)
    runs["before_cold"] = sweep(args.before.resolve(), tmp / "before_cold", tmp / "cache_before", seed, extra)
    if args.warm:
        runs["after_warm"] = sweep(args.after.resolve(), tmp / "after_warm", tmp / "cache_after", seed, extra)
    rows = {k: v.pop("_rows", None) for k, v in runs.items()}
    cmp = compare(rows["before_cold"], rows["after_cold"]) if rows["before_cold"] and rows["after_cold"] else None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        smi = None
    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": smi, "cores": os.cpu_count(),
           "seed": seed, "before_commit": args.before_commit or git_commit(args.before),
           "after_commit": args.after_commit or git_commit(args.after),
           "command": " ".join(["tileprobe sweep", *extra, f"--seed {seed}"]) + " (cold: empty TILEPROBE_CACHE_DIR)",
           **runs,
           "before_vs_after": cmp, "targets": {"after_cold_wall_s": 60}}
    print(json.dumps(rec, indent=1))
    args.record.parent.mkdir(parents=True, exist_ok=True)
    with open(args.record, "a") as f:
        f.write(json.dumps(rec) + "\n")
    if args.save:
        for name in runs:
            dest = args.save / name
            dest.mkdir(parents=True, exist_ok=True)
            for f in ("tileprobe-results/results.jsonl", "tileprobe-results/run.json", "sweep.log"):
                src = tmp / name / f
                if src.is_file():
                    (dest / Path(f).name).write_bytes(src.read_bytes())


if __name__ == "__main__":
    main()
