"""SGLang 0.5.23's Triton attention launchers (MHA/GQA), as tileprobe audit entries. What each entry's arguments
are, read from the engine's callers:
- SGLang 0.5.23 `extend_attention_fwd` (sglang/kernels/ops/attention/extend_attention.py), as
  sglang/srt/layers/attention/triton_backend.py `_forward_extend_kernel` calls it for MHA/GQA: q (T, H, D), k/v
  (T, KV, D) contiguous, o (T, H, D), the KV pool buffers (slots, KV, D), qo_indptr / kv_indptr int32 (B+1),
  kv_indices int64, no custom mask, causal, mask_indptr None, max_extend_len, k/v descale 1.0, sm_scale
  1/sqrt(D), sliding_window_size (the window, -1 for full layers), sinks (fp32 per head, gpt-oss), page_size 1;
  the model's dtype (the layer's q/k/v).
- SGLang 0.5.23 `decode_attention_fwd` (sglang/kernels/ops/attention/decode_attention.py), as triton_backend.py's
  forward_decode calls it: q/o (B, H, D), the KV pool buffers, kv_indptr int32, kv_indices int64, attn_logits fp32
  (B, H, max_kv_splits, D), attn_lse fp32 (B, H, max_kv_splits), num_kv_splits int32 (B), max_kv_splits 8 (the
  CUDA default), k/v descale 1.0, sinks; use_pdl left False (a launch option, not a size); the window is applied
  through kv_indices, not the kernel.
- SGLang 0.5.23 `context_attention_fwd` (sglang/kernels/ops/attention/prefill_attention.py): q/k/v/o (B*S, H or KV,
  D), b_start_loc / b_seq_len int32 (B), max_input_len S, causal.
"""

from __future__ import annotations

import math

from tileprobe.audit.entry import TORCH, AuditKernel, Point, empty, heads, indptr, not_mla, torch
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target


def _sglang_utils(target: Target, source: EngineSource) -> dict:
    """sglang.srt.utils' platform helpers, answering as a CUDA target."""
    no = lambda *a, **k: False  # noqa: E731
    return {"is_cuda": lambda: True, "is_hip": no, "is_npu": no, "is_xpu": no, "is_cpu": no, "is_musa": no,
            "is_gfx95_supported": no, "is_gfx1250_supported": no,
            "get_device_core_count": lambda device_id=0: target.sms,
            "get_device_sm": lambda: int(target.cc.replace(".", ""))}


SGLANG_STAND_INS = {"sglang.srt.utils": _sglang_utils}


def _sglang_extend(model: AttentionConfig, pt: Point):
    h, kv = heads(model, pt.tp)
    d, dt, t = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch * pt.seq_len
    q, o = empty((t, h, d), dt), empty((t, h, d), dt)
    k, v = empty((t, kv, d), dt), empty((t, kv, d), dt)
    kbuf, vbuf = empty((t, kv, d), dt), empty((t, kv, d), dt)
    args = (q, k, v, o, kbuf, vbuf, indptr(pt.batch, pt.seq_len), indptr(pt.batch, 0),
            torch.empty(0, dtype=torch.int64), None, True, None, pt.seq_len, 1.0, 1.0)
    kwargs = dict(sm_scale=1.0 / math.sqrt(d), logit_cap=0.0,
                  sliding_window_size=pt.window - 1 if pt.window else -1,
                  sinks=empty((h,), torch.float32) if model.sinks else None, page_size=1)
    return args, kwargs


def _sglang_context(model: AttentionConfig, pt: Point):
    h, kv = heads(model, pt.tp)
    d, dt, t = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch * pt.seq_len
    q, o = empty((t, h, d), dt), empty((t, h, d), dt)
    k, v = empty((t, kv, d), dt), empty((t, kv, d), dt)
    start = torch.arange(0, t, pt.seq_len, dtype=torch.int32)
    lens = torch.full((pt.batch,), pt.seq_len, dtype=torch.int32)
    return (q, k, v, o, start, lens, pt.seq_len), dict(is_causal=True)


MAX_KV_SPLITS = 8  # SGLang's --triton-attention-num-kv-splits on CUDA (16 is its AMD hook's, platform_hook.py)


def _sglang_decode(model: AttentionConfig, pt: Point):
    h, kv = heads(model, pt.tp)
    d, dt, b = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch
    slots = b * pt.seq_len
    args = (empty((b, h, d), dt), empty((slots, kv, d), dt), empty((slots, kv, d), dt), empty((b, h, d), dt),
            indptr(b, pt.seq_len), torch.empty(slots, dtype=torch.int64),
            empty((b, h, MAX_KV_SPLITS, d), torch.float32), empty((b, h, MAX_KV_SPLITS), torch.float32),
            torch.full((b,), MAX_KV_SPLITS, dtype=torch.int32), MAX_KV_SPLITS, 1.0 / math.sqrt(d), 1.0, 1.0)
    return args, dict(logit_cap=0.0, sinks=empty((h,), torch.float32) if model.sinks else None, page_size=1)


ENTRIES = (
    AuditKernel("sglang-extend-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd",
                ("sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.attention.decode_attention",
                 "sglang.kernels.ops.attention.score_mod", "sglang.srt.environ"),
                SGLANG_STAND_INS, _sglang_extend, not_mla, "the model's dtype (the layer's q/k/v)"),
    AuditKernel("sglang-context-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.prefill_attention",
                "context_attention_fwd", ("sglang.kernels.ops.attention.prefill_attention",),
                SGLANG_STAND_INS, _sglang_context, not_mla, "the model's dtype (q/k/v as the caller passes them)",
                windowed=False),
    AuditKernel("sglang-decode-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd",
                ("sglang.kernels.ops.attention.decode_attention", "sglang.kernels.ops.attention.score_mod",
                 "sglang.srt.environ"),
                SGLANG_STAND_INS, _sglang_decode, not_mla, "the model's dtype; split-K partials in fp32",
                windowed=False),
)
