"""One `--engine ... --workload ...` triton-moe answer, cold (an empty build cache) then warm, with the cold time
split into planning (engine files, lookup, launch reproduction), compiling (Triton, every distinct launch once) and
the rest (process start, imports, rows, reports). Prints and appends one JSON record to
results/benchmarks/triton_moe_answer.jsonl.

PYTHONPATH=. python3 benchmarks/triton_moe_answer.py [--engine vllm] [--workload qwen3-30b-a3b] [--quant fp8-block]
    [--target rtx-pro-6000] [--jobs 2] [--engine-wheel W] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(args: list[str], cache: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "tileprobe", "sweep", "--family", "triton-moe", *args, "--cache-dir", cache,
           "--out", str(out), "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"sweep failed ({p.returncode}): {p.stderr.strip()}")
    phases = json.loads((out / "run.json").read_text())["phases"]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"wall_s": round(wall, 2), **phases, "rest_s": round(wall - phases["plan_s"] - phases["compile_s"], 2),
            "rows": len(rows), "over_limit": sum(r["verdict"] == "smem-over-limit" for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--workload", default="qwen3-30b-a3b")
    ap.add_argument("--quant", default="fp8-block")
    ap.add_argument("--target", default="rtx-pro-6000")
    ap.add_argument("--tp", default="1")
    ap.add_argument("--jobs", default=str(os.cpu_count() or 1))
    ap.add_argument("--engine-wheel")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    args = ["--engine", a.engine, "--workload", a.workload, "--quant", a.quant, "--target", a.target, "--tp", a.tp,
            "--jobs", a.jobs] + (["--engine-wheel", a.engine_wheel] if a.engine_wheel else [])
    with tempfile.TemporaryDirectory() as tmp:
        cold = one(args, f"{tmp}/cache", Path(tmp) / "cold")
        warm = one(args, f"{tmp}/cache", Path(tmp) / "warm")
    rec = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "benchmark": "triton_moe_answer",
           "command": "tileprobe sweep --family triton-moe " + " ".join(args), "cores": os.cpu_count(),
           "machine": platform.machine(), "python": platform.python_version(), "triton": metadata.version("triton"),
           "cold": cold, "warm": warm}
    print(f"cold {cold['wall_s']} s: plan {cold['plan_s']} s, compile {cold['compile_s']} s "
          f"({cold['compiled']} of {cold['distinct']} distinct launches compiled), rest {cold['rest_s']} s; warm {warm['wall_s']} s "
          f"(compile {warm['compile_s']} s, {warm['cached']} of {warm['distinct']} cached); {cold['rows']} rows, "
          f"{cold['over_limit']} over the limit")
    if not a.no_save:
        with open(ROOT / "results" / "benchmarks" / "triton_moe_answer.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
