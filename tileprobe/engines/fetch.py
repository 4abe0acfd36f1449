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
says which are cached and what tileprobe reads them for (`usable`). A pinned flashinfer release the package index does
not serve (pip: no matching distribution) does not fail the fetch: `missing` gets one line saying so and naming the
served releases nearest to it, the fallback the user can choose (`not_served`).

`answerable(got, rules_off)`: the one release rule every command applies (tileprobe.engines.manifest): each engine
wheel fetched is checked against its release's manifest; a release with none, or files that differ, is one UsageError
line saying the wheel is cached and why no command reads it without --rules-off.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.engines import locate, manifest, packages
from tileprobe.engines.triton_configs import EngineSource
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
    pinned_by: str | None = None  # the engine whose pin this is ("vllm==VERSION")


def parse_spec(text: str) -> tuple[str, str | None]:
    """`vllm`, `sglang==VERSION`, `flashinfer-python==VERSION` (or `flashinfer==...`) -> (distribution, version)."""
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
    """A help line: what reads a cached engine wheel (every command that reads the engine, when its release has a
    manifest), and how to fetch it without its flashinfer pin."""
    if dist not in locate.PINNED:
        return f"help: {dist} {version} is cached ({path})"
    if manifest.supported(dist, version):
        held = [name for name, p in (manifest.read(dist, version).get("pieces") or {}).items() if not p.get("checked")]
        what = (f"help: tileprobe reads {dist} {version} (`--engine-wheel {path}`, or from the wheel cache)"
                + (f", except where its manifest records {', '.join(held)} as not holding for it" if held else ""))
    else:
        what = (f"help: tileprobe has no manifest for {dist} {version} (it answers for "
                f"{', '.join(manifest.releases(dist))}): a command reads {path} only with {manifest.RULES_OFF}")
    return f"{what}; `tileprobe engines fetch {locate.spec(dist, version)} --no-flashinfer` fetches it alone"


class NotServed(UsageError):
    """pip found no such release on the package index (`served`: the releases it lists, when it says)."""

    def __init__(self, message: str, served: tuple[str, ...]) -> None:
        super().__init__(message)
        self.served = served


def not_served(w: Want, exc: NotServed) -> str:
    """One line: the release (a pinned flashinfer, or one asked for) is not on the index here, and the nearest
    releases it serves (else the ones cached here), the fallback the user can choose."""
    key = locate.version_key(w.version)
    plain = [v for v in exc.served if not re.search(r"(rc|a|b|dev)\d*$", v)]
    older = max((v for v in plain if locate.version_key(v) < key), key=locate.version_key, default=None)
    newer = min((v for v in plain if locate.version_key(v) > key), key=locate.version_key, default=None)
    near = [v for v in (older, newer) if v]
    cached = sorted({p.version for p in locate.releases(w.dist)}, key=locate.version_key)
    said = (f"the index serves {' and '.join(near)} nearest to it" if near else
            "the index lists no release of it" if exc.served or not cached else
            f"cached here: {', '.join(cached)}")
    pick = newer or older
    choose = (f"choose a fallback: `tileprobe engines fetch {w.dist}=={pick}`"
              + (f" (or =={older})" if newer and older else "") if pick else
              f"choose a fallback: `tileprobe engines fetch {w.dist}==VERSION` of a release it serves")
    why = f" (pinned by {w.pinned_by})" if w.pinned_by else ""
    use = (f"; the audit then reads the nearest flashinfer release here and says so, and `export flashinfer-blocklist`"
           f" takes it as --flashinfer-dir with {manifest.RULES_OFF}" if w.dist == locate.FLASHINFER_DIST else "")
    return f"{w.dist} {w.version}{why} is not served by the package index here ({said}); {choose}{use}"


def answerable(got: list[tuple[Want, Path]], rules_off: bool = False) -> list[str]:
    """The manifest check of each engine wheel fetched: [] when every one is a release tileprobe answers for; with
    `rules_off`, the banner of each that is not; otherwise UsageError naming the cached wheel and why."""
    banners = []
    for w, path in got:
        if w.dist not in locate.PINNED:
            continue
        pkg = packages.from_wheel(path)
        src = EngineSource(w.dist, pkg.version, str(path), "wheel")
        try:
            text = manifest.check(src, rules_off).text
        except UsageError as exc:
            why = str(exc).removeprefix(f"{src.label()} ({src.origin})").lstrip(": ")
            raise UsageError(f"{w.dist} {pkg.version} is cached ({path}), but {why}") from None
        if text:
            banners.append(text)
    return banners


def fetch(specs: list[str] | None = None, dest: Path | None = None, flashinfer: bool = True,
          timeout_s: float = DEFAULT_TIMEOUT_S, say=None, missing: list[str] | None = None) -> list[tuple[Want, Path]]:
    """Every wheel of plan(specs), downloaded unless already there; an engine's pin is re-read from its wheel. A
    pinned flashinfer release the index does not serve is a line in `missing` (not_served), not a failure; another
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
        except NotServed as exc:
            if w.pinned_by is None or missing is None:
                raise UsageError(not_served(w, exc)) from None
            missing.append(f"note: {not_served(w, exc)}")
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
                if "No matching distribution found" in stderr:
                    listed = re.search(r"\(from versions: ([^)]*)\)", stderr)
                    served = tuple(v.strip() for v in listed.group(1).split(",") if v.strip() and v.strip() != "none") \
                        if listed else ()
                    raise NotServed(f"pip download {dist}=={version} failed: {last}", served)
                raise UsageError(f"pip download {dist}=={version} failed: {last}")
            os.replace(got[0], dest / got[0].name)
            say(f"fetched {dist} {version}: {got[0].name} ({_mb(dest / got[0].name)}) in "
                f"{time.monotonic() - start:.0f} s")
    return have()
