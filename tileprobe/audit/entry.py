"""What an audit entry is: one engine launcher, as data (AuditKernel), the point it is sized at (Point), and the
stand-in tensors entries build their arguments from (meta tensors: shapes, dtypes and strides, no memory).

An entry names the engine, the launcher's module in the wheel and its function, the modules served from the wheel
(the launcher's and the pure-Python ones it imports), the platform helpers it needs stand-ins for, the dtype the
engine runs it in, and how its arguments follow from the model (a function of the AttentionConfig and the point:
batch, sequence length, tensor parallelism, window). The launch parameters are never typed in an entry: the engine's
own launcher picks them (tileprobe.audit.capture). The entries live one module per engine and kernel group under
tileprobe.audit.entries; tileprobe.audit.kernels is their registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig

torch = LazyModule("torch")  # loaded at the first capture, not with the CLI
TORCH = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # the model's dtype -> torch's name


@dataclass(frozen=True)
class Point:
    """Where the model is sized: batch (sequences), seq_len (tokens each), tp (ranks the heads are split over),
    window (the layer's sliding window, None for full attention), phase (the engine step: "prefill", each sequence's
    seq_len tokens new; "extend", seq_len new tokens each over seq_len cached (a later prefill chunk, or a prompt
    after a prefix-cache hit, as SGLang's scheduler forms it); "decode", one new token each over seq_len cached;
    "mixed", decodes and one prefill chunk in one batch, as vLLM's scheduler forms them; only entries that drive the
    engine's own call site take the last three, see AuditKernel.drive)."""

    batch: int
    seq_len: int
    tp: int = 1
    window: int | None = None
    phase: str = "prefill"

    def label(self) -> str:
        w = f" window {self.window}" if self.window else ""
        ph = f" {self.phase}" if self.phase != "prefill" else ""
        return f"batch {self.batch} seq {self.seq_len} tp {self.tp}{w}{ph}"


@dataclass(frozen=True)
class Elsewhere:
    """The engine runs another kernel than this entry's launcher for the model on the target (a CUDA kernel of
    FlashInfer, a CuTe-DSL kernel, ...): what it runs, and the engine line whose test picked it."""

    runs: str  # what the engine runs instead, as the engine names it
    line: str  # file:line (inside the wheel) of the test that picked it
    why: str  # that test's text, as the engine wrote it


@dataclass(frozen=True)
class AuditKernel:
    name: str  # tileprobe's name for the entry
    engine: str  # vllm / sglang
    release: str  # the release whose launcher this entry's arguments are read from
    module: str  # the launcher's module (dotted, inside the wheel)
    launcher: str  # its function
    allow: tuple[str, ...]  # engine modules served from the wheel
    stand_ins: dict  # module -> (target -> attributes)
    arguments: Callable | None  # (AttentionConfig, Point) -> (args, kwargs) of the launcher (None: `drive` runs)
    serves: Callable  # AttentionConfig -> None, or why this launcher does not serve the model
    dtype_rule: str  # the dtype the engine runs it in, said in words
    windowed: bool = True  # the launcher takes the layer's sliding window (else one launch serves every layer)
    # (session, model, point) -> Elsewhere | None: the engine's own selection, run inside the entry's session
    # before the launcher; an Elsewhere means the launcher is not what the engine runs there (one row says so)
    chooses: Callable | None = None
    # the attention backend that runs this launcher, as the engine spells it (SGLang `triton`, vLLM `TRITON_ATTN`,
    # `TRITON_MLA`, `ROCM_ATTN`): the audit runs it only where the engine's own attention backend selection
    # (tileprobe.audit.backends) picks that backend; None: not an attention backend's kernel (MoE, linear attention,
    # SSM, the vision encoder's), run whenever it serves the model
    backend: str | None = None
    # (launch, target) -> what to set in the engine when the launch does not fit (a tuned-config folder, a
    # blocklist: the command that writes it); None: the launch's parameters are the engine's code (the row's line)
    remedy: Callable | None = None
    compile_from: str = "extract"  # the kernel's module for the compile: cut from its file, or "module": the
    # engine's own module imported under the session (tileprobe.audit.loader), for kernels that cannot be cut out
    # (session, kernel name) -> the @triton.jit object, or None: for compile_from "module", a kernel the engine
    # defines at run time (tileprobe.audit.capture.kernel_name `module.name`: no module's attribute until it runs)
    kernel_of: Callable | None = None
    # (launch, job, triton_version) -> metadata.shared by a stated rule, raising CannotPredict outside its scope
    # (tileprobe.audit.answers); None: no rule, the launch is sized by Triton's allocation or compiled
    predict: Callable | None = None
    # (session, model, point) -> None: the engine's own call site, driven (the attention backend's metadata builder
    # `build` and its impl's `forward` / `do_kv_cache_update`, as the model runner calls them); when set, it runs
    # instead of `launcher(*arguments(...))`, at every phase in `phases`
    drive: Callable | None = None
    phases: tuple[str, ...] = ("prefill",)
    # engine modules whose facts the entry's driver re-types (read by tileprobe, not imported in the session): the
    # release's manifest hashes them with the served ones, so another release's text is refused, not trusted
    reads: tuple[str, ...] = ()

    @property
    def module_file(self) -> str:
        return self.module.replace(".", "/") + ".py"


def heads(model: AttentionConfig, tp: int) -> tuple[int, int]:
    if model.heads % tp:
        raise UsageError(f"--tp {tp}: {model.name}'s {model.heads} attention heads do not split over {tp} ranks")
    return model.heads // tp, max(1, model.kv_heads // tp)


def empty(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def indptr(batch: int, each: int) -> torch.Tensor:
    return torch.arange(batch + 1, dtype=torch.int32) * each


def not_mla(model: AttentionConfig) -> str | None:
    if not model.heads:  # tileprobe.models: heads 0 is a model without attention layers (pure Mamba-2)
        return "no attention layers (config.json has no num_attention_heads: a pure Mamba-2 model)"
    return "an MLA model: SGLang runs its MLA attention through other kernels" if model.mla else None
