"""vLLM's linear-attention (lightning) step of MiniMax's layer as its model runner drives it, for an audit entry
(AuditKernel.drive): the backend's own metadata builder (`LinearAttentionMetadataBuilder(kv_cache_spec, layer_names,
vllm_config, device)` then `.build(0, common_attn_metadata)`, vllm/v1/attention/backends/linear_attn.py served from
the wheel), then the layer's own `MiniMaxText01LinearAttention._forward` with `_prefill_and_mix_infer`,
`_decode_infer` and the module's `clear_linear_attention_cache_for_new_sequences`, `linear_attention_decode`,
`linear_attention_prefill_and_mix` and `MiniMaxText01LinearKernel.jit_linear_forward_prefix`
(vllm/model_executor/layers/mamba/linear/minimax_linear_attn.py), cut from the wheel's text with their line numbers
and run unchanged (tileprobe.audit.engine_code.define: the module imports transformers, vLLM's distributed and
linear layers), calling lightning_attn.py's `lightning_attention` (prefill: _fwd_diag_kernel, _fwd_kv_parallel,
_fwd_kv_reduce, _fwd_none_diag_kernel) and `linear_decode_forward_triton` (decode: _linear_attn_decode_kernel) from
the module served from the wheel, the metadata reaching `_forward` as the forward context carries it
(`get_forward_context().attn_metadata[layer prefix]`). So the engine decides, not tileprobe: the builder's split of
a batch into decodes and prefills (`split_decodes_and_prefills`, `reorder_batch_threshold` 1) and its state indices
(`mamba_get_block_table_tensor`), whether the batch is decode-only (`_decode_infer`) or prefill-and-mix (each prefill
one `lightning_attention` call over its own slice and state slot, then the decodes in one decode launch), which new
sequences' states are cleared, the fp32 cast of q/k/v (`qkv.to(torch.float32)`), the decode's BLOCK_SIZE 32 and the
prefill's block (`self.BLOCK`).

Where the step starts and ends: `_forward` runs whole, but `qkv_proj` (a cuBLAS GEMM) answers with its output
(tokens, 3 * heads/tp * head_dim) in the model's dtype, and after the kernels the output norm
(`norm._forward`), `output_gate` (cuBLAS) and `out_proj` (cuBLAS) answer with their outputs, launching nothing: the
step covers what lies after the qkv projection and before the output norm / gate / out_proj.

What tileprobe sets, because the engine takes it from its config tree, its weights or its scheduler:
- the batch as vLLM's scheduler forms it (tileprobe.audit.vllm_backend.batch: prefill, decode, mixed with the decodes
  first); query_start_loc int32 on the CPU, `is_prefilling` True for the prefills, seq_lens as the upper bound; the
  block table (reqs, 1) int32, block i + 1 for request i (mamba_cache_mode "none", vLLM's default: one state slot per
  request, slot 0 left to the null block); the config the builder reads is that mode alone;
- the layer's attributes its __init__ sets from the config: heads per rank (`num_heads // tp_size`), head_dim,
  BLOCK 256 (`getattr(config, "block", 256)`: MiniMax's config has none), layer_idx 0, and `tp_slope`: the engine's
  own `_build_slope_tensor(num_heads)` (cut from the wheel) scaled as __init__ scales it for layer 0 and sliced to
  rank 0's heads, moved to the device;
- the state cache `kv_cache[0]` in the layer's own get_state_shape / get_state_dtype (MambaStateShapeCalculator /
  MambaStateDtypeCalculator.linear_attention_state_*, vllm/model_executor/layers/mamba/mamba_utils.py, cut from the
  wheel's text, with vllm/utils/torch_utils.py's `get_kv_cache_torch_dtype`) under vLLM's default
  mamba_cache_dtype "auto": (slots, heads/tp, head_dim, head_dim) in the model's dtype;
- the hidden states handed to `_forward` (tokens, heads * head_dim) in the model's dtype: only their token count
  and dtype are read past the stood-in projections.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

from tileprobe.audit import engine_code
from tileprobe.audit.entry import TORCH, Point, empty, heads, torch
from tileprobe.audit.vllm_backend import batch
from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.models import AttentionConfig

PREFIX = "model.layers.0.self_attn"
LIGHTNING = "vllm.model_executor.layers.lightning_attn"
BUILDER = "vllm.v1.attention.backends.linear_attn"
LAYER = "vllm/model_executor/layers/mamba/linear/minimax_linear_attn.py"
MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"
FUNCTIONS = ("clear_linear_attention_cache_for_new_sequences", "linear_attention_decode",
             "linear_attention_prefill_and_mix", "MiniMaxText01LinearKernel.jit_linear_forward_prefix",
             "MiniMaxText01LinearAttention._build_slope_tensor", "MiniMaxText01LinearAttention._prefill_and_mix_infer",
             "MiniMaxText01LinearAttention._decode_infer", "MiniMaxText01LinearAttention._forward")
ALLOW = (LIGHTNING, BUILDER, "vllm.v1.attention.backend", "vllm.v1.kv_cache_interface", "vllm.v1.kv_cache_layout",
         "vllm.v1.kv_cache_spec_registry", "vllm.utils.math_utils", "vllm.platforms.interface",
         "vllm.v1.attention.backends.registry", "vllm.envs")
# engine files whose text the step runs cut out, or whose facts it re-types (hashed by the release's manifest)
READS = ("vllm.model_executor.layers.mamba.linear.minimax_linear_attn", "vllm.model_executor.layers.mamba.linear.base",
         "vllm.model_executor.layers.mamba.mamba_utils", "vllm.utils.torch_utils", "vllm.config.cache",
         "vllm.v1.attention.backends.utils")
MAMBA_CACHE_DTYPE = "auto"  # vllm/config/cache.py CacheConfig.mamba_cache_dtype's default
BLOCK = 256  # LinearAttention.__init__: getattr(config, "block", 256)


def _layer(session) -> dict:
    """The engine's functions, cut from the wheel and defined in a scope of the session's modules (cached per
    session)."""
    cached = getattr(session, "_tileprobe_linear_attn", None)
    if cached is not None:
        return cached
    lightning = session.module(LIGHTNING)
    scope = {"torch": torch.load(), "F": torch.nn.functional, "Callable": Callable,
             "rearrange": lightning.rearrange, "lightning_attention": lightning.lightning_attention,
             "linear_decode_forward_triton": lightning.linear_decode_forward_triton, "math": math,
             "get_forward_context": lambda: session._tileprobe_linear_attn_context,
             "LinearAttentionMetadata": session.module(BUILDER).LinearAttentionMetadata}
    defined = engine_code.define(session.source, LAYER, FUNCTIONS, scope)
    # `MiniMaxText01LinearAttention._build_slope_tensor` / `MiniMaxText01LinearKernel.jit_linear_forward_prefix`:
    # the static methods by their class's name, as the engine's text spells them
    defined["MiniMaxText01LinearKernel"] = SimpleNamespace(
        jit_linear_forward_prefix=defined["jit_linear_forward_prefix"])
    session._tileprobe_linear_attn = defined
    return defined


def state(session, model: AttentionConfig, tp: int):
    """The layer's state shape and dtype, by the engine's own calculators (cut from the wheel's text)."""
    scope = {"torch": torch.load()}
    scope |= from_text(session.source, "vllm/utils/torch_utils.py", ("STR_DTYPE_TO_TORCH_DTYPE",
                                                                       "get_kv_cache_torch_dtype"), scope)
    calc = engine_code.define(session.source, MAMBA_UTILS, (
        "MambaStateShapeCalculator.linear_attention_state_shape",
        "MambaStateDtypeCalculator.linear_attention_state_dtype"), scope)
    (shape,) = calc["linear_attention_state_shape"](None, num_heads=model.heads, tp_size=tp, head_dim=model.head_dim)
    (dtype,) = calc["linear_attention_state_dtype"](None, getattr(torch, TORCH[model.dtype]), MAMBA_CACHE_DTYPE)
    return shape, dtype


def metadata(session, model: AttentionConfig, pt: Point, shape, dtype):
    """The builder's LinearAttentionMetadata for the phase's batch."""
    kvi = session.module("vllm.v1.kv_cache_interface")
    linear = session.module("vllm.v1.attention.backends.registry").MambaAttentionBackendEnum.LINEAR
    common_cls = session.module("vllm.v1.attention.backend").CommonAttentionMetadata
    q_lens, seq_lens = batch(pt.phase, pt.batch, pt.seq_len)
    spec = kvi.MambaSpec(block_size=max(seq_lens), shapes=(shape,), dtypes=(dtype,), mamba_type=linear)
    config = SimpleNamespace(cache_config=SimpleNamespace(mamba_cache_mode="none"))
    builder = session.module(BUILDER).LinearAttentionMetadataBuilder(spec, [PREFIX], config, torch.device("meta"))
    n, tokens = len(q_lens), sum(q_lens)
    loc = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(n)], dtype=torch.int32)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    common = common_cls(query_start_loc=loc, query_start_loc_cpu=loc, seq_lens=seq, num_reqs=n,
                        num_actual_tokens=tokens, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
                        block_table_tensor=torch.arange(1, n + 1, dtype=torch.int32).unsqueeze(1),
                        slot_mapping=torch.zeros((tokens,), dtype=torch.int64), causal=True,
                        is_prefilling=torch.tensor([q > 1 for q in q_lens], dtype=torch.bool),
                        seq_lens_cpu_upper_bound=seq)
    return builder.build(0, common)


