"""FlashInfer attention calls on the GPU as vLLM's FLASHINFER backend and SGLang's `flashinfer` backend make them
(FlashInfer 0.7.2.post1, the release vLLM 0.33.0 pins), each checked against an fp32 torch reference over the same
gathered K/V. Run by flashinfer_launch.py under the launch shim; argv[1] is a JSON list of cases, argv[2] a folder
for the per-case launch logs. Prints one JSON line per case (as soon as it is done).

- vLLM (vllm/v1/attention/backends/flashinfer.py): KV cache layout LBNHC ("NHD", the default off SM100): each
  layer's cache is [num_blocks, block_size, kv_heads, 2 * head_size] with K and V packed in the content dim and
  passed as the two `split(head_size, dim=-1)` views (equal strides); block size 16; workspace 394 MiB.
  prefill: BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="auto").plan(qo_indptr, paged_kv_indptr,
  paged_kv_indices, paged_kv_last_page_len, seq_lens=..., num_qo_heads, num_kv_heads, head_dim_qk, page_size,
  causal=True, sm_scale, window_left=-1, logits_soft_cap=None, q/kv/o dtypes, fixed_split_size=-1,
  disable_split_kv=False) then run(q, (k, v), q_scale=1.0, k_scale=1.0, v_scale=1.0, out=..., kv_cache_sf=None).
  decode: BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=False, use_tensor_cores=True,
  backend="auto") planned as fast_plan_decode's first call does (plan(..., pos_encoding_mode="NONE",
  non_blocking=True, block_tables=None, seq_lens=..., fixed_split_size=-1, disable_split_kv=False,
  q_len_per_req=1)), then run(q, (k, v), q_scale=1.0, k_scale=1.0, v_scale=1.0, out=..., kv_cache_sf=None,
  sinks=None).
- SGLang (sglang/srt/layers/attention/flashinfer_backend.py): token pool (page size 1), separate K and V buffers
  [slots, kv_heads, head_dim]; workspace 384 MiB. paged prefill (the extend path with a cached prefix, or
  use_paged): BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2").begin_forward(qo_indptr, kv_indptr,
  kv_indices, kv_last_page_len=1s, heads, kv_heads, head_dim, 1, q_data_type, kv_data_type, custom_mask=None,
  non_blocking=True, fixed_split_size=None, ...) then forward(q, (k_buf, v_buf), causal=True, sm_scale,
  window_left=-1, logits_soft_cap=0.0); ragged prefill (the extend with no cached prefix):
  BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto").begin_forward(qo_indptr, qo_indptr, heads,
  kv_heads, head_dim, q_data_type) then forward(q, k, v, causal=True, sm_scale, logits_soft_cap=0.0); decode:
  BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend="fa2", use_tensor_cores=True) (should_use_tensor_core:
  GQA group 4) .begin_forward(kv_indptr, kv_indices, 1s, heads, kv_heads, head_dim, 1, data_type, q_data_type,
  non_blocking=True, fixed_split_size=None, disable_split_kv=False) then forward(q, (k_buf, v_buf), sm_scale,
  logits_soft_cap=0.0).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

import torch

DEV, DT = "cuda", torch.bfloat16
MIB = 1024 * 1024


def reference(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor], new: int, ctx_len: int,
              heads: int, kv_heads: int) -> list[torch.Tensor]:
    """fp32 attention per sequence: query j of a sequence sees keys 0 .. ctx_len + j (causal, bottom-right)."""
    d = q.shape[-1]
    out = []
    for i, (k, v) in enumerate(zip(ks, vs)):
        total = k.shape[0]
        k = k.float().repeat_interleave(heads // kv_heads, dim=1)
        v = v.float().repeat_interleave(heads // kv_heads, dim=1)
        qi = q[i * new:(i + 1) * new].float()
        s = torch.einsum("qhd,khd->hqk", qi, k) * d ** -0.5
        mask = torch.arange(total, device=q.device)[None, :] > (ctx_len + torch.arange(new, device=q.device))[:, None]
        s = s.masked_fill(mask[None], float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v))
    return out


def run_case(c: dict) -> dict:
    import flashinfer
    from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper
    from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper

    torch.manual_seed(c["seed"])
    heads, kv_heads, d = c["heads"], c["kv_heads"], c["head_dim"]
    b, new, ctx_len, page = c["batch"], c["new"], c["context"], c["page_size"]
    total = ctx_len + new  # KV tokens per sequence (the new ones already written to the cache)
    scale = d ** -0.5
    q = torch.randn(b * new, heads, d, device=DEV, dtype=DT)
    rec: dict = {"id": c["id"], "flashinfer": flashinfer.__version__}
    ks, vs = [], []
    if c["wrapper"] == "prefill-ragged":
        k = torch.randn(b * total, kv_heads, d, device=DEV, dtype=DT)
        v = torch.randn(b * total, kv_heads, d, device=DEV, dtype=DT)
        ks = [k[i * total:(i + 1) * total] for i in range(b)]
        vs = [v[i * total:(i + 1) * total] for i in range(b)]
        ws = torch.empty(384 * MIB, dtype=torch.uint8, device=DEV)
        qo = torch.arange(0, (b + 1) * new, new, dtype=torch.int32, device=DEV)
        w = BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=c["backend"])
        w.begin_forward(qo, qo, heads, kv_heads, d, q_data_type=DT)
        rec["resolved_backend"] = getattr(w, "_backend", None)
        os.environ["TILEPROBE_LAUNCH_LOG"] = c["log"]
        out = w.forward(q, k, v, causal=True, sm_scale=scale, logits_soft_cap=0.0)
    elif c["engine"] == "vllm":
        per_seq = math.ceil(total / page)
        num_blocks = b * per_seq + 7
        kv = torch.randn(num_blocks, page, kv_heads, 2 * d, device=DEV, dtype=DT)  # LBNHC: K|V in the content dim
        k_cache, v_cache = kv.split(d, dim=-1)
        table = torch.randperm(num_blocks, device=DEV)[: b * per_seq].view(b, per_seq).to(torch.int32)
        for i in range(b):
            blocks = table[i].long()
            ks.append(k_cache[blocks].reshape(-1, kv_heads, d)[:total])
            vs.append(v_cache[blocks].reshape(-1, kv_heads, d)[:total])
        indptr = torch.arange(0, (b + 1) * per_seq, per_seq, dtype=torch.int32)
        indices = table.reshape(-1).contiguous()
        last = torch.full((b,), total - (per_seq - 1) * page, dtype=torch.int32)
        kv_lens = torch.full((b,), total, dtype=torch.int32)
        ws = torch.zeros(394 * MIB, dtype=torch.uint8, device=DEV)
        out = torch.empty_like(q)
        if c["phase"] == "prefill":
            qo = torch.arange(0, (b + 1) * new, new, dtype=torch.int32)
            w = BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=c["backend"])
            w.plan(qo_indptr=qo, paged_kv_indptr=indptr, paged_kv_indices=indices, paged_kv_last_page_len=last,
                   seq_lens=kv_lens, num_qo_heads=heads, num_kv_heads=kv_heads, head_dim_qk=d, page_size=page,
                   causal=True, sm_scale=scale, window_left=-1, logits_soft_cap=None, q_data_type=DT,
                   kv_data_type=DT, o_data_type=DT, fixed_split_size=-1, disable_split_kv=False)
            rec["resolved_backend"] = getattr(w, "_backend", None)
            os.environ["TILEPROBE_LAUNCH_LOG"] = c["log"]
            w.run(q, (k_cache, v_cache), q_scale=1.0, k_scale=1.0, v_scale=1.0, out=out, kv_cache_sf=None)
        else:
            w = BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=False, paged_kv_indptr_buffer=None,
                                                   paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                                                   use_tensor_cores=True, backend=c["backend"])
            w.plan(indptr=indptr, indices=indices, last_page_len=last, num_qo_heads=heads, num_kv_heads=kv_heads,
                   head_dim=d, page_size=page, pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None,
                   q_data_type=DT, kv_data_type=DT, o_data_type=DT, data_type=None, sm_scale=scale,
                   rope_scale=None, rope_theta=None, non_blocking=True, block_tables=None, seq_lens=kv_lens,
                   fixed_split_size=-1, disable_split_kv=False, q_len_per_req=1)
            rec["resolved_backend"] = getattr(w, "resolved_backend", None)
            os.environ["TILEPROBE_LAUNCH_LOG"] = c["log"]
            w.run(q, (k_cache, v_cache), q_scale=1.0, k_scale=1.0, v_scale=1.0, out=out, kv_cache_sf=None,
                  sinks=None)
    else:  # SGLang: token pool, page size 1
        assert page == 1
        slots = b * total + 13
        k_buf = torch.randn(slots, kv_heads, d, device=DEV, dtype=DT)
        v_buf = torch.randn(slots, kv_heads, d, device=DEV, dtype=DT)
        loc = torch.randperm(slots, device=DEV)[: b * total].view(b, total)
        for i in range(b):
            ks.append(k_buf[loc[i]])
            vs.append(v_buf[loc[i]])
        kv_indptr = torch.arange(0, (b + 1) * total, total, dtype=torch.int32, device=DEV)
        kv_indices = loc.reshape(-1).to(torch.int32).contiguous()
        last = torch.ones(b, dtype=torch.int32, device=DEV)
        ws = torch.empty(384 * MIB, dtype=torch.uint8, device=DEV)
        if c["phase"] == "prefill":
            qo = torch.arange(0, (b + 1) * new, new, dtype=torch.int32, device=DEV)
            w = BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=c["backend"])
            w.begin_forward(qo, kv_indptr, kv_indices, last, heads, kv_heads, d, 1, q_data_type=DT, kv_data_type=DT,
                            custom_mask=None, non_blocking=True, fixed_split_size=None, prefix_len_ptr=None,
                            token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None)
            rec["resolved_backend"] = getattr(w, "_backend", None)
            os.environ["TILEPROBE_LAUNCH_LOG"] = c["log"]
            out = w.forward(q, (k_buf, v_buf), causal=True, sm_scale=scale, window_left=-1, logits_soft_cap=0.0,
                            k_scale=None, v_scale=None)
        else:
            w = BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend=c["backend"], use_tensor_cores=True)
            w.begin_forward(kv_indptr, kv_indices, last, heads, kv_heads, d, 1, data_type=DT, q_data_type=DT,
                            non_blocking=True, fixed_split_size=None, disable_split_kv=False)
            rec["resolved_backend"] = getattr(w, "resolved_backend", None)
            os.environ["TILEPROBE_LAUNCH_LOG"] = c["log"]
            out = w.forward(q, (k_buf, v_buf), sm_scale=scale, logits_soft_cap=0.0, k_scale=None, v_scale=None)
    torch.cuda.synchronize()
    os.environ["TILEPROBE_LAUNCH_LOG"] = os.devnull  # the reference's torch kernels are not recorded
    plan = getattr(w, "_plan_info", None)
    try:  # FA2: [padded_batch_size, total_num_rows, ..., cta_tile_q, ..., split_kv, ...] (a tvm_ffi array)
        rec["plan_info"] = [int(x) for x in plan] if plan is not None else None
    except (TypeError, ValueError):
        rec["plan_info"] = repr(plan)[:500]
    refs = reference(q, ks, vs, new, ctx_len, heads, kv_heads)
    worst = max((out[i * new:(i + 1) * new].float() - r).abs().max().item() for i, r in enumerate(refs))
    rec |= {"max_abs_err": worst, "elements": int(out.numel()), "out_finite": bool(torch.isfinite(out).all())}
    rec["ok"] = rec["out_finite"] and worst < 3e-2
    return rec


def main() -> None:
    cases = json.loads(sys.argv[1])
    for c in cases:
        t = time.time()
        try:
            rec = run_case(c)
        except Exception as exc:  # noqa: BLE001 - one case's failure is a row, the rest still run
            os.environ["TILEPROBE_LAUNCH_LOG"] = os.devnull
            rec = {"id": c["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()[-4000:]}
        rec["seconds"] = round(time.time() - t, 2)
        print("CASE " + json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
