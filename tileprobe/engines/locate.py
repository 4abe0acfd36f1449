"""Where tileprobe finds a serving engine (vLLM, SGLang) or a flashinfer release: one lookup every command uses.

`find_release(dist, version, wheel)` looks, in this order, at
1. `wheel` when given (`--engine-wheel`): a .whl file of `dist`, or a folder holding its wheels;
2. the installed distribution (importlib.metadata: nothing of it is imported), when it is that version;
3. the wheel cache: $TILEPROBE_ENGINE_WHEELS (an os.pathsep list of folders), then `<user cache>/wheels`, where
   `tileprobe engines fetch` downloads.
With no version asked, an engine's pinned release (PINNED) is preferred among wheels, else the newest. A release
found nowhere is a UsageError whose last line is `help: tileprobe engines fetch <the exact arguments>`.

`releases(dist)` lists every release of `dist` installed or cached (for reports such as `tileprobe doctor`).
Nothing here downloads (tileprobe.engines.fetch does) or installs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs

from tileprobe.engines import packages, pins
from tileprobe.errors import UsageError

# The engine releases preferred among wheels, and the flashinfer-python release each requires: the pin table's
# (tileprobe.engines.pins), re-exported here where the lookup uses them.
PINNED = pins.PINNED
FLASHINFER_DIST = "flashinfer-python"
FLASHINFER_PINS = pins.FLASHINFER_PINS
WHEELS_ENV = "TILEPROBE_ENGINE_WHEELS"


def wheel_dirs() -> list[Path]:
    """Where cached wheels are looked for: $TILEPROBE_ENGINE_WHEELS (os.pathsep list), then <user cache>/wheels."""
    dirs = [Path(d) for d in os.environ.get(WHEELS_ENV, "").split(os.pathsep) if d]
    return dirs + [Path(platformdirs.user_cache_dir("tileprobe")) / "wheels"]


def cache_dir() -> Path:
    """The folder `tileprobe engines fetch` downloads into (and the last one looked at): <user cache>/wheels."""
    return wheel_dirs()[-1]


def spec(dist: str, version: str | None) -> str:
    return f"{dist}=={version}" if version else dist


def fetch_help(dist: str, version: str | None, dest: Path | None = None) -> str:
    """`help: tileprobe engines fetch vllm==VERSION [--dest DIR]`: the command that puts the release where
    find_release looks (an engine with no version: its pinned release; flashinfer with none: the engines' pins)."""
    dist = packages.canonical(dist)
    version = version or PINNED.get(dist)
    if dist == FLASHINFER_DIST and version is None:
        return "help: tileprobe engines fetch" + (f" --dest {dest}" if dest is not None else "")
    where = f" --dest {dest}" if dest is not None else ""
    return f"help: tileprobe engines fetch {spec(dist, version)}{where}"


def version_key(v: str) -> tuple:
    """A sort key for release strings: 0.7.2 < 0.7.2.post1 < 0.7.10; a pre-release (rc, a, b, dev) before its
    release."""
    m = re.match(r"(\d+(?:\.\d+)*)(.*)$", v)
    if not m:
        return ((), -2, 0)
    rest = m.group(2).lower()
    n = int((re.findall(r"\d+", rest) or ["0"])[0])
    return (tuple(int(x) for x in m.group(1).split(".")), 1 if "post" in rest else 0 if not rest else -1, n)


def _pick(found: list[packages.Package], dist: str, version: str | None) -> packages.Package | None:
    """The wheel of `version`; with none asked, the pinned release when there, else the newest."""
    if version is not None:
        return next((p for p in found if p.version == version), None)
    pinned = [p for p in found if p.version == PINNED.get(packages.canonical(dist))]
    if pinned:
        return pinned[0]
    return max(found, key=lambda p: version_key(p.version), default=None)


def _wheels(folder: Path, dist: str) -> list[packages.Package]:
    return [packages.from_wheel(w) for w in packages.wheels_in(folder, dist)] if folder.is_dir() else []


def search_folder(wheel: str | Path | None) -> Path | None:
    """The folder an --engine-wheel names for the releases beside it (its pinned flashinfer): itself, or a wheel
    file's folder."""
    if wheel is None:
        return None
    p = Path(wheel).expanduser()
    return p if p.is_dir() else p.parent


def _explicit(dist: str, version: str | None, wheel: Path) -> packages.Package:
    path = Path(wheel).expanduser()
    if path.is_file():
        pkg = packages.from_wheel(path.resolve())
        if packages.canonical(pkg.name) != packages.canonical(dist):
            raise UsageError(f"--engine-wheel {wheel}: a wheel of {pkg.name} {pkg.version}, not of {dist}")
        if version is not None and pkg.version != version:
            raise UsageError(f"--engine-wheel {wheel}: {dist} {pkg.version}, not the {version} asked for")
        return pkg
    if not path.is_dir():
        folder = path.parent if path.suffix == ".whl" else path
        raise UsageError(f"--engine-wheel {wheel}: no such file or folder\n{fetch_help(dist, version, folder)}")
    pkg = _pick(_wheels(path, dist), dist, version)
    if pkg is None:
        raise UsageError(f"no {spec(dist, version)} wheel in {path}\n{fetch_help(dist, version, path)}")
    return pkg


def find_release(dist: str, version: str | None = None, wheel: str | Path | None = None,
                 beside: str | Path | None = None) -> packages.Package:
    """`dist` (vllm, sglang, flashinfer-python) at `version` (None: any, an engine's pinned release preferred):
    from `wheel` when given, else the install, else the wheel cache (the module docstring's order). `beside`: a
    folder looked at first when it holds that release (the folder of the engine's --engine-wheel, for the flashinfer
    it pins)."""
    if wheel is not None:
        return _explicit(dist, version, Path(wheel))
    near = _pick(_wheels(Path(beside), dist), dist, version) if beside is not None and version is not None else None
    if near is not None:
        return near
    inst = packages.installed(dist)
    if inst is not None and (version is None or inst.version == version):
        return inst
    found = [p for d in wheel_dirs() for p in _wheels(d, dist)]
    pkg = _pick(found, dist, version)
    if pkg is not None:
        return pkg
    have = f"{inst.version} is installed" if inst is not None else "it is not installed"
    raise UsageError(f"need {spec(dist, version)}: {have} and no wheel of it is in the wheel cache "
                     f"({os.pathsep.join(str(d) for d in wheel_dirs())})\n{fetch_help(dist, version)}")


def nearest(pin: str, found: list[packages.Package]) -> packages.Package | None:
    """The release in `found` nearest `pin` (a pinned release that is not here): one of its own base release
    (0.7.2 -> 0.7.2.post1), else the next newer one, else the next older one."""
    key = version_key(pin)
    same = [p for p in found if version_key(p.version)[0] == key[0]]
    if same:
        return min(same, key=lambda p: abs(version_key(p.version)[2] - key[2]))
    newer = [p for p in found if version_key(p.version) > key]
    if newer:
        return min(newer, key=lambda p: version_key(p.version))
    older = [p for p in found if version_key(p.version) < key]
    return max(older, key=lambda p: version_key(p.version)) if older else None


def releases(dist: str) -> list[packages.Package]:
    """Every release of `dist` tileprobe can read here: the install (first, when there), then each cached wheel."""
    inst = packages.installed(dist)
    return ([inst] if inst is not None else []) + [p for d in wheel_dirs() for p in _wheels(d, dist)]
