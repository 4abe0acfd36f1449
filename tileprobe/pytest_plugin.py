"""The pytest plugin (entry point `pytest11: tileprobe`): keep known-good tile sets true in any repository's CI.

    pytest --tileprobe-known-good results/known_good -m tileprobe

collects one item per known-good tile, `<file>::<config name>[static]`, re-probed statically against the file's
target with the real nvcc and CUTLASS (marker `nvcc`; no GPU needed), plus one `<file>::<config name>[launch]` item
per tile (markers `gpu` and `nvcc`) that launches it where a GPU of the file's arch is present and is skipped, saying
so, where none is. A Triton family's tiles (triton-moe) are compiled again with Triton at every batch size recorded
(marker `triton`), as `tileprobe check` does; they have no [launch] item. A failing item names the tile, its recorded bytes and evidence, and what the re-probe found.
Every item carries the `tileprobe` marker, so `-m tileprobe` runs only these and `-m "not gpu"` drops the launches.

`--tileprobe-configs PATH` (an engine's Triton fused-MoE config files, `E=..,N=..,device_name=...json`, or a folder
of them; `--tileprobe-engine vllm|sglang`) collects one item per file entry, `<file>::M=<batch>` (marker `triton`):
both GEMMs compiled with Triton for the device the file names, through the engine's own lookup
(tileprobe.triton.check_configs). It needs tileprobe[triton]. An entry whose launch tileprobe does not reproduce
(SGLang's USE_TMA: TMA descriptors) is skipped, saying so; the file's other entries are still checked.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tileprobe.triton import check_configs as tcc
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.errors import TileprobeError, UsageError
from tileprobe.results import known_good
from tileprobe.results.resultset import config_from_entry, target_from_dict
from tileprobe.sweep import make_toolchain

MARKERS = {
    "tileprobe": "an item collected by tileprobe's plugin (--tileprobe-known-good / --tileprobe-configs)",
    "gpu": "needs an NVIDIA GPU and driver; skipped without one",
    "nvcc": "compiles with the real nvcc (and CUTLASS headers)",
    "triton": "compiles real Triton kernels (no GPU)",
}


def pytest_addoption(parser):
    g = parser.getgroup("tileprobe", "tileprobe: keep known-good tile sets true")
    g.addoption("--tileprobe-known-good", action="append", default=[], metavar="PATH",
                help="known-good JSON file(s) or folder(s): one test item per tile (repeatable)")
    g.addoption("--tileprobe-configs", action="append", default=[], metavar="PATH",
                help="an engine's Triton fused-MoE config files (or folders): one item per entry, against the device "
                     "each file names (needs tileprobe[triton])")
    g.addoption("--tileprobe-engine", default="vllm", metavar="ENGINE",
                help="whose config files --tileprobe-configs names: vllm (default) or sglang")
    g.addoption("--tileprobe-workload", default=None, metavar="PRESET",
                help="the model of the config files (default: the preset whose experts and intermediate size split "
                     "into the file's E and N)")
    g.addoption("--tileprobe-cache-dir", default=None, metavar="DIR", help="build cache (default: the user cache dir)")
    g.addoption("--tileprobe-nvcc", default=None, metavar="PATH", help="nvcc to use (default: PATH / CUDA_HOME)")
    g.addoption("--tileprobe-cutlass-dir", default=None, metavar="DIR", help="CUTLASS for non-engine families")
    g.addoption("--tileprobe-jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="parallel compiles")


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("--tileprobe-configs") and importlib.util.find_spec("triton") is None:
        raise pytest.UsageError("--tileprobe-configs needs tileprobe[triton] (pip install 'tileprobe[triton]'): "
                                "triton is not installed")


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
        self.triton = known_good.backend_of(doc) == "triton"  # compiled again with Triton; never launched here
        self.static_results: dict[str, tuple[str | None, str | None, object]] | None = None
        self.launch_results: dict[str, list[str]] | None = None
        self.launch_note = ""
        for e, cfg in pairs:
            yield KnownGoodTile.from_parent(self, name=f"{cfg.name}[static]", entry=e, cfg=cfg, mode="static",
                                            marker="triton" if self.triton else "nvcc")
            if not self.triton:
                yield KnownGoodTile.from_parent(self, name=f"{cfg.name}[launch]", entry=e, cfg=cfg, mode="launch",
                                                marker="nvcc")

    def _selected(self) -> list["KnownGoodTile"]:
        """This file's items that survived -k / -m / deselection."""
        return [i for i in self.session.items if i.parent is self]

    def static(self, tc) -> dict:
        """{config key: (regression, note, outcome)} for every selected tile (static or launch), probed together."""
        if self.static_results is None and self.triton:
            keys = {i.cfg.key for i in self._selected()}
            res = known_good.CheckResult(self.path)
            found = known_good.triton_findings(self.doc, target_from_dict(self.doc["target"]), res, self._jobs(),
                                               keys, self.config.getoption("--tileprobe-cache-dir"))
            self.static_results = {k: ("\nREGRESSION ".join(lines) or None, "; ".join(res.notes + notes) or None,
                                       None) for k, (lines, notes) in found.items()}
        if self.static_results is None:
            prep = known_good.prepare(self.path, tc)
            keys = {i.cfg.key for i in self._selected()}
            todo = [(e, c) for e, c in prep.configs if c.key in keys]
            outcomes = probe_static([c for _, c in todo], prep.target, prep.tc.cutlass, prep.tc.nvcc, prep.tc.cache,
                                    self._jobs(), 1200)
            self.prep = prep
            self.static_results = {}
            for (e, c), o in zip(todo, outcomes):
                line, note = known_good.static_finding(self.path.name, prep.target, e, c, o)
                self.static_results[c.key] = (line, note, o)
        return self.static_results

    def _jobs(self) -> int:
        return max(1, self.config.getoption("--tileprobe-jobs"))

    def launch(self, tc) -> dict[str, list[str]]:
        if self.launch_results is None:
            static = self.static(tc)
            keys = {i.cfg.key for i in self._selected() if i.mode == "launch"}
            ok = [(e, c, static[c.key][2]) for e, c in self.prep.configs
                  if c.key in keys and static[c.key][0] is None]
            self.launch_results, self.launch_note = (known_good.launch_findings(
                self.doc, self.prep.target, ok, self.prep.tc, self._jobs(), self.path.name) if ok else ({}, ""))
        return self.launch_results


