"""vLLM 0.33.0's Triton attention and linear-attention launchers, as tileprobe audit entries. What each entry's
arguments are, read from the engine's callers:
- vLLM 0.33.0 `unified_attention` (vllm/v1/attention/ops/triton_unified_attention.py), as TritonAttentionImpl
  calls it for a prefill batch (its 2D launch; `_vllm_unified` says the layout); compiled from the engine's own module
  (its kernel calls helpers of triton_attention_helpers.py and reads module globals in its defaults).
- vLLM 0.33.0 `lightning_attention` (vllm/model_executor/layers/lightning_attn.py), the linear-attention layers of
  MiniMax-Text-01 / M1 (`_vllm_lightning`): four launches (_fwd_diag_kernel, _fwd_kv_parallel, _fwd_kv_reduce,
  _fwd_none_diag_kernel), in fp32.
"""

from __future__ import annotations

import math

from tileprobe.audit import attention_rule, vllm_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Point, empty, heads, indptr, not_mla, torch
from tileprobe.models import AttentionConfig


VLLM_BLOCK_SIZE = 16  # vLLM's KV block size on CUDA (TritonAttentionBackend: MultipleOf(16); the default 16)


def _vllm_unified(model: AttentionConfig, pt: Point):
    """As TritonAttentionImpl.forward (vllm/v1/attention/backends/triton_attn.py) calls it for a prefill batch: the
    KV cache (blocks, KV, block_size, 2*D) transposed to (blocks, block_size, KV, 2*D) and split into K and V views,
    k/v descale the layer's (1,) scale expanded to (B, KV), block_table int32, no split-K scratch (the 2D launch)."""
    h, kv = heads(model, pt.tp)
    d, dt, b = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch
    per_seq = -(-pt.seq_len // VLLM_BLOCK_SIZE)
    cache = empty((b * per_seq, kv, VLLM_BLOCK_SIZE, 2 * d), dt).transpose(1, 2)
    k, v = cache.split(d, dim=-1)
    t = b * pt.seq_len
    scale = empty((1,), torch.float32).expand(b, kv)
    window = (pt.window - 1, 0) if pt.window else (-1, -1)
    kwargs = dict(q=empty((t, h, d), dt), k=k, v=v, out=empty((t, h, d), dt), cu_seqlens_q=indptr(b, pt.seq_len),
                  max_seqlen_q=pt.seq_len, seqused_k=torch.full((b,), pt.seq_len, dtype=torch.int32),
                  max_seqlen_k=pt.seq_len, softmax_scale=1.0 / math.sqrt(d), causal=True, window_size=window,
                  block_table=torch.empty((b, per_seq), dtype=torch.int32), softcap=0.0, q_descale=None,
                  k_descale=scale, v_descale=scale,
                  sinks=empty((h,), torch.float32) if model.sinks else None)
    return (), kwargs


VLLM_ALLOW = ("vllm.v1.attention.ops.triton_unified_attention", "vllm.v1.attention.ops.triton_attention_helpers",
              "vllm.envs", "vllm.platforms.interface", "vllm.v1.attention.backends.registry")


def _vllm_lightning(model: AttentionConfig, pt: Point):
    """As MiniMaxText01LinearAttention's prefill calls it, one sequence at a time: q/k/v (1, H, S, D) cast to fp32
    (the layer's `.float()`, whatever the model's dtype), the slope rate (H,) fp32, block_size 256, the sequence's
    kv state (1, H, D, D) fp32."""
    h, _ = heads(model, pt.tp)
    d, f32 = model.head_dim, torch.float32
    q = empty((1, h, pt.seq_len, d), f32)
    return (q, empty((1, h, pt.seq_len, d), f32), empty((1, h, pt.seq_len, d), f32), empty((h,), f32)), dict(
        block_size=256, kv_history=empty((1, h, d, d), f32))


def _linear(model: AttentionConfig) -> str | None:
    return None if model.linear_attention else "no linear-attention layers (config.json attn_type_list has no 0)"


ENTRIES = (
    AuditKernel("vllm-unified-attention", "vllm", "0.33.0", "vllm.v1.attention.ops.triton_unified_attention",
                "unified_attention", VLLM_ALLOW, vllm_stand_ins.STAND_INS, _vllm_unified, not_mla,
                "the model's dtype (the layer's query and KV cache)", compile_from="module", backend="TRITON_ATTN",
                predict=attention_rule.predict),
    AuditKernel("vllm-lightning-attention", "vllm", "0.33.0", "vllm.model_executor.layers.lightning_attn",
                "lightning_attention", ("vllm.model_executor.layers.lightning_attn", "vllm.platforms.interface",
                                        "vllm.v1.attention.backends.registry"),
                vllm_stand_ins.STAND_INS, _vllm_lightning, _linear, "fp32 (the layer casts q/k/v to float)",
                windowed=False, predict=attention_rule.predict),
)
