"""Building and caching harness binaries.

A build is keyed by a content hash of everything that changes the binary (harness sources, rendered configs, CUTLASS
tree, nvcc's path and version, the environment nvcc reads (NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS, NVCC_CCBIN), the host
compiler's path and version, flags) and named readably after its configs. Builds are written into a temporary folder inside
the cache and renamed into place, under a file lock taken as check, lock, check, so two sweeps can share a cache.
A config's failed compile is cached too (it is as deterministic as a success), with its full log; a kill, a timeout
or a failure the environment causes for every config (env_watch) is never cached. A runtime
harness's kernel halves (one per config) are also kept on their own, keyed by that config's source alone
(`kernel_key`), so a config's GEMM kernel is compiled once whichever batch of configs its host half serves.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor, as_completed

from filelock import FileLock
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from platformdirs import user_cache_dir

from tileprobe.backends.cutlass import env_watch
from tileprobe.backends.cutlass.content_hash import folder_hash
from tileprobe.errors import UsageError
from tileprobe.families import Config, family
from tileprobe.backends.cutlass.toolchain import CutlassTree, Nvcc, compile_env


def harness_dir() -> Path:
    """TILEPROBE_HARNESS_DIR, else the checkout's cutlass_harness/ (editable install), else the installed copy."""
    if os.environ.get("TILEPROBE_HARNESS_DIR"):
        return Path(os.environ["TILEPROBE_HARNESS_DIR"])
    here = Path(__file__).resolve().parents[2]  # the tileprobe package folder
    checkout = here.parent / "cutlass_harness"
    return checkout if (checkout / "kernels.cuh").is_file() else here / "cutlass_harness"


HARNESS_DIR = harness_dir()
COMMON_FLAGS = ["-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", "-diag-suppress", "20012,20013,20014,20015"]
DEFAULT_COMPILE_TIMEOUT_S = 1200
DEFAULT_HARNESS_CONFIGS = 3  # the most configs one runtime harness's host half serves (TILEPROBE_HARNESS_CONFIGS)


def kernel_cubin(index: int) -> str:
    """A split build's GEMM kernel of config `index`, beside its harness (cutlass_harness/kernel_library.cuh)."""
    return f"kernel.{index}.cubin"


def kernel_log(index: int) -> str:
    """That kernel half's nvcc output (its ptxas report)."""
    return f"kernel.{index}.log"


def harness_configs() -> int:
    """DEFAULT_HARNESS_CONFIGS, or $TILEPROBE_HARNESS_CONFIGS when set (a whole number >= 1; 1: one harness per
    config; anything else is one line)."""
    raw = os.environ.get("TILEPROBE_HARNESS_CONFIGS")
    if raw is None:
        return DEFAULT_HARNESS_CONFIGS
    if not raw.strip().isdigit() or int(raw) < 1:
        raise UsageError(f"TILEPROBE_HARNESS_CONFIGS={raw!r}: must be a whole number of at least 1")
    return int(raw)


def harness_batches(configs: list[Config], largest: int | None = None) -> list[tuple[Config, ...]]:
    """The configs of runtime harness builds, in input order: the first config alone, then two, then up to `largest`
    (harness_configs()) at a time, each batch of one family and arch. The kernel halves are one per config whatever
    the batch; a host half of several configs costs far less than as many host halves (CUTLASS's headers are
    parsed once), and the small first batches put the first configs on the GPU as early as one config alone would.
    The same configs in the same order give the same batches: the static probe's --compile builds the entries
    the GPU sweep launches."""
    largest = harness_configs() if largest is None else largest
    out: list[tuple[Config, ...]] = []
    groups: dict[tuple[str, str], list[Config]] = {}
    for c in configs:
        groups.setdefault((c.family, c.arch), []).append(c)
    for group in groups.values():
        size, start = 1, 0
        while start < len(group):
            out.append(tuple(group[start:start + size]))
            start += size
            size = min(largest, size + 1)
    order = {c.key: i for i, c in enumerate(configs)}
    return sorted(out, key=lambda b: order[b[0].key])


