"""Predict the shared bytes of the engines' Triton attention kernels (SGLang's and vLLM's split-K decode attention,
vLLM's unified attention, vLLM's lightning attention) without compiling, where the rules below were checked exact
against Triton's own metadata.shared; CannotPredict everywhere else.

Keyed by (Triton release, sha256 of the engine file that defines the kernel, or of the kernel as the audit cuts it
out of that file: KernelSource.sha256): CHECKED lists the pairs the rules were checked on. Another release or a
changed file is CannotPredict, saying so: the pipeliner, the MMA lowering, the layout passes and the allocator all
change between releases, and the rules read the kernels' text.

Scope: Triton 3.8.0; SGLang 0.5.23, vLLM 0.33.0; sm_120 / sm_121 (mma.sync). metadata.shared is what TritonGPU's
AllocateSharedMemory pass lays out: buffers live together add, buffers live at different times share space.
Sizes: e = the element size of q / K / V (bf16, fp16: 2 B; fp32: 4 B; all three one dtype).

1. _fwd_kernel_stage2 (SGLang decode_attention.py, vLLM triton_decode_attention.py: the split-K reduction) and
   _fwd_kv_reduce (vLLM lightning_attn.py: the running KV-state sum): 0 B. One- and two-dimensional loads, fp32
   arithmetic and stores in one blocked layout: no tl.dot, no reduction across a layout change, no layout
   conversion, so nothing is placed in shared memory (any BLOCK_DV / D_FBLOCK / E_FBLOCK, warps, stages).
2. _fwd_grouped_kernel_stage1 (SGLang decode_attention.py), the grouped-query decode, without MLA (HAS_MLA False,
   BLOCK_DPE 0, BLOCK_DMODEL == BLOCK_DV = D), num_stages 2 (SGLang's launcher on CUDA): the KV loop's dots
   S = q @ K^T (q: BLOCK_H x D, K: D x BLOCK_N) and acc += P @ V (P: BLOCK_H x BLOCK_N cast to V's dtype, V: BLOCK_N
   x D) keep every operand in shared memory at once: q one buffer (loaded once), K and V one buffer each (num_stages
   - 1 = 1 on mma.sync), and P converted from the first dot's accumulator layout to the second dot's operand layout
   through a BLOCK_H x BLOCK_N buffer of e bytes: e * (BLOCK_H*D + 2*BLOCK_N*D + BLOCK_H*BLOCK_N). Checked for
   BLOCK_H 16 and 32, BLOCK_N 16..64, D 64..256, 2 / 4 / 8 warps, bf16 / fp16 / fp32.
3. kernel_unified_attention (vLLM triton_unified_attention.py, the 2D launch), bf16 / fp16, BLOCK_M 16, num_stages
   3 (Triton's default, which vLLM's launcher leaves), HEAD_SIZE == HEAD_SIZE_PADDED = D, TILE_SIZE T: Q (16 x D,
   loaded once) one buffer; K (D x T) and V (T x D) one buffer each: their loads are indirect (through the block
   table), so the pipeliner gives them one stage and the block-table load the earlier one; P (16 x T, cast to V's
   dtype) through a conversion buffer (16 rows cannot spread 2+ warps along M, so the warps split the key axis and
   the operand layout differs); the block index vector (T int64, 8 B each), converted between K's (D x T) and V's
   (T x D) broadcast layouts through a T*8 B scratch that the pipelined loop keeps live. With a sliding window
   (SLIDING_WINDOW > 0) the loop's bounds come from the window and K takes a second buffer (D*T*e more):
   e * (16*D + 2*D*T + 16*T) + 8*T [+ D*T*e with a window]. Checked for D 64..256, T 16 and 32, 2 / 4 / 8 warps,
   windows 0 / 128 / 1024, with and without sinks.

CannotPredict, because measurements found the rules wrong there or nothing checked them:
- _fwd_grouped_kernel_stage1 with MLA (v = tl.trans(k): the transposed view reaches the second dot through buffers
  whose sizes vary with BLOCK_DPE, warps and dtype, 0 to 30720 B over the formula in 50 random launches: not
  modelled), with BLOCK_H 64 (measured 4096 B under rule 2: the P conversion then stays in registers), or
  num_stages other than 2 (at 1 K and V share one buffer; at 3 and more the index load is pipelined too);
  vLLM's stage-1 kernel (triton_decode_attention.py) was not checked without MLA;
- kernel_unified_attention in fp32 (the block-index scratch then measured 4 to 16 B per key by warps and stages,
  and a windowed K not one whole extra tile), BLOCK_M other than 16 (from 16 * num_warps rows P's conversion may
  stay in registers, and at 64 rows with 16 keys it did not), num_stages other than 3, TILE_SIZE 64 (the index
  scratch measured 256 B, not 512, with 2 warps and a window), the 3D (split-K) launch, FP8 / quantized KV,
  alibi, softcap, qq-bias, multimodal-prefix or per-sequence-causal launches;
- SGLang's extend / prefill _fwd_kernel and vLLM's other lightning kernels: no stated rule (their bytes over
  blocks, warps and head sizes are not a sum of whole tiles: sized instead);
- any other capability (sm_90 / sm_100 use wgmma / tcgen05, which keep num_stages buffers and more), Triton release
  or engine file.
"""

