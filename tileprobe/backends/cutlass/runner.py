"""Isolated harness processes: one process (own session, own process group) answers a list of points.

The harness announces each point before it starts it ({"event": "start", "point": ID}) and prints one result line
per point. This module turns what a process does into events, and knows nothing of verdict policy or sweeps:
- Answer(point, data): a result line for a started point;
- Died(point, verdict, reason): the started point whose process crashed, hung (per-point timeout; the group is
  killed) or printed garbage. Only a started point is ever blamed. When a process ends with no point in flight,
  the generator simply stops: the caller gives the points never started to a fresh process.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from tileprobe.verdict import Verdict


@dataclass
class Answer:
    point: int
    data: dict


@dataclass
class Died:
    point: int
    verdict: Verdict  # CRASHED or TIMEOUT
    reason: str


@dataclass
class Ended:
    """The process ended with no point in flight (cleanly, or before it could start one)."""
    returncode: int | None
    stderr_tail: str


class Stopped(Exception):
    """The sweep was interrupted while this process ran; its process group was killed and nothing is recorded."""


def run_points(cmd: list[str], timeout_s: float, env: dict | None = None, stop: threading.Event | None = None):
    """Run one harness process and yield Answer / Died / Ended events as they happen.

    `timeout_s` bounds each point from its start line (the first from the process start). The child is in its own
    session so a Ctrl-C on the terminal does not reach it: `stop` is polled instead, and when set the child's group
    is killed and Stopped raised.
    """
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    except OSError as exc:
        yield Ended(None, f"cannot start harness: {exc.strerror}")
        return
    lines: queue.Queue = queue.Queue()
    err_tail: list[str] = []
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    threading.Thread(target=_pump_tail, args=(proc.stderr, err_tail), daemon=True).start()
    in_flight: int | None = None
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if stop is not None and stop.is_set():
                raise Stopped()
            try:
                line = lines.get(timeout=min(0.25, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() < deadline:
                    continue
                _kill_group(proc)
                proc.wait()
                if in_flight is None:  # hung before announcing anything: nothing to blame
                    yield Ended(proc.returncode, f"no point started within {timeout_s:.0f} s; process group killed")
                else:
                    yield Died(in_flight, Verdict.TIMEOUT, f"no answer within {timeout_s:.0f} s of the point's "
                                                           f"start; process group killed")
                return
            if line is None:  # stdout closed: the process is ending
                rc = proc.wait()
                tail = " | ".join(err_tail[-2:])[:200]
                if in_flight is not None:
                    if rc < 0:
                        sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
                        why = f"harness killed by {sig} during the point"
                    else:
                        why = f"harness exited {rc} during the point without an answer"
                    yield Died(in_flight, Verdict.CRASHED, f"{why}; stderr: {tail}" if tail else why)
                else:
                    yield Ended(rc, tail)
                return
            msg = _parse_line(line)
            if msg is None:
                continue  # noise between answers
            if msg.get("event") == "start":
                in_flight = int(msg["point"])
                deadline = time.monotonic() + timeout_s
                continue
            if "launch_status" in msg:
                pid = int(msg.get("point", in_flight if in_flight is not None else -1))
                in_flight = None
                yield Answer(pid, msg)
    except BaseException:  # Ctrl-C, stop, or the consumer closing the generator early
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()


def _pump(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _pump_tail(stream, tail: list[str]) -> None:
    for line in stream:
        if line.strip():
            tail.append(line.strip())
            del tail[:-5]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parse_line(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        d = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(d, dict):
        return None
    if d.get("event") == "start" and isinstance(d.get("point"), int):
        return d
    return d if "launch_status" in d else None
