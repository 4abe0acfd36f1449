"""Toolchain discovery: the CUTLASS header tree and nvcc, with their versions, without importing flashinfer."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tileprobe.errors import ToolchainError

# The lowest CUDA release whose nvcc accepts each arch-specific target.
MIN_CUDA_FOR_ARCH = {"sm_90a": (12, 0), "sm_100a": (12, 8), "sm_120a": (12, 8), "sm_121a": (12, 9)}


@dataclass(frozen=True)
class CutlassTree:
    include_dirs: tuple[Path, ...]  # cutlass/include first, then tools/util/include
    version: str
    source: str  # "flag", "env", "flashinfer", "nvidia-cutlass"
    tree_hash: str  # content hash of every header: changes the binary, so it is part of the cache key

    @property
    def root(self) -> Path:
        return self.include_dirs[0]


@dataclass(frozen=True)
class Nvcc:
    path: Path
    version: tuple[int, int]
    version_text: str  # e.g. "13.0.88"
    host_compiler: str = ""  # first line of the host compiler's --version (nvcc's default: the c++ on PATH)
    host_compiler_path: str = ""  # where that host compiler is (a different gcc of the same version is another)

    def check_arch(self, arch: str) -> None:
        need = MIN_CUDA_FOR_ARCH.get(arch)
        if need and self.version < need:
            raise ToolchainError(
                f"nvcc {self.version_text} at {self.path} cannot build {arch}: it needs CUDA >= {need[0]}.{need[1]}"
            )


def _tree_from_root(root: Path, source: str) -> CutlassTree:
    """`root` may be a CUTLASS checkout (has include/ and tools/util/include) or an include directory itself."""
    root = root.expanduser().resolve()
    candidates = [root / "include", root]
    include = next((c for c in candidates if (c / "cutlass" / "version.h").is_file()), None)
    if include is None:
        raise ToolchainError(f"no CUTLASS headers at {root} (looked for include/cutlass/version.h)")
    dirs = [include]
    for util in (include.parent / "tools" / "util" / "include", root / "tools" / "util" / "include"):
        if (util / "cutlass" / "util").is_dir():
            dirs.append(util)
            break
    return CutlassTree(tuple(dirs), _read_version(include), source, hash_tree(tuple(dirs)))


def _read_version(include: Path) -> str:
    text = (include / "cutlass" / "version.h").read_text(errors="replace")
    parts = [re.search(rf"#define\s+CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise ToolchainError(f"cannot read the CUTLASS version from {include / 'cutlass' / 'version.h'}")
    return ".".join(m.group(1) for m in parts if m)


@lru_cache(maxsize=8)
def hash_tree(dirs: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for d in dirs:
        for path in sorted(p for p in d.rglob("*") if p.is_file() and p.suffix in {".h", ".hpp", ".inl", ".cuh"}):
            h.update(str(path.relative_to(d)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def package_dir(name: str) -> Path | None:
    """Where an installed top-level package lives, found without importing (and so without running) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_cutlass(explicit: str | os.PathLike | None = None) -> CutlassTree:
    """--cutlass-dir, then TILEPROBE_CUTLASS_DIR, then flashinfer's bundled copy, then nvidia-cutlass's."""
    if explicit:
        return _tree_from_root(Path(explicit), "flag")
    env = os.environ.get("TILEPROBE_CUTLASS_DIR")
    if env:
        return _tree_from_root(Path(env), "env")
    fi = package_dir("flashinfer")
    if fi and (fi / "data" / "cutlass" / "include" / "cutlass" / "version.h").is_file():
        return _tree_from_root(fi / "data" / "cutlass", "flashinfer")
    lib = package_dir("cutlass_library")
    if lib:
        for root in (lib / "source", lib):
            if (root / "include" / "cutlass" / "version.h").is_file():
                return _tree_from_root(root, "nvidia-cutlass")
    raise ToolchainError(
        "no CUTLASS headers found: pass --cutlass-dir, set TILEPROBE_CUTLASS_DIR, or install flashinfer-python"
    )


def family_cutlass(fam, explicit: str | os.PathLike | None = None) -> CutlassTree:
    """The CUTLASS tree a family's kernels compile against, and so the tree its predictions are keyed by.

    A family that mirrors an engine's kernels (fam.cutlass_root: flashinfer-moe) always gets the engine's own bundled
    copy, named as such (source "flashinfer 0.7.4's bundled copy"); `explicit` (--cutlass-dir) does not apply to it,
    and neither does TILEPROBE_CUTLASS_DIR. Any other family: find_cutlass(explicit)."""
    if fam is None or getattr(fam, "cutlass_root", None) is None:
        return find_cutlass(explicit)
    tree = _tree_from_root(Path(fam.cutlass_root()), "engine")
    label = fam.engine()[0] if getattr(fam, "engine", None) else fam.name
    return CutlassTree(tree.include_dirs, tree.version, f"{label}'s bundled copy", tree.tree_hash)


def find_nvcc(explicit: str | os.PathLike | None = None) -> Nvcc:
    """--nvcc, then $CUDA_HOME/bin/nvcc or $CUDA_PATH/bin/nvcc, then PATH."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    else:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
        found = shutil.which("nvcc")
        if found:
            candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return _nvcc_version(path)
    if explicit:
        raise ToolchainError(f"nvcc not found or not executable: {explicit}")
    raise ToolchainError("nvcc not found: pass --nvcc, set CUDA_HOME, or put nvcc on PATH")


@lru_cache(maxsize=8)
def _nvcc_version(path: Path) -> Nvcc:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {path} --version: {exc}") from exc
    m = re.search(r"release (\d+)\.(\d+), V([\d.]+)", out)
    if not m:
        raise ToolchainError(f"cannot read the version of {path}")
    host, host_path = host_compiler()
    return Nvcc(path.resolve(), (int(m.group(1)), int(m.group(2))), m.group(3), host, host_path)


def host_compiler() -> tuple[str, str]:
    """The host compiler nvcc calls by default (gcc, else c++ on PATH; NVCC_CCBIN when set), as (its --version's
    first line, its resolved path); ("unknown", "") when there is none that runs."""
    ccbin = os.environ.get("NVCC_CCBIN")
    names = [ccbin] if ccbin else ["gcc", "c++"]
    for name in names:
        exe = shutil.which(name)
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        return (out.strip().splitlines() or [name])[0], str(Path(exe).resolve())
    return "unknown", ""


# The environment nvcc itself reads: each changes what a compile does, so each is part of a build's cache key.
NVCC_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")


def compile_env() -> dict[str, str]:
    """The values of NVCC_ENV set now (names left unset are left out)."""
    return {k: os.environ[k] for k in NVCC_ENV if k in os.environ}


UTIL_INCLUDE = "tools/util/include"


def missing_parts(tree: CutlassTree) -> str | None:
    """What a harness build needs that the tree lacks (its tools/util/include: cutlass/util/packed_stride.hpp and
    the other host utilities), or None when it is complete."""
    if len(tree.include_dirs) < 2:
        return f"{UTIL_INCLUDE} (cutlass/util/packed_stride.hpp)"
    return None
