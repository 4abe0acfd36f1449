"""How long does `tileprobe audit` take for a model on this machine, cold and warm?

Cold: a fresh empty folder for every cache the audit writes: `--cache-dir` (tileprobe's build cache: the engine's
unpacked sources under audit-src, the sized and compiled answers, the path families' tables, the unpacked flashinfer
wheel), TILEPROBE_CACHE_DIR (the same root for code that reads it without --cache-dir) and TRITON_CACHE_DIR (Triton's
own). The engine wheels themselves are inputs, read from tileprobe's wheel cache (or `--engine-wheel`), not caches.
Warm: the same audit again with those caches as the cold run left them. Each (engine wheel, model, mode) is timed
`--repeats` times (a fresh cold folder each time, then its warm run); the table gives the medians, with each run's
exit code (0 fits, 1 a launch over the limit, 3 something unanswered, 2 refused, 4 internal error) and, where the
audit did not answer (2, 4, or no run.json), its message.

The issue's targets (recorded, not asserted): cold <= 30 s and warm <= 5 s on 2 cores.

Appends one JSON record per invocation to results/benchmarks/audit_cold.jsonl: date, commit (and whether the timed
checkout had uncommitted changes: dirty_paths), host facts (cores, CPU, memory, Python, load before and after), the Triton and
engine releases each audit reported (run.json), every run, the medians, and `--note` (say there when other jobs shared
the machine). `--modes predictor-first,compile-all` times each audit both ways (earlier records of this file).

PYTHONPATH=. python3 benchmarks/audit_cold.py --model nemotron-h-8b --model tests/data/configs/gemma-3-27b-it \\
    --engine-wheel ~/.cache/tileprobe/wheels/vllm-0.34.0-*.whl --engine-wheel ~/.cache/tileprobe/wheels/vllm-0.33.0-*.whl \\
    --ssm-stand-ins --repeats 2 [--engines vllm] [--target rtx-pro-6000] [--jobs 2] [--src DIR] [--note TEXT]

--src: the checkout whose tileprobe is timed (default: this one); the record is written here either way.
--ssm-stand-ins: also time the field-derived Mamba-2 and Falcon-H1 configs of tests/test_model_configs.py (named
*-fields; not published files: tests/data/configs/README.md says why).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "results" / "benchmarks" / "audit_cold.jsonl"
MODES = {"predictor-first": [], "compile-all": ["--compile-all"]}
TARGETS = {"cold_s": 30.0, "warm_s": 5.0}
STAND_INS = {"mamba2-codestral-fields": "MAMBA2", "falcon-h1-0.5b-fields": "FALCON_H1"}


def _git(src: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, timeout=60)
    return p.stdout.rstrip()  # not strip(): a porcelain line begins with a space


def host_facts() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() \
        else platform.processor()
    mem = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text()) if Path("/proc/meminfo").is_file() \
        else None
    return {"cores": os.cpu_count(), "cpu": cpu, "machine": platform.machine(), "system": platform.system(),
            "mem_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None, "python": platform.python_version()}


def stand_ins(folder: Path) -> list[str]:
    """The field-derived Mamba-2 and Falcon-H1 configs of tests/test_model_configs.py, written as config.json
    folders named after them."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_model_configs as t  # noqa: PLC0415 (tests/ is a path only this option needs)
    out = []
    for name, attr in STAND_INS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "config.json").write_text(json.dumps(getattr(t, attr)))
        out.append(str(folder / name))
    return out


