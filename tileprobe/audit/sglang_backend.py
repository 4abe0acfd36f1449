"""SGLang's attention step as its model runner drives it, for an audit entry (AuditKernel.drive): the backend's own
`TritonAttnBackend(model_runner)`, then `init_forward_metadata(forward_batch)`, then `AttentionBackend.forward(q, k,
v, layer, forward_batch)` (which dispatches to `forward_extend` or `forward_decode` by the batch's ForwardMode),
served from the wheel (sglang/srt/layers/attention/triton_backend.py, base_attn_backend.py) under the target's
stand-in device, with the layer object the model builds (`RadixAttention`, read from the wheel). So the engine picks,
not tileprobe: `max_kv_splits` (the `--triton-attention-num-kv-splits` default, read from the wheel's server-args
fields), the per-sequence split count (`get_num_kv_splits_triton`, a launch of its own, with the target's SM count),
the split-K scratch (`attn_logits` / `attn_lse`), the window rail of a sliding-window layer, and the extend kernel's
arguments.

What tileprobe sets, because the engine takes it from its model runner and scheduler (the stand-ins are
tileprobe.audit.sglang_backend_stand_ins, which says what each answers):
- the batch (`forward_batch`) as SGLang's scheduler forms it for the phase: `prefill`, an EXTEND batch of `batch`
  sequences of seq_len new tokens each, no cached prefix; `extend`, an EXTEND batch of seq_len new tokens each over
  seq_len cached (a later prefill chunk, or a prompt after a prefix-cache hit: extend_prefix_lens seq_len, seq_lens
  2 * seq_len); `decode`, a DECODE batch of one new token each over seq_len cached (seq_lens seq_len + 1), its
  extend fields None; seq_lens int64 as ScheduleBatch keeps them, their CPU copies and sums; no speculative input
  (SGLang's mixed chunks are off by default: `--enable-mixed-chunk`);
- the model runner: one rank (the heads already split by `--tp`), page size 1, `max_running_requests` 256 as the
  request pool's size (the batch where larger), a KV index translator that packs nothing (the index values never
  reach a compile), and a KV pool whose write is a no-op here (SGLang's own store, not a Triton launch of this
  backend);
- MHA/GQA (`triton_attention`, prefill and decode): attention_arch MHA, the model's head counts and head size,
  context length seq_len + 1 (the longest sequence; it reaches only MLA's split cap and deterministic mode, neither
  taken here), the model's sliding window as SGLang's layers pass it (`sliding_window - 1`, on the runner for every
  layer of a model that has one, on the layer only for its sliding layers), a full-attention pool of k/v buffers
  `(slots, kv_heads, head_dim)` in the model's dtype; the layer `RadixAttention(heads, head_dim, 1/sqrt(head_dim),
  kv_heads, 0, sliding_window_size=...)` and, for a model with attention sinks, sinks (heads,) fp32 passed as the
  model's attention passes them;
- MLA (`mla_attention`, prefill, extend and decode; DeepSeek-V2/V3, Kimi-K2): attention_arch MLA (the backend's
  `use_mla`), ModelConfig's MLA fields (one KV head, head_dim 256 as configs/model_config.py sets it for the
  DeepSeek-V2 family, the MLA ranks), context length MLA_CONTEXT_LEN, a stated constant (tileprobe's
  AttentionConfig does not carry max_position_embeddings; see its comment for why the answer does not move with
  it), an MLATokenToKVPool-like pool (one buffer (slots + 1, 1, kv_lora_rank + qk_rope_head_dim), the value its
  [..., :kv_lora_rank] view); the engine's own `handle_attention_triton` picks the model's layer for the batch
  (`attn_mha` or the absorbed `attn_mqa`, built as deepseek_v2.py builds them, with scaling
  (qk_nope + qk_rope)^-0.5: the YaRN mscale factor, a runtime float, left out), called as forward_mha.py /
  forward_mla.py call them (see mla_attention).
"""

from __future__ import annotations

import enum
import math
from types import SimpleNamespace

from tileprobe.audit import sglang_backend_stand_ins
from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.audit.entry import TORCH, Point, empty, heads, torch
from tileprobe.models import AttentionConfig

