"""Install tileprobe into an environment that already has flashinfer and torch: are their versions left alone?

A fresh venv in a temporary folder gets torch==2.13.0 first (the CPU wheel on the CI machines' disk, so that
flashinfer's plain `torch` requirement is already met), then flashinfer-python==0.7.2.post1 with its dependencies,
then this repository the way a user installs it: `pip install /path/to/tileprobe` (not editable), without
constraints.txt. Then, from a folder outside the checkout: `tileprobe --help`, and benchmarks/installed_sweep.py with
`python -I` (a static sweep of one config per registered family, with a fresh build cache: every row must come back
`sized`). Records every distribution's version before and after, the seconds of each step, pip's version, where
tileprobe and its harness were imported from and the rows; ok only when flashinfer and torch are untouched, nothing
else changed, --help exits 0 and every family gave a `sized` row. Prints the record and appends it to
results/benchmarks/install_check.jsonl.
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


def run(cmd: list[str], timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    """In the temporary folder, without PYTHONPATH: what runs is the venv's copy of everything, not this checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TILEPROBE_HARNESS_DIR", "TILEPROBE_FLASHINFER_DIR")}
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
        h = run([str(venv / "bin" / "tileprobe"), "--help"], timeout=300)[1]
        rec["help_exit"] = h.returncode
        if h.returncode:
            rec["help_error"] = tail(h)
        script = tmp / "installed_sweep.py"
        shutil.copy(ROOT / "benchmarks" / "installed_sweep.py", script)
        rec["seconds"]["sweep"], c = run([py, "-I", str(script), str(tmp / "out"), str(tmp / "cache")], timeout=3600)
        rec["installed"] = json.loads(c.stdout.strip().splitlines()[-1]) if c.returncode == 0 else {"error": tail(c)}
        fams = rec["installed"].get("families", {})
        sized = {name: [r["evidence"] for r in rows] == ["sized"] for name, rows in fams.items()}
        untouched = all(rec["before"][k] == rec["after"][k] for k in ("flashinfer-python", "torch"))
        from_venv = str(rec["installed"].get("tileprobe", "")).startswith(str(venv))
        rec["ok"] = bool(untouched and not rec["changed"] and rec["after"]["tileprobe"] and h.returncode == 0
                         and from_venv and sized and all(sized.values()))
        if not rec["ok"]:
            rec["error"] = (f"versions changed: {rec['changed']}" if rec["changed"] or not untouched else
                            f"tileprobe --help exited {h.returncode}" if h.returncode else
                            f"not every family sized: {sized}" if from_venv else
                            f"tileprobe was not imported from the venv: {rec['installed']}")
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
