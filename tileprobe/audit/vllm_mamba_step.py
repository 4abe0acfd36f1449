"""vLLM's Mamba-2 step as its model runner drives it, for an audit entry (AuditKernel.drive): the backend's own metadata
builder (`Mamba2AttentionMetadataBuilder(kv_cache_spec, layer_names, vllm_config, device).build(0, common)`,
vllm/v1/attention/backends/mamba2_attn.py over mamba_attn.py) and the mixer's own layer (`MambaMixer2(...)`, built by
its __init__, then its registered op `mamba_mixer2(projected_states, output, layer_name)`, which calls
`conv_ssm_forward`: vllm/model_executor/layers/mamba/mamba_mixer2.py), served from the wheel under the target's
stand-in device (tileprobe.audit.vllm_mamba_step_stand_ins says what is stood in). So the engine picks, not tileprobe:
the decode / prefill split of the batch, the chunk metadata (cu_chunk_seqlens, seq_idx, last_chunk_indices: how many
chunks the SSD scan steps over, and where a continued prefill's chunks break), whether a prefill passes initial
states (`prep_initial_states`), the causal conv's metadata (nums_dict, batch_ptr), the decode's state indices, the
selective-state-update backend (`initialize_mamba_ssu_backend` with vLLM's default MambaConfig: TRITON), the state
caches' shapes and dtypes (the mixer's own get_state_shape / get_state_dtype: MambaStateShapeCalculator /
MambaStateDtypeCalculator), the per-rank heads and groups (a single group replicated over the ranks), the views of
in_proj's output the kernels read and every argument of the kernels (conv_ssm_forward's calls).

What tileprobe sets, because the engine takes it from its config tree, its scheduler or its model runner:
- the batch (`common_attn_metadata`) as vLLM's scheduler forms it for the phase (tileprobe.audit.vllm_backend.batch:
  prefill, decode, or decodes then one prefill chunk over seq_len cached), `is_prefilling` true on the prefill rows,
  one cache block per request (block i + 1 for request i: block 0 is vLLM's null block), with mamba_cache_mode
  "none" (no prefix caching of Mamba states, vLLM's default) the block size the longest sequence;
- the config the mixer and builder read: the model's dtype; mamba_cache_dtype "auto"; mamba_ssm_cache_dtype
  "float32" for Nemotron-H (vllm/model_executor/models/config.py NemotronHForCausalLMConfig turns the default "auto"
  into float32), else "auto"; no ReplaySSM, no speculative decoding, no FlashInfer ReplaySSM; vLLM's default
  MambaConfig (read from vllm/config/mamba.py); cudagraph_mode FULL_AND_PIECEWISE, max_cudagraph_capture_size 512,
  max_num_seqs 256 (the serving defaults, tileprobe.audit.vllm_backend); use_conv_bias true, no in_proj bias
  (Nemotron-H's, Mamba2ForCausalLM's and Falcon-H1's defaults), activation silu;
- the state caches: one page of `kv_cache_spec.page_size_bytes` per block, each state a view of it at its offset (as
  the model runner's KV-cache reshape lays a MambaSpec's states out: stride(0) the page);
- the forward context (`attn_metadata` {layer: the builder's metadata}, `no_compile_layers` {layer: the mixer});
- in_proj's output (tokens, 2 * intermediate/tp + 2 * groups/tp * state + heads/tp) in the model's dtype: in_proj
  is a cuBLAS GEMM, not Triton, so the step starts at the op, after it; the gated RMSNorm and out_proj after the op
  are not driven (the norm's Triton kernel, layernorm_gated, is not audited).
"""

from __future__ import annotations

from types import SimpleNamespace

from tileprobe.audit import vllm_backend
from tileprobe.audit.entry import TORCH, Point, empty, torch
from tileprobe.audit.vllm_mamba_step_stand_ins import CURRENT
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig, SSMDims

