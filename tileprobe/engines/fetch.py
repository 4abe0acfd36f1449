"""Fetching the serving engines' wheels into tileprobe's wheel cache, so that triton-moe can read their kernels and
config trees without installing or importing them.

`fetch(engine)` runs `pip download --no-deps` for the release tileprobe reads (triton_configs.PINNED) into
`<user cache>/wheels` (or a folder given), with a timeout; the wheel is then found by `triton_configs.cached_wheel`.
Nothing is installed. The wheel is the engine's published file, read as a zip at run time; it is never committed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tileprobe.engines import triton_configs
from tileprobe.errors import UsageError

DEFAULT_TIMEOUT_S = 900


def cache_dir() -> Path:
    """The folder fetched wheels go to: the last of triton_configs.wheel_dirs(), <user cache>/wheels."""
    return triton_configs.wheel_dirs()[-1]


def fetch(engine: str, version: str | None = None, dest: Path | None = None,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """The wheel of serving engine `engine` (default: the release tileprobe reads), downloaded unless already there."""
    if engine not in triton_configs.PINNED:
        raise UsageError(f"unknown engine {engine!r}; known: {', '.join(triton_configs.PINNED)}")
    return download(engine, version or triton_configs.PINNED[engine], dest, timeout_s)


def download(dist: str, version: str, dest: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """The wheel of distribution `dist` at `version` in `dest` (default: the wheel cache), downloaded if missing."""
    dest = Path(dest) if dest else cache_dir()
    stem = dist.replace("-", "_")
    have = sorted(dest.glob(f"{stem}-{version}-*.whl")) if dest.is_dir() else []
    if have:
        return have[0]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(dest),
           f"{dist}=={version}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UsageError(f"pip download {dist}=={version} did not finish in {timeout_s:.0f} s") from None
    got = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if p.returncode or not got:
        last = (p.stderr.strip().splitlines() or ["no wheel was written"])[-1]
        raise UsageError(f"pip download {dist}=={version} failed: {last}")
    return got[0]
