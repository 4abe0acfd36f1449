"""How long do `tileprobe --help` and bad-input errors take? (Goal: under 0.5 s.)

Runs each command --runs times as a user would (the installed console script next to this Python, else
`python -m tileprobe`), and prints the median wall time; adds `python -X importtime -c "import tileprobe.cli"`'s
cumulative figure for tileprobe.cli and the heavy modules it still loads. The load average is recorded with the
figures (the CI machine is shared: a loaded machine is slower). Appends one JSON record to
results/benchmarks/cli_startup.jsonl.

python3 benchmarks/cli_startup.py [--runs 11] [--python OTHER_VENV/bin/python] [--no-save]
(--python times another install the same way, e.g. an older checkout's venv, for a before/after under the same load)
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
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bytecode() -> str:
    """How the timed Pythons treat bytecode (an editable checkout's modules are compiled from source at every start
    when none may be written)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "not written (PYTHONDONTWRITEBYTECODE)"
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return "written to PYTHONPYCACHEPREFIX"
    return "written beside the sources"
COMMANDS = {"--help": ["--help"], "sweep --help": ["sweep", "--help"], "sweep --seed x": ["sweep", "--seed", "x"],
            "sweep --batch 0": ["sweep", "--batch", "0"], "sweep --family nope": ["sweep", "--family", "nope"],
            "report (missing argument)": ["report"]}
HEAVY = ("pandas", "matplotlib", "jsonschema", "cuda.bindings.runtime", "typer.rich_utils")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--python", default=sys.executable, help="the Python whose tileprobe is timed")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    script = Path(a.python).parent / "tileprobe"
    base = [str(script)] if script.is_file() else [a.python, "-m", "tileprobe"]
    rec: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": os.cpu_count(),
                 "machine": platform.machine(), "python": platform.python_version(), "runs": a.runs,
                 "load_before": os.getloadavg()[0], "how": " ".join(base), "median_s": {},
                 "exit": {}, "bytecode": _bytecode()}
    src = subprocess.run([a.python, "-c", "import tileprobe; print(tileprobe.__file__)"], capture_output=True,
                         text=True, timeout=120, cwd="/").stdout.strip()
    g = subprocess.run(["git", "-C", str(Path(src).parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    rec["tileprobe"], rec["commit"] = src, g.stdout.strip() or None
    for name, args in COMMANDS.items():
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            p = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120, cwd="/")
            times.append(time.perf_counter() - t0)
        rec["median_s"][name] = round(statistics.median(times), 3)
        rec["exit"][name] = p.returncode
    imp = subprocess.run([a.python, "-X", "importtime", "-c", "import tileprobe.cli"], capture_output=True,
                         text=True, timeout=120, cwd="/").stderr
    cum = {m.group(2): int(m.group(1)) for m in re.finditer(r"\|\s*(\d+) \|\s*(\S+)\s*$", imp, re.M)}
    rec["import_cli_s"] = round(cum.get("tileprobe.cli", 0) / 1e6, 3)
    rec["heavy_loaded_at_import"] = [m for m in HEAVY if m in cum]
    rec["load_after"] = os.getloadavg()[0]
    rec["goal_s"] = 0.5
    line = json.dumps(rec)
    print(line)
    if not a.no_save:
        with open(ROOT / "results" / "benchmarks" / "cli_startup.jsonl", "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
