"""Benchmark (no GPU): the static default set (sm120-nvfp4 on rtx-pro-6000, 18 configs), cold cache, built the
default way (one translation unit per core, `--jobs` = the machine's cores) against all of its configs in one
translation unit (`--jobs 1`), for this checkout and, with --before DIR, for an older one: the issue's target is
"the default way at least as fast as one translation unit".

Each sweep gets its own empty cache; the variants run interleaved (round-robin, --rounds times) so a load that comes
and goes on a shared machine falls on all of them; the load average before each sweep is recorded. Verdicts and
sizes of every variant are compared with the first one's. Wall seconds on a shared machine move with the others'
load; the CPU seconds (user + system of the sweep and every compiler it ran) hardly do: with c cores truly free the
default way's wall is about the largest translation unit's, with none to spare it is about its CPU seconds. Appends to results/benchmarks/static_tu.jsonl.
Run: python benchmarks/static_tu.py [--before OLD_CHECKOUT] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def sweep(checkout: Path, jobs: int | None, tmp: Path) -> tuple[float, float, dict]:
    """(wall s, CPU s of the sweep and every compiler it ran, {config: (verdict, smem, stages)})."""
    cache, out = tmp / "cache", tmp / "out"
    cmd = [sys.executable, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000",
           "--static-only", "--out", str(out), "--cache-dir", str(cache), "--json"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH")) if p))
    start, cpu0 = time.perf_counter(), _children_cpu()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=3600)
    took, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    if p.returncode != 0:
        sys.exit(f"sweep failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return took, cpu, {r["config"]: (r["verdict"], r["smem_bytes"], r["stages"]) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, help="an older checkout to measure the same way")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--record", type=Path, default=ROOT / "results" / "benchmarks" / "static_tu.jsonl")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    variants = {"after_default": (ROOT, None), "after_one_tu": (ROOT, 1)}
    if args.before:
        variants |= {"before_default": (args.before.resolve(), None), "before_one_tu": (args.before.resolve(), 1)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    loads: dict[str, list[float]] = {k: [] for k in variants}
    answers: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, (checkout, jobs) in variants.items():
            with tempfile.TemporaryDirectory() as tmp:
                loads[name].append(round(os.getloadavg()[0], 2))
                took, cpu, ans = sweep(checkout, jobs, Path(tmp))
                times[name].append(round(took, 1))
                cpus[name].append(round(cpu, 1))
                answers.setdefault(name, ans)
    first = next(iter(answers.values()))
    sys.path.insert(0, str(ROOT))
    from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc

    cut, nvcc = find_cutlass(), find_nvcc()
    def commit(checkout: Path) -> str | None:
        p = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        return p.stdout.strip() or None

    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": cores, "rounds": args.rounds,
           "after_commit": commit(ROOT), "before_commit": commit(args.before) if args.before else None,
           "configs": len(first), "median_s": {k: statistics.median(v) for k, v in times.items()}, "s": times,
           "cpu_s": cpus, "median_cpu_s": {k: statistics.median(v) for k, v in cpus.items()},
           "loadavg_before": loads, "same_answers": all(a == first for a in answers.values()),
           "nvcc": nvcc.version_text, "cutlass": f"{cut.version} ({cut.source}, {cut.tree_hash})",
           "command": "tileprobe sweep --family sm120-nvfp4 --target rtx-pro-6000 --static-only [--jobs 1]"}
    print(json.dumps(rec, indent=1))
    args.record.parent.mkdir(parents=True, exist_ok=True)
    with open(args.record, "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
