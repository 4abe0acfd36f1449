"""What the driver would make of PTX-only code: the PTX compiled here with ptxas for the target's arch, as the
driver's JIT compiles it at load. The driver's compiler version may differ from this ptxas: the answer says which
ptxas made it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.binary.cubin import Kernel, kernels
from tileprobe.binary.elf import Image
from tileprobe.backends.cutlass.toolchain import find_nvcc
from tileprobe.errors import ToolchainError


DEFAULT_TIMEOUT_S = 120.0  # one PTX image's compile (--jit-timeout): a multi-MB image of hundreds of kernels can take
# ptxas many minutes; past this the row says so and the run goes on


@dataclass
class Jit:
    """Compiles PTX images for a compute capability with one ptxas; remembers each result within a run. Each compile
    is bounded by `timeout_s`; `progress` (a tileprobe.progress.Tracker), when set, hears of each one finished."""
    ptxas: Path
    version: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    progress: object | None = None
    _done: dict = field(default_factory=dict)

    def kernels_for(self, image: Image, cc: int) -> tuple[list[Kernel], str]:
        """The kernels of `image` compiled for sm_<cc> ('a' when the PTX is arch-specific), and what was done (or
        why nothing could be)."""
        arch = f"sm_{cc}{image.suffix}"
        key = (image.origin, arch)
        if key not in self._done:
            self._done[key] = self._compile(image, arch)
            if self.progress is not None:
                found, what = self._done[key]
                self.progress.done(f"PTX {image.arch} ({image.origin}, {_size(image)}) for {arch}",
                                   f"{len(found)} kernel{'' if len(found) == 1 else 's'}" if found else
                                   f"timed out after {self.timeout_s:g} s" if "--jit-timeout" in what else "failed")
        return self._done[key]

    def _compile(self, image: Image, arch: str) -> tuple[list[Kernel], str]:
        with tempfile.TemporaryDirectory(prefix="tileprobe-jit-") as tmp:
            src, out = Path(tmp) / "in.ptx", Path(tmp) / "out.cubin"
            src.write_bytes(image.data or b"")
            try:
                p = subprocess.run([str(self.ptxas), f"-arch={arch}", "-o", str(out), str(src)], capture_output=True,
                                   text=True, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                return [], (f"not compiled here: ptxas {self.version} did not finish this PTX ({_size(image)}) for "
                            f"{arch} within {self.timeout_s:g} s (--jit-timeout), so its bytes are unknown; the "
                            "driver compiles it at load")
            except OSError as exc:
                return [], f"ptxas {self.version} could not compile {image.arch} for {arch}: {exc}"
            if p.returncode != 0:
                why = (p.stderr or p.stdout).strip()[:200]
                return [], f"ptxas {self.version} refused {image.arch} for {arch}: {why}"
            cubin = Image("cubin", int(arch[3:].rstrip("af")), image.suffix, out.read_bytes(),
                          f"{image.origin}, compiled here for {arch}")
            return kernels(cubin), (f"PTX {image.arch} compiled here for {arch} by ptxas {self.version}, as the "
                                    "driver's JIT does at load (its compiler version may differ)")


def _size(image: Image) -> str:
    n = len(image.data or b"")
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def find_jit(nvcc: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Jit | None:
    """The ptxas beside nvcc (--nvcc, CUDA_HOME, PATH), else ptxas on PATH; None when there is none. Each compile
    is given `timeout_s` seconds."""
    try:
        found = find_nvcc(nvcc)
        path, version = found.path.parent / "ptxas", found.version_text
    except ToolchainError:
        path, version = None, "?"
    if path is None or not path.is_file():
        which = shutil.which("ptxas")
        if which is None:
            return None
        path = Path(which)
    return Jit(path, version, timeout_s)
