"""Fetching the serving engines' wheels, and the flashinfer releases they pin, into tileprobe's wheel cache, so that
triton-moe, check-configs and the export commands can read them without installing or importing them.

`plan(specs)` is what `tileprobe engines fetch` would download: each engine release asked for (default: the PINNED
ones) and the flashinfer-python release it pins, read from the engine's wheel METADATA when that wheel is already
here, else from locate.FLASHINFER_PINS; a spec may also name flashinfer itself (`flashinfer-python==0.7.2`).
`fetch(specs)` runs `pip download --no-deps` for each (an argument list, a timeout) into `<user cache>/wheels` (or a
folder given); after an engine's wheel arrives its own pin is read again and is the one fetched. Nothing is
installed. The wheels are the projects' published files, read as zips at run time; they are never committed.
Progress goes to stderr (`say`): a line as each download starts, one every HEARTBEAT_S while it runs (an engine
wheel is hundreds of MB), and one with the wheel's size when it is done. A fetch that fails after some wheels arrived
says which are cached and what tileprobe reads them for (`usable`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.engines import locate, packages
from tileprobe.errors import UsageError

DEFAULT_TIMEOUT_S = 900
HEARTBEAT_S = 30.0  # a "still downloading" line this often
FLASHINFER_NAMES = ("flashinfer", "flashinfer-python")


def cache_dir() -> Path:
    """The folder fetched wheels go to: the last of locate.wheel_dirs(), <user cache>/wheels."""
    return locate.cache_dir()


@dataclass(frozen=True)
class Want:
    """One wheel to have: the distribution, its version, and why (asked for, or pinned by an engine and where the
    pin was read)."""

    dist: str
    version: str | None  # None: an engine's pin not known until its wheel is here
    why: str
    pinned_by: str | None = None  # the engine whose pin this is ("vllm==0.33.0")


def parse_spec(text: str) -> tuple[str, str | None]:
    """`vllm`, `sglang==0.5.23`, `flashinfer-python==0.7.2` (or `flashinfer==...`) -> (distribution, version)."""
    name, _, version = text.partition("==")
    name, version = packages.canonical(name.strip()), version.strip() or None
    if name in FLASHINFER_NAMES:
        if version is None:
            raise UsageError(f"{text!r}: name the flashinfer release (flashinfer-python==VERSION); without one, fetch "
                             "an engine and the release it pins comes with it")
        return locate.FLASHINFER_DIST, version
    if name not in locate.PINNED:
        raise UsageError(f"unknown engine {text!r}; known: {', '.join(locate.PINNED)}, flashinfer-python==VERSION")
    return name, version or locate.PINNED[name]


def _pin_here(engine: str, version: str, dest: Path | None) -> tuple[str | None, str]:
    """The flashinfer release `engine==version` pins, and where that was read: its wheel or install when here."""
    try:
        pkg = locate.find_release(engine, version, beside=dest)
    except UsageError:
        pkg = None
    if pkg is not None:
        return pkg.pin(locate.FLASHINFER_DIST), f"{pkg.where} METADATA"
    known = locate.FLASHINFER_PINS.get((engine, version))
    if known is not None:
        return known, "tileprobe's table of the pinned releases (checked against the wheel once it is here)"
    return None, "read from its wheel once it is here"


def plan(specs: list[str] | None = None, dest: Path | None = None, flashinfer: bool = True) -> list[Want]:
    """What fetch(specs) downloads, in order, without duplicates: each engine (default: every PINNED release) and,
    with `flashinfer`, the flashinfer-python release it pins."""
    out: list[Want] = []
    for text in specs or list(locate.PINNED):
        dist, version = parse_spec(text)
        if dist == locate.FLASHINFER_DIST:
            out.append(Want(dist, version, "asked for"))
            continue
        out.append(Want(dist, version, "asked for" if specs else "the release tileprobe reads"))
        if flashinfer:
            fi, where = _pin_here(dist, version, dest)
            out.append(Want(locate.FLASHINFER_DIST, fi, f"pinned by {dist} {version} ({where})",
                            locate.spec(dist, version)))
    seen: set = set()
    key = lambda w: (w.dist, w.version or w.pinned_by)  # noqa: E731
    return [w for w in out if not (key(w) in seen or seen.add(key(w)))]


def pip_command(dist: str, version: str, into: Path) -> list[str]:
    """The download: this Python's pip, the one release, its wheel only, no dependencies, into `into`."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(into),
            f"{dist}=={version}"]


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def usable(dist: str, version: str, path: Path) -> str:
    """A help line: what tileprobe reads a cached engine wheel for (its launchers are reproduced for the PINNED
    release only; the audit reads any release), and how to fetch it without its flashinfer pin."""
    if dist not in locate.PINNED:
        return f"help: {dist} {version} is cached ({path})"
    nearest = "its FlashInfer kernels from the nearest flashinfer release here"
    if version == locate.PINNED[dist]:
        what = (f"help: triton-moe sweeps, check-configs, `tileprobe export triton-configs` and `tileprobe audit "
                f"--engine {dist}` read {dist} {version} (the audit {nearest}); `tileprobe export flashinfer-blocklist`"
                " needs the flashinfer release it pins")
    else:
        what = (f"help: `tileprobe audit --engine {dist} --engine-wheel {path} --model M --target T` reads {dist} "
                f"{version} ({nearest}); triton-moe sweeps, check-configs and `tileprobe export triton-configs` "
                f"reproduce {dist} {locate.PINNED[dist]}'s launcher only; `tileprobe export flashinfer-blocklist` "
                "needs the flashinfer release it pins")
    return f"{what}; `tileprobe engines fetch {locate.spec(dist, version)} --no-flashinfer` fetches it alone"


