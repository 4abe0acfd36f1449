"""Progress of long work (sweeps, check-configs, exports, tunes, check): one API every driver calls.

    with progress.track(len(units), "check-configs") as bar:
        ... bar.done(unit_name, outcome_or_text) as each unit finishes ...

Where it goes: always stderr, never stdout, so `--json` output and the tables stay machine-readable. On a terminal
(rich `Console.is_terminal` of stderr) it draws rich's live bar: label, bar, done/total, the unit that finished
last with its verdict, time elapsed and time left. Elsewhere (a log, CI, a pipe) it prints one plain line per
finished unit, e.g. `[12/140] vllm E=128 N=384 bf16 M=64 gate_up: fits (98304 B) 3.2s elapsed, ~41s left`.

TILEPROBE_PROGRESS chooses: `0` (or off/no/false) prints nothing; `bar` draws the bar even where stderr is not a
terminal, `lines` prints plain lines even on a terminal; unset (or anything else) decides by the terminal.

A driver whose inner work already draws a bar of its own on a terminal (the GPU path's launch bar) passes
`bar=False`: its units then print plain lines in a log and nothing on a terminal, so two live displays never fight.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from rich.console import Console
from rich.text import Text
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

ENV = "TILEPROBE_PROGRESS"
_OFF = ("0", "off", "no", "false")


def mode(console: Console | None = None) -> str:
    """'off', 'bar' or 'lines': what progress shows on `console` (stderr's by default) under TILEPROBE_PROGRESS."""
    want = os.environ.get(ENV, "").strip().lower()
    if want in _OFF:
        return "off"
    if want in ("bar", "lines"):
        return want
    return "bar" if (console or make_console()).is_terminal else "lines"


def make_console() -> Console:
    """The console progress writes to: stderr, a terminal's bar forced by TILEPROBE_PROGRESS=bar."""
    forced = os.environ.get(ENV, "").strip().lower() == "bar"
    return Console(stderr=True, force_terminal=True if forced else None, highlight=False)


def verdict_text(verdict) -> str:
    """A unit's verdict in words: a string as given, an outcome (rows.Outcome) as `fits (98304 B)`."""
    if verdict is None or isinstance(verdict, str):
        return verdict or ""
    word = getattr(getattr(verdict, "verdict", None), "value", None) or str(verdict)
    smem = getattr(getattr(verdict, "info", None), "smem_bytes", None)
    return f"{word} ({smem} B)" if smem is not None else word


def unit(config, m=None) -> str:
    """A config as a unit's name: a CUTLASS config's kernel name; a Triton fused-MoE launch as the engine, quant,
    E, N, K, batch M, GEMM, tile, warps and stages it is compiled with (its kernel name is too long to read)."""
    if config.family != "triton-moe":
        return config.name
    g = config.get
    at = f" M={m}" if m is not None else ""
    return (f"{str(g('engine')).split()[0]} {g('quant')} E={g('experts')} N={g('gemm_n')} K={g('gemm_k')}{at} "
            f"{g('gemm')} {config.tile} w{g('num_warps')} s{config.stages}")


def entry(c: dict) -> str:
    """A Triton fused-MoE config entry (a dict of an engine's config file) as a unit's name: 64x128x64 g16 w4 s3."""
    return (f"{c.get('BLOCK_SIZE_M')}x{c.get('BLOCK_SIZE_N')}x{c.get('BLOCK_SIZE_K')} g{c.get('GROUP_SIZE_M')} "
            f"w{c.get('num_warps')} s{c.get('num_stages')}")


def against(limit: int):
    """A verdict(i, build) for compile_many's builds: `fits (N B)` / `smem-over-limit (N B)` against `limit`
    bytes, `compile-error` for a build that failed (it has no bytes)."""
    def text(i: int, build) -> str:
        shared = getattr(build, "shared", None)
        if shared is None:
            return "compile-error"
        return f"{'fits' if shared <= limit else 'smem-over-limit'} ({shared} B)"
    return text


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def clock(seconds: float) -> str:
    """3.2s, 1m05s, 2h03m."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


class _Bar(Progress):
    """rich's bar, with the unit that finished last on a line of its own below it (a narrow terminal cuts that
    line, never the counts and times)."""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            yield Text(f"  {task.fields.get('last', '')}", no_wrap=True, overflow="ellipsis")


class Tracker:
    """One piece of long work of `total` units (module docstring). `done` may be called from any thread."""

    def __init__(self, total: int, label: str, console: Console | None = None, bar: bool = True) -> None:
        self.total, self.label, self.count = max(0, int(total)), label, 0
        self.console = console or make_console()
        self.mode = mode(self.console) if self.total else "off"
        if self.mode == "bar" and not bar:
            self.mode = "off"
        self._lock = threading.Lock()
        self._bar: Progress | None = None
        self._task = None
        self.start = time.perf_counter()

    def __enter__(self) -> "Tracker":
        self.start = time.perf_counter()
        if self.mode == "bar":
            # stdout goes through the bar (printed above it) only where it is that terminal too: piped, it stays
            # exactly what the command printed; stderr's own lines (warnings) are printed above the bar
            self._bar = _Bar(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"),
                             console=self.console, transient=True, redirect_stdout=_isatty(sys.stdout),
                             redirect_stderr=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total, last="")
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def done(self, name: str, verdict=None) -> None:
        """One unit finished: `name` (the config), `verdict` a string or an outcome (verdict_text)."""
        if self.mode == "off":
            return
        text = verdict_text(verdict)
        with self._lock:
            self.count += 1
            if self._bar is not None:
                self._bar.update(self._task, advance=1, last=f"{name}: {text}" if text else name)
                return
            elapsed = time.perf_counter() - self.start
            left = elapsed / self.count * (self.total - self.count) if self.count < self.total else 0.0
            # units answered from a cache take no time: their pace says nothing of the ones still to build
            eta = ("time left unknown (so far answered from the cache)" if self.count < self.total and
                   elapsed / self.count < INSTANT_S else f"~{clock(left)} left")
            self.console.print(f"[{self.count}/{self.total}] {name}{': ' + text if text else ''} "
                               f"{clock(elapsed)} elapsed, {eta}", markup=False, highlight=False,
                               soft_wrap=True)

    def each(self, names, verdict=None):
        """An `on_result(i, result)` callback: unit i is names[i], its verdict verdict(i, result) (None: none)."""
        return lambda i, res: self.done(names[i], verdict(i, res) if verdict else None)

    def outcomes(self, then=None):
        """An `on_outcome(outcome)` callback: the unit outcome.config finished with that outcome; then `then`."""
        def on_outcome(o) -> None:
            self.done(unit(o.config), o)
            if then is not None:
                then(o)
        return on_outcome


INSTANT_S = 0.05  # a unit this fast was answered from a cache


def track(total: int, label: str, console: Console | None = None, bar: bool = True) -> Tracker:
    """The progress of `total` units of work called `label` (module docstring); use as a context manager."""
    return Tracker(total, label, console, bar)


def iterate(items, label: str, name=str, console: Console | None = None):
    """Each of `items`, a unit finished when the loop asks for the next one (as rich's `track`): for a loop whose
    body is the unit of work. `name(item)` names it."""
    items = list(items)
    with track(len(items), label, console) as bar:
        for item in items:
            yield item
            bar.done(name(item))
