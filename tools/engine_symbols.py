"""Record the block-scaled FP4 MoE grouped-GEMM kernels an engine's wheel ships, by their mangled names.

usage: python tools/engine_symbols.py DIST VERSION [--wheel PATH] [--out tests/data/engine_symbols]
  DIST VERSION   a package on the index (vllm 0.33.0, sgl-kernel 0.3.21); downloaded with `pip download --no-deps`
                 into a temporary folder that is deleted afterwards (never committed), unless --wheel names a wheel
                 file already on disk.
Writes OUT/<dist>-<version>.json: the command, the wheel's name and sha256, and for each shared library in the wheel
the `cutlass::device_kernel<GemmUniversal<GroupProblemShape<...>, ...>>` entry names whose mainloop is an SM100 or
SM120 block-scaled one over float_e2m1_t, exactly as the library's string table holds them (what `strings` and
`c++filt` would show; the mangled bytes are kept, never demangled, so a comparison is byte for byte).

The same reader serves the tests: `installed_symbols(dist)` reads the shared libraries of an installed distribution
(when the engine itself is installed) instead of the recorded file.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# A C++ mangled name is printable ASCII without spaces; an entry name is a whole NUL-terminated string-table entry
# that starts with cutlass::device_kernel<...> (not the host stubs' longer names that embed it).
_ENTRY = re.compile(rb"(?<=\x00)_ZN7cutlass13device_kernelI[\x21-\x7e]+(?=\x00)")
_GROUPED = b"GroupProblemShape"
_MAINLOOP = re.compile(rb"Mainloop(Sm1[02]0)Array[A-Za-z]*BlockScaled")
_SCHEDULE = re.compile(rb"(Kernel[A-Za-z0-9]*(?:Sm100|Sm120))")
DOWNLOAD_TIMEOUT_S = 1800


class SymbolError(Exception):
    """The wheel or library cannot be read, or holds no such kernel (one line for the user)."""


def kernels_in(data: bytes) -> list[str]:
    """The grouped SM100/SM120 block-scaled e2m1 kernel entry names in a library's bytes, sorted, unique."""
    out = set()
    for m in _ENTRY.finditer(data):
        name = m.group(0)
        if _GROUPED in name and _MAINLOOP.search(name) and b"float_e2m1_t" in name:
            out.add(name.decode("ascii"))
    return sorted(out)


def describe(name: str) -> dict:
    """What the mangled bytes say plainly: the mainloop's arch and the kernel schedule tag."""
    b = name.encode("ascii")
    arch = _MAINLOOP.search(b)
    sched = _SCHEDULE.search(b)
    return {"mainloop_arch": arch.group(1).decode() if arch else None,
            "schedule": sched.group(1).decode() if sched else None}


def wheel_symbols(wheel: Path) -> dict[str, list[str]]:
    """{library path inside the wheel: kernel names} for every shared library in the wheel that has some."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise SymbolError(f"cannot read wheel {wheel}: {exc}") from None
    out: dict[str, list[str]] = {}
    with zf:
        for info in zf.infolist():
            if ".so" not in Path(info.filename).name:
                continue
            with zf.open(info) as fh:
                names = kernels_in(fh.read())
            if names:
                out[info.filename] = names
    return out


def installed_symbols(dist: str) -> tuple[str, dict[str, list[str]]] | None:
    """(version, {library path: kernel names}) of an installed distribution, or None when it is not installed."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    out: dict[str, list[str]] = {}
    for f in d.files or ():
        if ".so" in Path(str(f)).name:
            path = Path(str(d.locate_file(f)))
            if path.is_file():
                names = kernels_in(path.read_bytes())
                if names:
                    out[str(f)] = names
    return d.version, out


def download(dist: str, version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", f"{dist}=={version}",
           "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SymbolError(f"pip download {dist}=={version} timed out after {DOWNLOAD_TIMEOUT_S} s") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise SymbolError(f"pip download {dist}=={version} failed: {tail[0]}")
    return wheels[0]


def record(dist: str, version: str, wheel: Path, command: str) -> dict:
    libs = wheel_symbols(wheel)  # empty is an answer too: the release ships no such kernel
    return {
        "dist": dist, "version": version, "command": command, "wheel": wheel.name,
        "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "libraries": {lib: [{"symbol": s, **describe(s)} for s in names] for lib, names in libs.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dist")
    ap.add_argument("version")
    ap.add_argument("--wheel", type=Path, help="a wheel already on disk (skips the download)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "data" /
                    "engine_symbols")
    args = ap.parse_args(argv)
    command = shlex.join(["python", "tools/engine_symbols.py", args.dist, args.version])
    try:
        if args.wheel:
            data = record(args.dist, args.version, args.wheel, command)
        else:
            with tempfile.TemporaryDirectory(prefix="tp-wheel-") as tmp:
                data = record(args.dist, args.version, download(args.dist, args.version, Path(tmp)), command)
    except SymbolError as exc:
        print(f"engine_symbols: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.dist}-{args.version}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    n = sum(len(v) for v in data["libraries"].values())
    print(f"{path}: {n} kernel(s) in {len(data['libraries'])} librar{'y' if len(data['libraries']) == 1 else 'ies'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
