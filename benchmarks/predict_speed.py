"""How fast is tileprobe.predict? Predict 10,000 random configs (both families, auto and explicit stages, with and
without C, swap_ab, every schedule; unbuildable draws included, they raise Unbuildable), a few times; compare the
median with the compile time per config that a committed static sweep recorded (its compile_seconds column: since
2026-11-30 each config's share of its batched build, the batch's wall time / compile_configs; records written before
hold the whole batch's wall time).

PYTHONPATH=. python3 benchmarks/predict_speed.py [--n 10000] [--runs 5] [--no-save]
Appends one JSON record to results/benchmarks/predict_speed.jsonl. Goal: 10,000 predictions in under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from tileprobe.predict import CannotPredict, Unbuildable, predict

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "results" / "static" / "rtx-pro-6000__sm120-nvfp4" / "results.jsonl"
GOAL_S = 1.0


def draw(rng: random.Random, n: int) -> list[tuple]:
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            fam, sched = "sm120-nvfp4", rng.choice(["auto", "cooperative", "pingpong"])
            tile = (rng.choice([128, 256]), rng.randrange(32, 257, 32), rng.randrange(64, 513, 64))
            arch, ver = rng.choice(["sm_120a", "sm_121a"]), rng.choice(["4.5.0", "4.2.0"])
        else:
            fam, sched = "sm90-fp8", rng.choice(["cooperative", "pingpong"])
            tile = (rng.randrange(64, 257, 64), rng.randrange(8, 257, 8), rng.randrange(32, 257, 32))
            arch, ver = "sm_90a", "4.5.0"
        out.append((fam, tile, sched, rng.choice([0, 0, 0, 2, 3, 4, 6]), rng.choice(["no-c", "with-c"]),
                    rng.random() < 0.5, arch, ver))
    return out


def run_once(configs: list[tuple]) -> tuple[float, int, int]:
    ok = bad = 0
    t0 = time.perf_counter()
    for c in configs:
        try:
            predict(*c)
            ok += 1
        except (Unbuildable, CannotPredict):
            bad += 1
    return time.perf_counter() - t0, ok, bad


def compile_seconds_per_config() -> dict:
    rows = [json.loads(line) for line in SWEEP.read_text().splitlines()]
    secs = [r["compile_seconds"] for r in rows if r.get("compile_seconds") is not None]
    out = {"sweep": str(SWEEP.relative_to(ROOT)), "rows": len(rows),
           # compile_seconds: the config's share of its nvcc batch (batch wall time / compile_configs)
           "compile_seconds_median": statistics.median(secs)}
    bench = ROOT / "results" / "benchmarks" / "static_sweep.jsonl"
    if bench.exists():
        last = json.loads(bench.read_text().splitlines()[-1])
        out["static_sweep_cold_s_per_config"] = round(last["cold_s_median"] / last["configs"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    configs = draw(random.Random(seed), args.n)
    times = []
    for _ in range(args.runs):
        dt, ok, bad = run_once(configs)
        times.append(round(dt, 4))
    med = statistics.median(times)
    comp = compile_seconds_per_config()
    rec = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": os.cpu_count(),
        "machine": platform.machine(), "python": platform.python_version(), "seed": seed, "configs": args.n,
        "predicted": ok, "unbuildable": bad, "runs_s": times, "median_s": med,
        "us_per_config": round(med / args.n * 1e6, 2), **comp,
        "first_run_s": times[0],  # cold caches
        "speedup_vs_compile_seconds": round(comp["compile_seconds_median"] / (med / args.n)),
        "goal_s": GOAL_S, "meets_goal": max(med, times[0]) < GOAL_S,
    }
    print(json.dumps(rec))
    if not args.no_save:
        out = ROOT / "results" / "benchmarks" / "predict_speed.jsonl"
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