class KnownGoodFailure(Exception):
    """A tile of a known-good file no longer works; the message is the one-line regression."""


class KnownGoodTile(pytest.Item):
    def __init__(self, *, entry: dict, cfg, mode: str, marker: str, **kw) -> None:
        super().__init__(**kw)
        self.entry, self.cfg, self.mode = entry, cfg, mode
        self.add_marker("tileprobe")
        self.add_marker(marker)  # nvcc (CUTLASS families) or triton (compiled again with Triton)
        if mode == "launch":
            self.add_marker("gpu")

    def runtest(self) -> None:
        parent: KnownGoodFile = self.parent  # type: ignore[assignment]
        tc = None if parent.triton else _session(self.config).toolchain()
        target = target_from_dict(parent.doc["target"])
        if self.mode == "launch" and not known_good.devices_for(target):
            pytest.skip(f"no {target.arch} GPU here: {self.cfg.tile} re-checked statically only")
        error = None
        try:
            line, note, _ = parent.static(tc)[self.cfg.key]
            bad = parent.launch(tc).get(self.cfg.key) if self.mode == "launch" and not line else None
        except TileprobeError as exc:  # a missing tool or engine: one line, no traceback
            error = f"tileprobe: {exc}"
        if error is not None:
            pytest.fail(error, pytrace=False)
        if line:
            raise KnownGoodFailure(line)
        if bad:
            raise KnownGoodFailure("\nREGRESSION ".join(bad))
        if note:
            self.user_properties.append(("tileprobe", note))
            print(note)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KnownGoodFailure):
            return f"REGRESSION {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        e = self.entry
        return self.path, None, (f"{self.cfg.name} [{self.mode}]: recorded {e.get('verdict')} ({e.get('evidence')}), "
                                 f"SharedStorage {e.get('smem_bytes')} B, headroom {e.get('headroom_bytes')} B")


