"""A compile failure whose log is the same for every config is the environment's, not a config's.

A missing header folder, an nvcc that does not run, or an `NVCC_PREPEND_FLAGS=--bogus` fails every build with one
and the same output once the config's own names and the build's temporary folder are taken out of it. So when two
failed builds of disjoint configs (a batch and one of its own configs alone can fail with the same log for that
config's reason: they do not count) give the same normalized log, the failure stops the run as an EnvironmentFault:
no row carries it, the first failure's cache entry is removed again, and the second is never cached. A log with a
static_assert (CUTLASS's SMEM check, the stage-count check, a family's own refusal) is a config's by construction
and never counts.

Failures are remembered per toolchain (`signature`: nvcc, its environment, the CUTLASS tree, the family's headers),
for the life of the process: once the environment is fixed, the signature is another, and nothing is remembered.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
from pathlib import Path

from tileprobe.errors import EnvironmentFault

_LOCK = threading.Lock()
# signature -> normalized log -> [(config keys, cache entry or None)]
_SEEN: dict[str, dict[str, list[tuple[frozenset[str], Path | None]]]] = {}

_TMP = re.compile(r"\.tmp-[A-Za-z0-9_]+")
_INDEX = re.compile(r"\b(k\d+|kernel\.\d+\.(cubin|log))\b")


def normalize(log: str, names: list[str]) -> str:
    """The log with the configs' names, the temporary build folder and kernel-half indices taken out."""
    for n in sorted(names, key=len, reverse=True):
        log = log.replace(n, "<config>")
    log = _TMP.sub(".tmp-X", log)
    return _INDEX.sub("<half>", log).strip()


def is_config_error(log: str) -> bool:
    """A static_assert stopped the compile: the config's own refusal, whatever the environment."""
    return "static assertion failed" in log or "static_assert" in log


def signature(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def observe(sig: str, keys: list[str], names: list[str], log: str, entry: Path | None) -> None:
    """Note a failed build of configs `keys` (cached, or about to be, at `entry`). Raises EnvironmentFault when an
    earlier failure of disjoint configs under the same toolchain had the same normalized log; the cache entries of
    every such failure, this one's included, are removed."""
    if not log.strip() or is_config_error(log):
        return
    norm = normalize(log, names)
    mine = frozenset(keys)
    with _LOCK:
        seen = _SEEN.setdefault(sig, {}).setdefault(norm, [])
        if not any(other.isdisjoint(mine) for other, _ in seen):
            seen.append((mine, entry))
            return
        for _, path in [*seen, (mine, entry)]:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        seen[:] = [(keys_, None) for keys_, _ in seen] + [(mine, None)]
    raise EnvironmentFault(f"every config fails to compile with the same error, so it is the toolchain's: "
                           f"{first_line(log)} (nothing was cached; fix the toolchain and run again)", log)


def first_line(log: str) -> str:
    """The log's first line that says error or fatal (else its last line), trimmed."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "fatal" in ln.lower():
            return ln[:240]
    return (lines or ["nvcc failed with no output"])[-1][:240]