BACKEND = "sglang.srt.layers.attention.triton_backend"
MAX_RUNNING_REQUESTS = 256  # the request pool's size (max_bs of the backend's indptr buffers)
# served with the launchers' modules: the backend, its base class and the split-count kernel
ALLOW = (BACKEND, "sglang.srt.layers.attention.base_attn_backend", "sglang.kernels.ops.attention.metadata")
# the engine files tileprobe reads facts from for this step (hashed by the release's manifest with the served ones)
READS = (*(f"sglang.srt.arg_groups.fields.{f}" for f in sglang_backend_stand_ins.FIELD_FILES),
         "sglang.srt.model_executor.forward_batch_info",
         "sglang.srt.configs.model_config", "sglang.srt.layers.radix_attention", "sglang.srt.mem_cache.kv_loc_plan",
         "sglang.srt.model_executor.cuda_graph_config", "sglang.srt.utils.common", "sglang.srt.mem_cache.memory_pool")


class _Pool:
    """A full-attention KV pool (MHATokenToKVPool's reads): one layer's k/v buffers, a write that stores nothing."""

    start_layer = 0

    def __init__(self, k, v) -> None:
        self.k, self.v = k, v

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v

    def get_kv_buffer(self, layer_id):
        return self.k, self.v

    def get_v_head_dim(self):
        return self.v.shape[-1]

    def set_kv_buffer(self, *args, **kwargs):
        return None


class _Translator:
    """The KV index translator: packs nothing (index values never reach a compile)."""

    window_kv_kind = None

    def pack_read_stream(self, plan, **kwargs):
        return True


def _runner(config, kv_pool, window: int | None, batch: int):
    """The model runner the backend's __init__ reads: `config` its model_config, `kv_pool` its token_to_kv_pool; the
    request pool holds MAX_RUNNING_REQUESTS, or the batch where it is larger (a server that runs it has that many)."""
    size = max(MAX_RUNNING_REQUESTS, batch)
    return SimpleNamespace(req_to_token_pool=SimpleNamespace(size=size, req_to_token=None),
                           sliding_window_size=window - 1 if window else None, token_to_kv_pool=kv_pool,
                           token_to_kv_pool_allocator=None, page_size=1, kv_index_translator=_Translator(),
                           decode_num_tokens_per_req=lambda: 1, is_draft_worker=False,
                           spec_algorithm=SimpleNamespace(is_dspark=lambda: False), model_config=config,
                           kv_cache_dtype=kv_pool.get_key_buffer(0).dtype, device=torch.device("cpu"), gpu_id=0)


def _mha_config(model: AttentionConfig, kv: int, h: int, pt: Point, attention_arch):
    d = model.head_dim
    return SimpleNamespace(attention_arch=attention_arch, get_max_num_attention_heads=lambda: h,
                           get_num_kv_heads=lambda tp, dcp=1: kv, v_head_dim=d, swa_v_head_dim=d, head_dim=d,
                           context_len=pt.seq_len + 1, is_encoder_decoder=False, hf_config=None)


def _batch(mode, phase: str, b: int, s: int, tokens: int):
    """The ForwardBatch of `phase`: prefill (s new tokens, no prefix), extend (s new over s cached), decode (one new
    over s cached)."""
    prefix = {"prefill": 0, "extend": s, "decode": s}[phase]
    new = 1 if phase == "decode" else s
    lens = [prefix + new] * b
    seq = torch.tensor(lens, dtype=torch.int64)
    batch = SimpleNamespace(batch_size=b, forward_mode=mode.DECODE if phase == "decode" else mode.EXTEND,
                            spec_info=None, seq_lens=seq, seq_lens_cpu=seq, seq_lens_sum=sum(lens),
                            req_pool_indices=torch.arange(b, dtype=torch.int64), kv_loc_plan=None,
                            out_cache_loc=torch.zeros((tokens,), dtype=torch.int64), out_cache_loc_is_physical=False,
                            mha_one_shot=False, attn_attend_prefix_cache=False, mha_return_lse=False,
                            positions=None, dcp_kv_mask=None)
    extend = phase != "decode"  # a decode batch's extend fields are None, as ForwardBatch leaves them
    batch.extend_prefix_lens = torch.full((b,), prefix, dtype=torch.int32) if extend else None
    batch.extend_prefix_lens_cpu = [prefix] * b if extend else None
    batch.extend_seq_lens = torch.full((b,), new, dtype=torch.int32) if extend else None
    batch.extend_seq_lens_cpu = [new] * b if extend else None
    return batch


def _served(session):
    """The engine modules both steps run: the backend, ForwardMode, the layer's module and AttentionArch."""
    return (session.module(BACKEND), session.module("sglang.srt.model_executor.forward_batch_info").ForwardMode,
            session.module("sglang.srt.layers.radix_attention"),
            session.module("sglang.srt.configs.model_config").AttentionArch)


