"""SGLang's Triton MLA attention (DeepSeek-V3 / Kimi-K2) and its SM120 sparse MLA decode (DeepSeek-V4), as
tileprobe audit entries. SGLang's default attention backend for an MLA model on sm_120 is "triton"
(sglang/srt/arg_groups/model_override_base.py get_default_attn_backend: MLA, neither Hopper nor sm_100 nor ROCm).
What each entry's arguments are, read from the engine's callers:

- `sglang-mla-decode`: `decode_attention_fwd` (sglang/kernels/ops/attention/decode_attention.py) as
  sglang/srt/layers/attention/triton_backend.py `TritonAttnBackend.forward_decode` calls it for the absorbed MLA
  layer (sglang/srt/models/deepseek_v2.py `attn_mqa`: head dim kv_lora_rank + qk_rope_head_dim, one KV head,
  v_head_dim kv_lora_rank; deepseek_common/attention_forward_methods/forward_mla.py `forward_absorb_core` passes
  q = cat(q_nope_out, q_pe), k = cat(k_nope, k_pe), v = k_nope, triton not being a
  FORWARD_ABSORB_CORE_ATTENTION_BACKENDS backend): q (B, H, rank+rope) and o (B, H, rank) views of the layer's
  buffers; the KV pool's one buffer (sglang/srt/mem_cache/memory_pool.py MLATokenToKVPool: (size + page_size, 1,
  rank+rope), get_value_buffer its [..., :rank] view, strides shared); kv_indptr int32, kv_indices int64; attn_logits
  fp32 (B, H, max_kv_splits, v_head_dim of the pool = rank), attn_lse fp32 (B, H, max_kv_splits), num_kv_splits
  int32 (B); max_kv_splits as TritonAttnBackend.__init__ sizes it for MLA: `_mla_decode_kv_splits_cap`(8, the
  device's SM count, the model's context length) (the engine's function, tileprobe.audit.entries.mla_stand_ins);
  sm_scale the layer's scaling (qk_nope+rope)^-0.5 (the YaRN mscale factor, a runtime float, left out); k/v
  descale 1.0; has_mla True; uneven_batch int32 (1,); page_size 1. use_pdl is left False (SGLang sets it on sm_90+:
  a launch option, not a size) and the Lean buffers (read on ROCm only) are not passed.
- `sglang-mla-extend-absorbed`: `extend_attention_fwd` (sglang/kernels/ops/attention/extend_attention.py) as
  TritonAttnBackend.forward_extend calls it for `attn_mqa` when the batch has a cached prefix
  (deepseek_common/attention_backend_handler.py handle_attention_triton: an extend with prefix lengths -> MLA):
  q (T, H, rank+rope), k (T, 1, rank+rope), v (T, 1, rank) contiguous (the backend's .contiguous()), o (T, H,
  rank), the pool's buffers as above, qo_indptr int64 (TritonAttnBackend.qo_indptr), kv_indptr int32 over the
  prefixes, kv_indices int64, no custom mask, causal, sliding_window_size -1, page_size 1. The point's batch each
  extends seq_len tokens after a cached prefix of seq_len tokens.
- `sglang-mla-extend-mha`: the same launcher for `attn_mha` (deepseek_v2.py: head dim qk_nope+rope, H KV heads,
  v_head_dim), which handle_attention_triton picks for an extend without prefix (AttnForwardMethod.MHA;
  forward_mha.py forward_normal_core: save_kv_cache False): q/k (T, H, qk_nope+rope), v (T, H, v_head_dim)
  contiguous, o (T, H, v_head_dim), still the MLA pool's buffers, kv_indptr all zero (no prefix), kv_indices empty.
- `sglang-mla-sparse-decode`: `_run_triton_sparse_decode` (sglang/kernels/ops/attention/flash_mla_sm120_triton.py,
  @triton.autotune `_tiled_sparse_decode_kernel`) as flash_mla_sparse_decode_triton calls it for the sliding-window
  cache, reached from sglang/srt/layers/attention/deepseek_v4_backend.py `_forward_attention` (DeepSeek-V4:
  config.json model_type deepseek_v4, attention backend forced to dsv4 by arg_groups/model_overrides/deepseek_v4.py)
  through flash_mla_sm120.flash_mla_with_kvcache_sm120 on sm_12x only, and only with
  SGLANG_SM120_FLASHMLA_BACKEND=triton (environ.py: default "flashinfer"); the entry's `chooses` runs the engine's own
  `_sm120_default_backend`: q (B, 1, H', 512) bf16 (H' = the heads, padded to 64 under attention TP:
  deepseek_v4.py _kernel_num_heads), the SWA cache: the pool's uint8 (pages, ceil(256 * 584 / 576) * 576) buffer
  (deepseek_v4_memory_pool.py create_buffer, V4 layout, 256-token pages: kv_cache_configurator.py asserts it) viewed
  as (pages, 256, 1, 584); indices int32 (B, 1, window padded to 64), topk_length int32 (B,), softmax_scale
  head_dim^-0.5 (deepseek_v4_backend.py).
"""

