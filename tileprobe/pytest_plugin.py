"""The pytest plugin (entry point `pytest11: tileprobe`): keep known-good tile sets true in any repository's CI.

    pytest --tileprobe-known-good results/known_good -m tileprobe

collects one item per known-good tile, `<file>::<config name>[static]`, re-probed statically against the file's
target with the real nvcc and CUTLASS (marker `nvcc`; no GPU needed), plus one `<file>::<config name>[launch]` item
per tile (markers `gpu` and `nvcc`) that launches it where a GPU of the file's arch is present and is skipped, saying
so, where none is. A failing item names the tile, its recorded bytes and evidence, and what the re-probe found.
Every item carries the `tileprobe` marker, so `-m tileprobe` runs only these and `-m "not gpu"` drops the launches.

`--tileprobe-configs PATH` (Triton config files) needs the Triton backend (tileprobe[triton]); without it the option
is refused with one line.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.errors import TileprobeError, UsageError
from tileprobe.results import known_good
from tileprobe.results.resultset import config_from_entry, target_from_dict
from tileprobe.sweep import make_toolchain

MARKERS = {
    "tileprobe": "an item collected by tileprobe's plugin (--tileprobe-known-good / --tileprobe-configs)",
    "gpu": "needs an NVIDIA GPU and driver; skipped without one",
    "nvcc": "compiles with the real nvcc (and CUTLASS headers)",
}


def pytest_addoption(parser):
    g = parser.getgroup("tileprobe", "tileprobe: keep known-good tile sets true")
    g.addoption("--tileprobe-known-good", action="append", default=[], metavar="PATH",
                help="known-good JSON file(s) or folder(s): one test item per tile (repeatable)")
    g.addoption("--tileprobe-configs", action="append", default=[], metavar="PATH",
                help="Triton config files: one item per entry, against the device each file names (needs "
                     "tileprobe[triton])")
    g.addoption("--tileprobe-cache-dir", default=None, metavar="DIR", help="build cache (default: the user cache dir)")
    g.addoption("--tileprobe-nvcc", default=None, metavar="PATH", help="nvcc to use (default: PATH / CUDA_HOME)")
    g.addoption("--tileprobe-cutlass-dir", default=None, metavar="DIR", help="CUTLASS for non-engine families")
    g.addoption("--tileprobe-jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="parallel compiles")


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("--tileprobe-configs") and importlib.util.find_spec("tileprobe.backends.triton") is None:
        raise pytest.UsageError("--tileprobe-configs needs tileprobe[triton] (the Triton backend), which this "
                                "install does not have")


class _Session:
    """The toolchain, made once per pytest session (an error is kept and fails each item with its one line)."""

    def __init__(self, config) -> None:
        self.config = config
        self._tc = None
        self._error: str | None = None

    def toolchain(self):
        if self._tc is None and self._error is None:
            try:
                self._tc = make_toolchain(self.config.getoption("--tileprobe-cutlass-dir"),
                                          self.config.getoption("--tileprobe-nvcc"),
                                          self.config.getoption("--tileprobe-cache-dir"))
            except UsageError as exc:
                self._error = str(exc)
        if self._error is not None:
            pytest.fail(f"tileprobe: {self._error}", pytrace=False)
        return self._tc


class KnownGoodFile(pytest.File):
    """One known-good file; its items share one static re-probe (and one launch batch) of the selected tiles."""

    def collect(self):
        try:
            doc = known_good.load_file(self.path)
        except UsageError as exc:
            raise self.CollectError(str(exc)) from None
        try:
            pairs = [(e, config_from_entry(e)) for e in doc["tiles"]]
        except (TileprobeError, KeyError, TypeError, ValueError) as exc:
            raise self.CollectError(f"{self.path}: a tile entry is unreadable: {exc}") from None
        self.doc = doc
        self.static_results: dict[str, tuple[str | None, str | None, object]] | None = None
        self.launch_results: dict[str, list[str]] | None = None
        self.launch_note = ""
        for e, cfg in pairs:
            yield KnownGoodTile.from_parent(self, name=f"{cfg.name}[static]", entry=e, cfg=cfg, mode="static")
            yield KnownGoodTile.from_parent(self, name=f"{cfg.name}[launch]", entry=e, cfg=cfg, mode="launch")

    def _selected(self) -> list["KnownGoodTile"]:
        """This file's items that survived -k / -m / deselection."""
        return [i for i in self.session.items if i.parent is self]

    def static(self, tc) -> dict:
        """{config key: (regression, note, outcome)} for every selected tile (static or launch), probed together."""
        if self.static_results is None:
            prep = known_good.prepare(self.path, tc)
            keys = {i.cfg.key for i in self._selected()}
            todo = [(e, c) for e, c in prep.configs if c.key in keys]
            jobs = max(1, self.config.getoption("--tileprobe-jobs"))
            outcomes = probe_static([c for _, c in todo], prep.target, prep.tc.cutlass, prep.tc.nvcc, prep.tc.cache,
                                    jobs, 1200)
            self.prep = prep
            self.static_results = {}
            for (e, c), o in zip(todo, outcomes):
                line, note = known_good.static_finding(self.path.name, prep.target, e, c, o)
                self.static_results[c.key] = (line, note, o)
        return self.static_results

    def launch(self, tc) -> dict[str, list[str]]:
        if self.launch_results is None:
            static = self.static(tc)
            keys = {i.cfg.key for i in self._selected() if i.mode == "launch"}
            ok = [(e, c, static[c.key][2]) for e, c in self.prep.configs
                  if c.key in keys and static[c.key][0] is None]
            self.launch_results, self.launch_note = (known_good.launch_findings(
                self.doc, self.prep.target, ok, self.prep.tc, max(1, self.config.getoption("--tileprobe-jobs")),
                self.path.name) if ok else ({}, ""))
        return self.launch_results


