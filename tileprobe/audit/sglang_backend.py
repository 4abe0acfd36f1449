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
  sequences of seq_len new tokens each, no cached prefix; `decode`, a DECODE batch of one new token each over
  seq_len cached (seq_lens seq_len + 1); seq_lens int64 as ScheduleBatch keeps them, their CPU copies and sums;
  no speculative input (SGLang's mixed chunks are off by default: `--enable-mixed-chunk`);
- the model runner: one rank (the heads already split by `--tp`), the model's head counts and head size, page
  size 1, `max_running_requests` 256 as the request pool's size, context length seq_len + 1 (the longest sequence;
  it reaches only MLA's split cap and deterministic mode, neither driven here), the model's sliding window as
  SGLang's layers pass it (`sliding_window - 1`, on the runner for every layer of a model that has one, on the
  layer only for its sliding layers), a full-attention KV pool holding k/v buffers `(slots, kv_heads, head_dim)` in
  the model's dtype whose write is a no-op here (SGLang's own store, not a Triton launch of this backend), and a KV
  index translator that packs nothing (the index values never reach a compile);
- the layer: `RadixAttention(heads, head_dim, 1/sqrt(head_dim), kv_heads, 0, sliding_window_size=...)` and, for a
  model with attention sinks, sinks (heads,) fp32 passed as the model's attention passes them.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from tileprobe.audit import sglang_backend_stand_ins
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


def _runner(model: AttentionConfig, kv: int, h: int, pool: _Pool, pt: Point, attention_arch):
    window = model.sliding_window if any(model.windows()) else None  # the model's, whichever layer runs
    d = model.head_dim
    config = SimpleNamespace(attention_arch=attention_arch, get_max_num_attention_heads=lambda: h,
                             get_num_kv_heads=lambda tp, dcp=1: kv, v_head_dim=d, swa_v_head_dim=d, head_dim=d,
                             context_len=pt.seq_len + 1, is_encoder_decoder=False,
                             hf_config=None)
    return SimpleNamespace(req_to_token_pool=SimpleNamespace(size=MAX_RUNNING_REQUESTS, req_to_token=None),
                           sliding_window_size=window - 1 if window else None, token_to_kv_pool=pool,
                           token_to_kv_pool_allocator=None, page_size=1, kv_index_translator=_Translator(),
                           decode_num_tokens_per_req=lambda: 1, is_draft_worker=False,
                           spec_algorithm=SimpleNamespace(is_dspark=lambda: False), model_config=config,
                           device=torch.device("cpu"), gpu_id=0)


def _batch(mode, phase: str, b: int, s: int, tokens: int):
    new = s if phase == "prefill" else 1
    lens = [s] * b if phase == "prefill" else [s + 1] * b
    seq = torch.tensor(lens, dtype=torch.int64)
    batch = SimpleNamespace(batch_size=b, forward_mode=mode.EXTEND if phase == "prefill" else mode.DECODE,
                            spec_info=None, seq_lens=seq, seq_lens_cpu=seq, seq_lens_sum=sum(lens),
                            req_pool_indices=torch.arange(b, dtype=torch.int64), kv_loc_plan=None,
                            out_cache_loc=torch.zeros((tokens,), dtype=torch.int64), out_cache_loc_is_physical=False,
                            mha_one_shot=False, attn_attend_prefix_cache=False, mha_return_lse=False,
                            positions=None, dcp_kv_mask=None)
    if phase == "prefill":
        batch.extend_prefix_lens = torch.zeros((b,), dtype=torch.int32)
        batch.extend_prefix_lens_cpu = [0] * b
        batch.extend_seq_lens = torch.full((b,), new, dtype=torch.int32)
        batch.extend_seq_lens_cpu = [new] * b
    return batch


def triton_attention(session, model: AttentionConfig, pt: Point) -> None:
    """One layer's attention step through SGLang's triton backend, for pt.phase (prefill or decode)."""
    if pt.phase not in ("prefill", "decode"):
        raise ValueError(f"phase {pt.phase!r}: SGLang's triton backend step is driven for prefill or decode")
    backend = session.module(BACKEND)
    mode = session.module("sglang.srt.model_executor.forward_batch_info").ForwardMode
    radix = session.module("sglang.srt.layers.radix_attention")
    arch = session.module("sglang.srt.configs.model_config").AttentionArch
    h, kv = heads(model, pt.tp)
    d, dt = model.head_dim, getattr(torch, TORCH[model.dtype])
    tokens = pt.batch * (pt.seq_len if pt.phase == "prefill" else 1)
    slots = pt.batch * (pt.seq_len + 1)
    pool = _Pool(empty((slots, kv, d), dt), empty((slots, kv, d), dt))
    runner = _runner(model, kv, h, pool, pt, arch.MHA)
    attn = backend.TritonAttnBackend(runner)
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
