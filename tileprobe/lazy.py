"""Third-party modules loaded at first use.

pandas, matplotlib, jsonschema and cuda-python take seconds to import together; `tileprobe --help` and every
bad-input error need none of them, so the modules that use them hold a LazyModule instead, which imports on the first
attribute read. Only third-party modules: a tileprobe module is refused, so nothing here can hide an import cycle.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any, Callable

_LOCK = threading.RLock()


class LazyModule:
    """Stands for module `name`; `before()` runs once right before the import, `after(module)` right after it (e.g.
    choosing matplotlib's backend before pyplot loads)."""

    def __init__(self, name: str, before: Callable[[], Any] | None = None,
                 after: Callable[[ModuleType], Any] | None = None) -> None:
        if name.split(".")[0] == "tileprobe":
            raise ValueError(f"LazyModule is for third-party modules, not {name}: import tileprobe modules at the top")
        self._name, self._before, self._after, self._module = name, before, after, None

    def load(self) -> ModuleType:
        if self._module is None:
            with _LOCK:
                if self._module is None:
                    if self._before is not None:
                        self._before()
                    module = importlib.import_module(self._name)
                    if self._after is not None:
                        self._after(module)
                    self._module = module
        return self._module

    def missing(self) -> str | None:
        """None when the module imports, else why not ("ImportError: ...")."""
        try:
            self.load()
        except Exception as exc:  # ImportError, or a broken install: the caller says what cannot be done
            return f"{type(exc).__name__}: {exc}"
        return None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.load(), attr)

    def __repr__(self) -> str:
        return f"<LazyModule {self._name} ({'loaded' if self._module is not None else 'not loaded'})>"
