"""Fake harness executables that speak the harness protocol (cutlass_harness/PROTOCOL.md) without a GPU."""

import json
import sys
import textwrap
from pathlib import Path

# Reads the problems file ('point R ID' lines), announces each point, then does what BEHAVIOUR says for that point:
# 'ok' (a verified answer, every element of the point's problems counted), 'short' (verified, one element short),
# 'sticky' (a launch-error answer, then exit 3 as the real harness does after a sticky
# CUDA error), 'segv' (dies during the point), 'hang' (never answers), 'unchecked' (no correctness fields),
# 'die-before' (exits 1 before announcing anything).
PROLOGUE = """
import json, os, signal, sys, time
INDEX = int(sys.argv[sys.argv.index("--config-index") + 1]) if "--config-index" in sys.argv else 0
OWN = (DESCRIBE[INDEX] if isinstance(DESCRIBE, list) else DESCRIBE) if DESCRIBE is not None else None
if sys.argv[1:2] == ["--describe"] and OWN is not None:  # run.cu --describe [--config-index I]: sizes, no GPU
    print(json.dumps(OWN), flush=True)
    sys.exit(0)
path = sys.argv[sys.argv.index("--problems") + 1]
ids, sizes = [], {}
for l in open(path):
    if l.startswith("point"):
        ids.append(int(l.split()[2]))
        sizes[ids[-1]] = 0
    elif l.strip():
        m, n, k = map(int, l.split())
        sizes[ids[-1]] += m * n
def answer(pid, **extra):
    d = {"event": "result", "point": pid, "launch_status": "ok", "launch_reason": None, "rel_err": 0.002,
         "nonfinite": 0, "checked_elements": sizes[pid], "bad_elements": 0, "bad_groups": 0, "groups": 4,
         "worst_group": 1, "worst_row": 3, "worst_col": 7, "worst_value": 1.0, "worst_ref": 1.0, "worst_ratio": 0.1,
         "atol": 0.05, "rtol": 0.02, "us": [5.0, 5.5, 6.0], "us_graph": [4.0, 4.5, 5.0], "l2_bytes": 52428800,
         "rotation_bytes": 209715200, "smem_optin": 232448, "smem_bytes": OWN["smem_bytes"] if OWN else 1000,
         "stages": 4, "index": INDEX}
    d.update(extra)
    print(json.dumps(d), flush=True)
"""


def fake_harness(tmp_path: Path, behaviour: dict, default: str = "ok", name: str = "harness",
                 log: Path | None = None, describe: dict | list | None = None) -> Path:
    """behaviour: {point id: what}; `log` gets one line per process start listing the ids it was given; `describe`:
    what `--describe` prints (run.cu's description of its config; a list: of config --config-index I of a harness
    serving several, whose answers then carry that config's smem_bytes), None: the harness has no --describe."""
    body = f"DESCRIBE = {describe!r}\n" + PROLOGUE + textwrap.dedent(f"""
    behaviour = {json.dumps({str(k): v for k, v in behaviour.items()})}
    if {str(log) if log else ''!r}:
        open({str(log) if log else ''!r}, "a").write(" ".join(map(str, ids)) + "\\n")
    for pid in ids:
        what = behaviour.get(str(pid), {default!r})
        if what == "die-before":
            sys.exit(1)
        print(json.dumps({{"event": "start", "point": pid}}), flush=True)
        if what == "ok":
            answer(pid)
        elif what == "slow":
            time.sleep(0.4)
            answer(pid)
        elif what == "short":
            answer(pid, checked_elements=sizes[pid] - 1)
        elif what == "unchecked":
            answer(pid, rel_err=None, bad_elements=None, checked_elements=None)
        elif what == "sticky":
            answer(pid, launch_status="launch-error", launch_reason="sync: cudaErrorIllegalAddress — an illegal "
                   "memory access was encountered", us=[])
            sys.exit(3)
        elif what == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif what == "hang":
            time.sleep(600)
    """)
    p = tmp_path / name
    p.write_text(f"#!{sys.executable}\n" + body)
    p.chmod(0o755)
    return p


def problems(tmp_path: Path, ids: list[int]) -> Path:
    p = tmp_path / "problems.txt"
    p.write_text("".join(f"point 2 {i}\n8 4096 7168\n" for i in ids))
    return p
