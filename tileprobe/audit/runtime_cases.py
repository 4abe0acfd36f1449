"""The cases `tileprobe.audit.runtime` launches on a GPU: each engine launcher's arguments as real, random tensors in
the layouts the engine's own callers build (the same callers the audit entries read, tileprobe/audit/entries/), and
an independent fp64 reference of attention for each.

Callers read (file and function inside the wheels):
- SGLang (the pin table's release, tileprobe.engines.pins) sglang/srt/layers/attention/triton_backend.py
  `forward_extend` -> `extend_attention_fwd`: q/k/v of the new tokens (T, H|KV, D), the KV pool (slots, KV, D) addressed
  by kv_indices (int64, here a random permutation of slots) over each sequence's prefix (kv_indptr int32), causal,
  sliding_window_size = window - 1 (the kernel keeps a key when q <= k + sliding_window_size), sinks fp32 (H,). The
  window case passes the whole prefix (the kernel masks it; the engine's window rail passes a trimmed prefix, the same
  keys after the mask).
- SGLang `context_attention_fwd` (prefill_attention.py): q/k/v/o (sum S, H|KV, D), b_start_loc / b_seq_len int32,
  causal (no window, no sinks: the kernel takes neither).
- SGLang `forward_decode` -> `decode_attention_fwd`: q/o (B, H, D), the pool, kv_indices of each sequence's tokens
  (a sliding layer passes only the last `window` tokens: the window is the indices), attn_logits fp32
  (B, H, 8, D), attn_lse fp32 (B, H, 8), num_kv_splits int32 = 8 (max_kv_splits, SGLang's CUDA default; the
  engine may pick fewer per request), sinks.
- vLLM (the pin table's release) vllm/v1/attention/backends/triton_attn.py `TritonAttentionImpl.forward` ->
  `unified_attention`: the cache (blocks, KV, 16, 2D) transposed and split into K/V views, block_table int32 (here
  random block ids), seqused_k, cu_seqlens_q, window_size (window - 1, 0) (the kernel keeps a key when q - k < window),
  k/v descale (1,) expanded to (B, KV), sinks; a decode batch gets the split-K scratch of TritonAttentionMetadataBuilder
  (seq_threshold_3D = 128 // KV, 16 segments) and so the engine's 3D launch.
- vLLM vllm/v1/attention/backends/mla/triton_mla.py `TritonMLAImpl.forward_mqa` -> `decode_attention_fwd`
  (vllm/v1/attention/ops/triton_decode_attention.py): q = [ql_nope, q_pe] (B, H, 512 + 64), the latent cache
  (blocks, 16, 576) unsqueezed to (blocks, 16, 1, 576) and its [..., :512] view as V, block_table, seq_lens,
  attn_logits fp32 (B, H, splits, 513), num_kv_splits = min(next_pow2(max(1, max_seq_len // 512)), 2 * SMs)
  (`_compute_num_kv_splits`), scale 1/sqrt(qk_nope + qk_rope), k_scale = v_scale = the layer's fp32 1.0, is_mla.

The reference (`reference`) is attention as the model defines it, in fp64 from the same bf16 values the kernel
reads: softmax(scale * q.k) over the keys a query may see (causal: key position <= query position; sliding
window W: query position - key position < W, W keys including itself, HF `sliding_window`), query head h reading
KV head h // (H / KV) (GQA), a sink (gpt-oss) an extra logit per head in the softmax's denominator that carries no
value; MLA: keys [c_kv, k_pe], values c_kv.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from tileprobe.audit import vllm_stand_ins
# the engine modules the audit entries serve for the same launchers
from tileprobe.audit.entries.sglang_attention import DECODE_ALLOW as SGLANG_DECODE
from tileprobe.audit.entries.sglang_attention import EXTEND_ALLOW as SGLANG_EXTEND
from tileprobe.audit.entries.sglang_attention import SGLANG_STAND_INS
from tileprobe.audit.entries.vllm_attention import VLLM_ALLOW as VLLM_UNIFIED
from tileprobe.audit.entry import TORCH
from tileprobe.lazy import LazyModule
from tileprobe.models import ATTENTION_PRESETS, AttentionConfig

torch = LazyModule("torch")

SGLANG_PREFILL = ("sglang.kernels.ops.attention.prefill_attention",)
VLLM_MLA = ("vllm.v1.attention.ops.triton_decode_attention", "vllm.platforms.interface",
            "vllm.v1.attention.backends.registry")
# files the stand-ins read beside the served modules (vllm_stand_ins.kv_cache_interface, backend_utils)
VLLM_READ = ("vllm/v1/kv_cache_interface.py", "vllm/v1/attention/backends/utils.py")

SGLANG_SPLITS = 8  # max_kv_splits on CUDA (SGLang's server-args default; the audit reads it from the wheel)
VLLM_BLOCK = 16  # vLLM's KV block size on CUDA
VLLM_SEGMENTS = 16  # NUM_PAR_SOFTMAX_SEGMENTS (triton_attn.py)
VLLM_GRID_2D = 128  # MIN_LAUNCH_GRID_SIZE_2D (triton_attn.py): seq_threshold_3D = 128 // KV
MLA_WORK_PER_SPLIT = 512  # triton_mla.py _MIN_WORK_PER_SPLIT


@dataclass
class Seq:
    """One sequence's reference inputs: q (Lq, H, D), k (Lk, KV, D), v (Lk, KV, Dv) at key positions 0..Lk-1,
    query positions qpos (Lq), and the rows of the kernel's output they fill (out[rows])."""
    q: object
    k: object
    v: object
    qpos: object
    rows: slice


