"""Python packages read without installing or importing them: an installed distribution or a downloaded wheel,
its version, its pins and its source files; and a flashinfer package tree unpacked from its wheel.

A serving engine (vLLM, SGLang) decides which flashinfer release runs and how it calls it; tileprobe reads that from
the engine's own files. A wheel is read as a zip (`pip download --no-deps NAME==VER`), never installed, so several
releases can be read side by side on one machine.
"""

from __future__ import annotations

import email.parser
import importlib.metadata as md
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.backends.cutlass.build import cache_root
from tileprobe.engines import wheel_zip
from tileprobe.errors import UsageError

# What tileprobe reads of a flashinfer wheel: its Python (the loader, the autotuner, the JIT flags, the version) and the
# C++ sources and headers of the fused-MoE runner. Not unpacked: prebuilt kernels and other families' sources.
_FLASHINFER_DATA = ("flashinfer/data/csrc/nv_internal/", "flashinfer/data/cutlass/", "flashinfer/data/cccl/",
                    "flashinfer/data/include/", "flashinfer/data/spdlog/")


def canonical(name: str) -> str:
    """PEP 503 normalisation: flashinfer_python, Flashinfer.Python -> flashinfer-python."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Package:
    """One distribution's metadata and files, from an install or a wheel."""

    name: str
    version: str
    requires: tuple[str, ...]
    where: str  # the wheel file or the install's location, for messages and provenance
    wheel: Path | None = None
    install: Path | None = None  # the folder holding the top-level packages (site-packages)

    def read(self, rel: str) -> str:
        """A file of the distribution by its path inside it (vllm/envs.py); UsageError naming it when absent."""
        if self.wheel is not None:
            with zipfile.ZipFile(self.wheel) as z:
                try:
                    return z.read(rel).decode(errors="replace")
                except KeyError:
                    raise UsageError(f"{self.name} {self.version}: {rel} is not in {self.wheel}") from None
        path = Path(self.install) / rel
        if not path.is_file():
            raise UsageError(f"{self.name} {self.version}: no {rel} in {self.install}")
        return path.read_text(errors="replace")

    def pin(self, dist: str) -> str:
        """The exact version this package requires of `dist` (`flashinfer-python==0.7.2.post1`, extras allowed);
        UsageError when it requires none or a range."""
        want = canonical(dist)
        for req in self.requires:
            m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?\s*(.*)$", req)
            if not m or canonical(m.group(1)) != want:
                continue
            spec = m.group(3).split(";", 1)
            marker = spec[1].strip() if len(spec) > 1 else ""
            if "extra ==" in marker.replace("  ", " "):
                continue  # only under an optional extra: not what a plain install brings
            exact = re.fullmatch(r"\(?\s*==\s*([A-Za-z0-9_.+\-]+)\s*\)?", spec[0].strip())
            if not exact:
                raise UsageError(f"{self.name} {self.version} requires {req.strip()!r}, not one exact "
                                 f"{dist} release ({self.where}); pass the flashinfer it runs with --flashinfer-dir")
            return exact.group(1)
        raise UsageError(f"{self.name} {self.version} does not require {dist} ({self.where})")


def _requires(meta_text: str) -> tuple[str, ...]:
    msg = email.parser.Parser().parsestr(meta_text, headersonly=True)
    return tuple(msg.get_all("Requires-Dist") or ())


def from_wheel(whl: Path) -> Package:
    try:
        z = wheel_zip.open_zip(str(whl))  # the process's one reader of a wheel: the engine's is read once
        meta = next((n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if meta is None:
            raise UsageError(f"{whl} has no .dist-info/METADATA: not a wheel")
        text = z.read(meta).decode(errors="replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read the wheel {whl}: {exc}") from None
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return Package(msg["Name"] or "", msg["Version"] or "", _requires(text), str(whl), wheel=Path(whl))


def installed(dist: str) -> Package | None:
    """The installed distribution `dist`, or None."""
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        return None
    base = Path(d.locate_file(""))
    return Package(d.metadata["Name"], d.version, tuple(d.requires or ()), str(base), install=base)


def wheels_in(folder: Path, dist: str) -> list[Path]:
    """Wheels of `dist` in `folder` (file names use the normalised name with underscores)."""
    stem = canonical(dist).replace("-", "_")
    return sorted(p for p in Path(folder).glob("*.whl") if canonical(p.name.split("-", 1)[0]).replace("-", "_") == stem)


def unpack_flashinfer(pkg: Package, cache_dir: str | Path | None = None) -> Path:
    """The flashinfer package folder of `pkg`: the install's, or the wheel's Python and fused-MoE sources unpacked
    once into the cache (`<cache>/flashinfer-wheels/<version>-<size>/`, with its dist-info METADATA beside it)."""
    if pkg.wheel is None:
        return Path(pkg.install) / "flashinfer"
    base = cache_root(cache_dir) / "flashinfer-wheels"
    base.mkdir(parents=True, exist_ok=True)
    dest = base / f"{pkg.version}-{pkg.wheel.stat().st_size}"
    done = dest / ".unpacked"
    with FileLock(str(dest) + ".lock"):
        if not done.is_file():
            shutil.rmtree(dest, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=base))
            try:
                with zipfile.ZipFile(pkg.wheel) as z:
                    for info in z.infolist():
                        n = info.filename
                        keep = (n.startswith("flashinfer/") and (n.endswith(".py") or
                                                                 n.startswith(_FLASHINFER_DATA))) \
                            or re.fullmatch(r"flashinfer_python-[^/]+\.dist-info/METADATA", n)
                        if keep and not n.endswith("/") and ".." not in n.split("/"):
                            z.extract(info, tmp)
                (tmp / ".unpacked").write_text(f"{pkg.wheel}\n")
                os.replace(tmp, dest)
            except BaseException:  # stopped (Ctrl-C, a stopped read-ahead worker) or failed: no half tree left
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    return dest / "flashinfer"
