"""The model's forward pass, layer kind by layer kind, with the compiled kernel the engine chooses for each.

`calls(...)` walks one decoder layer of each kind the model has, then the head, in forward order:

1. norm (input RMSNorm), 2. QKV projection, 3. rotary embedding, 4. KV-cache write, 5. attention (per window the
layers attend with; prefill and decode apart), 6. O projection, 7. post-attention norm, 8. the MLP: the router,
the routed experts and the shared expert (MoE layers) or the dense gate_up / activation / down, 9. the final norm
and lm_head.

Per slot it names the kernel the engine runs on the target and the engine line (or rule) that chose it:
- attention: the backend the engine's own selection picked (tileprobe.audit.backends, run from the wheel); a Triton
  backend's kernels are the Triton rows (tileprobe.audit.run), so no compiled call is made for it;
- MoE experts: what the engine's MoE oracle chose (the not-selected rows of the Triton MoE entries carry it:
  tileprobe.audit.entries.vllm_moe / vllm_moe_mxfp4); SGLang runs its Triton fused MoE (`triton-fused-moe`);
- the rest is stated here, with the engine line that decides it:
  - vLLM's default compilation (Inductor, vllm/config/vllm.py: custom_ops "none") turns RMSNorm, SiluAndMul and
    the rotary embedding into Inductor-generated Triton kernels at start-up (`inductor`, unanswered: generated);
  - vLLM's KV-cache write for FlashAttention / FlashInfer layouts is its `reshape_and_cache_flash` op (MLA:
    `concat_and_cache_mla`);
  - unquantized linears are torch's F.linear (cuBLAS); fp8 block-quantized ones vLLM's CUTLASS blockwise op.
A slot no family answers is still a call: its row is `unanswered`, never absent.
"""

from __future__ import annotations

from tileprobe.audit.path.call import KernelCall
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

PHASES = ("prefill", "decode")
VLLM_BLOCK = 16  # vLLM's default --block-size (CacheConfig.block_size None -> 16 for these backends)

# vLLM attention backends -> the compiled family that answers them (Triton backends: none, their rows are Triton's)
VLLM_ATTENTION = {"FLASH_ATTN": "fa2", "FLASHINFER": "flashinfer-attention",
                  "FLASHINFER_MLA_SPARSE_SM120": "flashinfer-sparse-mla-sm120", "FLASHINFER_MLA": "trtllm-gen",
                  "TRTLLM_ATTN": "trtllm-gen"}
SGLANG_ATTENTION = {"flashinfer": "flashinfer-attention", "trtllm_mha": "trtllm-gen", "trtllm_mla": "trtllm-gen",
                    "fa3": "sgl-kernel-fa3", "flashmla": "flashmla", "cutlass_mla": "cutlass-mla"}
# vLLM MoE oracle backends (as the oracle spells them) -> family
VLLM_MOE = {"FLASHINFER_CUTLASS": "flashinfer-cutlass-moe", "MARLIN": "marlin-moe", "DEEPGEMM": "deepgemm",
            "FLASHINFER_TRTLLM": "trtllm-gen"}
INDUCTOR_LINE = "vllm/config/vllm.py: custom_ops 'none' under the Inductor backend (vLLM's default compilation)"


