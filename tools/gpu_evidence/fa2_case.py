"""One FlashAttention-2 call on the GPU as vLLM makes it: vLLM's own `flash_attn_varlen_func` (from its wheel) on a
paged KV cache (block size 16, a shuffled block table, seqused_k, causal), checked against an fp32 reference
computed with torch from the same gathered K/V. Run by fa2_launch.py under the launch shim; prints one JSON line."""

from __future__ import annotations

import json
import math
import sys

import torch

from vllm.vllm_flash_attn.flash_attn_interface import flash_attn_varlen_func

case = json.loads(sys.argv[1])
torch.manual_seed(case["seed"])
d, b, new, ctx_len = case["head_dim"], case["batch"], case["new"], case["context"]
heads, kv_heads, block = case["heads"], case["kv_heads"], 16
total = ctx_len + new
per_seq = math.ceil(total / block)
num_blocks = b * per_seq + 7
dev, dt = "cuda", torch.bfloat16
k_cache = torch.randn(num_blocks, block, kv_heads, d, device=dev, dtype=dt)
v_cache = torch.randn(num_blocks, block, kv_heads, d, device=dev, dtype=dt)
table = torch.randperm(num_blocks, device=dev)[: b * per_seq].view(b, per_seq).to(torch.int32)
q = torch.randn(b * new, heads, d, device=dev, dtype=dt)
cu_q = torch.arange(0, (b + 1) * new, new, device=dev, dtype=torch.int32)
seqused = torch.full((b,), total, device=dev, dtype=torch.int32)
out = flash_attn_varlen_func(q, k_cache, v_cache, max_seqlen_q=new, cu_seqlens_q=cu_q, max_seqlen_k=total,
                             seqused_k=seqused, causal=True, block_table=table, fa_version=2)
torch.cuda.synchronize()
worst = 0.0
scale = d ** -0.5
for i in range(b):
    blocks = table[i].long()
    k = k_cache[blocks].reshape(-1, kv_heads, d)[:total].float()
    v = v_cache[blocks].reshape(-1, kv_heads, d)[:total].float()
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    qi = q[i * new:(i + 1) * new].float()
    s = torch.einsum("qhd,khd->hqk", qi, k) * scale
    # causal, aligned to the bottom right: query j sees keys up to ctx_len + j
    mask = torch.arange(total, device=dev)[None, :] > (ctx_len + torch.arange(new, device=dev))[:, None]
    s = s.masked_fill(mask[None], float("-inf"))
    ref = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
    worst = max(worst, (out[i * new:(i + 1) * new].float() - ref).abs().max().item())
print(json.dumps({"max_abs_err": worst, "elements": int(out.numel()), "out_finite": bool(torch.isfinite(out).all())}))
