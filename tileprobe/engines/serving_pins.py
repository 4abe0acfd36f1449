"""What a serving engine runs of FlashInfer's CUTLASS fused MoE: the flashinfer release it pins, and whether gemm2
fuses the finalize epilogue, read from the engine's own package (an install or a wheel) and never assumed.

- vLLM calls `flashinfer_cutlass_fused_moe(...)` (`vllm/utils/flashinfer.py`: a lazy wrapper of
  `flashinfer.fused_moe.cutlass_fused_moe`) from its FlashInfer CUTLASS experts; when that call passes no
  `use_fused_finalize`, the mode is the pinned flashinfer's own default, read from its `fused_moe/core.py`.
- SGLang passes `use_fused_finalize=envs.<VAR>.get()` from its MoE runner; the variable's default is read from
  `sglang/srt/environ.py` (`<VAR> = EnvBool(...)`), and its value here from this process's environment, parsed as
  SGLang's EnvBool parses it.
- plain flashinfer: its `cutlass_fused_moe` signature default.

Every file or construct that is missing or reads otherwise raises UsageError naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tileprobe.engines import locate, packages
from tileprobe.errors import UsageError

ENGINES = ("vllm", "sglang", "flashinfer")
FLASHINFER_DIST = locate.FLASHINFER_DIST
VLLM_CALLER = "vllm/model_executor/layers/fused_moe/experts/flashinfer_cutlass_moe.py"
VLLM_WRAPPER = "vllm/utils/flashinfer.py"
SGLANG_CALLER = "sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py"
SGLANG_ENVIRON = "sglang/srt/environ.py"
FLASHINFER_CORE = Path("fused_moe") / "core.py"
_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")  # SGLang's EnvBool.parse


@dataclass(frozen=True)
class Finalize:
    mode: str  # on / off
    why: str  # where it was read, in words
    env_var: str | None = None  # the engine's switch, when it has one


@dataclass(frozen=True)
class EnginePin:
    engine: str  # vllm / sglang / flashinfer
    version: str  # the engine's own version (flashinfer: the flashinfer release)
    flashinfer: str  # the flashinfer-python release it pins
    where: str  # the wheel or install read
    package: packages.Package | None  # the engine's package (None for plain flashinfer)

    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def slug(self) -> str:
        return f"{self.engine}-{self.version}"


def parse_engine(spec: str) -> tuple[str, str | None]:
    """`vllm` or `vllm==VERSION` -> (engine, version or None); UsageError for an engine not read here."""
    name, _, version = spec.partition("==")
    name = name.strip().lower()
    if name not in ENGINES:
        raise UsageError(f"--engine {spec!r}: expected one of {', '.join(ENGINES)} (optionally NAME==VERSION)")
    return name, version.strip() or None


def read_pin(spec: str, wheels: Path | None) -> EnginePin:
    """The engine's version and the flashinfer release it pins, from `wheels` (--engine-wheel: a wheel or a folder of
    them), else the install, else the wheel cache (locate.find_release)."""
    name, version = parse_engine(spec)
    if name == "flashinfer":
        fi = locate.find_release(FLASHINFER_DIST, version, wheels)
        return EnginePin(name, fi.version, fi.version, fi.where, None)
    pkg = locate.find_release(name, version, wheels)
    return EnginePin(name, pkg.version, pkg.pin(FLASHINFER_DIST), pkg.where, pkg)


def _calls(text: str, func: str) -> list[str]:
    """The argument text of every call `func(...)` (not a definition, not an attribute or a longer name)."""
    out = []
    for m in re.finditer(rf"(?<![\w.]){re.escape(func)}\(", text):
        if re.search(r"def\s+$", text[:m.start()][-8:]):
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def flashinfer_default(flashinfer_dir: Path, version: str) -> Finalize:
    """cutlass_fused_moe's own default for use_fused_finalize in this flashinfer (its fused_moe/core.py)."""
    path = Path(flashinfer_dir) / FLASHINFER_CORE
    if not path.is_file():
        raise UsageError(f"flashinfer {version}: no {path}")
    text = path.read_text(errors="replace")
    m = re.search(r"\ndef cutlass_fused_moe\((.*?)\)\s*(?:->[^:]*)?:(.*?)(?=\ndef |\Z)", text, re.S)
    sig = re.search(r"use_fused_finalize\s*:\s*([^=,]+?)\s*=\s*(\w+)\s*,", m.group(1)) if m else None
    if not sig:
        raise UsageError(f"structure not recognized in {path}: no `use_fused_finalize: ... = ...` in "
                         "cutlass_fused_moe's signature")
    default = sig.group(2)
    where = f"flashinfer {version} fused_moe/core.py, cutlass_fused_moe(use_fused_finalize: {sig.group(1)} = {default})"
    if default == "True":
        return Finalize("on", where)
    if default == "False":
        return Finalize("off", where)
    if default == "None" and re.search(r"use_fused_finalize\s*=\s*not\s+torch\.are_deterministic_algorithms_enabled"
                                       r"\(\)", m.group(2)):
        return Finalize("on", where + ", which becomes `not torch.are_deterministic_algorithms_enabled()`: on "
                                      "unless the caller enabled torch's deterministic algorithms")
    raise UsageError(f"structure not recognized in {path}: use_fused_finalize defaults to {default!r} and is "
                     "resolved in a way not read here")


