"""Compile one Triton kernel launch for an arch with no GPU, and read what its launch-time check would compare.

A launch is reproduced with Triton's own code: the binder Triton builds for the kernel
(`triton.runtime.jit.create_function_from_signature`, whose `native_specialize_impl` marks 16-divisible pointers and
ints, turns ints equal to 1 and None into constexprs) runs on stand-in arguments, `JITFunction._pack_args` turns
that into the signature, constexprs and attributes, and `triton.compile(ASTSource(...), GPUTarget("cuda", cc, 32))`
builds the cubin with the bundled ptxas. `metadata.shared` is the number `CompiledKernel._init_handles`
(triton/compiler/compiler.py) compares with the device's MAX_SHARED_MEMORY_PER_BLOCK_OPTIN at the first launch.
Registers and spills are what Triton's driver reads after loading the cubin (driver.c `load_binary`:
CU_FUNC_ATTRIBUTE_NUM_REGS, and LOCAL_SIZE_BYTES / 4 as n_spills); with no driver they are read from the cubin by the
bundled cuobjdump (--dump-resource-usage: REG, LOCAL).

A job with `upto="allocate"` (KernelJob.sized) stops where Triton decides metadata.shared
(tileprobe.backends.triton.allocate): the same bytes, no PTX or cubin, so no registers or spills (evidence `sized`).

Results are cached by content (kernel module text, Triton version, arguments, options, target, and the environment
Triton's compiler reads: `compile_env`) in the user cache dir: an entry is built in a temporary folder and renamed
into place, under a file lock. The failure policy is the CUTLASS build cache's: a broken entry (unreadable
result.json) is one warning line and compiled again; a config's own compile error (Triton's CompilationError,
OutOfResources, a ptxas or MLIR pass failure) is cached like a success; anything else (an OSError, a missing tool, a
kill) says nothing about the config and is never cached. TRITON_CACHE_DIR is set only while Triton compiles and is
put back after, so the caller's process (and a user's tests under the pytest plugin) never sees it.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types as _types
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from filelock import FileLock

from tileprobe.backends.triton import allocate
from tileprobe.backends.triton import source as src_mod
from tileprobe.backends.triton.source import KernelSource
from tileprobe.backends.triton.toolchain import cache_root, installed
from tileprobe.errors import EnvironmentFault, OutOfResources, TileprobeError
from tileprobe.lazy import LazyModule

_triton = LazyModule("triton")
_tl = LazyModule("triton.language")
_jit = LazyModule("triton.runtime.jit")
_compiler = LazyModule("triton.compiler")
_backends = LazyModule("triton.backends.compiler")
_knobs = LazyModule("triton.knobs")
_errors = LazyModule("triton.runtime.errors")
_driver = LazyModule("triton.runtime.driver")
_tensor_descriptor = LazyModule("triton.tools.tensor_descriptor")
_torch = LazyModule("torch")
_compiler_errors = LazyModule("triton.compiler.errors")

CACHE_VERSION = 2  # 2: the key holds the compiler's environment (compile_env)
RESULT_FIELDS = ("shared", "regs", "spills", "static_shared", "num_warps", "num_stages", "seconds", "triton_version",
                 "arch")

# Environment Triton reads that does not change a compile's output: where caches and dumps go.
_NOT_COMPILE_ENV = {"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_CACHE_MANAGER",
                    "TRITON_REMOTE_CACHE_BACKEND", "TRITON_INTERPRET", "TRITON_PRINT_AUTOTUNING"}
_COMPILE_ENV_PREFIXES = ("TRITON_", "MLIR_", "LLVM_")
_COMPILE_ENV_NAMES = ("PTXAS_OPTIONS", "DISABLE_PTXAS_OPT", "DISABLE_LLVM_OPT", "USE_IR_LOC", "CC")


def compile_env(env: dict | None = None) -> dict[str, str]:
    """The environment that changes what Triton compiles (TRITON_PTXAS_PATH and the other tool overrides, the
    compiler's option knobs), of `env` (default os.environ); a tool override also by its file's size and time."""
    env = os.environ if env is None else env
    out = {}
    for k, v in env.items():
        if v is None or k in _NOT_COMPILE_ENV:
            continue
        if k.startswith(_COMPILE_ENV_PREFIXES) or k in _COMPILE_ENV_NAMES:
            out[k] = v
            if k.endswith("_PATH") and os.path.isfile(v):
                st = os.stat(v)
                out[k] = f"{v} ({st.st_size} B, mtime {st.st_mtime_ns})"
    return dict(sorted(out.items()))
CUOBJDUMP_TIMEOUT_S = 60


class TritonCompileError(TileprobeError):
    """Triton could not compile the launch: `line` is the compiler's own one-line error. `transient`: the failure
    says nothing about the config (not a compile error Triton raises for it); it is not cached."""

    def __init__(self, line: str, transient: bool = False) -> None:
        super().__init__(line)
        self.line = line
        self.transient = transient


class TritonOutOfResources(OutOfResources):
    """The compiled kernel needs more shared memory than the target allows; `text` is Triton's own error text
    (triton.runtime.errors.OutOfResources, what the engine's first launch raises on that GPU)."""

    def __init__(self, required: int, limit: int, text: str) -> None:
        super().__init__("shared memory", required, limit)
        self.text = text


@dataclass(frozen=True)
class KernelJob:
    """One launch to compile: the kernel, its stand-in arguments (see `stand_in`), keyword arguments (constexprs and
    Triton options such as num_warps, num_stages) and the target's compute capability (120, 90, ...)."""

    source: KernelSource
    args: tuple  # positional stand-ins, JSON values
    kwargs: tuple[tuple[str, object], ...]
    cc: int
    upto: str = "cubin"  # "allocate": Triton's stages up to its shared-memory allocation only (allocate.py: `sized`)

    def identity(self, triton_version: str, env: dict | None = None) -> dict:
        doc = {"v": CACHE_VERSION, "source": self.source.sha256, "triton": triton_version,
               "args": list(self.args), "kwargs": [[k, v] for k, v in self.kwargs], "target": ["cuda", self.cc, 32],
               "env": compile_env(env)}
        return doc if self.upto == "cubin" else {**doc, "upto": self.upto}

    def sized(self) -> KernelJob:
        """This launch answered by Triton's allocation alone (evidence `sized`), not compiled to a cubin."""
        return replace(self, upto="allocate")

    def compiled(self) -> KernelJob:
        return replace(self, upto="cubin")

    def key(self, triton_version: str, env: dict | None = None) -> str:
        """The content key; `env`: the environment the compile runs in (default os.environ)."""
        return hashlib.sha256(json.dumps(self.identity(triton_version, env), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class TritonBuild:
    shared: int  # metadata.shared: dynamic shared bytes, what the launch check compares with the opt-in limit
    regs: int | None  # registers per thread (cuobjdump REG; the driver's n_regs)
    spills: int | None  # LOCAL bytes / 4 (the driver's n_spills)
    static_shared: int | None  # cuobjdump SHARED: static shared plus the 1 KiB system reserve (1024: none static)
    num_warps: int
    num_stages: int
    seconds: float  # compile wall time (of the run that filled the cache)
    cached: bool = False
    triton_version: str = ""
    arch: str = ""  # metadata.arch, e.g. sm120
    sized: bool = False  # Triton's allocation pass alone (allocate.py): no cubin, so no registers or spills

    def fits(self, limit: int) -> TritonOutOfResources | None:
        """What the first launch on a device with opt-in `limit` would raise (None: the check passes)."""
        if self.shared <= limit:
            return None
        return TritonOutOfResources(self.shared, limit, str(_errors.OutOfResources(self.shared, limit,
                                                                                   "shared memory")))


class _Ptr:
    """A tensor as the binder sees it: a dtype and a data pointer (0: 16-byte aligned, as every torch allocation)."""

    def __init__(self, dtype) -> None:
        self.dtype = dtype

    @staticmethod
    def data_ptr() -> int:
        return 0


def stand_in(value):
    """JSON value -> what the launcher passes: '*bf16' a tensor of that Triton dtype, 'tl.bfloat16' a dtype,
    anything else (int, float, bool, None) itself. A pointer's dtype names are Triton's (bf16, fp16, fp32, fp8e4nv,
    i32, i64, u8)."""
    if isinstance(value, str) and value.startswith("*"):
        return _Ptr(_dtype(value[1:]))
    if isinstance(value, str) and value.startswith("tl."):
        return getattr(_tl, value[3:])
    if isinstance(value, str) and TENSORDESC.fullmatch(value):
        return _tensordesc(value)
    return value


# A host tensor descriptor as Triton's signature writes it (its dtype and block shape are all the compile sees)
TENSORDESC = re.compile(r"tensordesc<(\w+)\[(\d+(?:, \d+)*)\]>")


def _tensordesc(value: str):
    """'tensordesc<bf16[1, 32, 128]>' -> a TensorDescriptor of that dtype and block shape over a meta tensor of the
    block's size (its rows padded to 16 bytes, as a descriptor's strides must be)."""
    name, dims = TENSORDESC.fullmatch(value).groups()
    block = [int(d) for d in dims.split(", ")]
    dtype = getattr(_torch, _DTYPES[name].replace("float8e4nv", "float8_e4m3fn").replace("float8e5", "float8_e5m2")
                    .replace("int1", "bool"))
    itemsize = _torch.empty((), dtype=dtype, device="meta").element_size()
    row = -(-block[-1] * itemsize // 16) * 16 // itemsize
    strides = [1, row]
    for d in reversed(block[1:-1]):
        strides.append(strides[-1] * d)
    strides = list(reversed(strides))[-len(block):]
    base = _torch.empty_strided(block, strides, dtype=dtype, device="meta")
    return _tensor_descriptor.TensorDescriptor(base, block, strides, block)


def stand_in_problem(value) -> str | None:
    """Why a JSON launch argument is none of stand_in's forms (None when it is one): caught before any compile, so a
    typo is not reported as every config's compile error."""
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str) and value.startswith("*"):
        return None if value[1:] in _DTYPES else (f"unknown pointer dtype {value}; known: "
                                                  f"{', '.join('*' + d for d in _DTYPES)}")
    if isinstance(value, str) and value.startswith("tensordesc<"):
        m = TENSORDESC.fullmatch(value)
        return None if m and m.group(1) in _DTYPES else f"{value}: not tensordesc<DTYPE[B0, B1, ...]>"
    if isinstance(value, str) and value.startswith("tl."):
        return None if isinstance(getattr(_tl, value[3:], None), _tl.dtype) else \
            f"{value} is not a triton.language dtype (e.g. tl.float32, tl.bfloat16)"
    return ("not a launch argument: '*bf16' (a tensor of that dtype), 'tl.float32' (a dtype), "
            "'tensordesc<bf16[64, 64]>' (a host TMA descriptor), a number, true/false or null")


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8e4nv": "float8e4nv", "fp8e5": "float8e5",
           "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
           "u32": "uint32", "u64": "uint64", "i1": "int1"}


def _dtype(name: str):
    if name not in _DTYPES:
        raise TritonCompileError(f"unknown pointer dtype *{name}; known: {', '.join('*' + d for d in _DTYPES)}")
    return getattr(_tl, _DTYPES[name])


def one_line(exc: BaseException) -> str:
    """The compiler's own error as one line: its type and the last non-empty line of its message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and set(ln.strip()) != {"^"}]
    return f"{type(exc).__name__}: {lines[-1] if lines else repr(exc)}"[:500]


def _resource_usage(cubin: Path, cuobjdump: Path, name: str) -> dict:
    try:
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                             timeout=CUOBJDUMP_TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    block = out.split(f"Function {name}:")[-1] if f"Function {name}:" in out else out
    for field in ("REG", "SHARED", "LOCAL"):
        m = re.search(rf"\b{field}:(\d+)", block)
        if m:
            found[field] = int(m.group(1))
    return found


def jit_function(kernel):
    """The JITFunction under an @triton.autotune / @triton.heuristics wrapper (each keeps it in `.fn`)."""
    while not hasattr(kernel, "params") and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


@contextmanager
def _env(name: str, value: str):
    """os.environ[name] = value inside the block; the caller's value (or its absence) is put back after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _deterministic(exc: Exception) -> bool:
    """A compile error Triton raises for this kernel and config (as every compile of it would): its frontend's
    CompilationError, OutOfResources, a ptxas failure, an MLIR pass failure. Anything else (an OSError, a missing
    tool, an import problem) says nothing about the config."""
    kinds = tuple(k for k in (getattr(_compiler_errors, "CompilationError", None),
                              getattr(_errors, "OutOfResources", None), getattr(_errors, "PTXASError", None))
                  if isinstance(k, type))
    return isinstance(exc, kinds) or (type(exc) is RuntimeError and "PassManager" in str(exc))


def _compile_now(job: KernelJob, work: Path, cache: Path, triton_cache: str | None = None) -> dict:
    """Compile in this process into `work`; the result as a JSON dict ({'error': line, 'transient': bool} on a
    compile failure). Triton's own cache is this entry's (deleted after) unless `triton_cache` names a folder to
    share: the tune's launching process then finds the cubin there (tileprobe.triton.tune). TRITON_CACHE_DIR is set
    for the compile only."""
    with _env("TRITON_CACHE_DIR", triton_cache or str(work / "triton-cache")):
        return _compile_in(job, work, cache)


@contextmanager
def _driver_target(target):
    """Triton's active driver answers `target` while the kernel compiles: the frontend's @constexpr_function target
    queries (triton.language.target_info is_cuda / cuda_capability_geq, which triton_kernels' kernels call) read
    `driver.active.get_current_target()`, which has no GPU to answer here (and the wrong one on another GPU)."""
    config = _driver.driver
    before = config.__dict__.get("_active")
    config._active = _types.SimpleNamespace(get_current_target=lambda: target)
    try:
        yield
    finally:
        config._active = before


def _compile_in(job: KernelJob, work: Path, cache: Path) -> dict:
    kernel = src_mod.load(job.source, cache)
    fn = jit_function(kernel)
    t0 = time.perf_counter()
    try:
        target = _backends.GPUTarget("cuda", job.cc, 32)
        backend = _compiler.make_backend(target)
        binder = _jit.create_function_from_signature(fn.signature, fn.params, backend)
        kwargs = {k: stand_in(v) for k, v in job.kwargs}
        kwargs.setdefault("debug", _knobs.runtime.debug)  # as JITFunction.run adds them
        kwargs.setdefault("instrumentation_mode", _knobs.compilation.instrumentation_mode)
        bound, spec, options = binder(*[stand_in(a) for a in job.args], **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
        if job.upto == "allocate":
            with _driver_target(target):
                shared, opts = allocate.shared_bytes(_compiler.ASTSource(fn, signature, constexprs, attrs), target,
                                                     options.__dict__)
            return {"shared": shared, "regs": None, "spills": None, "static_shared": None,
                    "num_warps": int(opts.num_warps), "num_stages": int(opts.num_stages),
                    "seconds": time.perf_counter() - t0, "triton_version": _triton.__version__,
                    "arch": str(opts.arch), "sized": True}
        with _driver_target(target):
            compiled = _triton.compile(_compiler.ASTSource(fn, signature, constexprs, attrs), target=target,
                                       options=options.__dict__)
    except TritonCompileError:
        raise
    except Exception as exc:  # Triton's frontend, MLIR passes or ptxas: the row carries its one line
        return {"error": one_line(exc), "seconds": time.perf_counter() - t0, "transient": not _deterministic(exc)}
    seconds = time.perf_counter() - t0
    cubin = work / "kernel.cubin"
    cubin.write_bytes(compiled.kernel)
    md = compiled.metadata
    inst = installed()
    usage = _resource_usage(cubin, inst.cuobjdump, md.name) if inst else {}
    return {"shared": int(md.shared), "regs": usage.get("REG"),
            "spills": usage["LOCAL"] // 4 if "LOCAL" in usage else None, "static_shared": usage.get("SHARED"),
            "num_warps": int(md.num_warps), "num_stages": int(md.num_stages), "seconds": seconds,
            "triton_version": str(getattr(md, "triton_version", "")), "arch": str(md.arch)}


def _entry(cache: Path, key: str) -> Path:
    return cache / "triton" / key[:2] / key


def _from_entry(path: Path, quiet: bool = False) -> dict | None:
    """A cached result, or None when there is none or it is broken (a truncated or unparseable result.json, a
    field missing): then one warning line (unless `quiet`: the caller looks again under the lock), the entry is
    removed and the caller compiles it again."""
    f = path / "result.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(f.read_text())
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if "error" not in doc:
            missing = [k for k in RESULT_FIELDS if k not in doc]
            if missing:
                raise KeyError(missing[0])
        elif not isinstance(doc["error"], str):
            raise ValueError("its error is not text")
        return doc
    except (OSError, ValueError, KeyError) as exc:
        if not quiet:
            why = "no result.json" if isinstance(exc, FileNotFoundError) else f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"tileprobe: warning: triton cache entry {path.name[:16]} is broken ({why}); "
                             "rebuilding\n")
            shutil.rmtree(path, ignore_errors=True)
        return None


def _as_result(doc: dict, cached: bool) -> TritonBuild | TritonCompileError:
    if "error" in doc:
        return TritonCompileError(doc["error"], bool(doc.get("transient")))
    return TritonBuild(cached=cached, sized=bool(doc.get("sized")), **{k: doc[k] for k in RESULT_FIELDS})


def compile_job(job: KernelJob, cache_dir: str | os.PathLike | None = None,
                rebuild: bool = False, triton_cache: str | None = None) -> TritonBuild | TritonCompileError:
    """The build of one launch, from the cache or compiled now (a compile failure is returned, not raised)."""
    cache = cache_root(cache_dir)
    inst = installed()
    version = inst.version if inst else "none"
    key = job.key(version)
    entry = _entry(cache, key)
    if not rebuild and (doc := _from_entry(entry, quiet=True)) is not None:
        return _as_result(doc, True)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock"):
        if not rebuild and (doc := _from_entry(entry)) is not None:
            return _as_result(doc, True)
        work = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        try:
            doc = _compile_now(job, work, cache, triton_cache)
            if doc.get("transient"):  # says nothing about the config: returned, never cached
                return _as_result(doc, False)
            doc["identity"] = job.identity(version)
            (work / "result.json").write_text(json.dumps(doc, indent=1, default=str))
            shutil.rmtree(work / "triton-cache", ignore_errors=True)
            if entry.exists():
                shutil.rmtree(entry)
            os.rename(work, entry)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _as_result(doc, False)


def forget(job: KernelJob, cache_dir: str | os.PathLike | None = None) -> None:
    """Remove a job's cache entry (the preflight's kernel, when its compile says the toolchain is broken)."""
    inst = installed()
    shutil.rmtree(_entry(cache_root(cache_dir), job.key(inst.version if inst else "none")), ignore_errors=True)


def _worker(args) -> TritonBuild | TritonCompileError:
    job, cache_dir, rebuild, triton_cache = args
    try:
        return compile_job(job, cache_dir, rebuild, triton_cache)
    except TritonCompileError as exc:
        return exc


def _set_env(env: dict) -> None:
    """A worker's environment: each name set to its value, or removed where the value is None. The worker leads a
    process group of its own and ignores SIGINT: a terminal's Ctrl-C reaches the parent alone, which cancels what is
    not started and kills each worker's group (the worker and its ptxas) at once (`_stop`); the worker never prints
    a traceback of its own."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if hasattr(os, "setpgrp"):
        try:
            os.setpgrp()
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C (or any error) while the pool compiles: the jobs not started are cancelled and the workers killed with
    the compilers they run, now, not after their queue. A finished job's result is already in the cache (an entry
    is renamed into place whole), so the same command resumes from it; a killed one left only a temporary folder."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker's own group (_set_env): it and its ptxas
        except (OSError, AttributeError):
            try:
                p.kill()
            except (OSError, ValueError):
                pass
    for p in procs:
        try:
            p.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass


def compile_many(jobs: list[KernelJob], n_jobs: int = 1, cache_dir: str | os.PathLike | None = None,
                 rebuild: bool = False, triton_cache: str | None = None,
                 worker_env: dict | None = None, on_result=None) -> list[TritonBuild | TritonCompileError]:
    """Every job's build, in order; cache misses compiled by `n_jobs` processes (distinct jobs compiled once).
    `triton_cache`: Triton's own cache folder, shared by every worker (kept); `worker_env`: the workers'
    environment changes (then every miss is compiled in a worker process, never in this one). `on_result(i,
    build)`, when given, is called in this thread once per job i as soon as its build is known (cached ones first)."""
    cache = cache_root(cache_dir)
    version = (installed().version if installed() else "none")
    env = {**os.environ, **(worker_env or {})}  # the workers' environment: what their compiles read
    keys = [j.key(version, env) for j in jobs]
    done: dict[str, TritonBuild | TritonCompileError] = {}
    where: dict[str, list[int]] = {}  # a key's job indices (a repeated job is compiled once)
    for i, k in enumerate(keys):
        where.setdefault(k, []).append(i)

    def tell(k: str, res) -> None:  # the build of key k is known: it is every job i of that key's
        done[k] = res
        if on_result is not None:
            for i in where[k]:
                on_result(i, res)

    for k in dict.fromkeys(keys):
        doc = None if rebuild else _from_entry(_entry(cache, k))
        if doc is not None:
            tell(k, _as_result(doc, True))
    todo = {k: j for k, j in zip(keys, jobs) if k not in done}
    work = [(j, str(cache), rebuild, triton_cache) for j in todo.values()]
    if worker_env is None and (n_jobs <= 1 or len(work) <= 1):
        for k, w in zip(todo, work):
            tell(k, _worker(w))
    elif work:
        pool = ProcessPoolExecutor(max_workers=max(1, min(n_jobs, len(work))),
                                   mp_context=multiprocessing.get_context("spawn"), initializer=_set_env,
                                   initargs=(worker_env or {},))
        try:
            futures = {pool.submit(_worker, w): k for k, w in zip(todo, work)}
            for fut in as_completed(futures):
                tell(futures[fut], fut.result())
        except BaseException:  # Ctrl-C (KeyboardInterrupt) or an error: stop now, keep what finished (_stop)
            _stop(pool)
            raise
        pool.shutdown(wait=True)
    results = [done[k] for k in todo]
    same = {r.line for r in results if isinstance(r, TritonCompileError) and r.transient}
    if len(same) == 1 and sum(isinstance(r, TritonCompileError) and r.transient for r in results) >= 2:
        raise EnvironmentFault(f"{sum(isinstance(r, TritonCompileError) for r in results)} launches failed to "
                               f"compile with the same error, which is not a config's: {same.pop()} (nothing was "
                               "cached; fix the environment and run again)")
    return [done[k] for k in keys]
