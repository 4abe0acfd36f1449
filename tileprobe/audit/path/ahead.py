"""The path's slow reads done ahead, in a second process, while the audit's main process selects the attention backend
and captures the Triton launches on one core.

A family's answer spends most of a cold audit's path time filling disk caches: an engine binary's device-code index
(tileprobe.audit.path.binaries.library: hundreds of zstd-compressed cubins), FlashInfer's unpacked tree and its nvcc
sizes (flashinfer_cutlass_moe.compiled_sizes), vLLM's own checks run from the wheel (capture_cache.memo). Those do not
depend on the Triton capture, and the calls that reach them are known as soon as the backend is selected (the MoE
experts' call once the capture, which takes the MoE entries first, has walked the engine's MoE choice). So `Ahead`
runs `families.answer` on those calls in a worker process, the newest plan's new calls first, and throws the answers
away: only the caches stay. The main process still answers every call itself, from the last call back (rows in the
model's order), so the two meet once; where the worker is filling the same cache entry, the entry's file lock makes
the main process wait for that entry instead of computing it a second time. Nothing the worker does reaches a row,
so the rows are the rows of an audit without it (tests/audit/path/test_ahead.py).

- The worker ignores SIGINT: one Ctrl-C stops the audit, and `close` stops the worker. Every cache file is written
  whole then renamed, and a lock dies with its holder, so a stopped worker leaves nothing half-written.
- Off (nothing started) on a one-core machine, or when TILEPROBE_AHEAD=0.
- The worker reads a large binary in one process (the main process's core is busy).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import signal
from typing import Callable

from tileprobe.audit.path import binaries, families
from tileprobe.audit.path.call import Context, KernelCall

ENV = "TILEPROBE_AHEAD"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0" and (os.cpu_count() or 1) > 1


def _stop(signum, frame):  # SIGTERM from close(): unwind, so temporary files are removed on the way out
    raise SystemExit(0)


def _work(queue, ctx: Context) -> None:
    """Answer the calls of each plan put on `queue` (None: stop). A plan that arrives while older calls wait goes
    first: its new calls (the MoE experts', once the capture has walked the engine's choice) are the ones the main
    process reaches soonest, answering last first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    binaries.SPLIT_BYTES = 1 << 62
    seen: set = set()
    pending: collections.deque = collections.deque()
    while True:
        while not pending or not queue.empty():
            plan = queue.get()
            if plan is None:
                return
            try:
                calls = plan()
            except Exception:  # noqa: BLE001 - the main process plans the path again and says what failed
                continue
            new = []
            for call in calls:
                key = (call.family, call.op, repr(sorted(call.params.items())), call.phase)
                if key not in seen:
                    seen.add(key)
                    new.append(call)
            pending.extendleft(reversed(new))
        call = pending.popleft()
        with contextlib.suppress(Exception):  # the main process answers the call and says what failed
            families.answer(call, ctx)


class Ahead:
    """One worker process for an audit's path: `add(plan)` as the path's calls become known, `close()` at the end."""

    def __init__(self, ctx: Context | None) -> None:
        """`ctx` None (or `enabled()` False): nothing is started and `add` does nothing."""
        self._proc = self._queue = None
        if ctx is None or not enabled():
            return
        mp = multiprocessing.get_context("spawn")
        try:
            self._queue = mp.SimpleQueue()
            bare = Context(ctx.target, ctx.engine_source, ctx.cache_dir, ctx.flashinfer)  # no per-process memo
            self._proc = mp.Process(target=_work, args=(self._queue, bare), daemon=True, name="tileprobe-ahead")
            self._proc.start()
        except (OSError, RuntimeError, ValueError, TypeError, AttributeError):
            self._proc = self._queue = None  # nothing ahead: the main process reads everything itself

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def add(self, plan: Callable[[], list[KernelCall]]) -> None:
        """`plan()` (picklable: tileprobe.audit.path.compiled.planner) gives the calls to answer ahead; it runs in
        the worker, so the path's own planning (vLLM's MoE router choice, run from the wheel) is ahead too."""
        if self.running:
            self._queue.put(plan)

    def close(self) -> None:
        """Stop the worker (what it finished stays cached; what it was doing is dropped whole)."""
        if self._proc is None:
            return
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=10)
        self._proc = None

    def __enter__(self) -> "Ahead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ENV", "Ahead", "enabled"]
