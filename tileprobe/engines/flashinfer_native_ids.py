"""FlashInfer's own tactic enumeration, compiled from its sources with nvcc and run on the host (no GPU).

`cutlass_harness/engine/flashinfer_moe_tactics.cu` calls the runner's own `CutlassMoeFCRunner::getTactics`
(and, for finalize fusion off, the two calls that method makes with `use_fused_finalize_ = false`); it is linked
with FlashInfer's `cutlass_heuristic.cpp` and its common logger/exception sources (all compiled as CUDA, `-x cu`:
those .cpp files need the CUDA math headers), with the -D flags of FlashInfer's SM120 fused-MoE JIT module (read
from its `jit/fused_moe.py`) for `compute_120a`, so the host code takes the same preprocessor branches FlashInfer's
module does (FAST_BUILD off, as the default JIT build). No kernel is instantiated; nothing is launched.
This is the ground truth `tileprobe.engines.flashinfer_tactic_ids` is checked against.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tileprobe.engines import flashinfer as engine
from tileprobe.backends.cutlass.build import _harness_dir
from tileprobe.errors import CompileError, UsageError

DRIVER_NAME = "flashinfer_moe_tactics.cu"  # in cutlass_harness/engine/
_NV = Path("data") / "csrc" / "nv_internal"
LINKED = (_NV / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "cutlass_heuristic.cpp",
          _NV / "cpp" / "common" / "logger.cpp", _NV / "cpp" / "common" / "tllmException.cpp",
          _NV / "cpp" / "common" / "stringUtils.cpp", _NV / "cpp" / "common" / "envUtils.cpp")


@dataclass(frozen=True)
class NativeTactic:
    """One line of the driver: what FlashInfer's runner numbers `id`."""

    dtypes: str  # the runner: its dtype pair, suffixed for another runner type of that pair (-prequant, -f16out)
    sm: int
    finalize: bool
    id: int
    gemm: str
    tma_ws: bool
    tile: str  # engine name without CtaShape/B: 128x256x64 (K in bytes)
    cluster: str
    mainloop: str
    epilogue_schedule: int
    epilogue: str  # none / finalize
    swap_ab: bool

    def key(self) -> tuple:
        return (self.gemm, self.tile, self.epilogue, self.swap_ab, self.dtypes)


def module_flags(tree: engine.FlashinferTree) -> list[str]:
    """The -D flags of gen_cutlass_fused_moe_sm120_module (jit/fused_moe.py), and the SM120 arch-specific target."""
    path = tree.path(engine.JIT_FUSED_MOE)
    if not path.is_file():
        raise UsageError(f"flashinfer source file missing: {path}")
    m = re.search(r"def gen_cutlass_fused_moe_sm120_module\(.*?\n(.*?)\n(?:def |\Z)", path.read_text(), re.S)
    defines = re.findall(r'"(-D[A-Za-z0-9_=]+)"', m.group(1)) if m else []
    if "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS" not in defines or "-DENABLE_FP4" not in defines:
        raise UsageError(f"structure not recognized in {path}: gen_cutlass_fused_moe_sm120_module's -D flags")
    return ["-std=c++17", "-O1", "-DNDEBUG", "--expt-relaxed-constexpr", *defines,
            "-gencode=arch=compute_120a,code=sm_120a"]


def include_flags(tree: engine.FlashinferTree) -> list[str]:
    nv, data = tree.root / _NV, tree.root / "data"
    stubs = _harness_dir() / "stubs"  # cuBLAS enum headers only (absent here); they decide nothing in the list
    user = [nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels", *tree.cccl_include_dirs]
    system = [data / "include", data / "csrc", data / "cutlass" / "include",
              data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include", stubs]
    return [f"-I{p}" for p in user] + [a for p in system for a in ("-isystem", str(p))]


def build(tree: engine.FlashinferTree, nvcc: str, workdir: Path, timeout_s: float = 900) -> Path:
    """Compile and link the driver against `tree`; returns the executable."""
    for rel in LINKED:
        if not tree.path(rel).is_file():
            raise UsageError(f"flashinfer source file missing: {tree.path(rel)}")
    driver = _harness_dir() / "engine" / DRIVER_NAME
    workdir.mkdir(parents=True, exist_ok=True)
    exe = workdir / "flashinfer_moe_tactics"
    cmd = [nvcc, *module_flags(tree), *include_flags(tree), "-w", "-x", "cu", str(driver),
           *(str(tree.path(rel)) for rel in LINKED), "-o", str(exe)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    except subprocess.TimeoutExpired:
        raise CompileError(f"nvcc took over {timeout_s:.0f} s on {DRIVER_NAME}") from None
    if proc.returncode != 0:
        raise CompileError(f"nvcc failed on {DRIVER_NAME} against {tree.root}", proc.stderr[-6000:])
    return exe


def run(exe: Path, timeout_s: float = 60) -> list[NativeTactic]:
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise CompileError(f"{exe.name} exited {proc.returncode}", proc.stderr[-4000:])
    out = []
    for line in proc.stdout.splitlines():
        f = line.split("\t")
        if len(f) != 12:
            raise CompileError(f"{exe.name} printed an unexpected line: {line!r}")
        out.append(NativeTactic(f[0], int(f[1]), f[2] == "on", int(f[3]), f[4], f[5] == "1", f[6], f[7], f[8],
                                int(f[9]), f[10], f[11] == "1"))
    return out


def native_tactics(tree: engine.FlashinferTree, nvcc: str, workdir: Path) -> list[NativeTactic]:
    """Every (dtype pair, sm 120/121, finalize on/off) list FlashInfer's runner builds, as its own code builds it."""
    return run(build(tree, nvcc, workdir))


def mismatches(lines: list[NativeTactic], ours) -> list[str]:
    """Where `ours(dtypes, finalize, arch)` (tileprobe.engines.flashinfer_tactic_ids.tactic_ids) numbers differently from the
    engine's own lines: one line per differing ID; empty when the whole map agrees."""
    runners = {n.dtypes: n.dtypes.split("-")[0] for n in lines}  # runner type -> its dtype pair
    out = []
    for runner, pair in runners.items():
        for sm in sorted({n.sm for n in lines}):
            for fin in (True, False):
                theirs = {n.id: (n.gemm, n.tile, n.epilogue, n.swap_ab, pair) for n in lines
                          if n.dtypes == runner and n.sm == sm and n.finalize == fin}
                mine = {t.id: t.key() for t in ours(pair, fin, f"sm_{sm}a")}
                for i in sorted(set(theirs) | set(mine)):
                    if theirs.get(i) != mine.get(i):
                        out.append(f"{runner} sm{sm} finalize {'on' if fin else 'off'} ID {i}: flashinfer "
                                   f"{theirs.get(i) or 'absent'}, tileprobe {mine.get(i) or 'absent'}")
    return out