from __future__ import annotations

import importlib
import math

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule
from tileprobe.audit.entries import mla_stand_ins
from tileprobe.audit.entries.sglang_attention import DECODE_ALLOW, EXTEND_ALLOW, SGLANG_STAND_INS
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, heads, indptr, torch
from tileprobe.models import AttentionConfig

STAND_INS = {**SGLANG_STAND_INS, mla_stand_ins.SGLANG_TRITON_BACKEND: mla_stand_ins.sglang_triton_backend}
BASE_KV_SPLITS = 8  # --triton-attention-num-kv-splits on CUDA (arg_groups/fields/exec_.py default)
# The model's context length (max_position_embeddings: DeepSeek-V3 163840, Kimi-K2 131072), which tileprobe's
# AttentionConfig does not carry; it caps max_kv_splits at next_power_of_2(context / 32), above any GPU's SM cap here
CONTEXT_LEN = 131072
V4_MODEL_TYPE = "deepseek_v4"  # sglang/srt/configs/deepseek_v4.py model_type


def _mla(model: AttentionConfig) -> str | None:
    if not model.mla:
        return "not an MLA model (config.json has no kv_lora_rank)"
    if model.model_type == V4_MODEL_TYPE:
        return "DeepSeek-V4: SGLang runs it on its dsv4 attention backend, not the Triton MLA one"
    return None


def _v4(model: AttentionConfig) -> str | None:
    return None if model.model_type == V4_MODEL_TYPE else \
        f"not DeepSeek-V4 (config.json model_type {V4_MODEL_TYPE}): SGLang reaches its SM120 sparse MLA decode " \
        "only from the DeepSeek-V4 attention backend"


def _pool(model: AttentionConfig, slots: int, dt):
    """MLATokenToKVPool's layer buffer (slots + the padded slot 0, 1, rank+rope) and its value view [..., :rank]."""
    kv = empty((slots + 1, 1, model.kv_lora_rank + model.qk_rope_head_dim), dt)
    return kv, kv[..., :model.kv_lora_rank]


def _scale(model: AttentionConfig) -> float:
    return 1.0 / math.sqrt(model.qk_nope_head_dim + model.qk_rope_head_dim)


def _indptr64(batch: int, each: int):
    return torch.arange(batch + 1, dtype=torch.int64) * each


def max_kv_splits() -> int:
    """TritonAttnBackend.__init__'s max_kv_splits for an MLA model, by the engine's own `_mla_decode_kv_splits_cap`
    (imported under the session: its stand-in reads it from the wheel) on the target's SM count."""
    backend = importlib.import_module(mla_stand_ins.SGLANG_TRITON_BACKEND)
    return backend._mla_decode_kv_splits_cap(BASE_KV_SPLITS, mla_stand_ins.sm_count(), CONTEXT_LEN)


