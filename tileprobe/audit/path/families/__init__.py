"""The compiled-kernel families of the model's path: one module per family, one registry line each.

A family module defines NAME (the registry key a KernelCall names), LIBRARY (what ships the kernel, in words) and
`answer(call, ctx) -> CompiledAnswer`. It raises nothing for a call it cannot answer: it returns the parts it could
not answer as `call.unanswered(why)`. Adding a family is a module here and one line below.
"""

from __future__ import annotations

import importlib

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered

# name -> module (imported when first asked, so a family's heavy imports cost only the audits that reach it)
REGISTRY: dict[str, str] = {
    "fa2": "tileprobe.audit.path.families.fa2",
    "flashinfer-attention": "tileprobe.audit.path.families.flashinfer_attention",
    "flashinfer-sparse-mla-sm120": "tileprobe.audit.path.families.flashinfer_sparse_mla",
    "trtllm-gen": "tileprobe.audit.path.families.trtllm_gen",
    "flashinfer-cutlass-moe": "tileprobe.audit.path.families.flashinfer_cutlass_moe",
    "marlin-moe": "tileprobe.audit.path.families.marlin",
    "deepgemm": "tileprobe.audit.path.families.deepgemm",
    "vllm-custom-op": "tileprobe.audit.path.families.custom_ops",
    "cublas": "tileprobe.audit.path.families.cublas",
    "inductor": "tileprobe.audit.path.families.inductor",
    "sgl-kernel": "tileprobe.audit.path.families.sgl_kernel",
    "triton-fused-moe": "tileprobe.audit.path.families.triton_fused_moe",
}


def answer(call: KernelCall, ctx: Context) -> tuple[str, CompiledAnswer]:
    """(library, answer) for the call; a family tileprobe does not have (or cannot load) answers `unanswered`."""
    name = REGISTRY.get(call.family)
    if name is None:
        why = f"no tileprobe family knows {call.family} ({call.op})"
        return call.family, CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        why = f"tileprobe's {call.family} family is not available here ({exc})"
        return call.family, CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))
    return mod.LIBRARY, mod.answer(call, ctx)


__all__ = ["REGISTRY", "CompiledAnswer", "Context", "KernelCall", "Part", "answer", "unanswered"]