def _vllm(pkg: packages.Package, flashinfer_dir: Path, fi_version: str) -> Finalize:
    wrapper = pkg.read(VLLM_WRAPPER)
    if not re.search(r"flashinfer_cutlass_fused_moe\s*=\s*_lazy_import_wrapper\(\s*['\"]flashinfer\.fused_moe['\"]"
                     r"\s*,\s*['\"]cutlass_fused_moe['\"]", wrapper):
        raise UsageError(f"structure not recognized in vllm {pkg.version} {VLLM_WRAPPER}: flashinfer_cutlass_fused_moe "
                         "is no longer a wrapper of flashinfer.fused_moe.cutlass_fused_moe")
    calls = _calls(pkg.read(VLLM_CALLER), "flashinfer_cutlass_fused_moe")
    if not calls:
        raise UsageError(f"structure not recognized in vllm {pkg.version} {VLLM_CALLER}: no "
                         "flashinfer_cutlass_fused_moe(...) call")
    passed = {re.sub(r"\s+", "", m) for c in calls for m in re.findall(r"use_fused_finalize\s*=\s*([^,)]+)", c)}
    if not passed:
        base = flashinfer_default(flashinfer_dir, fi_version)
        return Finalize(base.mode, f"vllm {pkg.version} {VLLM_CALLER} calls flashinfer_cutlass_fused_moe without "
                                   f"use_fused_finalize, so {base.why}")
    if passed in ({"True"}, {"False"}):
        mode = "on" if passed == {"True"} else "off"
        return Finalize(mode, f"vllm {pkg.version} {VLLM_CALLER} passes use_fused_finalize={passed.pop()}")
    raise UsageError(f"structure not recognized in vllm {pkg.version} {VLLM_CALLER}: use_fused_finalize="
                     f"{', '.join(sorted(passed))} is not read here")


def _sglang(pkg: packages.Package, environ) -> Finalize:
    calls = _calls(pkg.read(SGLANG_CALLER), "flashinfer_cutlass_fused_moe")
    names = {m for c in calls for m in re.findall(r"use_fused_finalize\s*=\s*envs\.(\w+)\.get\(\)", c)}
    every = all(re.search(r"use_fused_finalize\s*=", c) for c in calls)
    if not calls or len(names) != 1 or not every:
        raise UsageError(f"structure not recognized in sglang {pkg.version} {SGLANG_CALLER}: its "
                         "flashinfer_cutlass_fused_moe calls do not all pass use_fused_finalize=envs.<ONE VAR>.get()")
    var = names.pop()
    m = re.search(rf"^\s*{var}\s*=\s*EnvBool\(\s*(True|False)\s*\)", pkg.read(SGLANG_ENVIRON), re.M)
    if not m:
        raise UsageError(f"structure not recognized in sglang {pkg.version} {SGLANG_ENVIRON}: no `{var} = "
                         "EnvBool(True|False)`")
    default = m.group(1) == "True"
    where = (f"sglang {pkg.version} {SGLANG_CALLER} passes use_fused_finalize=envs.{var}.get(); {SGLANG_ENVIRON}: "
             f"{var} = EnvBool({m.group(1)})")
    raw = environ.get(var)
    if raw is None:
        return Finalize("on" if default else "off", where + f"; {var} is not set here", var)
    val = raw.lower()
    if val not in _TRUE + _FALSE:
        raise UsageError(f"{var}={raw!r}: SGLang's EnvBool accepts {', '.join(_TRUE + _FALSE)}")
    return Finalize("on" if val in _TRUE else "off", where + f"; {var}={raw} is set here", var)


def finalize_mode(pin: EnginePin, flashinfer_dir: Path, environ=None) -> Finalize:
    """The gemm2 finalize-fusion mode `pin`'s engine runs, read from its source (and, for SGLang, the environment)."""
    environ = os.environ if environ is None else environ
    if pin.engine == "vllm":
        return _vllm(pin.package, flashinfer_dir, pin.flashinfer)
    if pin.engine == "sglang":
        return _sglang(pin.package, environ)
    return flashinfer_default(flashinfer_dir, pin.flashinfer)


def flashinfer_dir(pin: EnginePin, explicit: Path | None, wheels: Path | None,
                   cache_dir: str | Path | None = None) -> Path:
    """The package folder of the flashinfer release `pin` names: `explicit` (--flashinfer-dir) when given, else its
    wheel beside --engine-wheel (`wheels`: that folder, or the wheel's), else the install when it is that release, else
    its wheel in the wheel cache (locate.find_release); a wheel is unpacked into the cache."""
    if explicit is not None:
        return Path(explicit)
    fi = locate.find_release(FLASHINFER_DIST, pin.flashinfer, beside=locate.search_folder(wheels))
    return packages.unpack_flashinfer(fi, cache_dir)
