"""How long does `tileprobe audit` take for a model, cold (an empty tileprobe cache and an empty Triton cache), on
this machine? One run per (engine, model): wall and CPU seconds (this process's children), the capture and compile
phases (run.json), the launches and how many do not fit, the 1-minute load average before and after (the machine is
shared). The issue's target: an audit of a model nobody committed, cold on 2 cores, under 2 minutes.
`--modes predictor-first,compile-all` runs each audit both ways, each cold (predictor first: the stated rules, then
Triton's allocation alone; --compile-all: every launch compiled), records how the launches were answered (run.json
`answers`), and prints the compile-all / predictor-first wall ratio per audit.

Prints and appends one JSON record per run to results/benchmarks/audit_cold.jsonl.

PYTHONPATH=. python3 benchmarks/audit_cold.py --model results/audit/models/gemma-3-4b.json --engines vllm,sglang
    [--target rtx-pro-6000] [--jobs 2] [--modes predictor-first,compile-all]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "results" / "benchmarks" / "audit_cold.jsonl"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


MODES = {"predictor-first": [], "compile-all": ["--compile-all"]}


def one(engine: str, model: str, target: str, jobs: int, mode: str = "predictor-first") -> dict:
    with tempfile.TemporaryDirectory(prefix="tp-audit-cold-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "tileprobe", "audit", "--engine", engine, "--model", model, "--target", target,
               "--jobs", str(jobs), "--out", str(out), "--cache-dir", str(Path(tmp) / "cache"), *MODES[mode]]
        env = os.environ | {"TRITON_CACHE_DIR": str(Path(tmp) / "triton"), "TILEPROBE_PROGRESS": "plain",
                            "PYTHONPATH": str(ROOT)}
        load0, cpu0, t0 = os.getloadavg()[0], _cpu(), time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
        run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
        rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()] \
            if (out / "results.jsonl").is_file() else []
    last = (p.stdout.strip().splitlines() or [""])[-1]
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=ROOT, timeout=30).stdout.strip(),
            "cores": os.cpu_count(), "command": " ".join(["tileprobe", *cmd[3:]]), "engine": engine, "model": model,
            "target": target, "mode": mode, "answers": run.get("answers"), "exit_code": p.returncode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "phases": run.get("phases"), "rows": len(rows),
            "over": sum(r["verdict"] == "smem-over-limit" for r in rows),
            "not_selected": sum(r["verdict"] == "not-selected" for r in rows),
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2), "summary": last,
            "stderr_tail": p.stderr[-400:] if p.returncode not in (0, 1) else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, help="a preset or config.json (repeatable)")
    ap.add_argument("--engines", default="vllm,sglang")
    ap.add_argument("--target", default="rtx-pro-6000")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--modes", default="predictor-first", help=f"comma list of {', '.join(MODES)}")
    a = ap.parse_args()
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes):
        sys.exit(f"--modes {a.modes}: each one of {', '.join(MODES)}")
    LOG.parent.mkdir(parents=True, exist_ok=True)
    walls = {}
    for model in a.model:
        for engine in a.engines.split(","):
            for mode in modes:
                rec = one(engine, model, a.target, a.jobs, mode)
                walls[(engine, model, mode)] = rec["wall_s"]
                print(json.dumps(rec))
                with LOG.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
    for (engine, model, mode), wall in walls.items():
        full = walls.get((engine, model, "compile-all"))
        if mode == "predictor-first" and full:
            print(f"{engine} {model}: predictor first {wall} s, compile-all {full} s, ratio {full / wall:.2f}")


if __name__ == "__main__":
    main()
