"""What the forward pass hands a compiled-kernel family, and what the family answers.

A `KernelCall` is one kernel call on the model's path that is not a Triton launch (those are tileprobe.audit.run's):
the layer and phase it serves, the family that knows the kernel (tileprobe.audit.path.families), the call's
parameters as the engine passes them, and the engine line that chose it.

A family answers with a `CompiledAnswer`: three `Part`s, each an answer and the evidence word for how it was
reached, and from them one verdict of the one enum (tileprobe.verdict):

- arch: does the code the engine ships (or the JIT's arch list) run on the target? `no-code` when it does not.
- gate: do the library's and the engine's own checks accept the call's shapes there? `refused` when not.
- bytes: the dynamic (plus static) shared memory the launch asks for, against the target's opt-in limit.

A part whose `ok` is None is unanswered: the verdict is then `unanswered` unless another part already fails, and
the row says which part and why. Evidence words (EVIDENCE) say how strong each part is; none claims a launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.targets import Target
from tileprobe.verdict import Verdict

# How a part was answered, weakest to strongest. Nothing here is `launched`: no SM120 kernel runs on this machine.
EVIDENCE = {
    "none": "not answered",
    "quoted": "the library's check or formula, quoted from its source, with the call's values put in",
    "read": "read from the shipped binary or package (fatbin entries, mangled template arguments, arch lists)",
    "run": "the library's or engine's own Python code, run here under the stand-in device",
    "predicted": "a tileprobe rule, keyed by compiler release and kernel source, checked exact against the compiler",
    "compiled": "nvcc or ptxas built it for the target here (sizeof of the library's own types, or ptxas's bytes)",
}


@dataclass(frozen=True)
class KernelCall:
    layer: str  # the layer kind on the forward pass: "attention (full)", "moe experts", "linear qkv", "rms_norm" ...
    phase: str  # "prefill", "decode" or "prefill+decode"
    family: str  # the family that answers it (tileprobe.audit.path.families.FAMILIES); unknown: an unanswered row
    op: str  # the engine's call as the engine names it (flash_attn_varlen_func, cutlass_fused_moe, F.linear, ...)
    params: dict  # what the family needs, as the engine passes it (head_dim, heads, kv_heads, dtype, page_size, ...)
    chosen_by: str  # the engine line (file:line in the wheel) or rule that chose this kernel, and why
    engine: str  # "vllm <release>" (EngineSource.label)

    def param(self, name: str, default=None):
        return self.params.get(name, default)

    def label(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in self.params.items() if not isinstance(v, (dict, list, tuple)))
        return f"{self.layer} [{self.phase}] {self.op}({keys})"


@dataclass(frozen=True)
class Part:
    answer: str  # what it is, in the library's terms ("sm_80 cubin + compute_80 PTX: the driver JIT-compiles ...")
    ok: bool | None  # True: passes; False: fails (no code, refused, over); None: unanswered
    evidence: str = "none"  # a key of EVIDENCE

    def __post_init__(self) -> None:
        if self.evidence not in EVIDENCE:
            raise ValueError(f"evidence {self.evidence!r} is not one of {', '.join(EVIDENCE)}")


def unanswered(why: str) -> Part:
    return Part(why, None, "none")


def guarded(name: str, answer, call, ctx) -> "CompiledAnswer":
    """A family's answer where any failure to read the engine's files becomes an unanswered row, never a traceback."""
    from tileprobe.errors import TileprobeError

    try:
        return answer(call, ctx)
    except (TileprobeError, OSError, ValueError, KeyError, IndexError, SyntaxError) as exc:
        why = f"{name}: the engine's files are not in the structure tileprobe reads ({type(exc).__name__}: {exc})"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))


@dataclass(frozen=True)
class CompiledAnswer:
    kernel: str  # the kernel the library launches, in its own terms (template traits, module name, tactic)
    arch: Part
    gate: Part
    bytes: Part
    smem_bytes: int | None = None  # dynamic + static shared memory per block the launch asks for
    static_smem: int | None = None  # from the binary (cubin), when read
    registers: int | None = None  # from the binary (cubin) for the arch that runs there, when read
    notes: tuple[str, ...] = ()  # what else the row should say (fallbacks, what to set)

    def verdict(self, target: Target) -> Verdict:
        """no-code, then refused, then over (bytes over the opt-in limit), then unanswered, else fits."""
        if self.arch.ok is False:
            return Verdict.NO_CODE
        if self.gate.ok is False:
            return Verdict.REFUSED
        if self.bytes.ok is False or (self.smem_bytes is not None and self.smem_bytes > target.smem_optin):
            return Verdict.SMEM_OVER_LIMIT
        if None in (self.arch.ok, self.gate.ok, self.bytes.ok):
            return Verdict.UNANSWERED
        return Verdict.FITS

    def reason(self, target: Target) -> str:
        parts = [f"arch: {self.arch.answer} [{self.arch.evidence}]", f"gate: {self.gate.answer} [{self.gate.evidence}]",
                 f"bytes: {self.bytes.answer} [{self.bytes.evidence}]"]
        if self.smem_bytes is not None:
            parts.append(f"{self.smem_bytes} B of {target.smem_optin} B opt-in on {target.name}")
        return "; ".join(parts + list(self.notes))


@dataclass
class Context:
    """What a family may read: the target, the engine's files, the FlashInfer the engine pins, a cache folder."""

    target: Target
    engine_source: object  # tileprobe.engines.triton_configs.EngineSource
    cache_dir: Path
    flashinfer: object | None = None  # an EngineSource-like reader of the pinned FlashInfer wheel, when found
    memo: dict = field(default_factory=dict)  # per-audit memo (an extracted binary read once for every call)
