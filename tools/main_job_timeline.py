"""Diagnostic (device): the main job's timeline. Runs `tileprobe sweep ARGS` in this process with three taps
(no behaviour change): each harness build's start/end (pipeline.build), each harness process start (runner's Popen),
each protocol line as it is read (runner._parse_line). Prints per config: build s, process start -> first point
(context + setup), each point's s (with the harness's phase_ms: allocate/first_run/check/time/free); and writes the raw events as JSON to --events.

PYTHONPATH=. python3 tools/main_job_timeline.py --events ev.json -- --seed 1 --out DIR
"""
from __future__ import annotations

import json
import sys
import threading
import time

from tileprobe import cli
from tileprobe.backends.cutlass import pipeline, runner

T0 = time.perf_counter()
EV: list[dict] = []
LOCK = threading.Lock()


def note(**kw):
    with LOCK:
        EV.append({"t": round(time.perf_counter() - T0, 3), "thread": threading.get_ident(), **kw})


_build = pipeline.build


def build(req, *a, **k):
    name = req.configs[0].name
    note(ev="build-start", config=name)
    r = _build(req, *a, **k)
    note(ev="build-end", config=name, seconds=round(getattr(r, "seconds", 0), 2), cached=getattr(r, "cached", None))
    return r


_popen = runner.subprocess.Popen


class Popen(_popen):
    def __init__(self, cmd, *a, **k):
        note(ev="proc-start", binary=str(cmd[0]))
        super().__init__(cmd, *a, **k)


_parse = runner._parse_line


def parse(line):
    d = _parse(line)
    if d is not None:
        note(ev=d.get("event") or "result", point=d.get("point"), status=d.get("launch_status"),
             reps=len(d.get("us") or []), greps=len(d.get("us_graph") or []), iters=d.get("iters"),
             rotate=d.get("rotate"), set_bytes=d.get("set_bytes"), phase_ms=d.get("phase_ms"))
    return d


def main():
    args = sys.argv[1:]
    events = "timeline.json"
    if args[:1] == ["--events"]:
        events, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    pipeline.build = build
    runner.subprocess.Popen = Popen
    runner._parse_line = parse
    sys.argv = ["tileprobe", "sweep", *args]
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code or 0
    note(ev="end")
    with open(events, "w") as f:
        json.dump(EV, f)
    starts = [e for e in EV if e["ev"] == "build-start"]
    ends = {e["config"]: e for e in EV if e["ev"] == "build-end"}
    print(f"# builds: first start {starts[0]['t'] if starts else None}, ends: "
          + ", ".join(f"{ends[c]['t']}" for c in sorted(ends, key=lambda c: ends[c]['t'])))
    procs = [i for i, e in enumerate(EV) if e["ev"] == "proc-start"]
    for i in procs:
        p = EV[i]
        mine = [e for e in EV[i + 1:] if e["thread"] == p["thread"] and e["ev"] in ("start", "result", "proc-start")]
        seq = []
        for e in mine:
            if e["ev"] == "proc-start":
                break
            seq.append(e)
        first = next((e["t"] for e in seq if e["ev"] == "start"), None)
        pts = []
        for a, b in zip(seq, seq[1:]):
            if a["ev"] == "start" and b["ev"] == "result":
                ph = b.get("phase_ms") or {}
                split = "/".join(f"{ph[k]:.0f}" for k in ("allocate", "first_run", "check", "time", "free") if k in ph)
                pts.append(f"{b['t'] - a['t']:.2f}({b['reps']}/{b['greps']}x{b['iters']},r{b['rotate']}"
                           f"{',ms ' + split if split else ''})")
        last = seq[-1]["t"] if seq else p["t"]
        parts = p["binary"].split("/")
        if len(parts) < 2 or not parts[-2].startswith("run-") or not seq:
            continue  # not a harness (nvidia-smi, ...), or the describe call before its launches
        print(f"proc {parts[-2][:60]} t={p['t']} init={None if first is None else round(first - p['t'], 2)} "
              f"total={round(last - p['t'], 2)} points: {' '.join(pts)}")
    print(f"# end {EV[-1]['t']} s; exit {code}")


if __name__ == "__main__":
    main()
