"""vLLM's attention step as its model runner drives it, for an audit entry (AuditKernel.drive): the backend's own
metadata builder (`TritonAttentionMetadataBuilder(kv_cache_spec, layer_names, vllm_config, device)` then
`.build(0, common_attn_metadata)`) and its impl (`TritonAttentionImpl(...)`, then `do_kv_cache_update` and
`forward`), served from the wheel (vllm/v1/attention/backends/triton_attn.py) under the target's stand-in device.
So the engine picks, not tileprobe: the 2D or the 3D launch (the builder's `seq_threshold_3D` against the batch),
the softmax segments (16, or 64 on capability 12.0 when the decode grid under-fills the SMs), the split-K scratch
and `reduce_segments`, and the KV-cache write (`triton_reshape_and_cache_flash`).

What tileprobe sets, because the engine takes it from its config tree or its scheduler (each guarded by the
release's manifest, which hashes the files named here):
- the batch (`common_attn_metadata`) as vLLM's scheduler forms it for the phase: `prefill`, every sequence's seq_len
  tokens new; `decode`, one new token each over seq_len cached; `mixed`, the decodes first (batch - 1 of them, as
  the builder's `reorder_batch_threshold` orders a batch) and one prefill chunk of seq_len tokens over seq_len cached;
  query_start_loc / seq_lens int32, the block table int32 (blocks of `kv_cache_spec.block_size`), slot_mapping int64;
- the KV cache: logical `(num_blocks, num_kv_heads, block_size, 2 * head_size)` in the model's dtype, as the impl's
  forward documents it ("KV cache arrives in logical (B, H, N, 2*hs) order"), laid out as the engine resolves it
  (`layout`: the backend's own `supported_kv_cache_layouts()`, else vLLM's `_DEFAULT_LAYOUT_PREFERENCE` read from
  vllm/v1/attention/backends/utils.py: LBNHC, block / slot / head / content);
- vLLM's serving defaults the builder reads: cudagraph_mode FULL_AND_PIECEWISE and the capture sizes of
  `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py: [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16) for
  the default max capture size 512), max_num_seqs 256, no speculative decoding, kv_cache_dtype "auto";
- the layer: its q/k/v scales (1,) fp32, its sinks (H,) fp32 for a model with attention sinks.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from tileprobe.audit.entry import TORCH, Point, empty, heads, torch
from tileprobe.models import AttentionConfig

# the engine files tileprobe reads facts from for this step (the serving defaults below; the stand-ins' definitions,
# tileprobe.audit.vllm_backend_stand_ins): hashed by the release's manifest with the served ones
BUILDER_FILES = ("vllm.config.vllm", "vllm.config.compilation", "vllm.config.cache", "vllm.utils.torch_utils",
                 "vllm.model_executor.layers.quantization.utils.quant_utils", "vllm.v1.attention.backends.utils")
CAPTURE_SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
MAX_NUM_SEQS = 256


def batch(phase: str, b: int, s: int) -> tuple[list[int], list[int]]:
    """(query tokens, sequence lengths) per request for the phase, decodes first."""
    if phase == "prefill":
        return [s] * b, [s] * b
    if phase == "decode":
        return [1] * b, [s + 1] * b
    if phase == "mixed":
        return [1] * (b - 1) + [s], [s + 1] * (b - 1) + [2 * s]
    raise ValueError(f"phase {phase!r}: prefill, decode or mixed")


def layout(session, backend_cls):
    """The per-layer physical axis order of the KV cache the engine resolves for this backend alone."""
    own = backend_cls.supported_kv_cache_layouts()
    if own:
        return own[0].layer_view_order
    from tileprobe.audit.vllm_backend_stand_ins import from_text
    default = from_text(session.source, "vllm/v1/attention/backends/utils.py", ("_DEFAULT_LAYOUT_PREFERENCE",),
                        {"KVCacheLayout": session.module("vllm.v1.kv_cache_layout").KVCacheLayout})
    return default["_DEFAULT_LAYOUT_PREFERENCE"][0].layer_view_order


def _config(session, h: int, kv: int, d: int):
    mode = session.module("vllm.config").CUDAGraphMode
    model = SimpleNamespace(get_num_attention_heads=lambda parallel: h, get_num_kv_heads=lambda parallel: kv,
                            get_head_size=lambda: d, rswa_window=None)
    compilation = SimpleNamespace(cudagraph_mode=mode.FULL_AND_PIECEWISE, cudagraph_capture_sizes=CAPTURE_SIZES)
    return SimpleNamespace(model_config=model, compilation_config=compilation, parallel_config=SimpleNamespace(),
                           scheduler_config=SimpleNamespace(max_num_seqs=MAX_NUM_SEQS), speculative_config=None)


def triton_attention(session, model: AttentionConfig, pt: Point) -> None:
    """One layer's attention step (KV-cache write, then attention) through vLLM's TRITON_ATTN backend."""
    backend = session.module("vllm.v1.attention.backends.triton_attn")
    kvi = session.module("vllm.v1.kv_cache_interface")
    attention_type = session.module("vllm.v1.attention.backend").AttentionType
    common_cls = session.module("vllm.v1.attention.backend").CommonAttentionMetadata
    h, kv = heads(model, pt.tp)
    d, dt = model.head_dim, getattr(torch, TORCH[model.dtype])
    block = backend.TritonAttentionBackend.get_supported_kernel_block_sizes()[0].base
    spec = kvi.FullAttentionSpec(block_size=block, num_kv_heads=kv, head_size=d, dtype=dt,
                                 sliding_window=pt.window)
    builder = backend.TritonAttentionMetadataBuilder(spec, ["model.layers.0.self_attn.attn"], _config(session, h, kv, d),
                                                     torch.device("meta"))
    q_lens, seq_lens = batch(pt.phase, pt.batch, pt.seq_len)
    tokens, per_seq = sum(q_lens), max(-(-n // block) for n in seq_lens)
    loc = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], dtype=torch.int32)
    common = common_cls(query_start_loc=loc, query_start_loc_cpu=loc, seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
                        num_reqs=len(q_lens), num_actual_tokens=tokens, max_query_len=max(q_lens),
                        max_seq_len=max(seq_lens), block_table_tensor=torch.zeros((len(q_lens), per_seq),
                                                                                    dtype=torch.int32),
                        slot_mapping=torch.zeros((tokens,), dtype=torch.int64), causal=True)
    metadata = builder.build(0, common)
    sinks = empty((h,), torch.float32) if model.sinks else None
    impl = backend.TritonAttentionImpl(h, d, 1.0 / math.sqrt(d), kv, None, pt.window, "auto",
                                       attn_type=attention_type.DECODER, sinks=sinks)
    scale = empty((1,), torch.float32)
    layer = SimpleNamespace(_q_scale=scale, _k_scale=scale, _v_scale=scale)
    logical = (len(q_lens) * per_seq, kv, block, 2 * d)
    order = layout(session, backend.TritonAttentionBackend)
    cache = empty(tuple(logical[i] for i in order), dt).permute(*(order.index(i) for i in range(4)))
    key, value = empty((tokens, kv, d), dt), empty((tokens, kv, d), dt)
    impl.do_kv_cache_update(layer, key, value, cache, common.slot_mapping)
    impl.forward(layer, empty((tokens, h, d), dt), key, value, cache, metadata, empty((tokens, h, d), dt))
