"""vLLM's gated-delta-net (GDN) step as its model runner drives it, for an audit entry (AuditKernel.drive): the
backend's own metadata builder (`GDNAttentionMetadataBuilder(kv_cache_spec, layer_names, vllm_config, device)`
then `.build(0, common_attn_metadata)`, vllm/v1/attention/backends/gdn_attn.py served from the wheel), then the
layer's own forward core, `QwenGatedDeltaNetAttention._forward_core` (with `_forward_core_decode_non_spec`,
`rearrange_mixed_qkv` and `ChunkGatedDeltaRule.forward_native`, vllm/model_executor/layers/mamba/gdn/
qwen_gdn_linear_attn.py) cut from the wheel's text with their line numbers and run unchanged
(tileprobe.audit.engine_code.define), the metadata reaching it as the forward context carries it
(`get_forward_context().attn_metadata[layer prefix]`). So the engine decides, not tileprobe: the builder's split of a
batch into decodes and prefills (its `split_decodes_and_prefills`, `reorder_batch_threshold` 1), the prefill's
cu_seqlens / chunk indices / state indices / initial-state mask, the conv1d metadata (`nums_dict`), whether a
decode-only batch takes the packed decode (`enable_packed_recurrent_decode`) and whether a mixed batch peels its
decodes off to `fused_sigmoid_gating_delta_rule_update`, and the prefill's post-conv prep flags.

Where the step starts: after the layer's input projections (`in_proj_qkvz`, `in_proj_ba`: cuBLAS GEMMs) and their
re-ordering into [q, k, v] / b / a (`forward_cuda` part 1, torch ops): mixed_qkv (T, 2*H*K + HV*V), b and a (T, HV)
contiguous in the model's dtype, core_attn_out zeros (T, HV, V). It ends before the gated RMSNorm and `out_proj`.

What tileprobe sets, because the engine takes it from its config tree, its weights or its scheduler:
- the batch as vLLM's scheduler forms it (tileprobe.audit.vllm_backend.batch: prefill, decode, mixed with the decodes
  first); query_start_loc int32 on the CPU (the builder reads the CPU copy), `is_prefilling` True for the prefills
  (a mixed batch's chunk too, resumed over seq_len cached), seq_lens as the upper bound; the block table (reqs, 1)
  int32 (mamba_cache_mode "none": one state slot per request, slot 0 left to the null block);
- the layer's attributes its __init__ sets from the config: head counts / dims per rank, conv1d.weight
  (dim, 1, width) with no bias, activation "silu" (Qwen3-Next's hidden_act), A_log fp32, dt_bias in the model's
  dtype, `enable_packed_recurrent_decode` = vllm.envs.VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE (the engine's env,
  as __init__ reads it), `gdn_prefill_backend` the engine's own `_resolve_gdn_prefill_backend`;
- the state caches (kv_cache[0], kv_cache[1]): the conv state (slots, width-1, dim) ("SD", vLLM's default conv state
  layout: `is_conv_state_dim_first()` answers False), the recurrent state (slots, HV, V, K), both in the model's
  dtype (mamba_cache_dtype / mamba_ssm_cache_dtype "auto");
- vLLM's serving defaults the builder reads (tileprobe.audit.vllm_backend: FULL_AND_PIECEWISE, max capture size
  512, max_num_seqs 256, no speculative decoding, the v1 model runner); the batch is not padded to a CUDA-graph size;
- not recorded: the recurrent state's gather / scatter kernels around the chunked prefill of the releases that have
  them (vllm/model_executor/layers/mamba/ops/gather_initial_states.py, scatter_states.py): their asserts want the
  state and the builder's indices on one CUDA device, and the metadata here is on the CPU; they answer with an empty
  output;
- where the engine's prefill backend is FlashInfer (a CUDA kernel), `fi_chunk_gated_delta_rule` /
  `_forward_flashinfer_prefill` answer with empty outputs of the engine's shapes (no Triton launch: the
  vllm-gdn-chunk-prefill entry's row names the kernel).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from tileprobe.audit import engine_code
from tileprobe.audit.entries import vllm_gdn
from tileprobe.audit.entry import TORCH, Point, empty, torch
from tileprobe.audit.vllm_backend import CAPTURE_SIZES, MAX_NUM_SEQS, batch
from tileprobe.models import AttentionConfig

PREFIX = "model.layers.0.linear_attn"
LAYER = vllm_gdn.LAYER
METHODS = ("QwenGatedDeltaNetAttention._forward_core", "QwenGatedDeltaNetAttention._forward_core_decode_non_spec",
           "QwenGatedDeltaNetAttention.rearrange_mixed_qkv", "ChunkGatedDeltaRule.forward_native")
FLA = vllm_gdn.FLA
OPS = "vllm.model_executor.layers.mamba.ops"
# modules served from the wheel for the step (those a release lacks are skipped by `_optional`)
ALLOW = (*vllm_gdn.CHUNK_ALLOW, f"{FLA}.fused_recurrent", f"{FLA}.fused_sigmoid_gating",
         f"{FLA}.fused_gdn_prefill_post_conv", vllm_gdn.CONV, f"{OPS}.gather_initial_states",
         f"{OPS}.scatter_states", "vllm.v1.attention.backends.gdn_attn", "vllm.v1.attention.backend",
         "vllm.v1.kv_cache_interface", "vllm.v1.kv_cache_layout", "vllm.v1.kv_cache_spec_registry",
         "vllm.model_executor.layers.mamba.checkpoint", "vllm.utils.math_utils",
         "vllm.model_executor.warmup.jit_warmup",
         "vllm.model_executor.warmup.jit_warmup_triton_helper")
READS = ("vllm.config.vllm", "vllm.config.compilation", "vllm.model_executor.layers.mamba.mamba_utils")


def _config(session, model: AttentionConfig):
    mode = session.module("vllm.config").CUDAGraphMode
    compilation = SimpleNamespace(cudagraph_mode=mode.FULL_AND_PIECEWISE, cudagraph_capture_sizes=CAPTURE_SIZES,
                                  max_cudagraph_capture_size=CAPTURE_SIZES[-1])
    selector = vllm_gdn.vllm_config(model)
    return SimpleNamespace(model_config=selector.model_config, additional_config={},
                           compilation_config=compilation, parallel_config=SimpleNamespace(decode_context_parallel_size=1),
                           scheduler_config=SimpleNamespace(max_num_seqs=MAX_NUM_SEQS), speculative_config=None,
                           cache_config=SimpleNamespace(mamba_cache_mode="none"), use_v2_model_runner=False,
                           tileprobe_model=model)


def _gather(state, indices, has_initial_state):
    """Stand-in for the state gather kernel of the releases that have one (ops/gather_initial_states.py): its
    output, not launched (its asserts want CUDA-device indices, which the CPU metadata is not)."""
    return empty((indices.numel(), *state.shape[1:]), state.dtype)


def _scatter(state, values, indices):
    """Stand-in for ops/scatter_states.py's kernel (as `_gather`)."""