def fetch(specs: list[str] | None = None, dest: Path | None = None, flashinfer: bool = True,
          timeout_s: float = DEFAULT_TIMEOUT_S, say=None) -> list[tuple[Want, Path]]:
    """Every wheel of plan(specs), downloaded unless already there; an engine's pin is re-read from its wheel. A
    download that fails after others arrived is a UsageError saying which wheels are cached and what they serve."""
    got: list[tuple[Want, Path]] = []
    done: set = set()
    for w in plan(specs, dest, flashinfer):
        if w.pinned_by is not None:
            engine_path = next(p for g, p in got if locate.spec(g.dist, g.version) == w.pinned_by)
            fi = packages.from_wheel(engine_path).pin(locate.FLASHINFER_DIST)
            w = Want(w.dist, fi, w.why if fi == w.version else f"pinned by {w.pinned_by} ({engine_path} METADATA)",
                     w.pinned_by)
        if (w.dist, w.version) in done:
            continue
        done.add((w.dist, w.version))
        try:
            got.append((w, download(w.dist, w.version, dest, timeout_s, say)))
        except UsageError as exc:
            if not got:
                raise
            cached = "; ".join(f"{g.dist} {g.version} is cached: {p}" for g, p in got)
            why = f" (pinned by {w.pinned_by})" if w.pinned_by else ""
            helps = [usable(g.dist, g.version, p) for g, p in got if g.dist in locate.PINNED]
            raise UsageError("\n".join([f"{exc}{why}; {cached}", *helps])) from None
    return got


def download(dist: str, version: str, dest: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
             say=None) -> Path:
    """The wheel of distribution `dist` at `version` in `dest` (default: the wheel cache), downloaded if missing.
    Check, lock, check: two processes asking at once (parallel test workers) download it once; pip writes into a
    temporary folder beside it and the wheel is renamed into place whole, so nobody reads a partial file. `say`
    (default: stderr) gets a line as the download starts, every HEARTBEAT_S while it runs, and when it is done."""
    say = say or _stderr
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
            say(f"fetching {dist} {version} (pip download --no-deps into {dest}) ...")
            start = time.monotonic()
            p = subprocess.Popen(pip_command(dist, version, Path(tmp)), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            while True:
                try:
                    _, stderr = p.communicate(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() - start > timeout_s:
                        p.kill()
                        p.communicate()
                        raise UsageError(f"pip download {dist}=={version} did not finish in {timeout_s:.0f} s") \
                            from None
                    say(f"  {dist} {version}: still downloading ({time.monotonic() - start:.0f} s)")
            got = sorted(Path(tmp).glob(f"{stem}-{version}-*.whl"))
            if p.returncode or not got:
                last = (stderr.strip().splitlines() or ["no wheel was written"])[-1]
                raise UsageError(f"pip download {dist}=={version} failed: {last}")
            os.replace(got[0], dest / got[0].name)
            say(f"fetched {dist} {version}: {got[0].name} ({_mb(dest / got[0].name)}) in "
                f"{time.monotonic() - start:.0f} s")
    return have()
