"""The engines' kernels `tileprobe audit` sizes, as data: one entry per launcher.

An entry names the engine, the launcher's module in the wheel and its function, the modules served from the wheel
(the launcher's and the pure-Python ones it imports), the platform helpers it needs stand-ins for, the dtype the
engine runs it in, and how its arguments follow from the model (a function of the AttentionConfig and the point:
batch, sequence length, tensor parallelism, window). The launch parameters are never typed here: the engine's own
launcher picks them (tileprobe.audit.capture).

What each entry's arguments are, read from the engine's callers:
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
- vLLM 0.33.0 `unified_attention` (vllm/v1/attention/ops/triton_unified_attention.py), as TritonAttentionImpl
  calls it for a prefill batch (its 2D launch; `_vllm_unified` says the layout); compiled from the engine's own module
  (its kernel calls helpers of triton_attention_helpers.py and reads module globals in its defaults).
- vLLM 0.33.0 `lightning_attention` (vllm/model_executor/layers/lightning_attn.py), the linear-attention layers of
  MiniMax-Text-01 / M1 (`_vllm_lightning`): four launches (_fwd_diag_kernel, _fwd_kv_parallel, _fwd_kv_reduce,
  _fwd_none_diag_kernel), in fp32.
- SGLang 0.5.23 `context_attention_fwd` (sglang/kernels/ops/attention/prefill_attention.py): q/k/v/o (B*S, H or KV,
  D), b_start_loc / b_seq_len int32 (B), max_input_len S, causal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tileprobe.audit import vllm_stand_ins
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

torch = LazyModule("torch")  # loaded at the first capture, not with the CLI
TORCH = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # the model's dtype -> torch's name


@dataclass(frozen=True)
class Point:
    """Where the model is sized: batch (sequences), seq_len (tokens each), tp (ranks the heads are split over),
    window (the layer's sliding window, None for full attention)."""

    batch: int
    seq_len: int
    tp: int = 1
    window: int | None = None

    def label(self) -> str:
        w = f" window {self.window}" if self.window else ""
        return f"batch {self.batch} seq {self.seq_len} tp {self.tp}{w}"


@dataclass(frozen=True)
class AuditKernel:
    name: str  # tileprobe's name for the entry
    engine: str  # vllm / sglang
    release: str  # the release whose launcher this entry's arguments are read from
    module: str  # the launcher's module (dotted, inside the wheel)
    launcher: str  # its function
    allow: tuple[str, ...]  # engine modules served from the wheel
    stand_ins: dict  # module -> (target -> attributes)
    arguments: Callable  # (AttentionConfig, Point) -> (args, kwargs) of the launcher
    serves: Callable  # AttentionConfig -> None, or why this launcher does not serve the model
    dtype_rule: str  # the dtype the engine runs it in, said in words
    windowed: bool = True  # the launcher takes the layer's sliding window (else one launch serves every layer)
    compile_from: str = "extract"  # the kernel's module for the compile: cut from its file, or "module": the
    # engine's own module imported under the session (tileprobe.audit.loader), for kernels that cannot be cut out

    @property
    def module_file(self) -> str:
        return self.module.replace(".", "/") + ".py"


def _sglang_utils(target: Target, source: EngineSource) -> dict:
    """sglang.srt.utils' platform helpers, answering as a CUDA target."""
    no = lambda *a, **k: False  # noqa: E731
    return {"is_cuda": lambda: True, "is_hip": no, "is_npu": no, "is_xpu": no, "is_cpu": no, "is_musa": no,
            "is_gfx95_supported": no, "is_gfx1250_supported": no,
            "get_device_core_count": lambda device_id=0: target.sms,
            "get_device_sm": lambda: int(target.cc.replace(".", ""))}


SGLANG_STAND_INS = {"sglang.srt.utils": _sglang_utils}


def _heads(model: AttentionConfig, tp: int) -> tuple[int, int]:
    if model.heads % tp:
        raise UsageError(f"--tp {tp}: {model.name}'s {model.heads} attention heads do not split over {tp} ranks")
    return model.heads // tp, max(1, model.kv_heads // tp)


def _empty(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _indptr(batch: int, each: int) -> torch.Tensor:
    return torch.arange(batch + 1, dtype=torch.int32) * each


def _sglang_extend(model: AttentionConfig, pt: Point):
    h, kv = _heads(model, pt.tp)
    d, dt, t = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch * pt.seq_len
    q, o = _empty((t, h, d), dt), _empty((t, h, d), dt)
    k, v = _empty((t, kv, d), dt), _empty((t, kv, d), dt)
    kbuf, vbuf = _empty((t, kv, d), dt), _empty((t, kv, d), dt)
    args = (q, k, v, o, kbuf, vbuf, _indptr(pt.batch, pt.seq_len), _indptr(pt.batch, 0),
            torch.empty(0, dtype=torch.int64), None, True, None, pt.seq_len, 1.0, 1.0)
    kwargs = dict(sm_scale=1.0 / math.sqrt(d), logit_cap=0.0,
                  sliding_window_size=pt.window - 1 if pt.window else -1,
                  sinks=_empty((h,), torch.float32) if model.sinks else None, page_size=1)
    return args, kwargs


def _sglang_context(model: AttentionConfig, pt: Point):
    h, kv = _heads(model, pt.tp)
    d, dt, t = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch * pt.seq_len
    q, o = _empty((t, h, d), dt), _empty((t, h, d), dt)
    k, v = _empty((t, kv, d), dt), _empty((t, kv, d), dt)
    start = torch.arange(0, t, pt.seq_len, dtype=torch.int32)
    lens = torch.full((pt.batch,), pt.seq_len, dtype=torch.int32)
    return (q, k, v, o, start, lens, pt.seq_len), dict(is_causal=True)


MAX_KV_SPLITS = 8  # SGLang's --triton-attention-num-kv-splits on CUDA (16 is its AMD hook's, platform_hook.py)


def _sglang_decode(model: AttentionConfig, pt: Point):
    h, kv = _heads(model, pt.tp)
    d, dt, b = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch
    slots = b * pt.seq_len
    args = (_empty((b, h, d), dt), _empty((slots, kv, d), dt), _empty((slots, kv, d), dt), _empty((b, h, d), dt),
            _indptr(b, pt.seq_len), torch.empty(slots, dtype=torch.int64),
            _empty((b, h, MAX_KV_SPLITS, d), torch.float32), _empty((b, h, MAX_KV_SPLITS), torch.float32),
            torch.full((b,), MAX_KV_SPLITS, dtype=torch.int32), MAX_KV_SPLITS, 1.0 / math.sqrt(d), 1.0, 1.0)
    return args, dict(logit_cap=0.0, sinks=_empty((h,), torch.float32) if model.sinks else None, page_size=1)


VLLM_BLOCK_SIZE = 16  # vLLM's KV block size on CUDA (TritonAttentionBackend: MultipleOf(16); the default 16)


def _vllm_unified(model: AttentionConfig, pt: Point):
    """As TritonAttentionImpl.forward (vllm/v1/attention/backends/triton_attn.py) calls it for a prefill batch: the
    KV cache (blocks, KV, block_size, 2*D) transposed to (blocks, block_size, KV, 2*D) and split into K and V views,
    k/v descale the layer's (1,) scale expanded to (B, KV), block_table int32, no split-K scratch (the 2D launch)."""
    h, kv = _heads(model, pt.tp)
    d, dt, b = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch
    per_seq = -(-pt.seq_len // VLLM_BLOCK_SIZE)
    cache = _empty((b * per_seq, kv, VLLM_BLOCK_SIZE, 2 * d), dt).transpose(1, 2)
    k, v = cache.split(d, dim=-1)
    t = b * pt.seq_len
    scale = _empty((1,), torch.float32).expand(b, kv)
    window = (pt.window - 1, 0) if pt.window else (-1, -1)
    kwargs = dict(q=_empty((t, h, d), dt), k=k, v=v, out=_empty((t, h, d), dt), cu_seqlens_q=_indptr(b, pt.seq_len),
                  max_seqlen_q=pt.seq_len, seqused_k=torch.full((b,), pt.seq_len, dtype=torch.int32),
                  max_seqlen_k=pt.seq_len, softmax_scale=1.0 / math.sqrt(d), causal=True, window_size=window,
                  block_table=torch.empty((b, per_seq), dtype=torch.int32), softcap=0.0, q_descale=None,
                  k_descale=scale, v_descale=scale,
                  sinks=_empty((h,), torch.float32) if model.sinks else None)
    return (), kwargs


VLLM_ALLOW = ("vllm.v1.attention.ops.triton_unified_attention", "vllm.v1.attention.ops.triton_attention_helpers",
              "vllm.envs", "vllm.platforms.interface", "vllm.v1.attention.backends.registry")


def _vllm_lightning(model: AttentionConfig, pt: Point):
    """As MiniMaxText01LinearAttention's prefill calls it, one sequence at a time: q/k/v (1, H, S, D) cast to fp32
    (the layer's `.float()`, whatever the model's dtype), the slope rate (H,) fp32, block_size 256, the sequence's
    kv state (1, H, D, D) fp32."""
    h, _ = _heads(model, pt.tp)
    d, f32 = model.head_dim, torch.float32
    q = _empty((1, h, pt.seq_len, d), f32)
    return (q, _empty((1, h, pt.seq_len, d), f32), _empty((1, h, pt.seq_len, d), f32), _empty((h,), f32)), dict(
        block_size=256, kv_history=_empty((1, h, d, d), f32))


def _linear(model: AttentionConfig) -> str | None:
    return None if model.linear_attention else "no linear-attention layers (config.json attn_type_list has no 0)"


def _mha_gqa(model: AttentionConfig) -> str | None:
    return "an MLA model: SGLang runs its MLA attention through other kernels" if model.mla else None


KERNELS = {k.name: k for k in (
    AuditKernel("sglang-extend-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd",
                ("sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.attention.decode_attention",
                 "sglang.kernels.ops.attention.score_mod", "sglang.srt.environ"),
                SGLANG_STAND_INS, _sglang_extend, _mha_gqa, "the model's dtype (the layer's q/k/v)"),
    AuditKernel("sglang-context-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.prefill_attention",
                "context_attention_fwd", ("sglang.kernels.ops.attention.prefill_attention",),
                SGLANG_STAND_INS, _sglang_context, _mha_gqa, "the model's dtype (q/k/v as the caller passes them)",
                windowed=False),
    AuditKernel("sglang-decode-attention", "sglang", "0.5.23", "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd",
                ("sglang.kernels.ops.attention.decode_attention", "sglang.kernels.ops.attention.score_mod",
                 "sglang.srt.environ"),
                SGLANG_STAND_INS, _sglang_decode, _mha_gqa, "the model's dtype; split-K partials in fp32",
                windowed=False),
    AuditKernel("vllm-unified-attention", "vllm", "0.33.0", "vllm.v1.attention.ops.triton_unified_attention",
                "unified_attention", VLLM_ALLOW, vllm_stand_ins.STAND_INS, _vllm_unified, _mha_gqa,
                "the model's dtype (the layer's query and KV cache)", compile_from="module"),
    AuditKernel("vllm-lightning-attention", "vllm", "0.33.0", "vllm.model_executor.layers.lightning_attn",
                "lightning_attention", ("vllm.model_executor.layers.lightning_attn", "vllm.platforms.interface",
                                        "vllm.v1.attention.backends.registry"),
                vllm_stand_ins.STAND_INS, _vllm_lightning, _linear, "fp32 (the layer casts q/k/v to float)",
                windowed=False),
)}

ENGINES = ("sglang", "vllm")


def kernels_for(engine: str) -> list[AuditKernel]:
    """The entries of `engine`; UsageError for an engine tileprobe does not audit or one with no entry yet."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine}: tileprobe audits {', '.join(ENGINES)}")
    found = [k for k in KERNELS.values() if k.engine == engine]
    if not found:
        raise UsageError(f"--engine {engine}: no audited kernel yet (audited: "
                         f"{', '.join(sorted({k.engine for k in KERNELS.values()}))})")
    return found
