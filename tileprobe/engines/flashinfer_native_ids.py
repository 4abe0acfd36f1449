"""FlashInfer's own tactic enumeration, compiled from its sources and run on the host (no GPU).

`cutlass_harness/engine/flashinfer_moe_tactics.cu` calls the runner's own `CutlassMoeFCRunner::getTactics`
(and, for finalize fusion off, the two calls that method makes with `use_fused_finalize_ = false`); it is linked
with FlashInfer's `cutlass_heuristic.cpp` and its common logger/exception sources. Each file is compiled the way
FlashInfer's JIT compiles it for the SM120 fused-MoE module (jit/core.py gen_jit_spec, jit/cpp_ext.py): the driver,
a CUDA source like the module's binding, by nvcc with the module's -D flags (read from its `jit/fused_moe.py`) for
`compute_120a`, so its host code takes the same preprocessor branches the module's does; the `.cpp` files by the
host compiler with the JIT's C++ flags (`-std=c++17 -O3 -DNDEBUG`, no `-DFAST_BUILD`: the default JIT build, and none
of the module's nvcc -D flags, which FlashInfer gives its CUDA sources only). No kernel is instantiated; nothing is
launched. This is the ground truth `tileprobe.engines.flashinfer_tactic_ids` is checked against.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.engines import flashinfer as engine
from tileprobe.backends.cutlass.build import harness_dir, cache_root
from tileprobe.backends.cutlass.toolchain import Nvcc, hash_tree
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
    stubs = harness_dir() / "stubs"  # cuBLAS enum headers only (absent here); they decide nothing in the list
    user = [nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "include",
            nv / "tensorrt_llm" / "kernels" / "cutlass_kernels", *tree.cccl_include_dirs]
    system = [data / "include", data / "csrc", data / "cutlass" / "include",
              data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include", stubs]
    return [f"-I{p}" for p in user] + [a for p in system for a in ("-isystem", str(p))]


# FlashInfer's JIT flags for its .cpp sources (jit/core.py: cflags; the module adds -DFAST_BUILD only for a fast
# build), given to nvcc, which hands a .cpp to the host compiler with the CUDA include folder ($cuda_home/include in
# the JIT's common flags) and no CUDA front end.
CPP_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-Xcompiler=-fPIC,-Wno-switch-bool")


def compile_commands(tree: engine.FlashinferTree, nvcc: str, workdir: Path) -> tuple[list[list[str]], list[str]]:
    """(one compile per source, the link), as argument lists: the driver by nvcc as CUDA with the module's flags,
    each linked .cpp by the host compiler with the JIT's C++ flags, linked by nvcc (which adds the CUDA runtime)."""
    includes = include_flags(tree)
    driver = harness_dir() / "engine" / DRIVER_NAME
    objects = [workdir / "driver.o"]
    compiles = [[nvcc, *module_flags(tree), *includes, "-w", "-c", str(driver), "-o", str(objects[0])]]
    for rel in LINKED:
        obj = workdir / (Path(rel).stem + ".o")
        compiles.append([nvcc, *CPP_FLAGS, *includes, "-w", "-c", str(tree.path(rel)), "-o", str(obj)])
        objects.append(obj)
    link = [nvcc, *(str(o) for o in objects), "-o", str(workdir / "flashinfer_moe_tactics")]
    return compiles, link


def _name(cmd: list[str]) -> str:
    return Path(cmd[cmd.index("-c") + 1]).name if "-c" in cmd else "the link"


def _run_all(cmds: list[list[str]], workdir: Path, timeout_s: float) -> None:
    """Run the commands at once (each its own process); the first that fails (in the order they end) stops the
    others and raises CompileError with its output: a tree the driver cannot compile from costs no further work."""
    deadline = time.monotonic() + timeout_s
    procs = [(cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir,
                                    start_new_session=True))  # its own group: stopping it stops its compilers too
             for cmd in cmds]
    with ThreadPoolExecutor(max_workers=len(procs)) as pool:
        try:
            waits = {pool.submit(p.communicate, timeout=max(1.0, deadline - time.monotonic())): (cmd, p)
                     for cmd, p in procs}
            for fut in as_completed(waits):
                cmd, p = waits[fut]
                try:
                    out = fut.result()[0]
                except subprocess.TimeoutExpired:
                    raise CompileError(f"nvcc took over {timeout_s:.0f} s on {_name(cmd)}") from None
                if p.returncode != 0:
                    raise CompileError(f"nvcc failed on {_name(cmd)} ({DRIVER_NAME}'s enumeration)",
                                       out.decode(errors="replace")[-6000:])
        finally:  # before the pool waits for its threads: they return once their processes are gone
            for _, p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def build(tree: engine.FlashinferTree, nvcc: str, workdir: Path, timeout_s: float = 900) -> Path:
    """Compile (the six sources at once; the first failure stops the rest) and link the driver against `tree`;
    returns the executable."""
    for rel in LINKED:
        if not tree.path(rel).is_file():
            raise UsageError(f"flashinfer source file missing: {tree.path(rel)}")
    workdir.mkdir(parents=True, exist_ok=True)
    compiles, link = compile_commands(tree, nvcc, workdir)
    _run_all(compiles, workdir, timeout_s)
    _run_all([link], workdir, timeout_s)
    return workdir / "flashinfer_moe_tactics"


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