from __future__ import annotations

from tileprobe.predict._common import CannotPredict

FAMILY = "triton-attention"
SGLANG_DECODE = "sglang 0.5.23 decode_attention.py"
VLLM_DECODE = "vllm 0.33.0 triton_decode_attention.py"
VLLM_UNIFIED = "vllm 0.33.0 triton_unified_attention.py"
VLLM_LIGHTNING = "vllm 0.33.0 lightning_attn.py"
# (Triton release, sha256 of the engine file defining the kernel) -> the engine release whose file that is
CHECKED = {
    ("3.8.0", "7a3b66ce3daabbb027efd860411cd9abe4b399b1f2cfc3ed5c6c01731eb9fa0a"): SGLANG_DECODE,
    ("3.8.0", "6095f9bfe69e7c4f472e27f0757a4ae9c7358b50275908b0715fad9727297dde"): VLLM_DECODE,
    ("3.8.0", "c1cf2300c99f5dc1fb297d7e556620842ab53c64c5ecda4c6ba89fb8e16215da"): VLLM_UNIFIED,
    ("3.8.0", "8a7b8a1fcb54a9ff326b1a0a696ab004aed988f4f2d2ac39b5f105d3c6411e05"): VLLM_LIGHTNING,
    # the kernels the audit cuts out of those files (KernelSource.sha256 of the extract: function name and text)
    ("3.8.0", "7d3894a5dca23c8f48b2a9b535963713fa8548d0cfffc7ed9018e1fcc7dac2d6"): SGLANG_DECODE,  # stage1
    ("3.8.0", "19631c53a4a131ef2edf8c2e72ce9c5f8d2ab4ee1c13c22a267d96a7b9fb49a4"): SGLANG_DECODE,  # stage2
    ("3.8.0", "d0bc07ceab5d8116d8506057d4a51b3dbf0ba7784e2e165bc0b50d74148c3a9e"): VLLM_DECODE,  # stage1
    ("3.8.0", "f335c47a57e2e9c957e53ab014080c96cc5db593d67a8bcb32a9a34c9160d5c4"): VLLM_DECODE,  # stage2
    ("3.8.0", "0e9d08fe0a48990c09c441d00015610f212f4ef41b5712abd0878c8a656362d9"): VLLM_LIGHTNING,  # _fwd_kv_reduce
    ("3.8.0", "d2532169a69289ae5a326ca99e5ef5c1585908fe39a459fe5e457ff20abf5ee6"): VLLM_LIGHTNING,  # _fwd_diag_kernel
    ("3.8.0", "ba30fffe012d6479422dd4254c59db79f62409e54d81e636042507058cfe8af3"): VLLM_LIGHTNING,  # _fwd_kv_parallel
    ("3.8.0", "51c8dc5172957224d2847d05c2968289162d54f65d3c0b708260e981a66b9183"): VLLM_LIGHTNING,  # none_diag
}
TRITON_VERSIONS = tuple(dict.fromkeys(v for v, _ in CHECKED))
CCS = (120, 121)
SIZES = {"bf16": 2, "fp16": 2, "fp32": 4}
HALF = ("bf16", "fp16")
WARPS = (2, 4, 8)
# rule 2's checked scope
STAGE1_H = (16, 32)
STAGE1_N = (16, 32, 64)
STAGE1_D = (64, 128, 256)
# rule 3's checked scope
UNIFIED_D = (64, 128, 256)
UNIFIED_T = (16, 32)
UNIFIED_FLAGS_OFF = ("USE_ALIBI_SLOPES", "USE_ALIBI_SQRT", "USE_QQ_BIAS", "USE_SOFTCAP", "USE_PER_SEQ_CAUSAL",
                     "USE_MM_PREFIX", "USE_R_SWA", "USE_FP8", "IS_3D", "USE_TD", "USE_TD_QO", "Q_IS_FP8",
                     "MM_PREFIX_CLAMP_SW")
# which files each kernel's rule was checked in
KERNEL_FILES = {
    "_fwd_kernel_stage2": (SGLANG_DECODE, VLLM_DECODE),
    "_fwd_kv_reduce": (VLLM_LIGHTNING,),
    "_fwd_grouped_kernel_stage1": (SGLANG_DECODE,),
    "kernel_unified_attention": (VLLM_UNIFIED,),
}