def cache_root(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        root = Path(explicit)
    elif os.environ.get("TILEPROBE_CACHE_DIR"):
        root = Path(os.environ["TILEPROBE_CACHE_DIR"])
    else:
        root = Path(user_cache_dir("tileprobe"))
    root = root.expanduser().absolute()  # nvcc runs in the entry's own folder: a relative root would not be found
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the build cache {root}: {exc.strerror}") from None
    return root


@dataclass(frozen=True)
class BuildRequest:
    kind: str  # "describe" (static sizes; device code only with with_device) or "run" (the runtime harness)
    configs: tuple[Config, ...]
    with_device: bool = True

    def __post_init__(self) -> None:
        units = {(c.family, c.arch) for c in self.configs}
        if len(units) != 1:  # one unit is built with one family's header and one arch's flags
            raise ValueError(f"a {self.kind} unit holds the configs of one family and arch, not "
                             f"{', '.join(sorted(f'{f} {a}' for f, a in units)) or 'none'}")

    @property
    def source(self) -> Path:
        return HARNESS_DIR / f"{self.kind}.cu"

    @property
    def arch(self) -> str:
        return self.configs[0].arch

    def flags(self) -> list[str]:
        num = self.arch.removeprefix("sm_").removesuffix("a")
        if self.with_device:
            gencode = [f"-gencode=arch=compute_{num}a,code=sm_{num}a", "-O3", "-Xptxas", "-v", "-lineinfo"]
        else:
            # Sizes only: no kernel is instantiated, so there is no ptxas work, and describe.cu gives the device pass
            # an empty translation unit (every size is read by the host compile).
            gencode = [f"-gencode=arch=compute_{num}a,code=compute_{num}a", "-O0"]
        fam = family(self.configs[0].family)
        defines = [f"-DTP_FAMILY_KERNEL={fam.kernel_template}", f'-DTP_FAMILY_HEADER="families/{fam.header}"',
                   f"-DTP_ARCH={num}"]
        if self.kind == "describe" and self.with_device:
            defines.append("-DTP_WITH_DEVICE")
        if self.split:
            # Both halves (kernel.cu, run.cu) see GemmUniversalAdapter launch through a CudaHostAdapter; 20011: CUTLASS's
            # own memsetDevice is __host__ __device__ and calls a __host__ virtual.
            defines += ["-DCUTLASS_ENABLE_CUDA_HOST_ADAPTER=true", "-diag-suppress", "20011"]
            if fam.device_pass_header:  # run.cu's device pass: the harness's own kernels only (device_pass.cuh)
                defines.append(f'-DTP_DEVICE_PASS_HEADER="families/{fam.device_pass_header}"')
        return COMMON_FLAGS + gencode + defines

    @property
    def split(self) -> bool:
        """A runtime harness is built as nvcc processes at once: kernel.cu → kernel.<i>.cubin for each config i (its
        GEMM kernel) and run.cu → harness (host code, reference, check; no GEMM device code), which serves every
        config of the request (--config-index) and loads that config's cubin."""
        return self.kind == "run"

    def _lines(self, i: int, c: Config) -> str:
        line = family(c.family).cfg_macro(c, i) + "\n"
        if self.split:  # both halves name the config: the harness launches only a cubin of this very config
            line += f'TP_CFG_ID({i}, "{c.name}")\n'
        return line

    def config_include(self) -> str:
        """tp_configs.inc of the build (of a split build's host half): every config's lines."""
        return "".join(self._lines(i, c) for i, c in enumerate(self.configs))

    def kernel_include(self, i: int) -> str:
        """tp_configs.inc of a split build's kernel half i: config i's lines alone, at index 0 whatever its index in
        the host half (kernel.cu reads no index), so a config's kernel half is the same source in every batch and
        one compile of it serves them all (the kernel cache, `kernel_entry`)."""
        return self._lines(0, self.configs[i])

    def index_of(self, config: Config) -> int:
        return self.configs.index(config)

    def include_dirs(self) -> list[str]:
        """Folders a family's header needs besides CUTLASS's (e.g. an engine's extensions)."""
        fam = family(self.configs[0].family)
        return list(fam.include_dirs()) if fam.include_dirs else []

    def readable_name(self) -> str:
        if len(self.configs) == 1:
            return f"{self.kind}-{self.configs[0].name}{'' if self.with_device else '-sizes'}"
        if self.split:  # the first config's name, and how many follow it
            return f"{self.kind}-{self.configs[0].name}-and{len(self.configs) - 1}"
        return f"{self.kind}-{self.configs[0].family}-{self.arch}-batch{len(self.configs)}"


@dataclass
class BuildResult:
    request: BuildRequest
    ok: bool
    binary: Path | None
    log: str
    seconds: float
    cached: bool
    command: list[str]
    kernel_commands: list[list[str]] | None = None  # a split build's kernel halves, one per config (BuildRequest.split)
    kernel_logs: list[str] | None = None  # their output: each GEMM kernel's ptxas report

    def ptxas(self, index: int = 0) -> dict:
        """Registers and spills of config `index`'s GEMM kernel (a split build: its kernel half's report)."""
        return parse_ptxas(self.log if self.kernel_logs is None else self.kernel_logs[index])

    def index_of(self, config: Config) -> int:
        return self.request.index_of(config)


def cache_key(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc) -> str:
    return _key(req, req.config_include(), cutlass, nvcc)


def kernel_key(req: BuildRequest, index: int, cutlass: CutlassTree, nvcc: Nvcc) -> str:
    """The content key of a split build's kernel half `index`: everything cache_key covers, with that config's own
    tp_configs.inc (BuildRequest.kernel_include) in place of the batch's."""
    return _key(req, "kernel half\0" + req.kernel_include(index), cutlass, nvcc)


def _key(req: BuildRequest, configs_text: str, cutlass: CutlassTree, nvcc: Nvcc) -> str:
    h = hashlib.sha256()
    for path in harness_sources():
        h.update(str(path.relative_to(HARNESS_DIR)).encode())
        h.update(path.read_bytes())
    h.update(configs_text.encode())
    h.update(json.dumps(req.flags()).encode())
    h.update(cutlass.tree_hash.encode())
    h.update(nvcc.version_text.encode())
    h.update(nvcc.host_compiler.encode())
    # what else changes a compile: which nvcc and host compiler run, and the flags nvcc reads from the environment
    h.update(f"\0{nvcc.path}\0{nvcc.host_compiler_path}\0{json.dumps(compile_env(), sort_keys=True)}".encode())
    for i, inc in enumerate(req.include_dirs()):  # an engine's headers by content: an in-place upgrade changes them
        h.update(f"-I{i}:{folder_hash(inc)}".encode())
    return h.hexdigest()[:16]


def toolchain_signature(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc) -> str:
    """What a build's environment is, without its configs: failures under one signature are compared (env_watch)."""
    return env_watch.signature([str(nvcc.path), nvcc.version_text, nvcc.host_compiler_path,
                                json.dumps(compile_env(), sort_keys=True), cutlass.tree_hash,
                                *map(str, cutlass.include_dirs), *map(str, req.include_dirs()), str(HARNESS_DIR)])


def _watch(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc, res: BuildResult, entry: Path) -> None:
    """Hand a failed build to env_watch (raises EnvironmentFault, removing the entries, when it is the toolchain's)."""
    if not res.ok:
        env_watch.observe(toolchain_signature(req, cutlass, nvcc), [c.key for c in req.configs],
                          [c.name for c in req.configs], res.log, entry)


def harness_sources() -> list[Path]:
    """Every harness source and header (any of them can change a binary), in a stable order."""
    return sorted(p for p in HARNESS_DIR.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".hpp", ".inc") and p.is_file())


