"""`tileprobe doctor`: one line per thing a run needs, `ok` or what is wrong and the command that fixes it.

It finds nvcc and CUTLASS exactly as a sweep does (--nvcc, CUDA_HOME / CUDA_PATH, PATH; --cutlass-dir,
TILEPROBE_CUTLASS_DIR, flashinfer's bundled copy, nvidia-cutlass), runs the sweep's own preflight compile
(tileprobe.preflight, cached by content), and reads the Triton release, the engines and flashinfer without importing
them. What a run needs depends on the question: a CUTLASS sweep (no --engine) needs nvcc, a complete CUTLASS tree,
a host compiler and the cache; a triton-moe run (--engine vllm|sglang) needs the engines' Triton and that engine's
files, and not nvcc. A missing needed item makes the exit code 2; an item that only some runs need is reported
(`warn`) without failing. A GPU is never needed: without one, answers are static.

Whatever the question, what every engine or Triton run would use must be a release tileprobe answers for: the
engine each command would read (the install first, then the wheel cache; --engine-wheel for --engine's engine) must
have a manifest its files match (tileprobe.engines.manifest), and the installed Triton must be the engines' pinned
release; otherwise that line fails (exit 2), with a fix that changes what the runs read (for an install, which is
read before any cached wheel: --engine-wheel with a wheel of a release tileprobe answers for, checked by the doctor
command the line prints), unless --rules-off / --any-triton ask for it as it is.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from tileprobe import preflight
from tileprobe.backends.cutlass import build as cutlass_build
from tileprobe.backends.cutlass import toolchain as cutlass_tc
from tileprobe.backends.triton import toolchain as triton_tc
from tileprobe.engines import locate, manifest, triton_configs
from tileprobe.errors import EnvironmentFault, ToolchainError, UsageError
from tileprobe.families import arch_for, family_for_cc
from tileprobe.targets import NoDevice, query_devices, resolve_target

ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
NVCC_FIX = "export CUDA_HOME=<the CUDA toolkit folder> (or pass --nvcc, or put nvcc on PATH)"
FLASHINFER = "flashinfer-python"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # the command that fixes it (when not ok)
    needed: bool = True  # a run of the question asked needs it: not ok then fails the doctor

    @property
    def fails(self) -> bool:
        return self.needed and not self.ok


def triton_version() -> str | None:
    """The installed Triton's release, or None (the seam tests replace)."""
    found = triton_tc.installed()
    return found.version if found else None


def diagnose(engine: str | None = None, target: str | None = None, cutlass_dir: str | None = None,
             nvcc: str | None = None, cache_dir: str | None = None, engine_wheel: str | None = None,
             rules_off: bool = False, any_triton: bool = False) -> list[Check]:
    """Every check, in the order a run meets them."""
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected vllm or sglang")
    if engine_wheel is not None and engine is None:
        raise UsageError("--engine-wheel is read for --engine's engine: name it (--engine vllm|sglang)")
    tgt, _ = resolve_target(target, None)
    cutlass_run = engine is None
    out: list[Check] = []
    nv = tree = None
    try:
        nv = cutlass_tc.find_nvcc(nvcc)
        out.append(Check("nvcc", True, f"{nv.version_text} at {nv.path}", needed=cutlass_run))
    except ToolchainError as exc:
        out.append(Check("nvcc", False, str(exc), NVCC_FIX, needed=cutlass_run))
    try:
        tree = cutlass_tc.find_cutlass(cutlass_dir)
        missing = cutlass_tc.missing_parts(tree)
        where = f"CUTLASS {tree.version} at {preflight.cutlass_root(tree)} ({tree.source})"
        if missing:
            out.append(Check("CUTLASS", False, f"{where} has no {missing}", preflight.CUTLASS_FIX, cutlass_run))
            tree = None
        else:
            out.append(Check("CUTLASS", True, f"{where}, complete (include/, {cutlass_tc.UTIL_INCLUDE})",
                             needed=cutlass_run))
    except ToolchainError as exc:
        out.append(Check("CUTLASS", False, str(exc), preflight.CUTLASS_FIX, cutlass_run))
    host, host_path = cutlass_tc.host_compiler()
    out.append(Check("host compiler", bool(host_path), f"{host} at {host_path}" if host_path else
                     "no gcc or c++ on PATH (nvcc needs one)", "install g++ (e.g. apt-get install g++), or set "
                     "NVCC_CCBIN", cutlass_run))
    if nv is not None and tree is not None:  # else the line above already names what is missing
        out.append(_compile_check(nv, tree, tgt, cache_dir, cutlass_run))
    out.append(_triton_check(not cutlass_run, any_triton))
    if not cutlass_run and out[-1].ok:  # a triton-moe run: does this Triton compile for the target at all?
        out.append(_triton_compile_check(tgt.cc_int, cache_dir))
    for name, label in ENGINES.items():
        out.append(_engine_check(name, label, engine == name, engine_wheel if engine == name else None, rules_off))
    out.append(_flashinfer_check())
    out.append(_torch_check())
    out.append(_gpu_check())
    out.append(_cache_check(cache_dir))
    return out