def _check_scope(kernel: str, triton_version: str, source_sha256: str, cc: int) -> None:
    checked = CHECKED.get((triton_version, source_sha256))
    if checked is None:
        if triton_version not in TRITON_VERSIONS:
            raise CannotPredict(f"triton-attention rules were checked on Triton {', '.join(TRITON_VERSIONS)} only, "
                                f"not {triton_version}: another release lays shared memory out otherwise; size it")
        raise CannotPredict(f"{kernel}'s engine source {source_sha256[:16]} is not one the triton-attention rules "
                            "were checked on (sglang 0.5.23, vllm 0.33.0): a changed kernel changes the layout; "
                            "size it")
    if checked not in KERNEL_FILES.get(kernel, ()):
        raise CannotPredict(f"{kernel} ({checked}): no stated triton-attention rule (see "
                            "tileprobe.predict.triton_attention); size it")
    if cc not in CCS:
        raise CannotPredict(f"triton-attention rules were checked for sm_{', sm_'.join(map(str, CCS))} only, not "
                            f"sm_{cc} (wgmma / tcgen05 keep other buffers); size it")


def _one_dtype(p: dict, allowed: tuple[str, ...]) -> int:
    dts = {p[k] for k in ("q_dtype", "k_dtype", "v_dtype")}
    if len(dts) != 1 or not dts <= set(allowed):
        raise CannotPredict(f"q {p['q_dtype']}, K {p['k_dtype']}, V {p['v_dtype']}: checked for one dtype of "
                            f"{', '.join(allowed)}; size it")
    return SIZES[dts.pop()]


def _in(name: str, value, scope: tuple) -> None:
    if value not in scope:
        raise CannotPredict(f"{name} {value}: the rule was checked for {scope}; size it")


def stage1(p: dict) -> int:
    """Rule 2 (_fwd_grouped_kernel_stage1 without MLA)."""
    if p["HAS_MLA"] or p["BLOCK_DPE"]:
        raise CannotPredict(f"MLA decode (HAS_MLA {p['HAS_MLA']}, BLOCK_DPE {p['BLOCK_DPE']}): V is K's transposed "
                            "view, whose buffers are not modelled; size it")
    h, n, d, w, s = (p[k] for k in ("BLOCK_H", "BLOCK_N", "BLOCK_DMODEL", "num_warps", "num_stages"))
    if p["BLOCK_DV"] != d:
        raise CannotPredict(f"BLOCK_DMODEL {d} != BLOCK_DV {p['BLOCK_DV']}: not checked; size it")
    for name, value, scope in (("BLOCK_H", h, STAGE1_H), ("BLOCK_N", n, STAGE1_N), ("BLOCK_DMODEL", d, STAGE1_D),
                               ("num_warps", w, WARPS), ("num_stages", s, (2,))):
        _in(name, value, scope)
    odd = [f"{k}={p[k]!r}" for k, want in (("PAGE_SIZE", 1), ("SCORE_MOD", None), ("logit_cap", 0.0),
                                            ("xai_temperature_len", -1)) if p.get(k, want) != want]
    if odd:
        raise CannotPredict(f"{', '.join(odd)}: not a launch the rule was checked on; size it")
    e = _one_dtype(p, tuple(SIZES))
    return e * (h * d + 2 * n * d + h * n)


def unified(p: dict) -> int:
    """Rule 3 (kernel_unified_attention, 2D launch)."""
    on = [k for k in UNIFIED_FLAGS_OFF if p.get(k)]
    if on:
        raise CannotPredict(f"{', '.join(on)}: not a launch the rule was checked on; size it")
    mode = p.get("KV_QUANT_MODE")
    if mode is not None and int(mode) != 0:  # vLLM's KVQuantMode, an IntEnum: NONE is 0
        raise CannotPredict(f"KV_QUANT_MODE {mode}: quantized KV not checked; size it")
    d, t, m, w, s = (p[k] for k in ("HEAD_SIZE_PADDED", "TILE_SIZE", "BLOCK_M", "num_warps", "num_stages"))
    if p["HEAD_SIZE"] != d:
        raise CannotPredict(f"HEAD_SIZE {p['HEAD_SIZE']} padded to {d}: not checked; size it")
    for name, value, scope in (("HEAD_SIZE", d, UNIFIED_D), ("TILE_SIZE", t, UNIFIED_T), ("BLOCK_M", m, (16,)),
                               ("num_warps", w, WARPS), ("num_stages", s, (3,))):
        _in(name, value, scope)
    e = _one_dtype(p, HALF)
    window = d * t * e if p["SLIDING_WINDOW"] > 0 else 0
    return e * (m * d + 2 * d * t + m * t) + 8 * t + window


RULES = {"_fwd_kernel_stage2": lambda p: 0, "_fwd_kv_reduce": lambda p: 0, "_fwd_grouped_kernel_stage1": stage1,
         "kernel_unified_attention": unified}


def predict(kernel: str, params: dict, cc: int, triton_version: str, *, source_sha256: str) -> int:
    """metadata.shared of one launch of the attention `kernel` with `params` (its constexprs, num_warps, num_stages,
    q / K / V dtypes as q_dtype / k_dtype / v_dtype); source_sha256: the sha256 of the engine file defining it."""
    _check_scope(kernel, triton_version, source_sha256, cc)
    return RULES[kernel](params)