def build(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc, cache: Path, timeout_s: float,
          rebuild: bool = False, nice: int = 0) -> BuildResult:
    """Return the cached build or compile it (always compile with `rebuild`, replacing the cached entry). Never
    raises for a compile failure: the result carries the log. `nice` (0-19) lowers the compilers' CPU priority: the
    main job gives each later config a lower one, so that when its builds outnumber the cores the first ones finish
    first and the GPU starts on them (it changes no output, so it is not part of the key)."""
    key = cache_key(req, cutlass, nvcc)
    final = cache / f"{req.readable_name()}-{key}"
    hit = None if rebuild else _load(final, req, quiet=True)
    if hit:
        _watch(req, cutlass, nvcc, hit, final)
        return hit
    with FileLock(str(final) + ".lock"):
        hit = None if rebuild else _load(final, req)
        if hit:
            _watch(req, cutlass, nvcc, hit, final)
            return hit
        if final.exists():  # --rebuild, or an entry _load found broken: it must not shadow the new build
            shutil.rmtree(final, ignore_errors=True)
        res = _compile(req, cutlass, nvcc, cache, final, timeout_s, nice, rebuild)
        if final.exists():  # a kill or a timeout is not cached and says nothing
            _watch(req, cutlass, nvcc, res, final)
        return res