LAYER = "model.layers.0.mixer"
MIXER = "vllm.model_executor.layers.mamba.mamba_mixer2"
OPS = "vllm.model_executor.layers.mamba.ops."
ALLOW = (MIXER, "vllm.model_executor.layers.mamba.mamba_utils", "vllm.v1.attention.backends.mamba2_attn",
         "vllm.v1.attention.backends.mamba_attn", "vllm.v1.attention.backend", "vllm.v1.kv_cache_interface",
         "vllm.v1.kv_cache_layout", "vllm.v1.kv_cache_spec_registry", "vllm.utils.math_utils",
         "vllm.v1.attention.backends.registry", "vllm.envs", "vllm.platforms.interface") + tuple(
    OPS + m for m in ("ssd_combined", "ssd_bmm", "ssd_chunk_scan", "ssd_chunk_state", "ssd_state_passing",
                      "triton_helpers", "mamba_ssm", "causal_conv1d", "layernorm_gated", "ssu_dispatch",
                      "selective_state_update_replayssm_output_only", "replayssm_config"))
# engine files whose facts the driver re-types (the serving defaults, the NemotronH cache dtype): hashed by the
# release's manifest with the served ones
READS = vllm_backend.BUILDER_FILES + ("vllm.config.mamba", "vllm.distributed.utils", "vllm.model_executor.utils",
                                      "vllm.model_executor.models.config", "vllm.platforms.cuda",
                                      "vllm.utils.platform_utils")
MAX_CAPTURE = 512


def per_rank(ssm: SSMDims, tp: int, name: str) -> None:
    """MambaMixer2.__init__'s two assertions, said as the audit's usage errors (before the mixer asserts them)."""
    if ssm.heads % tp:
        raise UsageError(f"--tp {tp}: {name}'s {ssm.heads} Mamba heads do not split over {tp} ranks")
    if ssm.groups % tp and ssm.groups != 1:
        raise UsageError(f"--tp {tp}: {name}'s {ssm.groups} Mamba groups do not split over {tp} ranks "
                         "(vLLM replicates only a single group)")


def _config(session, model: AttentionConfig, dt, block_size: int):
    mode = session.module("vllm.config").CUDAGraphMode
    mamba = session.module("vllm.config.mamba").MambaConfig()
    ssm_cache = "float32" if model.model_type == "nemotron_h" else "auto"
    model_config = SimpleNamespace(dtype=dt, get_mamba_chunk_size=lambda: model.ssm.chunk_size)
    cache = SimpleNamespace(mamba_cache_dtype="auto", mamba_ssm_cache_dtype=ssm_cache, use_replayssm=False,
                            replayssm_buffer_len=None, mamba_cache_mode="none", block_size=block_size,
                            mamba_block_size=block_size, hash_block_size=None, cache_hit_alignment_tokens=None)
    compilation = SimpleNamespace(cudagraph_mode=mode.FULL_AND_PIECEWISE, max_cudagraph_capture_size=MAX_CAPTURE,
                                  cudagraph_capture_sizes=vllm_backend.CAPTURE_SIZES, static_forward_context={})
    return SimpleNamespace(model_config=model_config, cache_config=cache, compilation_config=compilation,
                           scheduler_config=SimpleNamespace(max_num_seqs=vllm_backend.MAX_NUM_SEQS),
                           parallel_config=SimpleNamespace(decode_context_parallel_size=1), speculative_config=None, num_speculative_tokens=0,
                           use_flashinfer_replayssm=False, mamba_config=mamba, num_hash_lookahead_tokens=0)


def _mixer(session, model: AttentionConfig, config, dt):
    """MambaMixer2 built by its own __init__, as the model's decoder layer builds it (under vLLM's default dtype,
    the model's; on the meta device: shapes only)."""
    s = model.ssm
    cls = session.module(MIXER).MambaMixer2
    before = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with torch.device("meta"):
            return cls(hidden_size=model.hidden_size or s.heads * s.head_dim, ssm_state_size=s.state_size,
                       conv_kernel_size=s.conv_kernel, intermediate_size=s.heads * s.head_dim, use_conv_bias=True,
                       use_bias=False, n_groups=s.groups, num_heads=s.heads, head_dim=s.head_dim,
                       activation="silu", model_config=config.model_config, cache_config=config.cache_config,
                       prefix=LAYER)
    finally:
        torch.set_default_dtype(before)