def _decode(model: AttentionConfig, pt: Point):
    h, _ = heads(model, pt.tp)
    rank, dq, dt, b = model.kv_lora_rank, model.kv_lora_rank + model.qk_rope_head_dim, \
        getattr(torch, TORCH[model.dtype]), pt.batch
    kbuf, vbuf = _pool(model, b * pt.seq_len, dt)
    splits = max_kv_splits()
    args = (empty((b, h, dq), dt), kbuf, vbuf, empty((b, h, rank), dt), indptr(b, pt.seq_len),
            torch.empty(b * pt.seq_len, dtype=torch.int64), empty((b, h, splits, rank), torch.float32),
            empty((b, h, splits), torch.float32), torch.full((b,), splits, dtype=torch.int32), splits,
            _scale(model), 1.0, 1.0)
    return args, dict(logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=True, use_pdl=False, page_size=1,
                      score_mod=None, aux_tensors=None, uneven_batch=torch.zeros((1,), dtype=torch.int32))


def _extend_kwargs(model: AttentionConfig, pt: Point) -> dict:
    return dict(sm_scale=_scale(model), logit_cap=0.0, sliding_window_size=-1, sinks=None, window_kv_offsets=None,
                xai_temperature_len=-1, page_size=1, score_mod=None, aux_tensors=None,
                extend_seq_lens_cpu=[pt.seq_len] * pt.batch)


def _extend_absorbed(model: AttentionConfig, pt: Point):
    h, _ = heads(model, pt.tp)
    rank, dq, dt = model.kv_lora_rank, model.kv_lora_rank + model.qk_rope_head_dim, getattr(torch, TORCH[model.dtype])
    b, s = pt.batch, pt.seq_len
    t = b * s
    kbuf, vbuf = _pool(model, 2 * t, dt)
    args = (empty((t, h, dq), dt), empty((t, 1, dq), dt), empty((t, 1, rank), dt), empty((t, h, rank), dt),
            kbuf, vbuf, _indptr64(b, s), indptr(b, s), torch.empty(t, dtype=torch.int64), None, True, None, s,
            1.0, 1.0)
    return args, _extend_kwargs(model, pt)


def _extend_mha(model: AttentionConfig, pt: Point):
    h, _ = heads(model, pt.tp)
    dqk, dv, dt = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim, getattr(torch, TORCH[model.dtype])
    b, s = pt.batch, pt.seq_len
    t = b * s
    kbuf, vbuf = _pool(model, t, dt)
    args = (empty((t, h, dqk), dt), empty((t, h, dqk), dt), empty((t, h, dv), dt), empty((t, h, dv), dt),
            kbuf, vbuf, _indptr64(b, s), indptr(b, 0), torch.empty(0, dtype=torch.int64), None, True, None, s,
            1.0, 1.0)
    return args, _extend_kwargs(model, pt)


# DeepSeek-V4's SWA cache, as deepseek_v4_memory_pool.py lays it out (KVLayout.V4) and the backend views it
V4_PAGE = 256  # SWA page size: kv_cache_configurator.py asserts page_size == 256
V4_TOKEN_BYTES = 448 + 64 * 2 + 448 // 64 + 1  # fp8 nope + bf16 rope + UE8M0 scales + pad (create_buffer's assert)
V4_PAGE_ALIGN = 576  # page bytes padded to a multiple of 576 (create_buffer's assert)
V4_WINDOW = 128  # configs/deepseek_v4.py window_size, when config.json has no sliding_window


