"""What the FlashInfer families share: the FlashInfer release the engine pins (found, unpacked, or the nearest one
here when it is not), the arch FlashInfer's JIT compiles for a compute capability (its own function, run here),
and `sizeof`-style numbers compiled with nvcc from the release's own headers (cached by content).

- `release(ctx)`: the engine's pin (its wheel's Requires-Dist), the wheel or install of that release
  (tileprobe.engines.locate), unpacked once (tileprobe.engines.packages.unpack_flashinfer); a release found nowhere
  falls back to the nearest one here (same base release first, else the next newer one, which carries the pinned
  release's changes, else the next older one), and every answer says so.
- `jit_arch(rel, cc, majors)`: `CompilationContext._normalize_cuda_arch` from the release's compilation_context.py,
  run here for the target's capability at CUDA 12.8 and 13.0, then the module's `supported_major_versions` filter.
- `compile_numbers(rel, ctx, name, source, extra_includes)`: a host-only translation unit that prints
  `key value` lines, built once per (header tree hash, source, nvcc) and cached as JSON under the cache folder.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import re
import subprocess
import tempfile
import textwrap
import threading
import types
from dataclasses import dataclass
from pathlib import Path

from tileprobe.audit.path.call import CompiledAnswer, unanswered
from tileprobe.backends.cutlass.content_hash import folder_hash
from tileprobe.backends.cutlass.toolchain import find_nvcc
from tileprobe.engines import locate, packages
from tileprobe.errors import ToolchainError, UsageError

DIST = locate.FLASHINFER_DIST
CUDA_LEVELS = ("12.8", "13.0")  # the CUDA releases the arch answer is given for (12.8: first with sm_120)


@dataclass(frozen=True)
class Release:
    version: str  # the release read
    pinned: str | None  # what the engine pins (None: not read)
    package: packages.Package
    root: Path  # the unpacked flashinfer package folder (flashinfer/)
    note: str  # "" when the pinned release was read, else the fallback in words

    def label(self) -> str:
        return f"flashinfer-python {self.version}"

    def text(self, rel: str) -> str:
        """A file of the package by its path under flashinfer/ (unpacked, else read from the wheel)."""
        p = self.root / rel
        if p.is_file():
            return p.read_text(errors="replace")
        return self.package.read(f"flashinfer/{rel}")

    def line_of(self, rel: str, pattern: str, start: int = 0) -> tuple[int, str] | None:
        """(1-based line, stripped text) of the first line at or after `start` matching `pattern`."""
        rx = re.compile(pattern)
        for i, ln in enumerate(self.text(rel).splitlines()[start:], start + 1):
            if rx.search(ln):
                return i, ln.strip()
        return None


def _engine_pin(src) -> str | None:
    if src is None:
        return None
    kind, origin = getattr(src, "kind", None), getattr(src, "origin", None)
    if kind == "wheel" and origin:
        pkg = packages.from_wheel(Path(origin))
    else:
        pkg = packages.installed(getattr(src, "engine", ""))
    return pkg.pin(DIST) if pkg is not None else None


def release(ctx) -> Release | str:
    """The FlashInfer the engine pins (or the nearest here), unpacked; a string saying why when none can be read.
    Memoized in ctx.memo for the audit."""
    if "flashinfer-release" in ctx.memo:
        return ctx.memo["flashinfer-release"]
    ctx.memo["flashinfer-release"] = out = _release(ctx)
    return out


def _release(ctx) -> Release | str:
    src = ctx.engine_source
    label = src.label() if hasattr(src, "label") else "the engine"
    try:
        pin = _engine_pin(src)
    except UsageError as exc:
        pin, why_pin = None, str(exc).splitlines()[0]
    else:
        why_pin = "" if pin else f"{label} pins no flashinfer-python release"
    fi = getattr(ctx, "flashinfer", None)
    if fi is not None and str(getattr(fi, "origin", "")).endswith(".whl"):
        pkg = packages.from_wheel(Path(fi.origin))
    else:
        pkg = None
    note = ""
    if pkg is not None and pin and pkg.version != pin:
        note = f"{label} pins flashinfer-python {pin}; the FlashInfer given is {pkg.version}, read instead"
    if pkg is None and pin:
        beside = Path(src.origin).parent if getattr(src, "kind", "") == "wheel" else None
        try:
            pkg = locate.find_release(DIST, pin, beside=beside)
        except UsageError:
            pkg = None
    if pkg is None:
        found = locate.releases(DIST)
        pkg = locate.nearest(pin, found) if pin else max(found, key=lambda p: locate.version_key(p.version), default=None)
        if pkg is None:
            return (f"{label} pins flashinfer-python {pin}, and no FlashInfer release is installed or cached here "
                    f"({locate.fetch_help(DIST, pin)})" if pin else f"{why_pin}; and no FlashInfer release is here")
        note = (f"{label} pins flashinfer-python {pin}, which is not installed or cached here: read "
                f"{pkg.version}, the nearest release here, instead" if pin else
                f"{why_pin}: read flashinfer-python {pkg.version}, the newest here")
    try:
        root = packages.unpack_flashinfer(pkg, ctx.cache_dir)
    except (OSError, UsageError) as exc:
        return f"cannot unpack flashinfer-python {pkg.version} ({pkg.where}): {exc}"
    return Release(pkg.version, pin, pkg, Path(root), note)


# ---- the JIT's arch ---------------------------------------------------------------------------------------------

CONTEXT_FILE = "compilation_context.py"


def _normalizer(rel: Release, cuda: str):
    """CompilationContext._normalize_cuda_arch of the release, with its CUDA-version query answered for `cuda`."""
    text = rel.text(CONTEXT_FILE)
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CompilationContext")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_normalize_cuda_arch")
    code = textwrap.dedent(ast.get_source_segment(text, fn))
    level = tuple(int(x) for x in cuda.split("."))

    def at_least(v: str) -> bool:
        return level >= tuple(int(x) for x in v.split("."))

    def imp(name, globals=None, locals=None, fromlist=(), level_=0):
        if name.endswith("cpp_ext"):
            return types.SimpleNamespace(is_cuda_version_at_least=at_least)
        return builtins.__import__(name, globals, locals, fromlist, level_)

    ns: dict = {"__builtins__": {**builtins.__dict__, "__import__": imp}}
    exec(compile(code, f"flashinfer/{CONTEXT_FILE}", "exec"), ns)  # noqa: S102 - the release's own function
    return ns["_normalize_cuda_arch"], fn.lineno


@dataclass(frozen=True)
class JitArch:
    ok: bool | None
    answer: str
    arch: str | None  # the nvcc target at the newest CUDA level (sm_120f, sm_121a, sm_90a), None: none


def jit_arch(rel: Release, cc: str, majors: list[int] | None = None, where: str = "") -> JitArch:
    """The -gencode FlashInfer's JIT passes for capability `cc` (its own normalization, run here), filtered by the
    module's supported_major_versions (`majors`, quoted at `where`)."""
    major, minor = (int(x) for x in cc.split("."))
    got: dict[str, str | None] = {}
    line = 0
    try:
        for cuda in CUDA_LEVELS:
            fn, line = _normalizer(rel, cuda)
            try:
                mj, mn = fn(major, minor)
                got[cuda] = f"sm_{mj}{mn}"
            except RuntimeError as exc:
                got[cuda] = None
                got[cuda + "!"] = str(exc)
    except (StopIteration, SyntaxError, TypeError, ValueError, AttributeError, KeyError, OSError) as exc:
        return JitArch(None, f"{rel.label()} {CONTEXT_FILE}: CompilationContext._normalize_cuda_arch not read "
                             f"({type(exc).__name__})", None)
    newest = got[CUDA_LEVELS[-1]]
    said = ", ".join(f"CUDA {c}: {got[c] or 'none (' + got.get(c + '!', '') + ')'}" for c in CUDA_LEVELS)
    head = (f"{rel.label()} JIT-compiles with nvcc at first use for the visible GPUs' capabilities "
            f"(FLASHINFER_CUDA_ARCH_LIST overrides); {CONTEXT_FILE}:{line} "
            f"CompilationContext._normalize_cuda_arch({major}, {minor}), run here: {said}")
    if majors is not None and major not in majors:
        return JitArch(False, f"{head}; but this module passes supported_major_versions={majors} ({where}), so "
                              f"get_nvcc_flags_list raises 'No supported CUDA architectures found' for cc {cc}: no "
                              "code for it", None)
    if newest is None:
        return JitArch(False, f"{head}: no code for cc {cc}", None)
    scope = f" ({where})" if where else ""
    return JitArch(True, f"{head}; -gencode=arch=compute_{newest[3:]},code={newest} for cc {cc}{scope}", newest)