def _caches(spec, blocks: int):
    """The spec's states in one page per block, each a view at its offset (stride(0) the page)."""
    page, offset, out = spec.page_size_bytes, 0, []
    align = getattr(spec, "state_alignment", 1)  # 0.34.0's MambaSpec field (1 without FlashInfer ReplaySSM)
    raw = empty((blocks * page,), torch.int8)
    for shape, dtype in zip(spec.shapes, spec.dtypes):
        size = dtype.itemsize
        inner = [1]
        for n in reversed(shape[1:]):
            inner.insert(0, inner[0] * n)
        out.append(raw.view(dtype).as_strided((blocks, *shape), (page // size, *inner), offset // size))
        n = 1
        for x in shape:
            n *= x
        offset += -(-n * size // align) * align
    return tuple(out)


def mixer2(session, model: AttentionConfig, pt: Point) -> None:
    """One Mamba-2 layer's conv + SSM step (the builder's metadata, then the mixer's op) through vLLM's own code."""
    per_rank(model.ssm, pt.tp, model.name)
    dt = getattr(torch, TORCH[model.dtype])
    q_lens, seq_lens = vllm_backend.batch(pt.phase, pt.batch, pt.seq_len)
    reqs, tokens = len(q_lens), sum(q_lens)
    config = _config(session, model, dt, max(seq_lens))
    CURRENT.config, CURRENT.tp, CURRENT.forward = config, pt.tp, None
    try:
        mixer = _mixer(session, model, config, dt)
        kvi = session.module("vllm.v1.kv_cache_interface")
        mamba_type = session.module("vllm.v1.attention.backends.registry").MambaAttentionBackendEnum.MAMBA2
        spec = kvi.MambaSpec(block_size=max(seq_lens), shapes=tuple(mixer.get_state_shape()),
                             dtypes=tuple(mixer.get_state_dtype()), mamba_type=mamba_type, mamba_cache_mode="none")
        mixer.kv_cache = _caches(spec, reqs + 1)
        groups = SimpleNamespace(kv_cache_groups=[SimpleNamespace(kv_cache_spec=spec)])
        session.module(OPS + "ssu_dispatch").initialize_mamba_ssu_backend(config.mamba_config, groups)
        builder = session.module("vllm.v1.attention.backends.mamba2_attn").Mamba2AttentionMetadataBuilder(
            spec, [LAYER], config, torch.device("meta"))
        common = _common(session, q_lens, seq_lens)
        metadata = builder.build(0, common)
        CURRENT.forward = SimpleNamespace(attn_metadata={LAYER: metadata}, no_compile_layers={LAYER: mixer})
        h, inter = model.ssm.heads // pt.tp, model.ssm.heads * model.ssm.head_dim // pt.tp
        width = 2 * inter + 2 * mixer.groups_ssm_state_size // pt.tp + h
        projected, output = empty((tokens, width), dt), empty((tokens, inter), dt)
        session.module(MIXER).mamba_mixer2(projected, output, LAYER)
    finally:
        CURRENT.config, CURRENT.tp, CURRENT.forward = None, 1, None


def _common(session, q_lens: list[int], seq_lens: list[int]):
    """CommonAttentionMetadata of the batch, as the model runner fills it (host copies on the CPU, the rest on the
    meta device), one block per request."""
    common_cls = session.module("vllm.v1.attention.backend").CommonAttentionMetadata
    i32 = torch.int32
    loc = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], dtype=i32)
    seqs = torch.tensor(seq_lens, dtype=i32)
    fields = {f for f in common_cls.__dataclass_fields__}
    extra = {k: v for k, v in dict(
        seq_lens_cpu_upper_bound=seqs, seq_lens_cpu=seqs,
        num_computed_tokens_cpu=seqs - torch.diff(loc),
        is_prefilling=torch.tensor([q > 1 or s == q for q, s in zip(q_lens, seq_lens)])).items() if k in fields}
    return common_cls(query_start_loc=loc.to("meta"), query_start_loc_cpu=loc, seq_lens=seqs.to("meta"),
                      num_reqs=len(q_lens), num_actual_tokens=sum(q_lens), max_query_len=max(q_lens),
                      max_seq_len=max(seq_lens),
                      block_table_tensor=torch.arange(1, len(q_lens) + 1, dtype=i32)[:, None].to("meta"),
                      slot_mapping=empty((sum(q_lens),), torch.int64), causal=True, **extra)
