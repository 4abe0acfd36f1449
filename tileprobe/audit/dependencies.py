"""The engine files each audit entry's kernels depend on, from Triton's own dependency walk (for the engine manifests,
tileprobe.engines.manifest; written by tools/engine_manifest.py).

For an entry, its served modules (AuditKernel.allow and the launcher's module) are imported from the engine's files
under tileprobe.audit.capture.engine_session, as an audit imports them (the launcher's module first; another served
module that does not import on its own there is skipped: the launcher cannot run it either); every module the session
loaded from those files (an alias package's too: vLLM's triton_kernels) is scanned for the @triton.jit functions defined
in it (a JITFunction, or one under @triton.autotune / @triton.heuristics). Each one's `cache_key` is then computed
afresh (its cached `hash` reset), which is Triton's own walk: `DependenciesFinder` visits the function's AST and hands
every @triton.jit callable it references, in this module or imported from another, to `DependenciesFinder._update_hash`,
which asks for that callable's own `cache_key` and so walks it in turn. Every callable passed there is recorded (and its
hash reset the first time, so a helper another kernel already hashed is walked again), and the files of all of them that
came from the engine's files are the entry's walked files: the kernels' own modules and the
modules of every transitive @triton.jit helper (Mamba-2's SSD kernels call `softplus` from mamba_ssm.py).

Nothing is compiled or launched. Triton's own helpers (triton/language/*.py) are not engine files and are not
listed: the Triton release is checked on its own.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from tileprobe.audit import capture
from tileprobe.lazy import LazyModule
from tileprobe.targets import profile

_jit = LazyModule("triton.runtime.jit")
TARGET = "rtx-pro-6000"  # the stand-in device the modules are imported for (an SM120 GPU, as the audit's default)


def _defined(module) -> list:
    """The @triton.jit functions a module defines (an autotuned or heuristics-wrapped one by its JITFunction)."""
    out = []
    for value in list(vars(module).values()):
        inner = value
        while isinstance(inner, _jit.KernelInterface) and not isinstance(inner, _jit.JITCallable):
            inner = getattr(inner, "fn", None)
        if isinstance(inner, _jit.JITCallable) and inner.__module__ == module.__name__ and inner not in out:
            out.append(inner)
    return out


@contextlib.contextmanager
def _recording(seen: dict, engine_file):
    """DependenciesFinder._update_hash records each callable it is handed (and resets an engine callable's cached
    hash the first time, so its own walk runs again); put back on exit."""
    finder = _jit.DependenciesFinder
    update = finder.__dict__["_update_hash"]

    def record(self, func):
        if id(func) not in seen:
            seen[id(func)] = func
            if engine_file(func) is not None:
                func.hash = None
        return update(self, func)

    finder._update_hash = record
    try:
        yield
    finally:
        finder._update_hash = update


def _served_modules(folder: Path) -> list:
    """Every module in sys.modules loaded from the session's copies of the engine's files."""
    out = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).is_relative_to(folder):
            out.append(module)
    return out


def entry_walk(source, entry, cache_dir=None) -> list[str]:
    """The engine files (paths inside the wheel, `vllm/.../mamba_ssm.py`) of the @triton.jit functions the entry's
    served modules define and of every @triton.jit callable Triton's walk reaches from them, sorted."""
    with capture.engine_session(source, profile(TARGET), entry.allow, entry.stand_ins, cache_dir) as session:
        session.module(entry.module)  # the launcher's module must import (else the entry is not walked: walk())
        for name in sorted(set(entry.allow) - {entry.module}):
            try:
                session.module(name)
            except ImportError:  # a served module that does not import on its own under the session: the launcher
                continue  # cannot run it either, so no kernel of it is launched (its file stays listed)
        folder = Path(session.folder)

        def engine_file(func) -> str | None:
            path = Path(func.fn.__code__.co_filename)
            if not path.is_relative_to(folder):
                return None
            return "/".join(path.relative_to(folder).parts[1:])  # <folder>/<content digest>/<path in the wheel>

        roots = [fn for module in _served_modules(folder) for fn in _defined(module)]
        seen: dict = {}
        with _recording(seen, engine_file):
            for fn in roots:
                if id(fn) not in seen:
                    seen[id(fn)] = fn
                    fn.hash = None
                    fn.cache_key  # noqa: B018  (Triton's walk; the callables it reaches are recorded)
        return sorted({f for f in map(engine_file, seen.values()) if f is not None})


def walk(source, entries, cache_dir=None) -> dict[str, list[str] | str]:
    """entry_walk for each entry, by entry name; for an entry whose served modules do not import from this release
    (its capture cannot run on it either), the one-line reason instead, which the manifest records."""
    out: dict[str, list[str] | str] = {}
    for k in entries:
        try:
            out[k.name] = entry_walk(source, k, cache_dir)
        except Exception as exc:  # noqa: BLE001  (recorded in the reviewed manifest, not swallowed)
            first = (str(exc).splitlines() or [""])[0].split(" (")[0]  # the capture's lists of modules left out
            out[k.name] = f"{type(exc).__name__}: {first}"[:300]
    return out