def one(src: Path, engine: str, wheel: str | None, model: str, target: str, jobs: int, mode: str,
        cache: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "tileprobe", "audit", "--engine", engine, "--model", model, "--target", target,
           "--jobs", str(jobs), "--out", str(out), "--cache-dir", str(cache / "tileprobe"), *MODES[mode]]
    if wheel:
        cmd[cmd.index("--model"):cmd.index("--model")] = ["--engine-wheel", wheel]
    env = os.environ | {"TRITON_CACHE_DIR": str(cache / "triton"), "TILEPROBE_CACHE_DIR": str(cache / "tileprobe"),
                        "TILEPROBE_PROGRESS": "plain", "PYTHONPATH": str(src)}
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=src, env=env, timeout=1800)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = "timeout", exc.stdout or "", f"killed after {exc.timeout} s"
    wall = time.perf_counter() - t0
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()] \
        if (out / "results.jsonl").is_file() else []
    stdout = stdout if isinstance(stdout, str) else stdout.decode(errors="replace")
    stderr = stderr if isinstance(stderr, str) else stderr.decode(errors="replace")
    answered = rc in (0, 1, 3) and bool(run)
    return {"command": " ".join(["tileprobe", *cmd[3:]]), "exit_code": rc, "wall_s": round(wall, 2),
            "engine_reported": (run.get("toolchain") or {}).get("engine"),
            "triton_version": (run.get("toolchain") or {}).get("triton_version"),
            "phases": run.get("phases"), "answers": {k: v for k, v in (run.get("answers") or {}).items()
                                                     if k in ("policy", "predicted", "sized", "compiled")},
            "rules_off": run.get("rules_off"), "rows": len(rows),
            "over": sum(r["verdict"] == "smem-over-limit" for r in rows),
            "summary": (stdout.strip().splitlines() or [""])[-1][:400],
            "message": "" if answered else (stderr.strip() or stdout.strip())[-600:],
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], help="a preset, config.json or its folder (repeatable)")
    ap.add_argument("--ssm-stand-ins", action="store_true", help="also the field-derived Mamba-2 / Falcon-H1 configs")
    ap.add_argument("--engines", default="vllm")
    ap.add_argument("--engine-wheel", action="append", default=[],
                    help="an engine wheel to audit with (repeatable; default: the engine's cached pinned wheel)")
    ap.add_argument("--target", default="rtx-pro-6000")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--modes", default="predictor-first", help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-warm", action="store_true", help="cold runs only")
    ap.add_argument("--src", default=str(ROOT), help="the tileprobe checkout to time")
    ap.add_argument("--note", default="")
    ap.add_argument("--log", default=str(LOG))
    a = ap.parse_args()
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes):
        sys.exit(f"--modes {a.modes}: each one of {', '.join(MODES)}")
    if a.repeats < 1:
        sys.exit("--repeats: at least 1")
    src = Path(a.src).resolve()
    engines = a.engines.split(",")
    wheels = [(w, Path(w).name.split("-")[1]) for w in a.engine_wheel] or [(None, None)]
    runs, rows = [], []
    with tempfile.TemporaryDirectory(prefix="tp-audit-cold-") as tmp:
        tmp = Path(tmp)
        models = a.model + (stand_ins(tmp / "models") if a.ssm_stand_ins else [])
        if not models:
            sys.exit("--model (or --ssm-stand-ins): nothing to time")
        for engine in engines:
            for wheel, release in wheels:
                if wheel and not Path(wheel).name.startswith(engine):
                    continue
                for model in models:
                    for mode in modes:
                        cold, warm = [], []
                        for r in range(a.repeats):
                            cache = tmp / f"cache-{len(runs)}"
                            rec = one(src, engine, wheel, model, a.target, a.jobs, mode, cache, tmp / f"o{len(runs)}")
                            runs.append(base := {"engine": engine, "wheel": release or "cached",
                                                 "model": Path(model).name if "/" in model else model,
                                                 "mode": mode, "repeat": r} | {"kind": "cold"} | rec)
                            cold.append(base)
                            if not a.no_warm:
                                rec = one(src, engine, wheel, model, a.target, a.jobs, mode, cache,
                                          tmp / f"o{len(runs)}")
                                runs.append(w := {**{k: base[k] for k in ("engine", "wheel", "model", "mode",
                                                                              "repeat")}, "kind": "warm"} | rec)
                                warm.append(w)
                            print(json.dumps(runs[-1])[:300], file=sys.stderr)
                        rows.append({"engine": engine, "wheel": release or "cached", "model": base["model"],
                                     "mode": mode, "n": a.repeats,
                                     "engine_reported": sorted({str(x["engine_reported"]) for x in cold}),
                                     "cold_median_s": _median([x["wall_s"] for x in cold]),
                                     "warm_median_s": _median([x["wall_s"] for x in warm]),
                                     "exit_codes": sorted({str(x["exit_code"]) for x in cold + warm}),
                                     "message": next((x["message"] for x in cold + warm if x["message"]), "")})
    meta_cpu = host_facts()
    record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "kind": "cold-warm",
              "commit": _git(src, "rev-parse", "--short", "HEAD") or None,
              "dirty_paths": [ln[3:] for ln in _git(src, "status", "--porcelain", "--untracked-files=no").splitlines()],
              "host": meta_cpu, "target": a.target, "jobs": a.jobs, "repeats": a.repeats,
              "triton_version": sorted({str(x["triton_version"]) for x in runs if x["triton_version"]}),
              "targets": TARGETS, "note": a.note, "medians": rows, "runs": runs}
    Path(a.log).parent.mkdir(parents=True, exist_ok=True)
    with Path(a.log).open("a") as f:
        f.write(json.dumps(record) + "\n")
    head = f"{'wheel':8} {'model':28} {'mode':15} {'n':>2} {'cold s':>8} {'warm s':>8}  exit   reported"
    print(head)
    for r in rows:
        cold, warm = r["cold_median_s"], r["warm_median_s"]
        flag = ("" if cold is not None and cold <= TARGETS["cold_s"] else " (cold > 30)") + \
               ("" if warm is None or warm <= TARGETS["warm_s"] else " (warm > 5)")
        print(f"{r['wheel']:8} {r['model'][:28]:28} {r['mode']:15} {r['n']:>2} {cold!s:>8} {warm!s:>8}  "
              f"{','.join(r['exit_codes']):6} {','.join(r['engine_reported'])}{flag}")
        if r["message"]:
            print(f"    message: {r['message'].splitlines()[-1][:300]}")
    dirty = f", uncommitted: {', '.join(record['dirty_paths'])}" if record["dirty_paths"] else ""
    print(f"record appended to {a.log} (commit {record['commit']}{dirty})")


if __name__ == "__main__":
    main()
