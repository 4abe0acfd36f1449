"""Building and caching harness binaries.

A build is keyed by a content hash of everything that changes the binary (harness sources, rendered configs, CUTLASS
tree, nvcc version, flags) and named readably after its configs. Builds are written into a temporary folder inside
the cache and renamed into place, under a file lock taken as check, lock, check, so two sweeps can share a cache.
Failed compiles are cached too (they are as deterministic as successful ones), with their full log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.errors import UsageError
from tileprobe.families import Config
from tileprobe.toolchain import CutlassTree, Nvcc


def _harness_dir() -> Path:
    """TILEPROBE_HARNESS_DIR, else the checkout's cutlass_harness/ (editable install), else the installed copy."""
    if os.environ.get("TILEPROBE_HARNESS_DIR"):
        return Path(os.environ["TILEPROBE_HARNESS_DIR"])
    here = Path(__file__).resolve().parent
    checkout = here.parent / "cutlass_harness"
    return checkout if (checkout / "kernels.cuh").is_file() else here / "cutlass_harness"


HARNESS_DIR = _harness_dir()
COMMON_FLAGS = ["-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", "-diag-suppress", "20012,20013,20014,20015"]
DEFAULT_COMPILE_TIMEOUT_S = 1200


def cache_root(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        root = Path(explicit)
    elif os.environ.get("TILEPROBE_CACHE_DIR"):
        root = Path(os.environ["TILEPROBE_CACHE_DIR"])
    else:
        from platformdirs import user_cache_dir  # noqa: PLC0415

        root = Path(user_cache_dir("tileprobe"))
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
            # Sizes only: the device pass parses the headers but instantiates no kernel, so there is no ptxas work.
            gencode = [f"-gencode=arch=compute_{num}a,code=compute_{num}a", "-O0"]
        defines = [f"-DTP_FAMILY_KERNEL={self.configs[0].fam.kernel_template}", f"-DTP_ARCH={num}"]
        if self.kind == "describe" and self.with_device:
            defines.append("-DTP_WITH_DEVICE")
        return COMMON_FLAGS + gencode + defines

    def config_include(self) -> str:
        return "".join(c.cfg_macro(i) + "\n" for i, c in enumerate(self.configs))

    def readable_name(self) -> str:
        if len(self.configs) == 1:
            return f"{self.kind}-{self.configs[0].name}{'' if self.with_device else '-sizes'}"
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

    def ptxas(self) -> dict:
        return parse_ptxas(self.log)


def cache_key(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc) -> str:
    h = hashlib.sha256()
    for path in sorted({req.source, HARNESS_DIR / "kernels.cuh"}):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(req.config_include().encode())
    h.update(json.dumps(req.flags()).encode())
    h.update(cutlass.tree_hash.encode())
    h.update(nvcc.version_text.encode())
    return h.hexdigest()[:16]


def build(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc, cache: Path, timeout_s: float) -> BuildResult:
    """Return the cached build or compile it. Never raises for a compile failure: the result carries the log."""
    key = cache_key(req, cutlass, nvcc)
    final = cache / f"{req.readable_name()}-{key}"
    hit = _load(final, req)
    if hit:
        return hit
    with FileLock(str(final) + ".lock"):
        hit = _load(final, req)
        if hit:
            return hit
        return _compile(req, cutlass, nvcc, cache, final, timeout_s)


def _load(entry: Path, req: BuildRequest) -> BuildResult | None:
    meta_path = entry / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    binary = entry / "harness"
    return BuildResult(req, meta["ok"], binary if meta["ok"] else None, (entry / "build.log").read_text(),
                       meta["seconds"], True, meta["command"])


def _compile(req: BuildRequest, cutlass: CutlassTree, nvcc: Nvcc, cache: Path, final: Path,
             timeout_s: float) -> BuildResult:
    nvcc.check_arch(req.arch)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        (tmp / "tp_configs.inc").write_text(req.config_include())
        cmd = [str(nvcc.path), *req.flags(), "-I", str(HARNESS_DIR), "-I", str(tmp)]
        for inc in cutlass.include_dirs:
            cmd += ["-I", str(inc)]
        cmd += [str(req.source), "-o", str(tmp / "harness")]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
            ok, log = proc.returncode == 0, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            ok = False
            log = f"tileprobe: nvcc timed out after {timeout_s:.0f} s\n{_text(exc.stdout)}{_text(exc.stderr)}"
            timed_out = True
        else:
            timed_out = False
        seconds = time.monotonic() - start
        (tmp / "build.log").write_text(log)
        result = BuildResult(req, ok, None, log, seconds, False, cmd)
        if timed_out:  # not deterministic: do not cache
            return result
        (tmp / "meta.json").write_text(json.dumps({"ok": ok, "seconds": seconds, "command": cmd,
                                                   "configs": [c.name for c in req.configs]}))
        try:
            os.rename(tmp, final)
        except OSError:  # another process put it in place first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
        result.binary = final / "harness" if ok else None
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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
               timeout_s: float, label: str = "compiling") -> list[BuildResult]:
    """Build in parallel (threads waiting on nvcc processes), with a rich progress bar; results in input order."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    results: list[BuildResult | None] = [None] * len(requests)
    if not requests:
        return []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as progress, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        task = progress.add_task(label, total=len(requests))
        futures = {pool.submit(build, r, cutlass, nvcc, cache, timeout_s): i for i, r in enumerate(requests)}
        from concurrent.futures import as_completed  # noqa: PLC0415

        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            progress.advance(task)
    return [r for r in results if r is not None]