def _sparse_decode(model: AttentionConfig, pt: Point):
    h = model.heads // pt.tp
    kernel_heads = h if pt.tp == 1 else (64 if h <= 64 else model.heads)  # deepseek_v4.py _kernel_num_heads
    b, d = pt.batch, model.head_dim
    page_bytes = -(-V4_PAGE * V4_TOKEN_BYTES // V4_PAGE_ALIGN) * V4_PAGE_ALIGN
    pages = b * -(-pt.seq_len // V4_PAGE)
    cache = empty((pages, page_bytes), torch.uint8)[:, :V4_PAGE * V4_TOKEN_BYTES].view(pages, V4_PAGE, 1,
                                                                                        V4_TOKEN_BYTES)
    topk = -(-(model.sliding_window or V4_WINDOW) // 64) * 64
    q = empty((b, kernel_heads, d), torch.bfloat16).unsqueeze(1)
    return (q, cache, torch.zeros((b, 1, topk), dtype=torch.int32), torch.full((b,), topk, dtype=torch.int32),
            d ** -0.5), {}


FLASH_MLA_SM120 = "sglang.kernels.ops.attention.flash_mla_sm120"
V4_BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"


def _line_of(text: str, needle: str, anchor: str, before: bool = False) -> int:
    """The line of `needle`: its first occurrence after `anchor`, or its last before it."""
    at = text.index(anchor)
    return text.count("\n", 0, text.rindex(needle, 0, at) if before else text.index(needle, at)) + 1


def _sparse_chooses(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """The engine's own selection: deepseek_v4_backend.py takes flash_mla_with_kvcache_sm120 on sm_12x only
    (get_platform().is_sm120: capability major 12), which runs the Triton kernel only when flash_mla_sm120's
    `_sm120_default_backend` (SGLANG_SM120_FLASHMLA_BACKEND, read by the engine's envs under the session) is
    "triton"."""
    if session.target.cc_int // 10 != 12:
        text = session.source.read_text(V4_BACKEND)
        test = "if get_platform().is_sm120:"
        return Elsewhere("FlashMLA's CUDA sparse decode (flash_mla_with_kvcache)",
                         f"{V4_BACKEND}:{_line_of(text, test, 'flash_mla_with_kvcache_sm120', before=True)}", test)
    chosen = session.module(FLASH_MLA_SM120)._sm120_default_backend
    if chosen == "triton":
        return None
    path = FLASH_MLA_SM120.replace(".", "/") + ".py"
    text = session.source.read_text(path)
    test = 'if _sm120_default_backend == "flashinfer":' if chosen == "flashinfer" else \
        'if _sm120_default_backend == "triton":'
    runs = {"flashinfer": "FlashInfer's SM120 sparse MLA decode (_flash_mla_flashinfer)"}.get(
        chosen, "the PyTorch fallback (_sm120_sparse_decode_fwd)")
    return Elsewhere(f"{runs}: SGLANG_SM120_FLASHMLA_BACKEND={chosen}",
                     f"{path}:{_line_of(text, test, 'def flash_mla_with_kvcache_sm120')}", test)


ENTRIES = (
    AuditKernel("sglang-mla-decode", "sglang", LISTED, "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd", DECODE_ALLOW, STAND_INS, _decode, _mla,
                "the model's dtype (the latent KV pool); split-K partials in fp32", windowed=False, backend="triton",
                predict=attention_rule.predict),
    AuditKernel("sglang-mla-extend-absorbed", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", EXTEND_ALLOW, STAND_INS, _extend_absorbed, _mla,
                "the model's dtype (q, the latent k/v and pool)", windowed=False, backend="triton",
                predict=attention_rule.predict),
    AuditKernel("sglang-mla-extend-mha", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", EXTEND_ALLOW, STAND_INS, _extend_mha, _mla,
                "the model's dtype (the up-projected q/k/v)", windowed=False, backend="triton",
                predict=attention_rule.predict),
    AuditKernel("sglang-mla-sparse-decode", "sglang", LISTED,
                "sglang.kernels.ops.attention.flash_mla_sm120_triton", "_run_triton_sparse_decode",
                ("sglang.kernels.ops.attention.flash_mla_sm120_triton", FLASH_MLA_SM120, "sglang.srt.environ"),
                STAND_INS, _sparse_decode, _v4, "bf16 q and output, the fp8/uint8/bf16 views of the V4 cache",
                windowed=False, chooses=_sparse_chooses),
)