@dataclass
class Built:
    args: tuple
    kwargs: dict
    out: object  # the kernel's output (T, H, Dv), poisoned before each launch
    seqs: list[Seq]
    scale: float
    window: int | None  # keys per query in the model's window (HF sliding_window), None: full
    sinks: object = None
    keys: int = 0  # the longest key range (the reduction length of the check)


@dataclass(frozen=True)
class Case:
    name: str
    engine: str
    module: str
    launcher: str
    allow: tuple[str, ...]
    stand_ins: dict
    model: AttentionConfig  # a preset of tileprobe.models, or --model's
    what: str
    build: Callable  # (AttentionConfig, torch.Generator, device) -> Built
    reads: tuple[str, ...] = field(default=())


def _rnd(gen, shape, dev, dtype):
    return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)


def _cum(lens, dev):
    return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=dev)


def _sinks(model, gen, dev):
    return 2.0 * _rnd(gen, (model.heads,), dev, torch.float32) if model.sinks else None


def sglang_extend(prefix, extend, window=None):
    def build(model: AttentionConfig, gen, dev) -> Built:
        dt = getattr(torch, TORCH[model.dtype])  # the model's dtype, as the engine runs the layer
        h, kv, d = model.heads, model.kv_heads, model.head_dim
        t, p = sum(extend), sum(prefix)
        q, k, v = _rnd(gen, (t, h, d), dev, dt), _rnd(gen, (t, kv, d), dev, dt), _rnd(gen, (t, kv, d), dev, dt)
        slots = p + 64
        kbuf, vbuf = _rnd(gen, (slots, kv, d), dev, dt), _rnd(gen, (slots, kv, d), dev, dt)
        idx = torch.randperm(slots, generator=gen, device=dev)[:p].to(torch.int64)
        o = torch.empty_like(q)
        qo, kvp = _cum(extend, dev), _cum(prefix, dev)
        sinks = _sinks(model, gen, dev)
        args = (q, k, v, o, kbuf, vbuf, qo, kvp, idx, None, True, None, max(extend), 1.0, 1.0)
        kwargs = dict(sm_scale=1.0 / math.sqrt(d), logit_cap=0.0,
                      sliding_window_size=window - 1 if window else -1, sinks=sinks, page_size=1)
        seqs = []
        for b in range(len(extend)):
            r, s = slice(int(qo[b]), int(qo[b + 1])), idx[int(kvp[b]):int(kvp[b + 1])]
            seqs.append(Seq(q[r], torch.cat([kbuf[s], k[r]]), torch.cat([vbuf[s], v[r]]),
                            prefix[b] + torch.arange(extend[b], device=dev), r))
        return Built(args, kwargs, o, seqs, 1.0 / math.sqrt(d), window, sinks, max(map(sum, zip(prefix, extend))))
    return build


