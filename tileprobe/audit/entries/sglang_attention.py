"""SGLang's Triton attention launchers (MHA/GQA), as tileprobe audit entries.
- `extend_attention_fwd` (sglang/kernels/ops/attention/extend_attention.py) and `decode_attention_fwd`
  (decode_attention.py): driven through SGLang's own attention step, `TritonAttnBackend` (its
  `init_forward_metadata`, then the `RadixAttention` layer's forward into the backend's `forward_extend` /
  `forward_decode`), for a prefill and a decode batch (tileprobe.audit.sglang_backend, which says what the model
  runner and the batch are). The engine forms every argument, the decode's split count (`max_kv_splits`, the
  server-args default read from the wheel) and its per-sequence split launch (`get_num_kv_splits_triton`) included.
- SGLang `context_attention_fwd` (sglang/kernels/ops/attention/prefill_attention.py): called only by the
  vision encoders' attention (srt/layers/attention/vision.py VisionTritonAttention, the `triton_attn` multimodal
  backend, which VisionAttention._determine_attention_backend picks on CUDA other than sm_90 / sm_100): q/k/v/o
  (B*S, H, D) of the vision tower, cu_seqlens, seq_lens, max_seqlen, not causal. A model with no vision_config does
  not reach it. Its arguments are still laid out here as VisionTritonAttention.forward passes them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule, engine_code, sglang_backend, sglang_backend_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, not_mla, torch
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig


SGLANG_STAND_INS = {"sglang.srt.utils": sglang_backend_stand_ins.platform_utils}


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


# the engine modules each launcher imports (the MLA entries, tileprobe.audit.entries.sglang_mla, run the same two)
EXTEND_ALLOW = ("sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.attention.decode_attention",
                "sglang.kernels.ops.attention.score_mod", "sglang.srt.environ")
DECODE_ALLOW = ("sglang.kernels.ops.attention.decode_attention", "sglang.kernels.ops.attention.score_mod",
                "sglang.srt.environ")

DRIVEN_ALLOW = EXTEND_ALLOW + sglang_backend.ALLOW
DRIVEN_STAND_INS = {**SGLANG_STAND_INS, **sglang_backend_stand_ins.STAND_INS}

ENTRIES = (
    AuditKernel("sglang-extend-attention", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", DRIVEN_ALLOW, DRIVEN_STAND_INS, None, not_mla,
                "the model's dtype (the layer's q/k/v)", backend="triton", predict=attention_rule.predict,
                drive=sglang_backend.triton_attention, phases=("prefill",), reads=sglang_backend.READS),
    AuditKernel("sglang-context-attention", "sglang", LISTED, "sglang.kernels.ops.attention.prefill_attention",
                "context_attention_fwd", ("sglang.kernels.ops.attention.prefill_attention",),
                SGLANG_STAND_INS, _sglang_vision, _vision, "the model's dtype (the vision encoder's q/k/v)",
                windowed=False, chooses=_vision_backend, predict=attention_rule.predict),
    AuditKernel("sglang-decode-attention", "sglang", LISTED, "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd", DRIVEN_ALLOW, DRIVEN_STAND_INS, None, not_mla,
                "the model's dtype; split-K partials in fp32", backend="triton", predict=attention_rule.predict,
                drive=sglang_backend.triton_attention, phases=("decode",), reads=sglang_backend.READS),
)