KERNELS = "kernels"  # <cache>/kernels/<config name>-<kernel_key>/: one config's kernel half, shared by every batch


def kernel_entry(cache: Path, req: BuildRequest, index: int, cutlass: CutlassTree, nvcc: Nvcc) -> Path:
    return cache / KERNELS / f"{req.configs[index].name}-{kernel_key(req, index, cutlass, nvcc)}"


def _load_kernel(entry: Path) -> tuple[list[str], str] | None:
    """A cached kernel half's (command, ptxas log), or None when there is none or it is broken (then one warning
    line, and the caller compiles it again and replaces the entry)."""
    if not entry.exists():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if not (entry / "kernel.cubin").is_file():
            raise FileNotFoundError("its kernel.cubin is gone")
        return list(meta["command"]), (entry / "kernel.log").read_text(errors="replace")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = exc.args[0] if isinstance(exc, FileNotFoundError) and exc.args and isinstance(exc.args[0], str) \
            else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"tileprobe: warning: kernel cache entry {entry.name} is broken ({why}); rebuilding\n")
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _store_kernel(entry: Path, cubin: Path, log: str, command: list[str], replace: bool = False) -> None:
    """Put a kernel half that compiled into the kernel cache (temporary folder, then rename; an entry another
    build put in place first is kept: it is the same source's), replacing the entry there with `replace`
    (--rebuild)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    if replace:
        shutil.rmtree(entry, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        shutil.copyfile(cubin, tmp / "kernel.cubin")
        (tmp / "kernel.log").write_text(log)
        (tmp / "meta.json").write_text(json.dumps({"command": command, "config": entry.name}))
        os.rename(tmp, entry)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load(entry: Path, req: BuildRequest, quiet: bool = False) -> BuildResult | None:
    """The cached build, or None when there is none or it is broken (a truncated meta.json, no build.log, an ok
    entry whose binary is gone): then one warning line (unless `quiet`: the caller looks again under the lock),
    and the caller rebuilds it."""
    meta_path = entry / "meta.json"
    if not entry.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        ok, seconds, command = bool(meta["ok"]), float(meta["seconds"]), list(meta["command"])
        log = (entry / "build.log").read_text(errors="replace")
        binary = entry / "harness"
        if ok and not binary.is_file():
            raise FileNotFoundError(f"its binary {binary.name} is gone")
        kernel_commands = kernel_logs = None
        if req.split:
            kernel_commands = [list(c) for c in meta["kernel_commands"]]
            kernel_logs = [(entry / kernel_log(i)).read_text(errors="replace") for i in range(len(req.configs))]
            gone = [kernel_cubin(i) for i in range(len(req.configs)) if not (entry / kernel_cubin(i)).is_file()]
            if ok and gone:
                raise FileNotFoundError(f"its kernel {gone[0]} is gone")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if not quiet:
            why = exc.args[0] if isinstance(exc, FileNotFoundError) and exc.args and isinstance(exc.args[0], str) \
                else f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"tileprobe: warning: build cache entry {entry.name} is broken ({why}); rebuilding\n")
        return None
    return BuildResult(req, ok, binary if ok else None, log, seconds, True, command, kernel_commands, kernel_logs)


def _compile(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc, cache: Path, final: Path,
             timeout_s: float, nice: int = 0, rebuild: bool = False) -> BuildResult:
    nvcc.check_arch(req.arch)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        (tmp / "tp_configs.inc").write_text(req.config_include())
        flags = [str(nvcc.path), *req.flags(), "-I", str(HARNESS_DIR)]
        incs = []
        for inc in [*req.include_dirs(), *cutlass.include_dirs]:  # a family's own headers come first
            incs += ["-I", str(inc)]
        cmd = [*flags, "-I", str(tmp), *incs, str(req.source), "-o", str(tmp / "harness")]
        kernel_cmds, entries, cached = [], [], {}
        for i in range(len(req.configs)) if req.split else ():  # each kernel half sees its own config alone
            own = tmp / f"k{i}"
            own.mkdir()
            (own / "tp_configs.inc").write_text(req.kernel_include(i))
            kernel_cmds.append([*flags, "-I", str(own), *incs, "-cubin", str(HARNESS_DIR / "kernel.cu"), "-o",
                                str(tmp / kernel_cubin(i))])
            entries.append(kernel_entry(cache, req, i, cutlass, nvcc))
            hit = None if rebuild else _load_kernel(entries[i])
            if hit:  # this config's kernel half, compiled before for another batch: the same source and flags
                shutil.copyfile(entries[i] / "kernel.cubin", tmp / kernel_cubin(i))
                kernel_cmds[i], cached[i] = hit[0], _Run(True, hit[1], None)
        todo = [i for i in range(len(kernel_cmds)) if i not in cached]
        start = time.monotonic()
        ran = _run_nvcc([cmd, *(kernel_cmds[i] for i in todo)], timeout_s, tmp, nice)
        seconds = time.monotonic() - start
        got = dict(zip(todo, ran[1:]))
        runs = [ran[0], *(cached.get(i) or got[i] for i in range(len(kernel_cmds)))]
        for i in todo:
            if got[i].ok:
                _store_kernel(entries[i], tmp / kernel_cubin(i), got[i].log, kernel_cmds[i], replace=rebuild)
        ok = all(r.ok for r in runs)
        # A failure's log is the failed halves' output, the kernel halves first; a success's is all of them, the
        # harness's first.
        failed = [r for r in reversed(runs) if not r.ok]
        log = "".join(r.log for r in (failed or runs))
        killed = [r.killed for r in runs if r.killed]
        if killed:
            log = f"tileprobe: {killed[0]}; not cached\n{log}"
        kernel_logs = [r.log for r in runs[1:]] if req.split else None
        (tmp / "build.log").write_text(log)
        result = BuildResult(req, ok, None, log, seconds, False, cmd, kernel_cmds if req.split else None, kernel_logs)
        if killed:  # a timeout, a signal or memory exhaustion says nothing about the config: do not cache
            return result
        meta = {"ok": ok, "seconds": seconds, "command": cmd, "configs": [c.name for c in req.configs]}
        if req.split:
            meta["kernel_commands"] = kernel_cmds
            for i, text in enumerate(kernel_logs):
                (tmp / kernel_log(i)).write_text(text)
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(tmp, final)
        except OSError:  # another process put it in place first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
        result.binary = final / "harness" if ok else None
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class _Run:
    ok: bool
    log: str
    killed: str | None  # why the result says nothing about the config (timeout, signal, out of memory)


def _run_nvcc(cmds: list[list[str]], timeout_s: float, cwd: Path, nice: int = 0) -> list[_Run]:
    """Run nvcc commands at the same time (threads waiting on processes), each under the timeout, at CPU priority
    `nice` (through coreutils' nice, so that every process nvcc starts has it; where there is none, unchanged)."""
    nice_exe = shutil.which("nice") if nice > 0 else None
    prefix = [nice_exe, "-n", str(min(19, nice))] if nice_exe else []

    def one(cmd: list[str]) -> _Run:
        try:
            proc = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            return _Run(False, f"{_text(exc.stdout)}{_text(exc.stderr)}", f"nvcc timed out after {timeout_s:.0f} s")
        log = proc.stdout + proc.stderr
        return _Run(proc.returncode == 0, log, killed_reason(proc.returncode, log))
    if len(cmds) == 1:
        return [one(cmds[0])]
    with ThreadPoolExecutor(max_workers=len(cmds)) as pool:
        return list(pool.map(one, cmds))


_OOM = re.compile(r"out of memory|cannot allocate memory|std::bad_alloc|virtual memory exhausted|Killed", re.I)


def killed_reason(returncode: int, log: str) -> str | None:
    """Why a failed compile says nothing about its config: killed by a signal (negative code, or 128+N from a
    wrapper), or the compiler ran out of memory. None for an ordinary result."""
    if returncode < 0:
        return f"nvcc killed by signal {-returncode}"
    if returncode in (137, 139, 143):
        return f"nvcc exited {returncode} (killed by signal {returncode - 128})"
    if returncode != 0 and _OOM.search(log):
        return "the compiler ran out of memory"
    return None


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")


_USED = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")


def parse_ptxas(log: str) -> dict:
    """Registers and spills of the GEMM kernel (the entry with the most registers) from `ptxas -v` output."""
    best: dict = {}
    # ptxas prints "Function properties for <f>", then stack/spill, then "Used N registers" for each entry.
    for block in log.split("Function properties for ")[1:]:
        used = _USED.search(block)
        if not used:
            continue
        spill = _SPILL.search(block)
        stack = _STACK.search(block)
        entry = {"regs": int(used.group(1)), "spill_stores": int(spill.group(1)) if spill else 0,
                 "spill_loads": int(spill.group(2)) if spill else 0, "stack": int(stack.group(1)) if stack else 0}
        if entry["regs"] > best.get("regs", -1):
            best = entry
    return best


_SMEM_ASSERT = re.compile(r"static assertion failed[^\n]*(SMEM usage exceeded capacity|shared memory)", re.I)
_NUMBERS = re.compile(r"SharedStorageSize\D{0,20}(\d+)\D{1,40}(\d+)")


def smem_static_assert(log: str) -> tuple[bool, int | None, int | None]:
    """Whether nvcc stopped on CUTLASS's SMEM static_assert, and (required, limit) when the log shows them."""
    if not _SMEM_ASSERT.search(log) and "SMEM usage exceeded capacity" not in log:
        return False, None, None
    m = _NUMBERS.search(log)
    return True, (int(m.group(1)) if m else None), (int(m.group(2)) if m else None)


STAGES_ASSERT = "Stages set to value 2 or more"


def too_few_stages(log: str) -> bool:
    """nvcc stopped because the mainloop got fewer than 2 stages: with an auto carveout, not even two pipeline
    stages fit in the shared memory CUTLASS budgets for the arch."""
    return "static assertion failed" in log and STAGES_ASSERT in log


def first_error(log: str) -> str:
    """The first line of a compiler log that says 'error', trimmed for a one-line reason."""
    for line in log.splitlines():
        if "error" in line.lower():
            line = re.sub(r"^.*?/(cutlass|cute)/", r"\1/", line.strip())
            return line[:240]
    return (log.strip().splitlines() or ["nvcc failed with no output"])[-1][:240]


def build_many(requests: list[BuildRequest], cutlass: CutlassTree, nvcc: Nvcc, cache: Path, jobs: int,
               timeout_s: float, label: str = "compiling", rebuild: bool = False,
               progress: bool = True, on_result=None) -> list[BuildResult]:
    """Build in parallel (threads waiting on nvcc processes), with a rich progress bar unless `progress` is False
    (when the caller already shows one: rich allows one live display); results in input order. `on_result(i,
    result)`, when given, is called in this thread as each build finishes (so its rows can be written then)."""
    results: list[BuildResult | None] = [None] * len(requests)
    if not requests:
        return []
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), transient=True) if progress else None
    with bar or nullcontext(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        task = bar.add_task(label, total=len(requests)) if bar else None
        futures = {pool.submit(build, r, cutlass, nvcc, cache, timeout_s, rebuild): i for i, r in enumerate(requests)}
        try:
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                if on_result is not None:
                    on_result(futures[fut], results[futures[fut]])
                if bar:
                    bar.advance(task)
        except BaseException:  # an EnvironmentFault (or ^C): the builds not started yet are not started
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [r for r in results if r is not None]
