"""SGLang's Triton attention launchers (MHA/GQA), as tileprobe audit entries. What each entry's arguments
are, read from the engine's callers:
- SGLang `extend_attention_fwd` (sglang/kernels/ops/attention/extend_attention.py), as
  sglang/srt/layers/attention/triton_backend.py `_forward_extend_kernel` calls it for MHA/GQA: q (T, H, D), k/v
  (T, KV, D) contiguous, o (T, H, D), the KV pool buffers (slots, KV, D), qo_indptr / kv_indptr int32 (B+1),
  kv_indices int64, no custom mask, causal, mask_indptr None, max_extend_len, k/v descale 1.0, sm_scale
  1/sqrt(D), sliding_window_size (the window, -1 for full layers), sinks (fp32 per head, gpt-oss), page_size 1;
  the model's dtype (the layer's q/k/v).
- SGLang `decode_attention_fwd` (sglang/kernels/ops/attention/decode_attention.py), as triton_backend.py's
  forward_decode calls it: q/o (B, H, D), the KV pool buffers, kv_indptr int32, kv_indices int64, attn_logits fp32
  (B, H, max_kv_splits, D), attn_lse fp32 (B, H, max_kv_splits), num_kv_splits int32 (B), max_kv_splits 8 (the
  CUDA default), k/v descale 1.0, sinks; use_pdl left False (a launch option, not a size); the window is applied
  through kv_indices, not the kernel.
- SGLang `context_attention_fwd` (sglang/kernels/ops/attention/prefill_attention.py): called only by the
  vision encoders' attention (srt/layers/attention/vision.py VisionTritonAttention, the `triton_attn` multimodal
  backend, which VisionAttention._determine_attention_backend picks on CUDA other than sm_90 / sm_100): q/k/v/o
  (B*S, H, D) of the vision tower, cu_seqlens, seq_lens, max_seqlen, not causal. A model with no vision_config does
  not reach it.
"""

from __future__ import annotations

import math

from types import SimpleNamespace
from typing import Optional

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule, engine_code
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, heads, indptr, not_mla, torch
from tileprobe.errors import UsageError
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


def _sglang_vision(model: AttentionConfig, pt: Point):
    """As VisionTritonAttention.forward calls it (srt/layers/attention/vision.py): q/k/v/o (B*S, H, D) with the
    vision encoder's heads (split over tp) and head size, cu_seqlens int32 (B+1), seq_lens int32 (B), max_seqlen S,
    not causal, the layer's softmax scale (None: 1/sqrt(D)); the model's dtype."""
    vis = model.vision
    if vis.heads % pt.tp:
        raise UsageError(f"--tp {pt.tp}: {model.name}'s vision encoder has {vis.heads} heads, which do not split "
                         f"over {pt.tp} ranks")
    h, d, dt, t = vis.heads // pt.tp, vis.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch * pt.seq_len
    q, k, v, o = (empty((t, h, d), dt) for _ in range(4))
    cu = torch.arange(0, t + 1, pt.seq_len, dtype=torch.int32)
    lens = torch.full((pt.batch,), pt.seq_len, dtype=torch.int32)
    return (q, k, v, o, cu, lens, pt.seq_len), dict(is_causal=False, sm_scale=None)


def _vision(model: AttentionConfig) -> str | None:
    return None if model.vision else ("no vision_config: SGLang calls context_attention_fwd only from its vision "
                                      "encoders' attention (srt/layers/attention/vision.py VisionTritonAttention)")


VISION_FILE = "sglang/srt/layers/attention/vision.py"


class _MM:
    mm_attention_backend = None  # --mm-attention-backend not given


def _vision_backend(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """SGLang's own VisionAttention._determine_attention_backend, run from the wheel's text (its file imports the
    distributed and quantization layers) with the target's capability; only the module names it reads are stood
    in: no --mm-attention-backend, no backend passed by the model, CUDA."""
    target = session.target
    major, minor = (int(x) for x in target.cc.split("."))
    no = lambda *a, **k: False  # noqa: E731
    scope = {"get_mm": _MM, "get_context": None, "is_cuda": lambda: True,
             "get_device_capability": lambda device_id=0: (major, minor), "_is_npu": False, "_is_musa": False,
             "_is_hip": False, "_is_cpu": False, "_is_cpu_amx_available": False, "_is_xpu": False,
             "_use_aiter": False, "get_platform": lambda: SimpleNamespace(is_blackwell=major in (10, 11, 12)),
             "Optional": Optional, "is_npu": no}
    ran = engine_code.run_function(session.source, VISION_FILE, "VisionAttention._determine_attention_backend",
                                   scope, None, None)
    if ran.value == "triton_attn":
        return None
    line, why = engine_code.decided(ran)
    return Elsewhere(f"its {ran.value!r} vision attention backend", line, why)


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


# the engine modules each launcher imports (the MLA entries, tileprobe.audit.entries.sglang_mla, run the same two)
EXTEND_ALLOW = ("sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.attention.decode_attention",
                "sglang.kernels.ops.attention.score_mod", "sglang.srt.environ")
DECODE_ALLOW = ("sglang.kernels.ops.attention.decode_attention", "sglang.kernels.ops.attention.score_mod",
                "sglang.srt.environ")

ENTRIES = (
    AuditKernel("sglang-extend-attention", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", EXTEND_ALLOW, SGLANG_STAND_INS, _sglang_extend, not_mla,
                "the model's dtype (the layer's q/k/v)", backend="triton", predict=attention_rule.predict),
    AuditKernel("sglang-context-attention", "sglang", LISTED, "sglang.kernels.ops.attention.prefill_attention",
                "context_attention_fwd", ("sglang.kernels.ops.attention.prefill_attention",),
                SGLANG_STAND_INS, _sglang_vision, _vision, "the model's dtype (the vision encoder's q/k/v)",
                windowed=False, chooses=_vision_backend, predict=attention_rule.predict),
    AuditKernel("sglang-decode-attention", "sglang", LISTED, "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd", DECODE_ALLOW, SGLANG_STAND_INS, _sglang_decode, not_mla,
                "the model's dtype; split-K partials in fp32", windowed=False, backend="triton",
                predict=attention_rule.predict),
)
