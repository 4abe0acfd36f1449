"""vLLM's Triton MLA decode (DeepSeek-V3 / Kimi-K2), as a tileprobe audit entry. vLLM's first MLA backend on
capability 12.x is TRITON_MLA (vllm/platforms/cuda.py, the MLA priority list for device_capability.major == 12).

- `vllm-mla-decode`: `decode_attention_fwd` (vllm/v1/attention/ops/triton_decode_attention.py) as
  vllm/v1/attention/backends/mla/triton_mla.py `TritonMLAImpl.forward_mqa` calls it: q = cat(ql_nope, q_pe)
  (B, H, kv_lora_rank + qk_rope_head_dim) in the model's dtype; the layer's KV cache (num_blocks, block_size,
  rank+rope) unsqueezed to (num_blocks, block_size, 1, rank+rope) as k_buffer and its [..., :rank] view as v_buffer;
  o (B, H, rank) and lse (B, H) in q's dtype; the decode block table int32 (B, blocks per sequence) and seq_lens
  int32 (B); attn_logits fp32 (B, H, num_kv_splits, rank + 1); num_kv_splits = the engine's
  `_compute_num_kv_splits`(max_seq_len, the device's SM count) (1 under VLLM_BATCH_INVARIANT, read from the engine's
  envs), the function read from the wheel (tileprobe.audit.entries.mla_stand_ins); sm_scale the layer's scale
  (qk_nope+rope)^-0.5 (the YaRN mscale factor, a runtime float, left out); PAGE_SIZE the block size, 16
  (CacheConfig.DEFAULT_BLOCK_SIZE, which TritonMLABackend's MultipleOf(16) accepts: backend.py
  get_preferred_block_size); k_scale = v_scale = the layer's `_k_scale` (an fp32 scalar tensor); is_mla True.
  The point's batch decodes one token each after seq_len tokens.
"""

from __future__ import annotations

import importlib
import math

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule, vllm_stand_ins
from tileprobe.audit.entries import mla_stand_ins
from tileprobe.audit.entries.sglang_mla import V4_MODEL_TYPE
from tileprobe.audit.entry import TORCH, AuditKernel, Point, empty, heads, torch
from tileprobe.models import AttentionConfig

BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
STAND_INS = {**vllm_stand_ins.STAND_INS, mla_stand_ins.VLLM_TRITON_MLA: mla_stand_ins.vllm_triton_mla}
ALLOW = ("vllm.v1.attention.ops.triton_decode_attention", "vllm.envs", "vllm.platforms.interface",
         "vllm.v1.attention.backends.registry")


def _mla(model: AttentionConfig) -> str | None:
    if not model.mla:
        return "not an MLA model (config.json has no kv_lora_rank)"
    if model.model_type == V4_MODEL_TYPE:
        return "DeepSeek-V4: its sparse attention is not vLLM's Triton MLA decode"
    return None


def num_kv_splits(max_seq_len: int) -> int:
    """forward_mqa's num_kv_splits: 1 under VLLM_BATCH_INVARIANT, else the engine's `_compute_num_kv_splits`."""
    if importlib.import_module("vllm.envs").VLLM_BATCH_INVARIANT:
        return 1
    mla = importlib.import_module(mla_stand_ins.VLLM_TRITON_MLA)
    return mla._compute_num_kv_splits(max_seq_len, mla_stand_ins.sm_count())


def _decode(model: AttentionConfig, pt: Point):
    h, _ = heads(model, pt.tp)
    rank, dq, dt, b = model.kv_lora_rank, model.kv_lora_rank + model.qk_rope_head_dim, \
        getattr(torch, TORCH[model.dtype]), pt.batch
    per_seq = -(-pt.seq_len // BLOCK_SIZE)
    cache = empty((b * per_seq, BLOCK_SIZE, dq), dt).unsqueeze(2)
    splits = num_kv_splits(pt.seq_len)
    scale = empty((), torch.float32)
    args = (empty((b, h, dq), dt), cache, cache[..., :rank], empty((b, h, rank), dt), empty((b, h), dt),
            torch.empty((b, per_seq), dtype=torch.int32), torch.full((b,), pt.seq_len, dtype=torch.int32),
            empty((b, h, splits, rank + 1), torch.float32), splits,
            1.0 / math.sqrt(model.qk_nope_head_dim + model.qk_rope_head_dim), BLOCK_SIZE)
    return args, dict(k_scale=scale, v_scale=scale, is_mla=True)


ENTRIES = (
    AuditKernel("vllm-mla-decode", "vllm", LISTED, "vllm.v1.attention.ops.triton_decode_attention",
                "decode_attention_fwd", ALLOW, STAND_INS, _decode, _mla,
                "the model's dtype (q and the latent KV cache); split-K partials in fp32", windowed=False,
                backend="TRITON_MLA", predict=attention_rule.predict),
)