def _per_rank(n: int, tp: int) -> int:
    return max(1, n // tp)


def attention_calls(engine: str, label: str, model: AttentionConfig, target: Target, tp: int, backend: str,
                    line: str) -> list[KernelCall]:
    table = VLLM_ATTENTION if engine == "vllm" else SGLANG_ATTENTION
    fam = table.get(backend)
    if fam is None and (backend.startswith("TRITON") or backend == "triton"):
        return []  # Triton backends: their launches are the Triton rows
    fam = fam or backend.lower()
    heads, kv = _per_rank(model.heads, tp), _per_rank(model.kv_heads, tp)
    out = []
    if model.mla:
        params = dict(heads=heads, kv_lora_rank=model.kv_lora_rank, qk_rope_head_dim=model.qk_rope_head_dim,
                      qk_nope_head_dim=model.qk_nope_head_dim, v_head_dim=model.v_head_dim, dtype=model.dtype,
                      kv_cache_dtype="auto", topk=model.index_topk)
        for ph in PHASES:
            out.append(KernelCall(f"attention (MLA{', sparse' if model.index_topk else ''})", ph, fam, backend,
                                  params, f"{line} (the engine's attention backend selection)", label))
        if model.index_topk:
            out.append(KernelCall("attention (sparse-MLA indexer)", "prefill+decode", "sparse-mla-indexer",
                                  "indexer top-k", dict(topk=model.index_topk, heads=heads), line, label))
        return out
    for w in model.windows():
        layer = "attention (full)" if w is None else f"attention (sliding {w})"
        for ph in PHASES:
            params = dict(heads=heads, kv_heads=kv, head_dim=model.head_dim, head_dim_v=model.head_dim,
                          dtype=model.dtype, kv_cache_dtype="auto", page_size=VLLM_BLOCK if engine == "vllm" else 1,
                          window=w, softcap=0.0, sinks=model.sinks, causal=True, paged=True)
            op = "flash_attn_varlen_func" if fam == "fa2" else backend
            if fam == "fa2":
                params["fa_version"] = 3 if target.cc_int == 90 else 2
            out.append(KernelCall(layer, ph, fam, op, params,
                                  f"{line} (the engine's attention backend selection)", label))
    return out


def _moe_family(engine: str, runs: str | None) -> tuple[str, str]:
    if engine == "sglang":
        return "triton-fused-moe", "sglang fused_moe (Triton)"
    if runs is None:
        return "moe-unknown", "the engine's MoE method for this quantization (not walked by tileprobe)"
    name = runs.split(" ", 1)[0]
    return VLLM_MOE.get(name, name.lower()), runs


def moe_calls(engine: str, label: str, model: AttentionConfig, tp: int, moe_runs: str | None, moe_line: str | None,
              triton_moe: bool, tokens: dict, router=None) -> list[KernelCall]:
    """`router`: the top-k op vLLM's own router factory picks (tileprobe.audit.path.vllm_router.RouterChoice; None:
    the model's routing was not read, and topk_softmax is assumed, as the row says)."""
    m = model.moe
    if m is None:
        return []
    inter = m.inter // tp if m.inter % tp == 0 else m.inter / tp
    quant = None if model.quant is None else model.quant.method + (
        "-block" if model.quant.weight_block_size else "")
    out = [KernelCall("moe router (gate linear)", "prefill+decode", "cublas", "F.linear",
                      dict(m="tokens", n=m.experts, k=m.hidden, dtype=model.dtype), "the router's ReplicatedLinear "
                      "(unquantized)", label)]
    if engine == "vllm":
        op = "topk_softmax" if router is None else (router.op or f"{router.router} (no custom op)")
        r = model.routing
        out.append(KernelCall("moe router (top-k)", "prefill+decode", "vllm-custom-op", op,
                              dict(kernel=op, experts=m.experts, top_k=m.top_k, dtype=model.dtype,
                                   groups=r.groups if r is not None else None),
                              router.why if router is not None else
                              "vllm fused_topk -> ops.topk_softmax (assumed: the model's routing was not read, so "
                              "vLLM's create_fused_moe_router was not run)", label))
    if not triton_moe:
        fam, runs = _moe_family(engine, moe_runs)
        params = dict(experts=m.experts, top_k=m.top_k, hidden=m.hidden, inter=inter, dtype=model.dtype, quant=quant,
                      tp=tp, engine=engine)
        line = moe_line or ("sglang/srt/layers/moe/fused_moe_triton (its default MoE runner)" if engine == "sglang"
                            else "the engine's MoE runner")
        if fam == "triton-fused-moe":  # its config depends on the token count: prefill and decode apart
            for ph in PHASES:
                out.append(KernelCall("moe experts", ph, fam, runs, params | {"tokens": list(tokens[ph])}, line,
                                      label))
        else:
            out.append(KernelCall("moe experts", "prefill+decode", fam, runs, params, line, label))
    if m.shared:
        out += dense_mlp(engine, label, model, tp, m.hidden, m.inter * m.shared, "shared expert")
    return out


def linear(label: str, layer: str, model: AttentionConfig, n: int | None, k: int | None,
           quantized: bool = True) -> KernelCall:
    q = model.quant if quantized else None  # lm_head stays unquantized in the engines' fp8 checkpoints
    if q is not None and q.method == "fp8" and q.weight_block_size:
        return KernelCall(layer, "prefill+decode", "vllm-custom-op", "cutlass_scaled_mm (blockwise fp8)",
                          dict(kernel="cutlass_scaled_mm_blockwise", n=n, k=k, block=list(q.weight_block_size)),
                          "vllm W8A8BlockFp8LinearOp (fp8 weight_block_size; re-typed: not walked)", label)
    return KernelCall(layer, "prefill+decode", "cublas", "F.linear", dict(m="tokens", n=n, k=k, dtype=model.dtype),
                      "unquantized linear: torch F.linear (vllm UnquantizedLinearMethod.apply)", label)


def dense_mlp(engine: str, label: str, model: AttentionConfig, tp: int, hidden: int | None, inter: int | None,
              name: str) -> list[KernelCall]:
    n = None if inter is None else 2 * inter // tp
    return [linear(label, f"{name} gate_up", model, n, hidden),
            _elementwise(engine, label, f"{name} activation", "silu_and_mul", model),
            linear(label, f"{name} down", model, hidden, None if inter is None else inter // tp)]


def _elementwise(engine: str, label: str, layer: str, kernel: str, model: AttentionConfig | None = None,
                 d: int | None = None) -> KernelCall:
    dtype = model.dtype if model is not None else "bf16"
    if engine == "vllm":
        return KernelCall(layer, "prefill+decode", "inductor", kernel, dict(kernel=kernel, d=d, dtype=dtype),
                          INDUCTOR_LINE, label)
    return KernelCall(layer, "prefill+decode", "sgl-kernel", kernel, dict(kernel=kernel, d=d, dtype=dtype),
                      "sglang layers (sgl_kernel custom op)", label)


def calls(engine: str, label: str, model: AttentionConfig, target: Target, tp: int, backend: str | None,
          backend_line: str, moe_runs: str | None = None, moe_line: str | None = None,
          triton_moe: bool = False, hidden: int | None = None, tokens: dict | None = None,
          router=None) -> list[KernelCall]:
    """Every compiled kernel call of one forward step, in forward order (the module docstring)."""
    out: list[KernelCall] = []
    has_attention = model.heads > 0 and backend is not None
    if has_attention:
        q_out = (model.heads + 2 * model.kv_heads) * model.head_dim // tp if not model.mla else None
        out.append(_elementwise(engine, label, "input norm", "rms_norm", model, hidden))
        out.append(linear(label, "linear qkv", model, q_out, hidden))
        if not model.mla:
            out.append(_elementwise(engine, label, "rotary embedding", "rotary_embedding", model))
        cache_op = "concat_and_cache_mla" if model.mla else "reshape_and_cache_flash"
        if engine == "vllm" and not (backend.startswith("TRITON")):
            out.append(KernelCall("kv-cache write", "prefill+decode", "vllm-custom-op", cache_op,
                                  dict(kernel=cache_op, kv_heads=_per_rank(model.kv_heads, tp),
                                       head_dim=model.head_dim), f"the {backend} backend's do_kv_cache_update", label))
        out += attention_calls(engine, label, model, target, tp, backend, backend_line)
        out.append(linear(label, "linear o", model, hidden, model.heads * (model.v_head_dim or model.head_dim) // tp))
        out.append(_elementwise(engine, label, "post-attention norm", "fused_add_rms_norm", model, hidden))
    if model.moe is not None:
        out += moe_calls(engine, label, model, tp, moe_runs, moe_line, triton_moe,
                         tokens or {"prefill": (1024,), "decode": (1, 8)}, router)
    elif has_attention:
        out += dense_mlp(engine, label, model, tp, hidden, model.intermediate_size, "mlp")
    out.append(_elementwise(engine, label, "final norm", "rms_norm", model, hidden))
    out.append(linear(label, "lm_head", model, None if model.vocab_size is None else model.vocab_size // tp, hidden,
                      quantized=False))
    return out
