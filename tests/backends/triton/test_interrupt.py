"""Ctrl-C during parallel Triton compiles, as a user presses it: SIGINT to the CLI's whole process group while
`tileprobe check-configs --compile-all --jobs 2` compiles into an empty cache. One line, exit 130 within seconds,
no traceback, no compile left running, and the compiles that finished stay in the cache for the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("triton")

from tileprobe.engines.triton_configs import find_engine  # noqa: E402
from tileprobe.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.triton

COMMAND = ("check-configs", "--engine", "sglang", "--compile-all", "--jobs", "2", "--target", "rtx-pro-6000")


def _start(cache) -> tuple[subprocess.Popen, list[str], list[float]]:
    """The CLI in a session of its own (a terminal's foreground group), its stderr read line by line as it comes."""
    env = dict(os.environ, TILEPROBE_PROGRESS="lines")
    p = subprocess.Popen([sys.executable, "-m", "tileprobe", *COMMAND, "--cache-dir", str(cache)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    lines: list[str] = []
    progress: list[float] = []  # when each progress line came

    def read() -> None:
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("["):
                progress.append(time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    return p, lines, progress


def _interrupt_after(p, progress: list[float], n: int, limit: float = 25.0, presses: int = 1) -> float:
    """Wait for n progress lines, then Ctrl-C the process group `presses` times; the time it then took to exit."""
    t0 = time.monotonic()
    while len(progress) < n and p.poll() is None and time.monotonic() - t0 < limit:
        time.sleep(0.05)
    assert len(progress) >= n, "no compile finished in time"
    t1 = time.monotonic()
    for _ in range(presses):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
            time.sleep(0.1)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        pytest.fail("Ctrl-C did not stop the compiles within 10 s")
    return time.monotonic() - t1


def _entries(cache) -> dict:
    return {f: f.stat().st_mtime_ns for f in cache.rglob("result.json")}


def test_ctrl_c_stops_parallel_compiles_with_one_line_and_keeps_what_finished(tmp_path):
    try:
        find_engine("sglang")
    except UsageError as exc:
        pytest.skip(f"no SGLang wheel: {exc}")
    cache = tmp_path / "cache"
    p, lines, progress = _start(cache)
    took = _interrupt_after(p, progress, 4)
    time.sleep(0.3)
    out = p.stdout.read()
    said = [ln for ln in lines if ln.strip() and not ln.startswith("[")]
    assert p.returncode == 130, (p.returncode, lines[-20:])
    assert took < 10
    assert "Traceback" not in "\n".join(lines) + out
    assert len(said) == 1 and "interrupted" in said[0], said
    finished = _entries(cache)
    time.sleep(3)  # a worker still compiling would add its entry now
    assert _entries(cache) == finished, "a compile went on after the interrupt"
    assert finished, "nothing finished was kept"
    for f in finished:
        assert "shared" in json.loads(f.read_text()) or "error" in json.loads(f.read_text())
    # the next run finds them: the units they answer come from the cache, nothing of them is compiled again
    p2, lines2, progress2 = _start(cache)
    _interrupt_after(p2, progress2, len(progress), presses=3)  # an impatient user: still one line, no traceback
    time.sleep(0.3)
    said = [ln for ln in lines2 if ln.strip() and not ln.startswith("[")]
    assert p2.returncode == 130 and len(said) == 1 and "interrupted" in said[0], said
    assert "Traceback" not in "\n".join(lines2) + p2.stdout.read()
    again = _entries(cache)
    assert all(again.get(f) == t for f, t in finished.items()), "a finished compile was redone"
