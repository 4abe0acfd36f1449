"""vLLM's Triton attention and linear-attention launchers, as tileprobe audit entries. What each entry's
arguments are, read from the engine's callers:
- vLLM's TRITON_ATTN backend (`unified_attention`, vllm/v1/attention/ops/triton_unified_attention.py): not called
  with re-typed arguments but driven through the backend's own metadata builder and impl
  (tileprobe.audit.vllm_backend) for a prefill, a decode and a mixed batch, so the engine picks the 2D or the 3D
  launch, its softmax segments and `reduce_segments`, and the KV-cache write; compiled from the engine's own module
  (its kernel calls helpers of triton_attention_helpers.py and reads module globals in its defaults).
- vLLM's lightning attention (vllm/model_executor/layers/lightning_attn.py), the linear-attention layers of
  MiniMax-Text-01 / M1: not called with re-typed arguments but driven through the linear-attention backend's own
  metadata builder and the layer's own `_forward` (tileprobe.audit.vllm_linear_attn_step) for a prefill, a decode
  and a mixed batch, so the engine splits the batch, picks the decode-only or the prefill-and-mix path, and makes
  the prefill's four launches per sequence (_fwd_diag_kernel, _fwd_kv_parallel, _fwd_kv_reduce,
  _fwd_none_diag_kernel) and the decode's one (_linear_attn_decode_kernel), q/k/v in fp32 (the layer's cast), the
  state in the layer's own state dtype; compiled from the engine's own module.
"""

from __future__ import annotations

from tileprobe.audit import (attention_rule, vllm_backend, vllm_backend_stand_ins, vllm_linear_attn_step,
                             vllm_linear_attn_step_stand_ins, vllm_selection)
from tileprobe.audit.entries import LISTED
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, not_mla, torch
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig



VLLM_ALLOW = ("vllm.v1.attention.ops.triton_unified_attention", "vllm.v1.attention.ops.triton_attention_helpers",
              "vllm.envs", "vllm.platforms.interface", "vllm.v1.attention.backends.registry")


# the backend's own builder and impl (tileprobe.audit.vllm_backend), with what they import
BACKEND_ALLOW = VLLM_ALLOW + ("vllm.v1.attention.backends.triton_attn", "vllm.v1.attention.backend",
                              "vllm.v1.attention.ops.triton_prefill_attention",
                              "vllm.v1.attention.ops.triton_reshape_and_cache_flash", "vllm.v1.kv_cache_interface",
                              "vllm.v1.kv_cache_layout", "vllm.v1.kv_cache_spec_registry", "vllm.utils.math_utils",
                              )


def _vllm_vit(model: AttentionConfig, pt: Point):
    """As the vision encoders' attention calls vLLM's ViT Triton path (vllm/v1/attention/ops/vit_attn_wrappers.py
    `triton_attn_wrapper`, the TRITON_ATTN ViT backend's op): q/k/v (B, S, H, D) with the vision encoder's heads
    (split over tp) and head size, in the model's dtype; batch_size B, no cu_seqlens (equal lengths), the default
    scale."""
    vis = model.vision
    if vis.heads % pt.tp:
        raise UsageError(f"--tp {pt.tp}: {model.name}'s vision encoder has {vis.heads} heads, which do not split "
                         f"over {pt.tp} ranks")
    shape = (pt.batch, pt.seq_len, vis.heads // pt.tp, vis.head_dim)
    dt = getattr(torch, TORCH[model.dtype])
    return (empty(shape, dt), empty(shape, dt), empty(shape, dt), pt.batch), {}


def _vit(model: AttentionConfig) -> str | None:
    return None if model.vision else "no vision_config: vLLM runs ViT attention only for a vision encoder"


def _vit_backend(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """vLLM's own ViT backend pick on the target (vllm_selection.vit_select), or --mm-encoder-attn-backend."""
    forced = session.flags.get("mm_encoder_attn_backend")
    name, line = vllm_selection.vit_select(session.source, session.target, model.vision.head_dim, model.dtype,
                                           forced)
    if name == "TRITON_ATTN":
        return None
    return Elsewhere(f"its {name} ViT attention backend", line,
                     "get_vit_attn_backend: the first supported backend for the head size and dtype"
                     + ("" if forced else " (no --mm-encoder-attn-backend)"))


def _linear(model: AttentionConfig) -> str | None:
    return None if model.linear_attention else "no linear-attention layers (config.json attn_type_list has no 0)"


ENTRIES = (
    AuditKernel("vllm-unified-attention", "vllm", LISTED, "vllm.v1.attention.ops.triton_unified_attention",
                "unified_attention", BACKEND_ALLOW, vllm_backend_stand_ins.STAND_INS_SERVED, None, not_mla,
                "the model's dtype (the layer's query and KV cache)", compile_from="module", backend="TRITON_ATTN",
                predict=attention_rule.predict, drive=vllm_backend.triton_attention,
                phases=("prefill", "decode", "mixed"), reads=vllm_backend.BUILDER_FILES),
    AuditKernel("vllm-lightning-attention", "vllm", LISTED, vllm_linear_attn_step.LIGHTNING, "lightning_attention",
                vllm_linear_attn_step.ALLOW, vllm_linear_attn_step_stand_ins.STAND_INS, None, _linear,
                "fp32 q/k/v (the layer casts them to float); the state in the layer's state dtype (the model's under "
                "mamba_cache_dtype auto)", windowed=False, compile_from="module", predict=attention_rule.predict,
                drive=vllm_linear_attn_step.linear_attn_step, phases=("prefill", "decode", "mixed"),
                reads=vllm_linear_attn_step.READS),
    AuditKernel("vllm-vit-attention", "vllm", LISTED, "vllm.v1.attention.ops.vit_attn_wrappers",
                "triton_attn_wrapper", ("vllm.v1.attention.ops.vit_attn_wrappers",
                                        "vllm.v1.attention.ops.triton_prefill_attention", "vllm.utils.math_utils",
                                        "vllm.platforms.interface", "vllm.v1.attention.backends.registry"),
                vllm_backend_stand_ins.STAND_INS, _vllm_vit, _vit, "the model's dtype (the vision tower's q/k/v)",
                windowed=False, chooses=_vit_backend, compile_from="module"),
)
