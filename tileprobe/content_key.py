"""Small content-keyed stores for plain answers that cost seconds to recompute and depend only on stated inputs
(report.md's charts: tileprobe.reports.chart_cache; a config.json's engine view: tileprobe.model_config).

`digest(doc)`: the sha256 of a JSON document (keys sorted). `installed()`: the distributions installed here (their
dist-info names, versions included), `distribution(name)`: one distribution's version and the sha256 of its RECORD
(every installed file's hash), `files(*paths)`: the sha256 of files' bytes (the code that computes the answer). A
stored entry is written whole (a temporary file renamed over it); one that cannot be read is computed again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
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