def sglang_context(lens):
    def build(model: AttentionConfig, gen, dev) -> Built:
        dt = getattr(torch, TORCH[model.dtype])  # the model's dtype, as the engine runs the layer
        h, kv, d = model.heads, model.kv_heads, model.head_dim
        t = sum(lens)
        q, k, v = _rnd(gen, (t, h, d), dev, dt), _rnd(gen, (t, kv, d), dev, dt), _rnd(gen, (t, kv, d), dev, dt)
        o = torch.empty_like(q)
        start = _cum(lens, dev)
        seqs = [Seq(q[int(start[b]):int(start[b + 1])], k[int(start[b]):int(start[b + 1])],
                    v[int(start[b]):int(start[b + 1])], torch.arange(n, device=dev),
                    slice(int(start[b]), int(start[b + 1]))) for b, n in enumerate(lens)]
        lens_t = torch.tensor(lens, dtype=torch.int32, device=dev)
        return Built((q, k, v, o, start[:-1].contiguous(), lens_t, max(lens)), dict(is_causal=True), o, seqs,
                     1.0 / math.sqrt(d), None, None, max(lens))
    return build


def sglang_decode(lens, window=None):
    def build(model: AttentionConfig, gen, dev) -> Built:
        dt = getattr(torch, TORCH[model.dtype])  # the model's dtype, as the engine runs the layer
        h, kv, d, b = model.heads, model.kv_heads, model.head_dim, len(lens)
        slots = sum(lens) + 64
        kbuf, vbuf = _rnd(gen, (slots, kv, d), dev, dt), _rnd(gen, (slots, kv, d), dev, dt)
        perm = torch.randperm(slots, generator=gen, device=dev).to(torch.int64)
        own = list(torch.split(perm[:sum(lens)], lens))  # each sequence's slots, in token order
        seen = [s[-window:] if window else s for s in own]  # a sliding layer's indices: the last `window` tokens
        q, o = _rnd(gen, (b, h, d), dev, dt), torch.empty((b, h, d), dtype=dt, device=dev)
        logits = torch.empty((b, h, SGLANG_SPLITS, d), dtype=torch.float32, device=dev)
        lse = torch.empty((b, h, SGLANG_SPLITS), dtype=torch.float32, device=dev)
        splits = torch.full((b,), SGLANG_SPLITS, dtype=torch.int32, device=dev)
        sinks = _sinks(model, gen, dev)
        args = (q, kbuf, vbuf, o, _cum([len(s) for s in seen], dev), torch.cat(seen), logits, lse, splits,
                SGLANG_SPLITS, 1.0 / math.sqrt(d), 1.0, 1.0)
        seqs = [Seq(q[i:i + 1], kbuf[own[i]], vbuf[own[i]], torch.tensor([n - 1], device=dev), slice(i, i + 1))
                for i, n in enumerate(lens)]
        return Built(args, dict(logit_cap=0.0, sinks=sinks, page_size=1), o, seqs, 1.0 / math.sqrt(d), window,
                     sinks, max(lens))
    return build


