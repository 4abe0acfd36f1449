"""Fetching the serving engines' wheels into tileprobe's wheel cache, so that triton-moe can read their kernels and
config trees without installing or importing them.

`fetch(engine)` runs `pip download --no-deps` for the release tileprobe reads (triton_configs.PINNED) into
`<user cache>/wheels` (or a folder given), with a timeout; the wheel is then found by `triton_configs.cached_wheel`.
Nothing is installed. The wheel is the engine's published file, read as a zip at run time; it is never committed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

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
    """The wheel of distribution `dist` at `version` in `dest` (default: the wheel cache), downloaded if missing.
    Check, lock, check: two processes asking at once (parallel test workers) download it once; pip writes into a
    temporary folder beside it and the wheel is renamed into place whole, so nobody reads a partial file."""
    dest = Path(dest) if dest else cache_dir()
    stem = dist.replace("-", "_")

    def have() -> Path | None:
        got = sorted(dest.glob(f"{stem}-{version}-*.whl")) if dest.is_dir() else []
        return got[0] if got else None

    if have():
        return have()
    dest.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest / f".{stem}-{version}.lock")):
        if have():
            return have()
        with tempfile.TemporaryDirectory(prefix=".download-", dir=dest) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", tmp,
                   f"{dist}=={version}"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise UsageError(f"pip download {dist}=={version} did not finish in {timeout_s:.0f} s") from None
            got = sorted(Path(tmp).glob(f"{stem}-{version}-*.whl"))
            if p.returncode or not got:
                last = (p.stderr.strip().splitlines() or ["no wheel was written"])[-1]
                raise UsageError(f"pip download {dist}=={version} failed: {last}")
            os.replace(got[0], dest / got[0].name)
    return have()
