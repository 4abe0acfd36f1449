"""Install tileprobe into an environment that already has flashinfer and torch: are their versions left alone?

A fresh venv in a temporary folder gets torch==2.13.0 first (the CPU wheel on the CI machines' disk, so that
flashinfer's plain `torch` requirement is already met), then flashinfer-python==0.7.2.post1 with its dependencies,
then this repository the way a user installs it: `pip install /path/to/tileprobe`, without constraints.txt. Records
every distribution's version before and after, the seconds of each step, pip's version, and whether the installed
tileprobe carries its harness sources; prints the record and appends it to results/benchmarks/install_check.jsonl.
Run: python3 benchmarks/install_check.py [--flashinfer 0.7.2.post1] [--torch 2.13.0] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))")
CHECK = ("import json, tileprobe.build as b, tileprobe.toolchain as t; c = t.find_cutlass(); "
         "print(json.dumps({'harness': str(b.HARNESS_DIR), 'harness_ok': (b.HARNESS_DIR / 'kernels.cuh').is_file(), "
         "'cutlass': c.version, 'cutlass_source': c.source}))")


def run(cmd: list[str], timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    """In the temporary folder, without PYTHONPATH: what runs is the venv's copy of everything, not this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env,
                       cwd=tempfile.gettempdir())
    return round(time.perf_counter() - start, 1), p


def tail(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return "\n".join(lines[-8:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashinfer", default="0.7.2.post1")
    ap.add_argument("--torch", default="2.13.0")
    ap.add_argument("--save", type=Path, default=ROOT / "results" / "benchmarks")
    ap.add_argument("--keep", action="store_true", help="keep the temporary venv (its path is printed)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tileprobe-install-check-"))
    venv = tmp / "venv"
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip"]
    rec: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.machine(),
                 "python": platform.python_version(), "commit": None, "seconds": {}, "ok": False, "error": None}
    g = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    rec["commit"] = g.stdout.strip() or None
    try:
        rec["seconds"]["venv"], p = run([sys.executable, "-m", "venv", str(venv)])
        if p.returncode:
            raise RuntimeError(f"venv: {tail(p)}")
        rec["pip"] = run([*pip, "--version"])[1].stdout.split(" from ")[0].strip()
        rec["pip_config"] = [ln for ln in run([*pip, "config", "list"])[1].stdout.splitlines()
                             if "constraint" in ln or "index" in ln or "find-links" in ln]
        steps = [("torch", [f"torch=={a.torch}"]), ("flashinfer", [f"flashinfer-python=={a.flashinfer}"])]
        for name, reqs in steps:
            rec["seconds"][name], p = run([*pip, "install", "-q", *reqs])
            if p.returncode:
                raise RuntimeError(f"pip install {' '.join(reqs)} failed (exit {p.returncode}): {tail(p)}")
        before = json.loads(run([py, "-c", VERSIONS])[1].stdout)
        rec["before"] = {k: before.get(k) for k in ("flashinfer-python", "torch")}
        rec["command"] = "pip install /path/to/tileprobe  (no constraints file)"
        rec["seconds"]["tileprobe"], p = run([*pip, "install", "-q", str(ROOT)])
        if p.returncode:
            raise RuntimeError(f"pip install {ROOT} failed (exit {p.returncode}): {tail(p)}")
        after = json.loads(run([py, "-c", VERSIONS])[1].stdout)
        rec["after"] = {k: after.get(k) for k in ("flashinfer-python", "torch", "tileprobe")}
        rec["changed"] = {k: [v, after.get(k)] for k, v in sorted(before.items()) if after.get(k) != v}
        rec["added"] = {k: v for k, v in sorted(after.items()) if k not in before}
        c = run([py, "-c", CHECK], timeout=300)[1]
        rec["installed"] = json.loads(c.stdout) if c.returncode == 0 else {"error": tail(c)}
        untouched = all(rec["before"][k] == rec["after"][k] for k in ("flashinfer-python", "torch"))
        rec["ok"] = bool(untouched and not rec["changed"] and rec["after"]["tileprobe"]
                         and rec["installed"].get("harness_ok"))
        if not rec["ok"]:
            rec["error"] = "versions changed or the installed tileprobe is incomplete"
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
        rec["error"] = str(exc)
    finally:
        rec["seconds"]["total"] = round(sum(v for v in rec["seconds"].values() if isinstance(v, float)), 1)
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    line = json.dumps(rec)
    print(line)
    a.save.mkdir(parents=True, exist_ok=True)
    with open(a.save / "install_check.jsonl", "a") as f:
        f.write(line + "\n")
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
