"""Before the first config: does the toolchain compile anything at all?

A CUTLASS tree without tools/util/include, an nvcc that does not run, a bad NVCC_PREPEND_FLAGS or a Triton that
compiles nothing would otherwise fail every config, one compile-error row each. Each check here is one cheap compile
(CUTLASS: the headers every harness includes, preprocessed with the harness's own include flags, about 0.2 s, and a
one-line kernel built for the arch, about 0.7 s; Triton: a four-line kernel for the target). A failure is an
EnvironmentFault: one line naming what is broken and how to fix it, then the line `help: run tileprobe doctor`; the caller
has written nothing yet. A pass is remembered by content key (the CUTLASS check under <cache>/preflight/; the Triton
kernel by the compile cache itself), so a warm run pays a hash and a stat; a failure is never remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from tileprobe.backends.cutlass import build as cutlass_build
from tileprobe.backends.cutlass.toolchain import CutlassTree, Nvcc, compile_env, missing_parts
from tileprobe.backends.triton import compile as triton_compile
from tileprobe.backends.triton.source import extract
from tileprobe.backends.triton.toolchain import TritonInstall
from tileprobe.errors import EnvironmentFault
from tileprobe.families import Config, family

TIMEOUT_S = 120
# The headers every harness includes first (harness.cuh, families/common.cuh): CUTLASS's core and tools/util.
HEADERS = ("cutlass/cutlass.h", "cutlass/version.h", "cutlass/util/packed_stride.hpp")
KERNEL = "__global__ void tileprobe_preflight(int* p) { *p = 1; }\n"
TRITON_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def tileprobe_preflight(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
'''
CUTLASS_FIX = ("export TILEPROBE_CUTLASS_DIR=<a CUTLASS checkout with include/ and tools/util/include/> (or pass "
               "--cutlass-dir), or pip install flashinfer-python for its bundled copy")


def cutlass_root(tree: CutlassTree) -> Path:
    inc = tree.root
    return inc.parent if inc.name == "include" else inc


def _flags(include_dirs: list[str], tree: CutlassTree) -> list[str]:
    incs = ["-I", str(cutlass_build.HARNESS_DIR)]
    for d in [*include_dirs, *map(str, tree.include_dirs)]:
        incs += ["-I", d]
    return [*cutlass_build.COMMON_FLAGS, *incs]


def _key(nvcc: Nvcc, tree: CutlassTree, arch: str, flags: list[str]) -> str:
    parts = [str(nvcc.path), nvcc.version_text, nvcc.host_compiler, nvcc.host_compiler_path,
             json.dumps(compile_env(), sort_keys=True), tree.tree_hash, arch, json.dumps(flags), KERNEL, *HEADERS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def check_cutlass(tree: CutlassTree, nvcc: Nvcc, cache: Path, configs: list[Config]) -> None:
    """Raise EnvironmentFault unless nvcc compiles for the configs' arch against `tree` with the harness's flags.
    Nothing to check when no config will be compiled (all unsupported)."""
    todo = [c for c in configs if not c.unsupported_reason]
    if todo:
        check_arch(tree, nvcc, cache, todo[0].arch, family(todo[0].family))


def check_arch(tree: CutlassTree, nvcc: Nvcc, cache: Path, arch: str, fam=None) -> None:
    """check_cutlass for one arch, with family `fam`'s own header folders (if any) on the include path."""
    missing = missing_parts(tree)
    if missing:
        raise EnvironmentFault(f"the CUTLASS tree at {cutlass_root(tree)} ({tree.source}) has no {missing}, which every "
                               f"harness includes: {CUTLASS_FIX}")
    nvcc.check_arch(arch)
    extra = [str(d) for d in fam.include_dirs()] if fam is not None and fam.include_dirs else []
    flags = _flags(extra, tree)
    marker = cache / "preflight" / f"cutlass-{_key(nvcc, tree, arch, flags)}.ok"
    if marker.is_file():
        return
    num = arch.removeprefix("sm_").removesuffix("a")
    with tempfile.TemporaryDirectory(prefix="tileprobe-preflight-") as tmp:
        headers = Path(tmp) / "headers.cu"
        headers.write_text("".join(f"#include <{h}>\n" for h in HEADERS))
        kernel = Path(tmp) / "kernel.cu"
        kernel.write_text(KERNEL)
        _run(nvcc, [*flags, "-E", str(headers), "-o", os.devnull], tree, "preprocess CUTLASS's headers")
        _run(nvcc, [*cutlass_build.COMMON_FLAGS, f"-gencode=arch=compute_{num}a,code=sm_{num}a", "-c", str(kernel),
                    "-o", str(Path(tmp) / "kernel.o")], tree, f"compile a one-line kernel for {arch}")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"nvcc": str(nvcc.path), "cutlass": str(cutlass_root(tree)), "arch": arch}))
    except OSError:
        pass  # not remembered: the next run checks again


