"""Benchmark (no GPU): building FlashInfer's own tactic enumeration (tileprobe.engines.flashinfer_native_ids: the
driver and five FlashInfer sources, linked, run on the host) for the installed flashinfer, in this checkout and,
with --before DIR, in an older one, interleaved --rounds times, each build in a fresh folder (no cache).

Records per variant the wall and CPU seconds (user + system of every compiler it ran) of each round, their medians,
the number of tactic lines the executable printed, and whether every variant printed the very same lines as the
first. Appends one JSON line to results/benchmarks/flashinfer_ids_build.jsonl.
Run: python benchmarks/flashinfer_ids_build.py [--before OLD_CHECKOUT] [--rounds N]
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

# Runs inside the checkout under test (PYTHONPATH): builds in argv[1], prints {"wall", "cpu", "lines", "sha"}.
_ONE = r"""
import hashlib, json, resource, sys, time
from dataclasses import astuple
from pathlib import Path
from tileprobe.engines import flashinfer as engine, flashinfer_native_ids as native
from tileprobe.backends.cutlass.toolchain import find_nvcc
tree, nvcc = engine.find_flashinfer(), find_nvcc()
t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
lines = native.native_tactics(tree, str(nvcc.path), Path(sys.argv[1]))
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
text = "\n".join("\t".join(map(str, astuple(n))) for n in lines)
print(json.dumps({"wall": time.monotonic() - t0, "cpu": cpu, "lines": len(lines), "flashinfer": tree.label(),
                  "nvcc": nvcc.version_text, "sha": hashlib.sha256(text.encode()).hexdigest()[:16]}))
"""


def _commit(checkout: Path) -> str:
    p = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       timeout=30)
    return p.stdout.strip() or "unknown"


def one(checkout: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="tp-fi-ids-bench-") as work:
        env = dict(os.environ, PYTHONPATH=str(checkout))
        p = subprocess.run([sys.executable, "-c", _ONE, work], capture_output=True, text=True, timeout=1800,
                           cwd=checkout, env=env)
    if p.returncode != 0:
        raise SystemExit(f"error: the enumeration did not build in {checkout}: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="an older checkout to compare with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record", type=Path, default=ROOT / "results" / "benchmarks" / "flashinfer_ids_build.jsonl")
    a = ap.parse_args()
    variants = {"after": ROOT} | ({"before": a.before.resolve()} if a.before else {})
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    for r in range(a.rounds):
        for name, checkout in variants.items():
            got = one(checkout)
            runs[name].append(got)
            print(f"round {r + 1} {name}: {got['wall']:.1f} s wall, {got['cpu']:.1f} CPU s, {got['lines']} lines",
                  flush=True)
    shas = {g["sha"] for v in runs.values() for g in v}
    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "machine": platform.machine(), "loadavg_at_end": round(os.getloadavg()[0], 2),
           "flashinfer": runs["after"][0]["flashinfer"], "nvcc": runs["after"][0]["nvcc"],
           "command": "python benchmarks/flashinfer_ids_build.py" + (" --before OLD" if a.before else "")
                      + f" --rounds {a.rounds}",
           "same_lines_everywhere": len(shas) == 1, "variants": {}}
    for name, checkout in variants.items():
        v = runs[name]
        rec["variants"][name] = {"commit": _commit(checkout), "lines": v[0]["lines"], "sha": v[0]["sha"],
                                 "wall_s": [round(g["wall"], 1) for g in v], "cpu_s": [round(g["cpu"], 1) for g in v],
                                 "median_wall_s": round(statistics.median(g["wall"] for g in v), 1),
                                 "median_cpu_s": round(statistics.median(g["cpu"] for g in v), 1)}
    if a.before:
        b, f = rec["variants"]["before"], rec["variants"]["after"]
        rec["cpu_ratio_before_over_after"] = round(b["median_cpu_s"] / f["median_cpu_s"], 2)
        rec["wall_ratio_before_over_after"] = round(b["median_wall_s"] / f["median_wall_s"], 2)
    print(json.dumps(rec, indent=1))
    a.record.parent.mkdir(parents=True, exist_ok=True)
    with a.record.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    return 0 if rec["same_lines_everywhere"] else 1


if __name__ == "__main__":
    sys.exit(main())