def prebuilt_note(rel: Release) -> str:
    """Whether prebuilt modules (flashinfer-jit-cache / flashinfer-cubin) could replace the JIT build here."""
    have = [d for d in ("flashinfer-jit-cache", "flashinfer-cubin") if packages.installed(d) is not None]
    sel = rel.line_of("jit/_cuda_architecture.py", r"def cuda_binary_target_compatibility_score")
    where = f" (jit/_cuda_architecture.py:{sel[0]}: an 'a' build runs only on its exact cc, 'f' on later minors)" \
        if sel else ""
    if have:
        return (f"{' and '.join(have)} installed here: a prebuilt module is used when its arch list covers the "
                f"target{where}")
    return f"no flashinfer-jit-cache / flashinfer-cubin here: modules are built by the JIT{where}"


# ---- compiled numbers -------------------------------------------------------------------------------------------

def _include_dirs(rel: Release, cutlass: bool) -> list[Path]:
    data = rel.root / "data"
    dirs = [data / "include", data / "cccl" / "cub", data / "cccl" / "libcudacxx" / "include",
            data / "cccl" / "thrust"]
    if cutlass:
        dirs.append(data / "cutlass" / "include")
    return dirs


def _nvcc() -> tuple[str, str] | None:
    try:
        nv = find_nvcc()
    except ToolchainError:
        return None
    return str(nv.path), nv.version_text