class KnownGoodFailure(Exception):
    """A tile of a known-good file no longer works; the message is the one-line regression."""


class KnownGoodTile(pytest.Item):
    def __init__(self, *, entry: dict, cfg, mode: str, **kw) -> None:
        super().__init__(**kw)
        self.entry, self.cfg, self.mode = entry, cfg, mode
        self.add_marker("tileprobe")
        self.add_marker("nvcc")
        if mode == "launch":
            self.add_marker("gpu")

    def runtest(self) -> None:
        parent: KnownGoodFile = self.parent  # type: ignore[assignment]
        tc = _session(self.config).toolchain()
        target = target_from_dict(parent.doc["target"])
        if self.mode == "launch" and not known_good.devices_for(target):
            pytest.skip(f"no {target.arch} GPU here: {self.cfg.tile} re-checked statically only")
        line, note, _ = parent.static(tc)[self.cfg.key]
        if line:
            raise KnownGoodFailure(line)
        if self.mode == "launch":
            bad = parent.launch(tc).get(self.cfg.key)
            if bad:
                raise KnownGoodFailure("\nREGRESSION ".join(bad))
        if note:
            self.user_properties.append(("tileprobe", note))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KnownGoodFailure):
            return f"REGRESSION {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        e = self.entry
        return self.path, None, (f"{self.cfg.name} [{self.mode}]: recorded {e.get('verdict')} ({e.get('evidence')}), "
                                 f"SharedStorage {e.get('smem_bytes')} B, headroom {e.get('headroom_bytes')} B")


_KEY = pytest.StashKey[_Session]()


def _session(config) -> _Session:
    if _KEY not in config.stash:
        config.stash[_KEY] = _Session(config)
    return config.stash[_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Add the known-good items before -k / -m deselect, so they select like any test."""
    named = config.getoption("--tileprobe-known-good")
    if not named:
        return
    try:
        files = known_good.files_in(named)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    for path in files:
        collector = KnownGoodFile.from_parent(session, path=Path(path).resolve())
        rep = collector.ihook.pytest_make_collect_report(collector=collector)
        if rep.failed:
            raise pytest.UsageError(f"{path}: {rep.longreprtext.strip().splitlines()[-1]}")
        items.extend(x for x in rep.result if isinstance(x, pytest.Item))