def _projection(shape, dtype):
    """A cuBLAS projection's (output, bias) as vLLM's linear layers return them: the output, no launch."""
    return lambda x: (empty((x.shape[0], shape), dtype), None)


def layer(session, model: AttentionConfig, tp: int, slots: int):
    """The layer as its __init__ leaves it (the attributes `_forward` reads), with its state cache."""
    fns = _layer(session)
    h, _ = heads(model, tp)
    d, dt = model.head_dim, getattr(torch, TORCH[model.dtype])
    shape, state_dt = state(session, model, tp)
    methods = {name: fns[name] for name in ("_prefill_and_mix_infer", "_decode_infer", "_forward")}
    self = type("MiniMaxText01LinearAttention", (), methods)()
    self.prefix, self.layer_idx, self.tp_size, self.tp_rank, self.BLOCK = PREFIX, 0, tp, 0, BLOCK
    self.num_heads, self.head_dim, self.tp_heads = model.heads, d, h
    slope = fns["_build_slope_tensor"](model.heads) * (1 + 1e-5)  # __init__, num_hidden_layers <= 1 or layer 0
    self.tp_slope = slope[: h].contiguous().to("meta")
    self.kv_cache = (empty((slots, *shape), state_dt),)
    self.qkv_proj = _projection(3 * h * d, dt)
    self.output_gate = _projection(h * d, dt)
    self.out_proj = _projection(model.heads * d, dt)
    self.norm = SimpleNamespace(_forward=lambda x: x)
    return self, (shape, state_dt)


def linear_attn_step(session, model: AttentionConfig, pt: Point) -> None:
    """One linear-attention layer's step: the builder's metadata for the phase's batch, then the layer's `_forward`
    past the qkv projection."""
    self, (shape, dtype) = layer(session, model, pt.tp, pt.batch + 1)
    md = metadata(session, model, pt, shape, dtype)
    session._tileprobe_linear_attn_context = SimpleNamespace(attn_metadata={PREFIX: md})
    tokens = md.num_prefill_tokens + md.num_decode_tokens
    dt = getattr(torch, TORCH[model.dtype])
    width = model.heads * model.head_dim
    self._forward(empty((tokens, width), dt), empty((tokens, width), dt), empty((tokens,), torch.int64))