def compile_numbers(rel: Release, ctx, name: str, source: str, cutlass: bool = False,
                    timeout_s: float = 600) -> tuple[dict[str, str] | None, str]:
    """Build `source` (a host-only .cu printing `key value` lines) against the release's headers and run it; the
    numbers, or None and why. Cached by (header tree hash, source, nvcc version) in <cache>/flashinfer-sizes/."""
    nv = _nvcc()
    if nv is None:
        return None, "no nvcc here"
    memo_key = ("flashinfer-tree", str(rel.root))
    tree = ctx.memo.get(memo_key)
    if tree is None:
        tree = ctx.memo[memo_key] = folder_hash(rel.root / "data" / "include")
    key = hashlib.sha256("\0".join([tree, rel.version, source, nv[1], str(cutlass)]).encode()).hexdigest()[:20]
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:  # one build per key in this process, whichever thread asks first
        if ("compiled", key) not in ctx.memo:
            ctx.memo[("compiled", key)] = _compile(rel, ctx, name, source, cutlass, timeout_s, nv, key)
    return ctx.memo[("compiled", key)]


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _compile(rel: Release, ctx, name: str, source: str, cutlass: bool, timeout_s: float, nv: tuple[str, str],
             key: str) -> tuple[dict[str, str] | None, str]:
    out_dir = Path(ctx.cache_dir) / "flashinfer-sizes"
    hit = out_dir / f"{name}-{key}.json"
    if hit.is_file():
        try:
            nums = json.loads(hit.read_text())
        except (OSError, ValueError):
            nums = None
        if nums is not None:
            if "__error__" in nums:
                return nums, f"nvcc {nv[1]} refused it (cached): {nums['__error__']}"
            return nums, f"compiled by nvcc {nv[1]} (cached: {hit.name})"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=out_dir) as tmp:
        cu, exe = Path(tmp) / f"{name}.cu", Path(tmp) / name
        cu.write_text(source)
        cmd = [nv[0], "-std=c++17", "-O0", "-gencode=arch=compute_90a,code=compute_90a", "-w",
               "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_FP8_E4M3",
               "-DFLASHINFER_ENABLE_FP8_E5M2", *[f"-I{d}" for d in _include_dirs(rel, cutlass)], "-o", str(exe),
               str(cu)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"nvcc failed to run ({type(exc).__name__})"
        if p.returncode != 0:
            msg = _first_error(p.stdout + p.stderr).replace(f"{tmp}/", "")
            _store(hit, {"__error__": msg})
            return {"__error__": msg}, f"nvcc {nv[1]} refused it: {msg}"
        try:
            r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"the sizes program did not run ({type(exc).__name__})"
    nums = {}
    for ln in r.stdout.splitlines():
        k, _, v = ln.partition(" ")
        if k:
            nums[k] = v.strip()
    _store(hit, nums)
    return nums, f"compiled by nvcc {nv[1]}"


def _store(hit: Path, nums: dict) -> None:
    tmp_hit = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp_hit.write_text(json.dumps(nums, sort_keys=True))
    os.replace(tmp_hit, hit)


def _first_error(log: str) -> str:
    for ln in log.splitlines():
        if "static assertion failed" in ln or "static_assert" in ln or " error" in ln:
            return ln.strip()[:300]
    return (log.strip().splitlines() or ["no output"])[0][:300]


def failed(kernel: str, exc: Exception) -> CompiledAnswer:
    """The answer of a call whose reading failed: every part unanswered, naming what went wrong."""
    first = (str(exc).splitlines() or [""])[0][:200]
    why = f"FlashInfer's files could not be read as expected ({type(exc).__name__}: {first})"
    return CompiledAnswer(kernel, unanswered(why), unanswered(why), unanswered(why))


def host_only(body: str) -> str:
    """A translation unit whose device pass is empty: every number is read by the host compile."""
    return "#ifndef __CUDA_ARCH__\n#include <cstdio>\n" + body.strip() + "\n#endif\n"


__all__ = ["Release", "JitArch", "release", "jit_arch", "prebuilt_note", "compile_numbers", "host_only", "failed"]