def _layer_class(session):
    """A class holding the engine's own methods, cut from the wheel and defined in a scope of the session's
    modules (cached per session)."""
    cached = getattr(session, "_tileprobe_gdn_layer", None)
    if cached is not None:
        return cached
    fla = session.module(f"{FLA}.chunk")
    conv = session.module(vllm_gdn.CONV)

    def empty_prefill(q, k, v, g, beta, initial_state, *a, **kw):  # FlashInfer's prefill: a CUDA kernel
        return empty(v.shape, v.dtype), empty(initial_state.shape, initial_state.dtype)

    scope = {"torch": torch.load(), "get_forward_context": lambda: session._tileprobe_gdn_context,
             "GDNAttentionMetadata": session.module("vllm.v1.attention.backends.gdn_attn").GDNAttentionMetadata,
             "is_conv_state_dim_first": lambda: False,
             "causal_conv1d_fn": conv.causal_conv1d_fn, "causal_conv1d_update": conv.causal_conv1d_update,
             "fused_post_conv_prep": session.module(f"{FLA}.fused_gdn_prefill_post_conv").fused_post_conv_prep,
             "fused_recurrent_gated_delta_rule_packed_decode":
                 session.module(f"{FLA}.fused_recurrent").fused_recurrent_gated_delta_rule_packed_decode,
             "fused_sigmoid_gating_delta_rule_update":
                 session.module(f"{FLA}.fused_sigmoid_gating").fused_sigmoid_gating_delta_rule_update,
             "fla_chunk_gated_delta_rule": fla.chunk_gated_delta_rule,
             "gather_initial_states": _gather, "scatter_states": _scatter,
             "fi_chunk_gated_delta_rule": empty_prefill}
    defined = engine_code.define(session.source, LAYER, METHODS, scope)
    methods = {q.rsplit(".", 1)[1]: defined[q.rsplit(".", 1)[1]] for q in METHODS}
    native = methods.pop("forward_native")
    cls = type("QwenGatedDeltaNetAttention", (), dict(methods))
    cls.triton_prefill = native
    cls._forward_flashinfer_prefill = lambda self, q, k, v, g, beta, md, **kw: empty_prefill(
        q, k, v, g, beta, kw["ssm_state"][: md.prefill_state_indices.shape[0]])
    session._tileprobe_gdn_layer = cls
    return cls