def cache_key(tree: engine.FlashinferTree, nvcc: Nvcc) -> str:
    """Everything the driver's output depends on: its source, the -D and -I flags, the content of every header
    under those folders and of the linked sources, and the compiler."""
    h = hashlib.sha256()
    h.update((harness_dir() / "engine" / DRIVER_NAME).read_bytes())
    h.update(" ".join(module_flags(tree)).encode())
    h.update(" ".join(CPP_FLAGS).encode())
    dirs = [Path(f[2:]) if f.startswith("-I") else Path(f) for f in include_flags(tree) if f != "-isystem"]
    h.update(hash_tree(tuple(d for d in dirs if d.is_dir())).encode())
    for rel in LINKED:
        path = tree.path(rel)
        h.update(str(rel).encode() + (path.read_bytes() if path.is_file() else b"<missing>"))
    h.update(f"{nvcc.version_text} {nvcc.host_compiler}".encode())
    return h.hexdigest()[:20]


def native_tactics_cached(tree: engine.FlashinferTree, nvcc: Nvcc,
                          cache_dir: str | Path | None = None) -> list[NativeTactic]:
    """native_tactics, built once per cache_key and kept in the build cache (`flashinfer-ids/<key>.json`); a cache
    file that does not read back is rebuilt."""
    folder = cache_root(cache_dir) / "flashinfer-ids"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cache_key(tree, nvcc)}.json"
    with FileLock(str(path) + ".lock"):
        try:
            return [NativeTactic(**d) for d in json.loads(path.read_text())["tactics"]]
        except (OSError, ValueError, TypeError, KeyError):
            pass
        with tempfile.TemporaryDirectory(prefix="tileprobe-fi-ids-") as work:
            lines = native_tactics(tree, str(nvcc.path), Path(work))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"flashinfer": tree.label(), "root": str(tree.root),
                                   "tactics": [asdict(n) for n in lines]}))
        os.replace(tmp, path)
    return lines


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


@dataclass(frozen=True)
class Numbering:
    """Whether a tactic map is FlashInfer's own (compared with its compiled enumeration) or tileprobe's model."""

    exact: bool
    compared: int  # IDs compared with the engine's own lines (0 when unchecked)
    note: str
    lines: tuple[NativeTactic, ...] = ()  # the engine's own enumeration, when compiled

    def record(self) -> dict:
        return {"state": "exact" if self.exact else "model-unchecked",
                "checked_against": "flashinfer's own getTactics, compiled from its sources" if self.exact else None,
                "compared_ids": self.compared, "note": self.note}

    def word(self) -> str:
        return "exact" if self.exact else "tileprobe's model, unchecked"

    def ids(self, dtypes: str, finalize: bool, arch: str) -> dict[int, tuple]:
        """The engine's own ID -> (gemm, tile bytes, epilogue, swap, dtypes) for one runner (exact numberings)."""
        sm = int(arch[3:6])
        return {n.id: (n.gemm, n.tile, n.epilogue, n.swap_ab, dtypes) for n in self.lines
                if n.dtypes == dtypes and n.sm == sm and n.finalize == finalize}


def numbering(tree: engine.FlashinferTree, ours, nvcc: Nvcc | None, model_only: bool = False,
              cache_dir: str | Path | None = None) -> Numbering:
    """Compare `ours(dtypes, finalize, arch)` with the engine's own enumeration when nvcc is there (`nvcc` None:
    none found) and `model_only` is off. UsageError when the enumeration does not compile or the two differ."""
    if model_only or nvcc is None:
        why = "--model-only" if model_only else "no nvcc found to compile flashinfer's own enumeration"
        return Numbering(False, 0, f"tileprobe's model of {tree.label()}'s numbering (read from its "
                                   f"cutlass_heuristic.cpp), unchecked: {why}")
    try:
        lines = native_tactics_cached(tree, nvcc, cache_dir)
    except (CompileError, subprocess.TimeoutExpired, UsageError) as exc:
        log = getattr(exc, "log", "") or ""
        last = next((ln.strip() for ln in log.splitlines() if "error" in ln), "")
        raise UsageError(f"{tree.label()} at {tree.root}: its own tactic enumeration does not compile "
                         f"({str(exc).strip()}{'; ' + last[:160] if last else ''}); the numbering cannot be "
                         "checked, so it is not called exact (--model-only to use tileprobe's model anyway)") from None
    bad = mismatches(lines, ours)
    if bad:
        raise UsageError(f"tileprobe numbers {tree.label()}'s tactics differently from its own getTactics at "
                         f"{len(bad)} ID(s), first: {bad[0]}")
    return Numbering(True, len(lines), f"equal to {tree.label()}'s own getTactics on all {len(lines)} IDs (sm "
                                       f"120/121, finalize on/off, every SM120 runner), compiled from its sources "
                                       f"with nvcc {nvcc.version_text}", tuple(lines))