def _paged(lens, blocks_extra, gen, dev):
    """A block table (B, max blocks) int32 of random distinct block ids, and the block count."""
    per = [-(-n // VLLM_BLOCK) for n in lens]
    blocks = sum(per) + blocks_extra
    ids = torch.randperm(blocks, generator=gen, device=dev).to(torch.int32)
    table = torch.zeros((len(lens), max(per)), dtype=torch.int32, device=dev)
    for i, chunk in enumerate(torch.split(ids[:sum(per)], per)):
        table[i, :len(chunk)] = chunk
    return table, blocks


def _gather(cache, table, i, n):
    """Tokens 0..n-1 of sequence i from a paged cache (blocks, 16, ...)."""
    pos = torch.arange(n, device=cache.device)
    return cache[table[i, pos // VLLM_BLOCK].long(), pos % VLLM_BLOCK]


def vllm_unified(context, queries, window=None):
    def build(model: AttentionConfig, gen, dev) -> Built:
        dt = getattr(torch, TORCH[model.dtype])  # the model's dtype, as the engine runs the layer
        h, kv, d, b = model.heads, model.kv_heads, model.head_dim, len(queries)
        lens = [c + n for c, n in zip(context, queries)]
        table, blocks = _paged(lens, 4, gen, dev)
        cache = _rnd(gen, (blocks, kv, VLLM_BLOCK, 2 * d), dev, dt).transpose(1, 2)
        k, v = cache.split(d, dim=-1)
        t = sum(queries)
        q, o = _rnd(gen, (t, h, d), dev, dt), torch.empty((t, h, d), dtype=dt, device=dev)
        cu = _cum(queries, dev)
        scale = torch.ones((1,), dtype=torch.float32, device=dev).expand(b, kv)
        sinks = _sinks(model, gen, dev)
        kwargs = dict(q=q, k=k, v=v, out=o, cu_seqlens_q=cu, max_seqlen_q=max(queries),
                      seqused_k=torch.tensor(lens, dtype=torch.int32, device=dev), max_seqlen_k=max(lens),
                      softmax_scale=1.0 / math.sqrt(d), causal=True, window_size=(window - 1, 0) if window else (-1, -1),
                      block_table=table, softcap=0.0, q_descale=None, k_descale=scale, v_descale=scale, sinks=sinks)
        if max(queries) == 1:  # a decode batch: TritonAttentionMetadataBuilder's split-K scratch
            rows = VLLM_GRID_2D // kv
            pad = 1 << (d - 1).bit_length()
            kwargs.update(seq_threshold_3D=rows, num_par_softmax_segments=VLLM_SEGMENTS,
                          softmax_segm_output=torch.empty((rows, h, VLLM_SEGMENTS, pad), dtype=torch.float32, device=dev),
                          softmax_segm_max=torch.empty((rows, h, VLLM_SEGMENTS), dtype=torch.float32, device=dev),
                          softmax_segm_expsum=torch.empty((rows, h, VLLM_SEGMENTS), dtype=torch.float32, device=dev))
        seqs = [Seq(q[int(cu[i]):int(cu[i + 1])], _gather(k, table, i, n), _gather(v, table, i, n),
                    context[i] + torch.arange(queries[i], device=dev), slice(int(cu[i]), int(cu[i + 1])))
                for i, n in enumerate(lens)]
        return Built((), kwargs, o, seqs, 1.0 / math.sqrt(d), window, sinks, max(lens))
    return build


def vllm_mla(lens, sms):
    def build(model: AttentionConfig, gen, dev) -> Built:
        dt = getattr(torch, TORCH[model.dtype])  # the model's dtype, as the engine runs the layer
        h, rank, rope, b = model.heads, model.kv_lora_rank, model.qk_rope_head_dim, len(lens)
        table, blocks = _paged(lens, 4, gen, dev)
        cache = _rnd(gen, (blocks, VLLM_BLOCK, rank + rope), dev, dt)
        q = _rnd(gen, (b, h, rank + rope), dev, dt)
        o = torch.empty((b, h, rank), dtype=dt, device=dev)
        lse = torch.zeros((b, h), dtype=dt, device=dev)
        splits = min(1 << (max(1, max(lens) // MLA_WORK_PER_SPLIT) - 1).bit_length(), 2 * sms)
        logits = torch.empty((b, h, splits, rank + 1), dtype=torch.float32, device=dev)
        cache4 = cache.unsqueeze(2)
        scale = 1.0 / math.sqrt(model.qk_nope_head_dim + rope)
        one = torch.tensor(1.0, dtype=torch.float32, device=dev)
        args = (q, cache4, cache4[..., :rank], o, lse, table, torch.tensor(lens, dtype=torch.int32, device=dev),
                logits, splits, scale, VLLM_BLOCK)
        seqs = []
        for i, n in enumerate(lens):
            kv = _gather(cache, table, i, n).unsqueeze(1)  # (n, 1, rank + rope)
            seqs.append(Seq(q[i:i + 1], kv, kv[..., :rank], torch.tensor([n - 1], device=dev), slice(i, i + 1)))
        return Built(args, dict(k_scale=one, v_scale=one, is_mla=True), o, seqs, scale, None, None, max(lens))
    return build


def reference(built: Built):
    """(ref, groups): the fp64 attention output shaped like the kernel's (T, H, Dv), and each output row's group for
    the check's rms: the row itself (one query token's head: one softmax average, whose size goes as 1/sqrt(keys it
    sees), so a row of few keys is judged by its own size, not by its sequence's)."""
    out = built.out
    ref = torch.full(out.shape, math.nan, dtype=torch.float64, device=out.device)
    groups = torch.arange(out.shape[0] * out.shape[1], device=out.device).reshape(out.shape[:2])
    h = out.shape[1]
    for s in built.seqs:
        kvh = s.k.shape[1]
        q = s.q.double().unflatten(1, (kvh, -1))  # (Lq, KV, g, D): query head h reads KV head h // g
        k, v = s.k.double(), s.v.double()
        logits = torch.einsum("qcgd,ncd->cgqn", q, k).flatten(0, 1) * built.scale  # (H, Lq, Lk)
        kpos = torch.arange(k.shape[0], device=k.device)
        diff = s.qpos[:, None].to(kpos.device) - kpos[None, :]
        keep = diff >= 0
        if built.window:
            keep &= diff < built.window
        logits = logits.masked_fill(~keep[None], -math.inf)
        if built.sinks is not None:
            sink = built.sinks.double()[:, None, None].expand(h, logits.shape[1], 1)
            p = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
        else:
            p = torch.softmax(logits, dim=-1)
        ref[s.rows] = torch.einsum("cgqn,ncd->qcgd", p.unflatten(0, (kvh, -1)), v).flatten(1, 2)
    return ref, groups


def _u(name, engine, module, launcher, allow, stand_ins, model, what, build, reads=()):
    return Case(name, engine, module, launcher, allow, stand_ins, model, what, build, reads)


def window_of(model: AttentionConfig) -> int | None:
    """The model's sliding window (HF `sliding_window`) when any of its layers slides, else None."""
    return next((w for w in model.windows() if w), None)


# What a case needs of a model (with --model: the cases run are those it has): "mla" (MLA's latent cache; every other
# case needs a model without it), "full" (a full-attention layer), "window" (a sliding layer), "sinks", "presets"
# (a second size of a case the presets already run: not repeated for one --model)
NEEDS = {"sglang-extend-gqa": {"full"}, "sglang-extend-window-sinks": {"window"}, "sglang-extend-full-sinks":
         {"full", "sinks"}, "sglang-prefill-gqa": {"full"}, "sglang-prefill-gqa-d64": {"presets"},
         "sglang-decode-gqa": {"full"}, "sglang-decode-window-sinks": {"window"}, "vllm-unified-prefill-gqa": {"full"},
         "vllm-unified-prefill-window-sinks": {"window"}, "vllm-unified-decode-gqa": {"full"},
         "vllm-unified-decode-window-sinks": {"window"}, "vllm-mla-decode": {"mla"}}


def applies(name: str, model: AttentionConfig) -> bool:
    need = NEEDS[name]
    if "presets" in need or ("mla" in need) != model.mla or model.heads == 0:
        return False
    return (("full" not in need or None in model.windows()) and ("window" not in need or window_of(model) is not None)
            and ("sinks" not in need or model.sinks))


def cases(sms: int, model: AttentionConfig | None = None) -> list[Case]:
    """Every case, small enough to run in seconds: GQA (qwen3-30b-a3b, 32/4 heads of 128), sliding window 128 and
    sinks (gpt-oss-120b, 64/8 heads of 64), MLA (kimi-k2: 64 heads, rank 512 + rope 64). With `model` (--model: a
    preset or a config.json), the cases that apply to it (NEEDS) with its dimensions, dtype and sinks, a window case
    at its own window W (the sequences' lengths set from W as the presets' are from 128: keys beyond the window)."""
    sx, sd, vu = "sglang.kernels.ops.attention.", "vllm.v1.attention.ops.", VLLM_UNIFIED
    vs = vllm_stand_ins.STAND_INS
    gqa, oss, mla = (model,) * 3 if model else (ATTENTION_PRESETS[n] for n in ("qwen3-30b-a3b", "gpt-oss-120b",
                                                                                 "kimi-k2"))
    w = window_of(oss) or 128  # the window cases' W (unused where the model has no sliding layer: not run)
    sk = ", sinks" if oss.sinks else ""
    every = [
        _u("sglang-extend-gqa", "sglang", sx + "extend_attention", "extend_attention_fwd", SGLANG_EXTEND,
           SGLANG_STAND_INS, gqa, "causal, prefix 96/0 + extend 160/77", sglang_extend([96, 0], [160, 77])),
        _u("sglang-extend-window-sinks", "sglang", sx + "extend_attention", "extend_attention_fwd", SGLANG_EXTEND,
           SGLANG_STAND_INS, oss, f"causal, window {w}{sk}, prefix {w + 72}/33 + extend 190/130",
           sglang_extend([w + 72, 33], [190, 130], window=w)),
        _u("sglang-extend-full-sinks", "sglang", sx + "extend_attention", "extend_attention_fwd", SGLANG_EXTEND,
           SGLANG_STAND_INS, oss, f"causal, full layer{sk}, prefix 64 + extend 200", sglang_extend([64], [200])),
        _u("sglang-prefill-gqa", "sglang", sx + "prefill_attention", "context_attention_fwd", SGLANG_PREFILL,
           SGLANG_STAND_INS, gqa, "causal, 2 sequences of 300/129", sglang_context([300, 129])),
        _u("sglang-prefill-gqa-d64", "sglang", sx + "prefill_attention", "context_attention_fwd", SGLANG_PREFILL,
           SGLANG_STAND_INS, oss, "causal, 2 sequences of 257/64 (no window, no sinks: not taken)",
           sglang_context([257, 64])),
        _u("sglang-decode-gqa", "sglang", sx + "decode_attention", "decode_attention_fwd", SGLANG_DECODE,
           SGLANG_STAND_INS, gqa, "decode, 4 sequences of 300/1000/37/513, 8 kv splits",
           sglang_decode([300, 1000, 37, 513])),
        _u("sglang-decode-window-sinks", "sglang", sx + "decode_attention", "decode_attention_fwd", SGLANG_DECODE,
           SGLANG_STAND_INS, oss, f"decode, window {w} (via kv_indices){sk}, 4 sequences of "
           f"{w + 172}/{w + 872}/37/{w + 1}", sglang_decode([w + 172, w + 872, 37, w + 1], window=w)),
        _u("vllm-unified-prefill-gqa", "vllm", sd + "triton_unified_attention", "unified_attention", vu, vs,
           gqa, "2D launch, causal, context 64/0 + query 200/45", vllm_unified([64, 0], [200, 45]),
           VLLM_READ),
        _u("vllm-unified-prefill-window-sinks", "vllm", sd + "triton_unified_attention", "unified_attention", vu,
           vs, oss, f"2D launch, causal, window {w}{sk}, context {w + 22}/0 + query 180/90",
           vllm_unified([w + 22, 0], [180, 90], window=w), VLLM_READ),
        _u("vllm-unified-decode-gqa", "vllm", sd + "triton_unified_attention", "unified_attention", vu, vs,
           gqa, "3D split-K launch, decode, 4 sequences of 300/1000/37/513",
           vllm_unified([299, 999, 36, 512], [1, 1, 1, 1]), VLLM_READ),
        _u("vllm-unified-decode-window-sinks", "vllm", sd + "triton_unified_attention", "unified_attention", vu,
           vs, oss, f"3D split-K launch, decode, window {w}{sk}, 4 sequences of {w + 172}/{w + 872}/37/{w + 1}",
           vllm_unified([w + 171, w + 871, 36, w], [1, 1, 1, 1], window=w), VLLM_READ),
        _u("vllm-mla-decode", "vllm", sd + "triton_decode_attention", "decode_attention_fwd", VLLM_MLA, vs,
           mla, "MLA decode (TritonMLAImpl), 4 sequences of 700/1500/33/1024",
           vllm_mla([700, 1500, 33, 1024], sms), VLLM_READ),
    ]
    return every if model is None else [c for c in every if applies(c.name, model)]


def model_of(case: Case) -> AttentionConfig:
    return case.model
