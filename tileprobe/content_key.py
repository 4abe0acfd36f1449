"""Small content-keyed stores for plain answers that cost seconds to recompute and depend only on stated inputs
(report.md's charts: tileprobe.reports.chart_cache; a config.json's engine view: tileprobe.model_config).

`digest(doc)`: the sha256 of a JSON document (keys sorted). `installed()`: the distributions installed here (their
dist-info names, versions included), `distribution(name)`: one distribution's version and the sha256 of its RECORD
(every installed file's hash), `closure(name)`: that of a library and of everything it requires, `files(*paths)`: the sha256 of files' bytes (the code that computes the answer). A
stored entry is written whole (a temporary file renamed over it); one that cannot be read is computed again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import tempfile
from pathlib import Path


def digest(doc) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def installed() -> str:
    """The dist-info / egg-info names on sys.path but tileprobe's own (a checkout's tileprobe.egg-info is on the path
    only where Python starts in it; the code an answer depends on is keyed by its bytes instead)."""
    names = set()
    for entry in sys.path:
        try:
            names |= {n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
                      and not n.lower().startswith(("tileprobe-", "tileprobe."))}
        except OSError:
            continue
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def distribution(name: str) -> list | None:
    """[version, sha256 of its RECORD] of an installed distribution; None: not installed."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    record = dist.read_text("RECORD") or ""
    return [dist.version, hashlib.sha256(record.encode()).hexdigest()]


_NAME_END = re.compile(r"[\s;<>=!~\[(]")


@functools.lru_cache(maxsize=8)
def closure(name: str) -> dict:
    """`distribution` of `name` and of every distribution it requires, transitively (Requires-Dist without an extra
    marker; one not installed is None), by lower-case name: the libraries an answer drawn by `name` depends on. Unlike
    `installed()`, it does not change when a library adds a folder of its own to sys.path in one process (ray's
    thirdparty_files), so two processes of one environment agree."""
    out: dict = {}
    todo = [name]
    while todo:
        n = todo.pop().lower().replace("_", "-")
        if n in out:
            continue
        out[n] = distribution(n)
        if out[n] is None:
            continue
        for req in importlib.metadata.requires(n) or ():
            marker = req.split(";", 1)[1] if ";" in req else ""
            if "extra" not in marker:  # an optional extra's requirement is not installed by the library itself
                todo.append(_NAME_END.split(req.strip(), 1)[0])
    return out


def files(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        data = Path(p).read_bytes()
        h.update(f"{Path(p).name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def env(*prefixes: str) -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def write_whole(dest: Path, data: bytes) -> bool:
    """`data` into `dest` through a temporary file renamed over it; False when it cannot be written."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        return False
    return True
