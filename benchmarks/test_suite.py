"""Benchmark (no GPU): the test suite the CI way, and a cold default static sweep in the same run.

1. A fresh clone of this checkout's HEAD (`git clone`, so only committed files) in a temporary folder.
2. Install (not timed): by default the interpreter running this script is used with the clone on PYTHONPATH (it must
   hold the packages CI installs: `pip install -c constraints.txt -e '.[test,ray,triton]'`); `--install` makes the CI venv
   in the clone instead (`python -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[test,ray,triton]'`).
3. Cold caches, set as CI's are: no TILEPROBE_CACHE_DIR and no TILEPROBE_TEST_CACHE (so the suite makes its one
   session cache and every test and subprocess shares it, as under .ci/run), and an empty XDG_CACHE_HOME (so the user
   cache ~/.cache/tileprobe, with its wheel cache, is not read either).
4. Timed: `python -m pytest -q -n 2 --durations=40` in the clone (.ci/run's command, read from it, plus the durations
   report): total seconds, the pass/fail summary and the ten slowest tests; the whole durations block is
   written to results/benchmarks/test_suite_durations_<commit>_<time>.txt (named in the record).
   Also the CPU seconds (user + system) of pytest and everything it ran.
5. Timed, in the same run: a cold default static sweep (`tileprobe sweep --family sm120-nvfp4 --target rtx-pro-6000
   --static-only`, empty cache), and the suite's seconds divided by it: a figure that does not depend on the machine.
Prints the record and appends it to results/benchmarks/test_suite.jsonl (or --record PATH).
The clone (its venv and caches, about 4 GB) is removed at the end; the pytest log the record names is kept.
Run: python benchmarks/test_suite.py [--install] [--pytest-args "-x"]   (takes the suite's time plus about 2 sweeps)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = 40  # pytest's slowest-tests block, kept in the record (ten) and in a durations file (all of them)


def cold_env(tmp: Path, clone: Path, python_path: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TILEPROBE_TEST_CACHE", "TILEPROBE_CACHE_DIR",
                                                            "PYTHONPATH", "VIRTUAL_ENV")}
    (tmp / "xdg").mkdir(exist_ok=True)
    env.update(XDG_CACHE_HOME=str(tmp / "xdg"), PYTHONUNBUFFERED="1")
    if python_path:
        env["PYTHONPATH"] = str(clone)
    return env


def ci_pytest_args(clone: Path) -> list[str]:
    """The pytest arguments of .ci/run's `.venv/bin/python -m pytest ...` (CI's command, so the two cannot drift)."""
    m = re.search(r"-m pytest([^&;\n]*)", (clone / ".ci" / "run").read_text())
    if not m:
        sys.exit("benchmarks/test_suite.py: .ci/run has no `-m pytest` command to time")
    return m.group(1).split()


def slowest(text: str) -> list[dict]:
    """The `--durations` report's lines: seconds, phase, test id."""
    out = []
    for m in re.finditer(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)", text, re.M):
        out.append({"s": float(m.group(1)), "phase": m.group(2), "test": m.group(3)})
    return out


def _children_cpu() -> float:
    """User + system seconds of every finished child process and its descendants (pytest, its xdist workers, every
    compiler they ran): moves less with the machine's load than wall seconds do, though still with its speed."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--install", action="store_true", help="make CI's venv in the clone (not timed)")
    ap.add_argument("--pytest-args", default=None,
                    help="pytest arguments instead of .ci/run's (e.g. one file, for a dry run)")
    ap.add_argument("--record", type=Path, default=ROOT / "results" / "benchmarks" / "test_suite.jsonl")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-suite-"))
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=600)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    py = sys.executable
    if args.install:
        subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True, timeout=600)
        py = str(clone / ".venv" / "bin" / "python")
        subprocess.run([py, "-m", "pip", "install", "-q", "-c", "constraints.txt", "-e", ".[test,ray,triton]"], cwd=clone,
                       check=True, timeout=3600)
    env = cold_env(tmp, clone, not args.install)
    start, cpu0 = time.perf_counter(), _children_cpu()
    pytest_args = ci_pytest_args(clone) if args.pytest_args is None else args.pytest_args.split()
    p = subprocess.run([py, "-m", "pytest", *pytest_args, f"--durations={DURATIONS}"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=4 * 3600)
    suite_s, suite_cpu_s = time.perf_counter() - start, _children_cpu() - cpu0
    (tmp / "pytest.log").write_text(p.stdout + p.stderr)
    summary = next((line for line in reversed(p.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", line)),
                   p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")
    sweep_env = cold_env(tmp, clone, not args.install) | {"TILEPROBE_CACHE_DIR": str(tmp / "sweep-cache")}
    start, cpu0 = time.perf_counter(), _children_cpu()
    s = subprocess.run([py, "-m", "tileprobe", "sweep", "--family", "sm120-nvfp4", "--target", "rtx-pro-6000",
                        "--static-only", "--out", str(tmp / "sweep"), "--json"], cwd=clone, env=sweep_env,
                       capture_output=True, text=True, timeout=3600)
    sweep_s, sweep_cpu_s = time.perf_counter() - start, _children_cpu() - cpu0
    rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit, "cores": os.cpu_count(),
           "machine": platform.machine(), "loadavg_at_end": round(os.getloadavg()[0], 2),
           "command": " ".join(["python -m pytest", *pytest_args, f"--durations={DURATIONS}"]),
           "installed": "ci venv" if args.install else "this interpreter, clone on PYTHONPATH",
           "suite_s": round(suite_s, 1), "suite_cpu_s": round(suite_cpu_s, 1), "exit_code": p.returncode, "summary": summary,
           "slowest": slowest(p.stdout)[:10], "cold_static_sweep_s": round(sweep_s, 1),
           "cold_static_sweep_cpu_s": round(sweep_cpu_s, 1), "cold_static_sweep_ok": s.returncode == 0,
           "suite_over_sweep": round(suite_s / sweep_s, 2) if s.returncode == 0 else None,
           "targets": {"suite_s": 600}, "log": str(tmp / "pytest.log")}
    block = re.search(r"^=+ slowest \d+ durations =+\n(?:.*\n)*?(?=^=+|\Z)", p.stdout, re.M)
    if block:  # the durations file the README points to: pytest's own block, named by commit and record date
        stamp = rec["date"][11:19].replace(":", "")
        rec["durations_file"] = f"results/benchmarks/test_suite_durations_{commit[:7]}_{stamp}.txt"
        (ROOT / rec["durations_file"]).write_text(
            f"# benchmarks/test_suite.py{' --install' if args.install else ''} at {commit[:7]} (record {rec['date']} "
            f"in test_suite.jsonl): pytest's --durations={DURATIONS} block from its log\n" + block.group(0))
    print(json.dumps(rec, indent=1))
    args.record.parent.mkdir(parents=True, exist_ok=True)
    with open(args.record, "a") as f:
        f.write(json.dumps(rec) + "\n")
    for left in tmp.iterdir():  # the clone, its venv and caches (about 4 GB a run) go; the log the record names stays
        if left.is_dir():
            shutil.rmtree(left, ignore_errors=True)
        elif left.name != "pytest.log":
            left.unlink()


if __name__ == "__main__":
    main()
