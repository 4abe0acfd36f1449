"""How long does `tileprobe check-configs --engine E` take over the engine's whole shipped tree (every file against
the device it is named for), predictor first, from a cold build cache; how many launches did the predictor answer,
how many were compiled, and how many could it not predict? With --verify N, the same run again on the warm cache
with `--verify N`: a sample of N predicted launches compiled, the exit code says whether any differed.

Prints and appends one JSON record per run to results/benchmarks/triton_predictor_first.jsonl: the command, the git
commit, the Triton version, wall and CPU seconds (this process's children), the 1-minute load average before and
after (the machine is shared), the launches predicted / compiled / cannot-predict (distinct launches, run.json's
`answers`), the phases and the summary line. --plan-only records the split alone, without compiling anything
(wall_s null).

PYTHONPATH=. python3 benchmarks/triton_predictor_first.py [--engines vllm,sglang] [--jobs 2] [--verify 200]
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

from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.triton import audit, predicted
from tileprobe.triton.sweep import engine_kernel_source

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "results" / "benchmarks" / "triton_predictor_first.jsonl"


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                          timeout=30).stdout.strip()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def plan_only(engine: str) -> dict:
    """The predictor's split of the tree's launches, nothing compiled."""
    src, source = engine_kernel_source(engine, None)
    files = tc.read_source_tree(src, triton_lookup.engine_module(engine).CONFIGS_DIR)
    checks, _ = audit.plan(files, engine, source, None, None)
    todo = [c for c in checks if c.job is not None]
    version = installed().version if installed() else "3.8.0"
    ans = predicted.answer([c.config for c in todo], [c.job for c in todo], source, version, predicted.Policy())
    return {"files": len(files), "entry_launches": len(todo), "answers": ans.record([c.job for c in todo])}


def subset_tree(engine: str, dest: Path, ccs: set[int]) -> int:
    """The engine's shipped files named after a device of these compute capabilities, in the engine's layout."""
    src = tc.find_engine(engine)
    mod = triton_lookup.engine_module(engine)
    devices = audit.device_targets(engine)
    n = 0
    for f in tc.read_source_tree(src, mod.CONFIGS_DIR):
        t = devices.get(f.name.device_name)
        if t is None or t.cc_int not in ccs:
            continue
        out = dest / f.rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(src.read_text(f"{mod.CONFIGS_DIR}/{f.rel}"))
        n += 1
    return n


def run(engine: str, jobs: int, cache: Path, out: Path, verify: int, timeout: float, tree: Path | None = None
        ) -> dict:
    cmd = [sys.executable, "-m", "tileprobe", "check-configs", *([str(tree)] if tree else []), "--engine", engine,
           "--jobs", str(jobs),
           "--cache-dir", str(cache), "--out", str(out)] + (["--verify", str(verify)] if verify else [])
    load0, cpu0, t0 = os.getloadavg()[0], _cpu(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    wall, cpu, load1 = time.perf_counter() - t0, _cpu() - cpu0, os.getloadavg()[0]
    meta = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    lines = p.stdout.strip().splitlines()
    return {"command": " ".join(["tileprobe"] + cmd[3:]), "exit_code": p.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "load_1min_before": round(load0, 2), "load_1min_after": round(load1, 2),
            "answers": meta.get("answers"), "phases": meta.get("phases"), "evidence_mode": meta.get("evidence_mode"),
            "rows": sum(1 for _ in open(out / "results.jsonl")) if (out / "results.jsonl").is_file() else None,
            "mismatches": [ln for ln in lines if ln.startswith("MISMATCH ")],
            "summary": lines[-1] if lines else p.stderr.strip()[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="vllm,sglang")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--verify", type=int, default=0, help="then the same run on the warm cache with --verify N")
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--plan-only", action="store_true", help="record the predictor's split only; compile nothing")
    ap.add_argument("--only-cc", default="", help="only the files named after a device of these capabilities "
                                                  "(e.g. 120,121: the predictor's scope), copied to a temporary tree")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    base = {"benchmark": "triton_predictor_first", "commit": _commit(), "cores": os.cpu_count(),
            "triton": installed().version if installed() else None}
    for engine in a.engines.split(","):
        recs = []
        if a.plan_only:
            recs.append({**base, "engine": tc.find_engine(engine).label(), "mode": "plan-only", "wall_s": None,
                         **plan_only(engine)})
        else:
            with tempfile.TemporaryDirectory() as tmp:
                cache = Path(tmp) / "cache"  # cold: a fresh build cache
                tree, extra = None, {}
                if a.only_cc:
                    tree = Path(tmp) / "tree"
                    ccs = {int(x) for x in a.only_cc.split(",")}
                    extra = {"only_cc": sorted(ccs), "files": subset_tree(engine, tree, ccs)}
                cold = run(engine, a.jobs, cache, Path(tmp) / "cold", 0, a.timeout, tree)
                recs.append({**base, "engine": tc.find_engine(engine).label(), "mode": "cold", **extra, **cold})
                if a.verify:
                    warm = run(engine, a.jobs, cache, Path(tmp) / "verify", a.verify, a.timeout, tree)
                    recs.append({**base, "engine": tc.find_engine(engine).label(),
                                 "mode": f"verify {a.verify} (warm cache of the cold run)", **extra, **warm})
        for rec in recs:
            rec["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            print(json.dumps(rec, indent=1))
            if not a.no_save:
                with open(LOG, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