def layer(session, model: AttentionConfig, tp: int, slots: int, backend: str):
    """The layer as its __init__ leaves it (the attributes the forward core reads), with its state caches."""
    h, hv, k, v = vllm_gdn.dims(model, tp)
    dt = getattr(torch, TORCH[model.dtype])
    dim, width = 2 * h * k + hv * v, model.gdn.conv_kernel
    self = _layer_class(session)()
    self.prefix, self.tp_size, self.activation = PREFIX, tp, "silu"
    self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim = h * tp, hv * tp, k, v
    self.key_dim, self.value_dim = h * k * tp, hv * v * tp
    self.conv1d = SimpleNamespace(weight=empty((dim, 1, width), dt), bias=None)
    self.A_log, self.dt_bias = empty((hv,), torch.float32), empty((hv,), dt)
    self.kv_cache = (empty((slots, width - 1, dim), dt), empty((slots, hv, v, k), dt))
    self.enable_packed_recurrent_decode = session.module("vllm.envs").VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE
    self.gdn_prefill_backend = backend
    if backend == "triton":
        self.chunk_gated_delta_rule = functools.partial(type(self).triton_prefill, self)
    else:
        self.chunk_gated_delta_rule = lambda **kw: _layer_class(session)._forward_flashinfer_prefill(
            self, kw["q"], kw["k"], kw["v"], kw["g"], kw["beta"],
            SimpleNamespace(prefill_state_indices=kw["initial_state"][:, 0, 0, 0]), ssm_state=kw["initial_state"])
    return self, (dim, hv, dt)


def metadata(session, model: AttentionConfig, pt: Point):
    """The builder's GDNAttentionMetadata for the phase's batch, and the builder."""
    gdn_attn = session.module("vllm.v1.attention.backends.gdn_attn")
    kvi = session.module("vllm.v1.kv_cache_interface")
    common_cls = session.module("vllm.v1.attention.backend").CommonAttentionMetadata
    h, hv, k, v = vllm_gdn.dims(model, pt.tp)
    dt = getattr(torch, TORCH[model.dtype])
    dim, width = 2 * h * k + hv * v, model.gdn.conv_kernel
    q_lens, seq_lens = batch(pt.phase, pt.batch, pt.seq_len)
    spec = kvi.MambaSpec(block_size=max(seq_lens), shapes=((width - 1, dim), (hv, v, k)), dtypes=(dt, dt))
    builder = gdn_attn.GDNAttentionMetadataBuilder(spec, [PREFIX], _config(session, model), torch.device("meta"))
    n, tokens = len(q_lens), sum(q_lens)
    loc = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(n)], dtype=torch.int32)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    prefilling = torch.tensor([q > 1 for q in q_lens], dtype=torch.bool)
    common = common_cls(query_start_loc=loc, query_start_loc_cpu=loc, seq_lens=seq, num_reqs=n,
                        num_actual_tokens=tokens, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
                        block_table_tensor=torch.arange(1, n + 1, dtype=torch.int32).unsqueeze(1),
                        slot_mapping=torch.zeros((tokens,), dtype=torch.int64), causal=True,
                        is_prefilling=prefilling, seq_lens_cpu_upper_bound=seq)
    return builder.build(0, common), builder


def gdn_step(session, model: AttentionConfig, pt: Point) -> None:
    """One GDN layer's step: the builder's metadata for the phase's batch, then the layer's forward core on the
    projected tensors."""
    md, builder = metadata(session, model, pt)
    self, (dim, hv, dt) = layer(session, model, pt.tp, pt.batch + 1, builder.gdn_prefill_backend)
    session._tileprobe_gdn_context = SimpleNamespace(attn_metadata={PREFIX: md})
    tokens = md.num_actual_tokens
    v = model.gdn.value_head_dim
    self._forward_core(mixed_qkv=empty((tokens, dim), dt), b=empty((tokens, hv), dt), a=empty((tokens, hv), dt),
                       core_attn_out=empty((tokens, hv, v), dt))