def _compile_check(nv, tree, tgt, cache_dir, needed: bool) -> Check:
    fam = family_for_cc(tgt.cc)
    arch = arch_for(fam, tgt.cc) or fam.archs[0]
    name = f"compile ({arch})"
    try:
        preflight.check_arch(tree, nv, cutlass_build.cache_root(cache_dir), arch)
    except EnvironmentFault as exc:
        return Check(name, False, exc.what, "", needed)
    except ToolchainError as exc:
        return Check(name, False, str(exc), "install a newer CUDA toolkit", needed)
    return Check(name, True, f"nvcc compiles for {arch} against CUTLASS {tree.version} with the harness's flags",
                 needed=needed)


def _triton_check(needed: bool, any_triton: bool = False) -> Check:
    """Triton: not installed fails only a run that needs it; another release than the engines' pin fails every
    question (each command that compiles would use it), unless --any-triton asks for its bytes."""
    version = triton_version()
    want = triton_tc.ENGINE_TRITON
    if version is None:
        return Check("triton", False, "not installed", "pip install 'tileprobe[triton]'", needed)
    if version != want:
        if any_triton:
            return Check("triton", True, f"triton {version} (--any-triton: its bytes, not those of the triton "
                                         f"{want} that {triton_tc.ENGINES_PINNING} run; every stated rule keyed by "
                                         f"{want} declines)", needed=needed)
        return Check("triton", False, f"triton {version} installed, but {triton_tc.ENGINES_PINNING} pin "
                                      f"triton~={want} (their bytes differ): tileprobe cannot answer for it",
                     f"pip install 'triton=={want}' (or pass --any-triton to size with {version})")
    return Check("triton", True, f"triton {version}, the engines' release", needed=needed)


def _triton_compile_check(cc: int, cache_dir: str | None) -> Check:
    name = f"triton compile (sm_{cc})"
    try:
        preflight.check_triton(triton_tc.installed(), cc, cache_dir)
    except EnvironmentFault as exc:
        return Check(name, False, exc.what)
    return Check(name, True, f"triton compiles a kernel for sm_{cc}")


def _engine_check(name: str, label: str, needed: bool, wheel: str | None = None, rules_off: bool = False) -> Check:
    """The engine every command would read (the same lookup: --engine-wheel, the install, the wheel cache): a release
    tileprobe has a manifest for, its files matching, or a failure whatever the question (a run would read it)."""
    known = manifest.releases(name)
    try:
        src = triton_configs.find_engine(name, wheel)
    except UsageError as exc:
        if wheel is not None:
            return Check(label, False, str(exc).splitlines()[0], "", needed)
        return Check(label, False, f"{label} ({', '.join(known)}): not installed and no wheel in "
                                   f"{', '.join(str(d) for d in triton_configs.wheel_dirs())}",
                     f"tileprobe engines fetch {name}", needed)
    try:
        banner = manifest.check(src, rules_off).text
    except UsageError as exc:
        return Check(label, False, str(exc).split("; --rules-off")[0], _engine_fix(name, src))
    if banner:
        return Check(label, True, f"{label} {src.version} ({src.origin}); {banner}", needed=needed)
    return Check(label, True, f"{label} {src.version} ({src.origin}), a release tileprobe answers for",
                 needed=needed)