def triton_attention(session, model: AttentionConfig, pt: Point) -> None:
    """One layer's attention step through SGLang's triton backend, for pt.phase (prefill or decode)."""
    if pt.phase not in ("prefill", "decode"):
        raise ValueError(f"phase {pt.phase!r}: SGLang's triton backend step is driven for prefill or decode")
    backend, mode, radix, arch = _served(session)
    h, kv = heads(model, pt.tp)
    d, dt = model.head_dim, getattr(torch, TORCH[model.dtype])
    tokens = pt.batch * (pt.seq_len if pt.phase == "prefill" else 1)
    slots = pt.batch * (pt.seq_len + 1)
    pool = _Pool(empty((slots, kv, d), dt), empty((slots, kv, d), dt))
    window = model.sliding_window if any(model.windows()) else None  # the model's, whichever layer runs
    attn = backend.TritonAttnBackend(_runner(_mha_config(model, kv, h, pt, arch.MHA), pool, window, pt.batch))
    batch = _batch(mode, pt.phase, pt.batch, pt.seq_len, tokens)
    attn.init_forward_metadata(batch)
    layer = radix.RadixAttention(h, d, 1.0 / math.sqrt(d), kv, 0,
                                 sliding_window_size=pt.window - 1 if pt.window else -1)
    sinks = {"sinks": empty((h,), torch.float32)} if model.sinks else {}
    sglang_backend_stand_ins.ATTN_BACKEND[:] = [attn]
    try:  # the layer's own forward: its views of k / v, then the backend's dispatch by the batch's mode
        layer(empty((tokens, h * d), dt), empty((tokens, kv * d), dt), empty((tokens, kv * d), dt), batch,
              save_kv_cache=True, **sinks)
    finally:
        sglang_backend_stand_ins.ATTN_BACKEND.clear()


# --- MLA (DeepSeek-V2 / V3, Kimi-K2): the model's two RadixAttention layers over the latent pool ---------------------
# The runner's context length for an MLA model (ModelConfig.context_len: config.json max_position_embeddings, e.g.
# DeepSeek-V3 163840, Kimi-K2 131072), which tileprobe's AttentionConfig does not carry: a stated constant, raised to
# the point's longest sequence. It reaches the engine only through `_mla_decode_kv_splits_cap`'s context cap,
# next_power_of_2(context / 32) = 4096 here, above the SM cap next_power_of_2(SM count) of every target profile
# (<= 256), so the engine's max_kv_splits is the SM cap for either model.
MLA_CONTEXT_LEN = 131072
MLA_MODEL_HEAD_DIM = 256  # ModelConfig.head_dim of the DeepSeek-V2 family (it sizes only the scheduler's BLOCK_M)
HANDLER = "sglang/srt/models/deepseek_common/attention_backend_handler.py"
FORWARD_METHODS = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_methods.py"
MLA_READS = ("sglang.srt.models.deepseek_v2", "sglang.srt.models.deepseek_common.attention_backend_handler",
             "sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods",
             "sglang.srt.models.deepseek_common.attention_forward_methods.forward_mla",
             "sglang.srt.models.deepseek_common.attention_forward_methods.forward_mha")


class _MLAPool(_Pool):
    """MLATokenToKVPool's reads: one buffer (slots + the padded slot 0, 1, kv_lora_rank + qk_rope_head_dim) as the
    key, its [..., :kv_lora_rank] view as the value (strides shared); a write that stores nothing."""

    def __init__(self, kv, rank: int) -> None:
        super().__init__(kv, kv[..., :rank])


def _mla_config(model: AttentionConfig, h: int, context_len: int, attention_arch):
    """ModelConfig as SGLang forms it for a DeepSeek-V2-family config (configs/model_config.py: attention_arch MLA,
    head_dim 256, one KV head: get_total_num_kv_heads is 1 for MLA)."""
    return SimpleNamespace(attention_arch=attention_arch, get_max_num_attention_heads=lambda: h,
                           get_num_kv_heads=lambda tp, dcp=1: 1, v_head_dim=model.v_head_dim,
                           swa_v_head_dim=model.v_head_dim, head_dim=MLA_MODEL_HEAD_DIM, context_len=context_len,
                           kv_lora_rank=model.kv_lora_rank, qk_nope_head_dim=model.qk_nope_head_dim,
                           qk_rope_head_dim=model.qk_rope_head_dim, is_encoder_decoder=False, hf_config=None)