class ConfigFileCollector(pytest.File):
    """One engine config file; one item per entry, compiled together for the selected entries."""

    def collect(self):
        engine = self.config.getoption("--tileprobe-engine")
        try:
            self.check = tcc.read(self.path, engine)
        except UsageError as exc:
            raise self.CollectError(str(exc)) from None
        self.done = False
        for m in self.check.entries:
            yield ConfigEntry.from_parent(self, name=f"M={m}", m=m)

    def results(self) -> tcc.ConfigCheck:
        if not self.done:
            ms = [i.m for i in self.session.items if i.parent is self]
            tcc.run(self.check, self.config.getoption("--tileprobe-workload"), ms,
                    max(1, self.config.getoption("--tileprobe-jobs")), self.config.getoption("--tileprobe-cache-dir"))
            self.done = True
        return self.check


class ConfigEntry(pytest.Item):
    def __init__(self, *, m: int, **kw) -> None:
        super().__init__(**kw)
        self.m = m
        self.add_marker("tileprobe")
        self.add_marker("triton")

    def runtest(self) -> None:
        parent: ConfigFileCollector = self.parent  # type: ignore[assignment]
        try:
            check, error = parent.results(), None
        except TileprobeError as exc:  # a missing tool or engine, an ambiguous model: one line, no traceback
            check, error = None, f"tileprobe: {exc}"
        if error is not None:
            pytest.fail(error, pytrace=False)
        problems = check.results.get(self.m, [])
        if problems:
            raise KnownGoodFailure("\nREGRESSION ".join(problems))
        if check.not_checked.get(self.m):  # a launch tileprobe does not reproduce (USE_TMA): said, not passed
            pytest.skip("; ".join(check.not_checked[self.m]))
        for note in check.notes.get(self.m, []):  # the bytes of what fits: shown with -rP, kept in junit XML
            self.user_properties.append(("tileprobe", note))
            print(note)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KnownGoodFailure):
            return f"REGRESSION {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        c = self.parent.check  # type: ignore[attr-defined]
        return self.path, None, (f"{self.path.name} M={self.m}: {c.engine} on {c.device_name} ({c.target.name}, "
                                 f"opt-in {c.target.smem_optin} B)")


def config_files(paths: list[str]) -> list[Path]:
    """The config files named, folders searched (recursively: SGLang's configs/triton_X_Y_Z/) for E=*.json."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("E=*.json") if tcc.tc.parse_name(f.name) is not None)
        elif p.is_file():
            out.append(p)
        else:
            raise UsageError(f"no config file or folder at {p}")
    if not out:
        raise UsageError(f"no engine config files (E=..,N=..,device_name=...json) in {', '.join(paths)}")
    return out


_KEY = pytest.StashKey[_Session]()


def _session(config) -> _Session:
    if _KEY not in config.stash:
        config.stash[_KEY] = _Session(config)
    return config.stash[_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Add the known-good items before -k / -m deselect, so they select like any test."""
    named = config.getoption("--tileprobe-known-good")
    configs = config.getoption("--tileprobe-configs")
    if not named and not configs:
        return
    try:
        files = [(KnownGoodFile, p) for p in (known_good.files_in(named) if named else [])]
        files += [(ConfigFileCollector, p) for p in (config_files(configs) if configs else [])]
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    for kind, path in files:
        collector = kind.from_parent(session, path=Path(path).resolve())
        rep = collector.ihook.pytest_make_collect_report(collector=collector)
        if rep.failed:
            raise pytest.UsageError(f"{path}: {rep.longreprtext.strip().splitlines()[-1]}")
        items.extend(x for x in rep.result if isinstance(x, pytest.Item))