def _engine_fix(name: str, src) -> str:
    """What makes every command read a release tileprobe answers for (and the doctor command that checks it)."""
    good = [p for p in locate.releases(name) if p.wheel is not None and manifest.supported(name, p.version)
            and manifest.check_package(name, p, rules_off=True).text == ""]
    newest = max(good, key=lambda p: locate.version_key(p.version), default=None)
    if src.kind == "installed":  # read before any cached wheel: only an explicit wheel (or another install) wins
        if newest is None:
            return (f"tileprobe engines fetch {name}=={manifest.releases(name)[-1]}, then pass --engine-wheel with "
                    f"the wheel it prints to every command (the installed {src.version} is read first), or "
                    f"--rules-off to read {src.version} with every stated rule off")
        return (f"tileprobe doctor --engine {name} --engine-wheel {newest.wheel} (and the same --engine-wheel on every"
                f" command: the installed {src.version} is read before the wheel cache), or pip install "
                f"{name}=={newest.version}, or --rules-off to read {src.version} with every stated rule off")
    if newest is not None:  # a cached wheel picked by version: name the good one
        return (f"tileprobe doctor --engine {name} --engine-wheel {newest.wheel} (and the same --engine-wheel on every "
                f"command), or --rules-off")
    return f"tileprobe engines fetch {name}=={manifest.releases(name)[-1]}, or --rules-off"


def _torch_check() -> Check:
    """torch: `tileprobe audit` runs the engines' launchers on its meta tensors (found, not imported)."""
    if importlib.util.find_spec("torch") is None:
        return Check("torch", False, "not installed (tileprobe audit runs the engines' launchers on torch meta "
                                     "tensors)", "pip install 'tileprobe[audit]'", needed=False)
    return Check("torch", True, f"torch {md.version('torch')} (tileprobe audit)", needed=False)


def _flashinfer_check() -> Check:
    try:
        return Check("flashinfer", True, f"{FLASHINFER} {md.version(FLASHINFER)} installed", needed=False)
    except md.PackageNotFoundError:
        pass
    wheels = [p for d in triton_configs.wheel_dirs() if d.is_dir() for p in sorted(d.glob("flashinfer_python-*.whl"))]
    if wheels:
        return Check("flashinfer", True, f"not installed; wheel(s) cached: {', '.join(p.name for p in wheels)}",
                     needed=False)
    return Check("flashinfer", False, "not installed and no wheel cached (the flashinfer-moe family and the "
                                      "default CUTLASS tree need it)", f"pip install {FLASHINFER}", needed=False)


def _gpu_check() -> Check:
    try:
        devs = query_devices()
    except NoDevice as exc:
        return Check("GPU", True, f"none ({exc}): static answers only", needed=False)
    shown = "; ".join(f"{d.gpu_index}: {d.device_name} (sm_{d.cc_int}, driver {d.driver or '?'})" for d in devs)
    return Check("GPU", True, shown or "none: static answers only", needed=False)


def _size(root: Path) -> int:
    total = 0
    for d, _, names in os.walk(root):
        for n in names:
            try:
                total += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass
    return total


def _cache_check(cache_dir: str | None) -> Check:
    try:
        root = cutlass_build.cache_root(cache_dir)
    except UsageError as exc:
        return Check("cache", False, str(exc), "export TILEPROBE_CACHE_DIR=<a writable folder>")
    if not os.access(root, os.W_OK):
        return Check("cache", False, f"{root} is not writable", "export TILEPROBE_CACHE_DIR=<a writable folder>")
    return Check("cache", True, f"{root} ({_size(root) / 2**20:.1f} MiB)", needed=True)


def lines(checks: list[Check], terminal: bool) -> list[str]:
    """One line per check: rich markup with a tick or a cross on a terminal, plain words otherwise."""
    out = []
    for c in checks:
        word = "ok" if c.ok else ("FAIL" if c.needed else "warn")
        text = f"{c.name}: {c.detail}" + (f"; fix: {c.fix}" if not c.ok and c.fix else "")
        if terminal:
            mark = "[green]✓[/]" if c.ok else ("[red]✗[/]" if c.needed else "[yellow]![/]")
            out.append(f"{mark} {escape(text)}")
        else:
            out.append(f"{word:<4} {text}")
    bad = [c for c in checks if c.fails]
    out.append(f"{len(bad)} problem(s) a run of this kind needs fixed" + (f": {', '.join(c.name for c in bad)}"
                                                                         if bad else ""))
    return out


def exit_code(checks: list[Check]) -> int:
    return 2 if any(c.fails for c in checks) else 0
