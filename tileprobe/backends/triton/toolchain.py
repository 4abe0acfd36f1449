"""Which Triton compiles, and whose bytes those are.

The engines this backend mirrors pin one Triton: the engine releases of the pin table (tileprobe.engines.pins) pin
torch releases (TORCH_PINS) that both require `triton~=3.8.0` (3.8.0 is the only 3.8 release). The same config needs
different shared bytes under different Triton releases (sglang #5995: 163840 under 3.2; #8513: 147456 under 3.3+), so
another installed release is refused unless the user asks for its bytes (`--any-triton`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from platformdirs import user_cache_dir

from tileprobe.engines import pins
from tileprobe.errors import UsageError

ENGINE_TRITON = "3.8.0"
ANY_TRITON_ENV = "TILEPROBE_ANY_TRITON"  # set (by --any-triton): another installed release is used, its bytes said
ENGINES_PINNING = pins.torch_pinning()  # 'vLLM <release> (torch <release>) and SGLang ...'


@dataclass(frozen=True)
class TritonInstall:
    version: str
    root: Path  # the installed package folder (triton/)

    @property
    def bin_dir(self) -> Path:
        """The bundled ptxas, cuobjdump and nvdisasm (backends/nvidia/bin)."""
        return self.root / "backends" / "nvidia" / "bin"

    @property
    def cuobjdump(self) -> Path:
        return self.bin_dir / "cuobjdump"

    def label(self) -> str:
        return f"triton {self.version}"


def installed() -> TritonInstall | None:
    """The installed Triton (from its package metadata, without importing it); None when there is none."""
    try:
        dist = metadata.distribution("triton")
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file("triton")))
    return TritonInstall(dist.version, root) if (root / "__init__.py").is_file() else None


def require_triton(any_triton: bool = False) -> TritonInstall:
    """The Triton to compile with: the engines' release, or (asked for) whatever is installed. UsageError otherwise."""
    found = installed()
    if found is None:
        raise UsageError(f"Triton is not installed: pip install 'tileprobe[triton]' (triton=={ENGINE_TRITON}, the "
                         f"release {ENGINES_PINNING} run)")
    if found.version != ENGINE_TRITON and not any_triton and not os.environ.get(ANY_TRITON_ENV):
        raise UsageError(f"triton {found.version} is installed: these bytes would be triton {found.version}'s, not "
                         f"those of the triton {ENGINE_TRITON} that {ENGINES_PINNING} run; install "
                         f"triton=={ENGINE_TRITON} or pass --any-triton to size with {found.version}")
    return found


def cache_root(explicit: str | os.PathLike | None = None) -> Path:
    """The build cache the CUTLASS backend uses too (--cache-dir, TILEPROBE_CACHE_DIR, else the user cache dir);
    Triton entries live under its triton/ folder."""
    root = Path(explicit) if explicit else Path(os.environ.get("TILEPROBE_CACHE_DIR") or user_cache_dir("tileprobe"))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the build cache {root}: {exc.strerror}") from None
    return root