def _run(nvcc: Nvcc, args: list[str], tree: CutlassTree, what: str) -> None:
    try:
        proc = subprocess.run([str(nvcc.path), *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentFault(f"nvcc at {nvcc.path} did not {what} within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise EnvironmentFault(f"cannot run nvcc at {nvcc.path}: {exc.strerror}; pass --nvcc, set CUDA_HOME, or put "
                               "a working nvcc on PATH") from None
    if proc.returncode == 0:
        return
    log = proc.stdout + proc.stderr
    raise EnvironmentFault(explain(log, nvcc, tree, what), log)


_MISSING_HEADER = re.compile(r"fatal error: ([\w./+-]+): No such file or directory")
_UNKNOWN_OPTION = re.compile(r"nvcc fatal\s*:\s*(Unknown option[^\n]*|[^\n]*option[^\n]*)", re.I)


def explain(log: str, nvcc: Nvcc, tree: CutlassTree, what: str) -> str:
    """One line: what the failed preflight compile says is broken, and the fix."""
    m = _MISSING_HEADER.search(log)
    if m:
        return (f"nvcc cannot find {m.group(1)} under the CUTLASS tree at {cutlass_root(tree)} ({tree.source}): "
                f"{CUTLASS_FIX}")
    env = compile_env()
    m = _UNKNOWN_OPTION.search(log)
    if m and env:
        set_ = "; ".join(f"{k}={v!r}" for k, v in env.items())
        return f"nvcc at {nvcc.path}: {m.group(1).strip()} ({set_}): unset or fix {', '.join(env)}"
    first = next((ln.strip() for ln in log.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()),
                 (log.strip().splitlines() or ["no output"])[-1])
    where = f" (with {'; '.join(f'{k}={v!r}' for k, v in env.items())})" if env else ""
    return f"nvcc {nvcc.version_text} at {nvcc.path} cannot {what}{where}: {first[:240]}"


def triton_job(cc: int) -> triton_compile.KernelJob:
    """The preflight's Triton launch: a load, an add and a store of 16 floats, for compute capability `cc`."""
    source = extract(TRITON_KERNEL, "tileprobe_preflight", "tileprobe preflight kernel")
    return triton_compile.KernelJob(source, ("*fp32",), (("BLOCK", 16),), cc)


def check_triton(triton: TritonInstall, cc: int, cache_dir: str | os.PathLike | None = None) -> None:
    """Raise EnvironmentFault unless the installed Triton compiles a tiny kernel for sm_<cc>. The pass is the compile
    cache's own entry (keyed by Triton's release, target and compiler environment); a failure is removed again."""
    job = triton_job(cc)
    if os.environ.get("TRITON_INTERPRET"):  # the interpreter turns a jit function into a Python one: compile as the
        # callers' workers do, in a process of its own without it
        got = triton_compile.compile_many([job], 1, cache_dir, worker_env={"TRITON_INTERPRET": None})[0]
    else:
        try:
            got = triton_compile.compile_job(job, cache_dir)
        except triton_compile.TritonCompileError as exc:
            got = exc
    if isinstance(got, triton_compile.TritonCompileError):
        triton_compile.forget(job, cache_dir)
        env = triton_compile.compile_env()
        where = f" (with {'; '.join(f'{k}={v!r}' for k, v in env.items())})" if env else ""
        raise EnvironmentFault(f"{triton.label()} at {triton.root} cannot compile a four-line kernel for sm_{cc}"
                               f"{where}: {got.line}; reinstall it: pip install 'tileprobe[triton]'")