def attn_forward_method(session, model: AttentionConfig, h: int, batch):
    """The DeepSeek-V2 attention's forward method for the batch on the triton backend: the engine's own
    `handle_attention_triton` (deepseek_common/attention_backend_handler.py, with `_dispatch_mla_subtype` and
    `_can_use_triton_dense_fp8_prefill`, read from the wheel's text) with `AttnForwardMethod` from forward_methods.py:
    outside any CUDA graph (an eager step), the server-args defaults (get_exec), CUDA (not ROCm, no Intel AMX)."""
    ctx = session.module("sglang.srt.runtime_context")
    methods = from_text(session.source, FORWARD_METHODS, ("AttnForwardMethod",),
                        {"IntEnum": enum.IntEnum, "auto": enum.auto})
    no = lambda *a, **k: False  # noqa: E731
    scope = {**methods, "is_in_tc_piecewise_cuda_graph": no, "is_in_breakable_cuda_graph": no,
             "get_exec": ctx.get_exec, "get_parallel": ctx.get_parallel, "_is_hip": False,
             "is_gfx95_supported": no, "use_intel_amx_backend": no}
    handler = from_text(
        session.source, HANDLER, ("_dispatch_mla_subtype", "_can_use_triton_dense_fp8_prefill",
                                  "handle_attention_triton"), scope)
    attn = SimpleNamespace(num_local_heads=h, kv_lora_rank=model.kv_lora_rank, qk_nope_head_dim=model.qk_nope_head_dim,
                           qk_rope_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim,
                           current_attention_backend="triton")
    return handler["handle_attention_triton"](attn, batch).name


def mla_attention(session, model: AttentionConfig, pt: Point) -> None:
    """One DeepSeek-V2-family attention layer's step through SGLang's triton backend with use_mla, for pt.phase:
    prefill (no cached prefix), extend (seq_len new tokens over seq_len cached) or decode. The engine's dispatch
    (attn_forward_method) picks the layer: MHA -> `attn_mha` (forward_mha.py forward_normal_core: q/k (T, H,
    qk_nope+rope), v (T, H, v_head_dim), save_kv_cache False); MLA -> the absorbed `attn_mqa` (forward_mla.py
    forward_absorb_core: q = cat(q_nope_out, q_pe) (T, H, rank+rope), k = cat(k_nope, k_pe) (T, 1, rank+rope),
    v = k_nope (T, 1, rank), save_kv_cache True)."""
    if pt.phase not in ("prefill", "extend", "decode"):
        raise ValueError(f"phase {pt.phase!r}: SGLang's triton MLA step is driven for prefill, extend or decode")
    backend, mode, radix, arch = _served(session)
    h, _ = heads(model, pt.tp)
    dt = getattr(torch, TORCH[model.dtype])
    rank, rope, nope, dv = model.kv_lora_rank, model.qk_rope_head_dim, model.qk_nope_head_dim, model.v_head_dim
    total = pt.seq_len + (pt.seq_len if pt.phase == "extend" else 1)  # each sequence's tokens after the step
    tokens = pt.batch * (1 if pt.phase == "decode" else pt.seq_len)
    pool = _MLAPool(empty((pt.batch * total + 1, 1, rank + rope), dt), rank)
    config = _mla_config(model, h, max(MLA_CONTEXT_LEN, total), arch.MLA)
    attn = backend.TritonAttnBackend(_runner(config, pool, None, pt.batch))
    batch = _batch(mode, pt.phase, pt.batch, pt.seq_len, tokens)
    attn.init_forward_metadata(batch)  # the runner's, before the model's forward
    method = attn_forward_method(session, model, h, batch)
    scaling = 1.0 / math.sqrt(nope + rope)  # DeepseekV2AttentionMLA.scaling (the YaRN mscale factor left out)
    if method == "MHA":
        layer = radix.RadixAttention(h, nope + rope, scaling, num_kv_heads=h, layer_id=0, v_head_dim=dv)
        q, k, v, save = (empty((tokens, h, nope + rope), dt), empty((tokens, h, nope + rope), dt),
                         empty((tokens, h, dv), dt), False)
    elif method == "MLA":
        layer = radix.RadixAttention(h, rank + rope, scaling, num_kv_heads=1, layer_id=0, v_head_dim=rank)
        q, k, v, save = (empty((tokens, h, rank + rope), dt), empty((tokens, 1, rank + rope), dt),
                         empty((tokens, 1, rank), dt), True)
    else:
        raise ValueError(f"SGLang's handle_attention_triton picked {method} for phase {pt.phase}: tileprobe drives "
                         "MHA and MLA")
    sglang_backend_stand_ins.ATTN_BACKEND[:] = [attn]
    try:
        layer(q, k, v, batch, save_kv_cache=save)
    finally:
        sglang_backend_stand_ins.ATTN_BACKEND.clear()
