"""Predict the shared bytes of the engines' Triton attention kernels (SGLang's extend / prefill attention, SGLang's
and vLLM's split-K decode attention, vLLM's unified attention, vLLM's lightning attention) without compiling, where
the rules below were checked exact against Triton's own metadata.shared; CannotPredict everywhere else.

Keyed by (Triton release, sha256 of the engine file that defines the kernel, or of the kernel as the audit cuts it
out of that file: KernelSource.sha256): CHECKED lists the pairs the rules were checked on. Another release or a
changed file is CannotPredict, saying so: the pipeliner, the MMA lowering, the layout passes and the allocator all
change between releases, and the rules read the kernels' text.

Scope: Triton 3.8.0; the kernels of the pin table's SGLang and vLLM (by sha256); sm_120 / sm_121 (mma.sync).
metadata.shared is what TritonGPU's AllocateSharedMemory pass lays out: buffers live together add, buffers live at
different times share space. Sizes: e = the element size of q / K / V (bf16, fp16: 2 B; fp32: 4 B; one dtype for all of
them, and for the KV pool's buffers where the kernel reads them). The flash-attention kernels run two chained dots per
key block, S = Q @ K^T (rows x keys) and acc += P @ V (rows x value head), with P = softmax(S) cast to V's dtype.

0. P's conversion (every flash kernel below). Triton's accelerate_matmul gives chained dots one MMA layout, whose
   warps all go along the rows when the rows are at least the value head (rows >= head), else all along the head;
   P then reaches the second dot in registers (rows >= head: 0 B) or through one rows x keys buffer of e bytes
   (measured: every launch below where rows < head has it, none where rows >= head).
1. _fwd_kernel_stage2 (SGLang decode_attention.py, vLLM triton_decode_attention.py: the split-K reduction) and
   _fwd_kv_reduce (vLLM lightning_attn.py: the running KV-state sum): 0 B. One- and two-dimensional loads, fp32
   arithmetic and stores in one blocked layout: no tl.dot, no reduction across a layout change, no layout
   conversion, so nothing is placed in shared memory (any BLOCK_DV / D_FBLOCK / E_FBLOCK, warps, stages).
   _fwd_kv_reduce only with its KV and KV_HISTORY in fp32 (what it was checked on): a bf16 KV_HISTORY (the state
   cache vLLM gives a bf16 model, mamba_cache_dtype "auto") makes Triton allocate 4096 B, so it is declined.
2. _fwd_grouped_kernel_stage1 (SGLang decode_attention.py), the grouped-query decode, without MLA (HAS_MLA False,
   BLOCK_DPE 0, BLOCK_DMODEL == BLOCK_DV = D), num_stages 2 (SGLang's launcher on CUDA): q (BLOCK_H x D) one
   buffer, loaded once; K (D x BLOCK_N) and V (BLOCK_N x D) one buffer each (num_stages - 1 = 1 on mma.sync), all
   live together in the loop; plus P (rule 0, rows = BLOCK_H): e * (BLOCK_H*D + 2*BLOCK_N*D) + P. Checked for
   BLOCK_H 16 and 32, BLOCK_N 16..64, D 64..256, 2 / 4 / 8 warps, bf16 / fp16 / fp32.
2b. _fwd_grouped_kernel_stage1 with MLA (SGLang's HAS_MLA, vLLM triton_decode_attention.py's IS_MLA: v =
   tl.trans(k), the latent cache read once for both dots), num_stages 2, BLOCK_H 16 (both launchers'), bf16 /
   fp16: K (D x BLOCK_N) is loaded into registers (both dots use it) and stored once, not pipelined; Kpe (BLOCK_DPE
   x BLOCK_N) pipelined, one buffer; q (16 x D) and qpe (16 x BLOCK_DPE) one buffer each; P (16 x BLOCK_N) takes
   K's space once K is read; the transposed view of K reaches the second dot through a layout conversion whose
   scratch is a MEASURED table, MLA_TRANS_SCRATCH[(D, num_warps)] elements (not derived: it depends on the two
   layouts Triton picks, and did not vary with BLOCK_N or BLOCK_DPE):
   e * (BLOCK_N*D + 16*(D + BLOCK_DPE) + BLOCK_DPE*BLOCK_N + MLA_TRANS_SCRATCH[(D, W)]). Checked on every D
   128 / 256 / 512, BLOCK_DPE 0 / 64, BLOCK_N 16..64, 2 / 4 / 8 warps (bf16, and fp16 on a sample) for both
   engines' kernels (vLLM's with its page size 16).
3. kernel_unified_attention (vLLM triton_unified_attention.py, the 2D launch), bf16 / fp16, HEAD_SIZE ==
   HEAD_SIZE_PADDED = D, TILE_SIZE T, BLOCK_M rows: Q (BLOCK_M x D, loaded once) one buffer; K (D x T) and V
   (T x D) one buffer each: their loads are indirect (through the block table), so the pipeliner gives them one
   stage and the block-table load (T int32) the earlier ones; P (rule 0); at num_stages >= 3 the block-table load
   is pipelined itself, two T x 4 B buffers: 8*T B, measured min(8*T, 128*num_warps) (256 B at T 64 with 2 warps;
   at 2 stages nothing); with a sliding window (SLIDING_WINDOW > 0) the loop's bounds
   come from the window and K takes a second buffer (D*T*e more):
   e * (BLOCK_M*D + 2*D*T) + P + [num_stages >= 3] min(8*T, 128*W) + [window] D*T*e. Checked for D 64..256, T
   16..64, BLOCK_M 16..64, num_stages 2..4, 2 / 4 / 8 warps, windows 0 / 128 / 1024, with and without sinks.
   fp32 (the tf32 MMA path), BLOCK_M 16: the same, plus, without a window, the softmax row reduction's cross-warp
   scratch, live with P's buffer: 16 rows x min(W, T/8) warps x 4 B (with a window it fits in the second K
   buffer's space); checked on every D 64..256, T 16..64, 2..4 stages, 2 / 4 / 8 warps, window 0 / 128.
4. _fwd_kernel of SGLang extend_attention.py (extend: a prefix loop over the KV pool, then an extend loop) and of
   prefill_attention.py (the vision encoders' context attention), num_stages 1 (both launchers' on sm_120):
   nothing is pipelined. Q (BLOCK_M x BLOCK_DMODEL) and, with a rope part, Qpe (BLOCK_M x BLOCK_DPE) stay in
   shared memory the whole kernel; in each loop K (BLOCK_DMODEL x BLOCK_N), Kpe (BLOCK_DPE x BLOCK_N) and V
   (BLOCK_N x BLOCK_DV) are each dead before the next is stored, so they share the largest one's (K's) space; P
   (rule 0, rows = BLOCK_M, head = BLOCK_DV) is live with V and takes its own; the reductions' and index
   vectors' scratch and the epilogue's output conversion fit in space already counted:
   e * (BLOCK_M*(BLOCK_DMODEL + BLOCK_DPE) + BLOCK_N*BLOCK_DMODEL) + P.
   Checked with BLOCK_DMODEL == BLOCK_DV in 32..512, BLOCK_DPE 0 / 32 / 64 (<= BLOCK_DMODEL), BLOCK_M and BLOCK_N
   16..128, 2 / 4 / 8 warps, bf16 / fp16 / fp32, head sizes (Lq, Lk) at and under the block, windows and sinks
   (extend), causal or not (prefill), with the flags SGLang's extend launcher passes on CUDA (EXTEND_FLAGS).
5. vLLM's lightning attention (lightning_attn.py; fp32: the layer casts q/k/v to float; CBLOCK C, head sizes d, e,
   num_stages S, Triton's defaults 4 warps and 3 stages where vLLM passes none). Each loop's tl.dot operands that
   are loaded in the loop are pipelined (S - 1 buffers on mma.sync); what is loaded once takes one buffer:
   - _fwd_diag_kernel (the intra-block part): Q (C x d) one buffer; K^T (d x C) and V (C x e) S - 1 each; the
     decayed scores (C x C, fp32) reach the second dot through a buffer by rule 0 (rows C, head e):
     4 * (C*d + (S-1)*(d*C + C*e)) + P.
   - _fwd_kv_parallel (each block's K^T V): K^T (d x C), V (C x e) and the decay vector (C) S - 1 each:
     4 * (S-1)*(d*C + C*e + C); the epilogue converts the d x e fp32 result after the loop's buffers die, so where
     that tile (d*e*4) is larger than the loop's bytes its conversion may be the answer: CannotPredict.
   - _fwd_none_diag_kernel (the inter-block part): the KV state (d x e) and Q (C x d), one buffer each:
     4 * (d*e + C*d).
   Checked for C 16..64, d and e 64 / 128 (D_FBLOCK = d, E_FBLOCK = e), 2 / 4 / 8 warps, 2..4 stages.

CannotPredict, because measurements found the rules wrong there or nothing checked them:
- _fwd_grouped_kernel_stage1 with MLA in fp32 (the conversion scratch measured otherwise: 1024 to 8192 elements,
  not the table's), or outside the table's (D, warps); without MLA with BLOCK_H 64 (64 x 64 with 2 warps measured
  512 B over rule 2), or num_stages other than 2 (at 1 V took K's space; at 3 and 4, 512 B more at BLOCK_N 32: not
  modelled); vLLM's stage-1 kernel without MLA (its launches are MLA) was not checked;
- kernel_unified_attention in fp32 with BLOCK_M above 16 (the reduction scratch then measured 512 to 1024 B, not
  the 16-row rule's), num_stages 1 (measured 1024 B under rule 3 at 16 x 32: not modelled), the 3D (split-K)
  launch, FP8 / quantized KV, alibi, softcap, qq-bias, multimodal-prefix or per-sequence-causal launches;
- _fwd_kernel with BLOCK_DMODEL != BLOCK_DV (P may then fit beside V inside K's space), BLOCK_DPE > BLOCK_DMODEL
  (measured 1024 B under the sum at 32 + 64 with 16 rows and 2 warps), num_stages above 1, custom
  masks, FP8 KV, paged KV (PAGE_SIZE > 1) or any flag other than EXTEND_FLAGS;
- any other capability (sm_90 / sm_100 use wgmma / tcgen05, which keep num_stages buffers and more), Triton release
  or engine file.

Checked: every launch the committed rtx-pro-6000 audits capture for these kernels (SGLang gpt-oss-120b, kimi-k2,
gemma-3-4b, gqa-h128-fp32; vLLM gpt-oss-120b, gemma2-fp32-like, kimi-k2, minimax-m1: all 29 distinct answered,
each equal to the compiled bytes), and about 900 random launches around them
(the scopes above) against Triton 3.8.0's own passes up to AllocateSharedMemory on sm_120;
tests/predict/test_triton_attention.py draws new ones every run (one compiled in full).
"""

from __future__ import annotations

from tileprobe.engines import pins
from tileprobe.predict import recheck
from tileprobe.predict._common import CannotPredict, cc_checked, source_checked

VLLM = pins.label("vllm")  # the engine releases whose kernels the tables below were checked on
SGLANG = pins.label("sglang")

FAMILY = "triton-attention"
SGLANG_DECODE = f"{SGLANG} decode_attention.py"
SGLANG_EXTEND = f"{SGLANG} extend_attention.py"
SGLANG_PREFILL = f"{SGLANG} prefill_attention.py"
VLLM_DECODE = f"{VLLM} triton_decode_attention.py"
VLLM_UNIFIED = f"{VLLM} triton_unified_attention.py"
VLLM_LIGHTNING = f"{VLLM} lightning_attn.py"
# (Triton release, sha256 of the engine file defining the kernel) -> the engine release whose file that is
CHECKED = {
    ("3.8.0", "7a3b66ce3daabbb027efd860411cd9abe4b399b1f2cfc3ed5c6c01731eb9fa0a"): SGLANG_DECODE,
    ("3.8.0", "be3baffc80ef9fe484d0b896842522b02bf671785088e05a66ca4dcdb2e8a9b3"): SGLANG_EXTEND,
    ("3.8.0", "eb158c4c03e69091eb95a1bce093c9b054ac1ca5aab12769063d2e84630ca7f3"): SGLANG_PREFILL,
    ("3.8.0", "6095f9bfe69e7c4f472e27f0757a4ae9c7358b50275908b0715fad9727297dde"): VLLM_DECODE,
    ("3.8.0", "c1cf2300c99f5dc1fb297d7e556620842ab53c64c5ecda4c6ba89fb8e16215da"): VLLM_UNIFIED,
    ("3.8.0", "8a7b8a1fcb54a9ff326b1a0a696ab004aed988f4f2d2ac39b5f105d3c6411e05"): VLLM_LIGHTNING,
    # the kernels the audit cuts out of those files (KernelSource.sha256 of the extract: function name and text)
    ("3.8.0", "7d3894a5dca23c8f48b2a9b535963713fa8548d0cfffc7ed9018e1fcc7dac2d6"): SGLANG_DECODE,  # stage1
    ("3.8.0", "19631c53a4a131ef2edf8c2e72ce9c5f8d2ab4ee1c13c22a267d96a7b9fb49a4"): SGLANG_DECODE,  # stage2
    ("3.8.0", "3633695a221c7e31b619ea802e1181d9667c6b7f8d92258510bab7916e07ddda"): SGLANG_EXTEND,  # _fwd_kernel
    ("3.8.0", "e8288bf4a1824dbace6bd605fcd0d46f6bf98ac7dfc9a0444235a0c1801d8d9d"): SGLANG_PREFILL,  # _fwd_kernel
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
WARPS = (2, 4, 8)
# rule 2's checked scope
STAGE1_H = (16, 32)
STAGE1_N = (16, 32, 64)
STAGE1_D = (64, 128, 256)
# rule 2b: the transposed K's conversion scratch, in elements, per (BLOCK_DMODEL, num_warps): measured (bf16, fp16;
# BLOCK_H 16, BLOCK_N 16..64, BLOCK_DPE 0 / 64; the same for SGLang's and vLLM's kernel)
MLA_TRANS_SCRATCH = {(128, 2): 1024, (128, 4): 1024, (128, 8): 2048, (256, 2): 2048, (256, 4): 2048, (256, 8): 2048,
                     (512, 2): 2048, (512, 4): 4096, (512, 8): 4096}
MLA_D = (128, 256, 512)
MLA_PAGE = {SGLANG_DECODE: 1, VLLM_DECODE: 16}  # the page sizes each engine's MLA decode was checked with
# rule 3's checked scope
UNIFIED_D = (64, 128, 256)
UNIFIED_T = (16, 32, 64)
UNIFIED_M = (16, 32, 64)
UNIFIED_STAGES = (2, 3, 4)
# rule 5's checked scope
LIGHTNING_C = (16, 32, 64)
LIGHTNING_D = (64, 128)
# rule 4's checked scope, and the flags SGLang's extend launcher passes on CUDA (checked only with these)
FWD_BLOCKS = (16, 32, 64, 128)
FWD_D = (32, 64, 128, 256, 512)
FWD_DPE = (0, 32, 64)
EXTEND_FLAGS = {"USE_CUSTOM_MASK": False, "STORE_LSE": False, "SKIP_PREFIX": False, "SKIP_EXTEND": False,
                "STORE_TRANSPOSE": False, "USE_FP8_PREFIX": False, "USE_FP8_EXTEND": False, "SCORE_MOD": None,
                "PAGE_SIZE": 1, "IDENTITY_KV_INDICES": False, "USE_COMPACT_TILE_GRID": False, "logit_cap": 0.0,
                "xai_temperature_len": -1, "IS_GFX1250": False, "IS_CAUSAL": True, "USE_EXP2": False}
UNIFIED_FLAGS_OFF = ("USE_ALIBI_SLOPES", "USE_ALIBI_SQRT", "USE_QQ_BIAS", "USE_SOFTCAP", "USE_PER_SEQ_CAUSAL",
                     "USE_MM_PREFIX", "USE_R_SWA", "USE_FP8", "IS_3D", "USE_TD", "USE_TD_QO", "Q_IS_FP8",
                     "MM_PREFIX_CLAMP_SW")
# which files each kernel's rule was checked in
KERNEL_FILES = {
    "_fwd_kernel_stage2": (SGLANG_DECODE, VLLM_DECODE),
    "_fwd_kv_reduce": (VLLM_LIGHTNING,),
    "_fwd_diag_kernel": (VLLM_LIGHTNING,),
    "_fwd_kv_parallel": (VLLM_LIGHTNING,),
    "_fwd_none_diag_kernel": (VLLM_LIGHTNING,),
    "_fwd_kernel": (SGLANG_EXTEND, SGLANG_PREFILL),
    "_fwd_grouped_kernel_stage1": (SGLANG_DECODE, VLLM_DECODE),
    "kernel_unified_attention": (VLLM_UNIFIED,),
}


def _check_scope(kernel: str, triton_version: str, source_sha256: str, cc: int) -> str:
    """The engine file the kernel's source is (CHECKED's word), where the rules were checked for it."""
    # the table's own releases, or one whose reviewed recheck file lists this rule 0-differ (tileprobe.predict.recheck)
    checked = recheck.lookup(FAMILY, CHECKED, TRITON_VERSIONS, triton_version, kernel, (source_sha256,))
    if checked is None:
        raise source_checked("triton-attention", kernel, source_sha256, f"{SGLANG}, {VLLM}")
    if checked not in KERNEL_FILES.get(kernel, ()):
        raise CannotPredict(f"{kernel} ({checked}): no stated triton-attention rule (see "
                            "tileprobe.predict.triton_attention); size it")
    cc_checked("triton-attention", CCS, cc, " (wgmma / tcgen05 keep other buffers)")
    return checked


def _one_dtype(p: dict, allowed: tuple[str, ...]) -> int:
    """e: the one dtype of q, K and V (and the KV pool's buffers where the kernel reads them)."""
    dts = set(p["qkv_dtypes"])
    if len(dts) != 1 or not dts <= set(allowed):
        raise CannotPredict(f"q / K / V {', '.join(map(str, p['qkv_dtypes']))}: checked for one dtype of "
                            f"{', '.join(allowed)}; size it")
    return SIZES[dts.pop()]


def _p_buffer(rows: int, head_v: int, keys: int, e: int) -> int:
    """Rule 0: P's conversion buffer, rows x keys of e bytes, unless the chained dots put every warp along the rows
    (rows >= the value head), where P stays in registers."""
    return 0 if rows >= head_v else rows * keys * e


def _flags(p: dict, want: dict) -> None:
    odd = [f"{k}={p[k]!r}" for k, v in want.items() if k in p and p[k] != v and not (v is None and p[k] is None)]
    if odd:
        raise CannotPredict(f"{', '.join(odd)}: not a launch the rule was checked on; size it")


def _in(name: str, value, scope: tuple) -> None:
    if value not in scope:
        raise CannotPredict(f"{name} {value}: the rule was checked for {scope}; size it")


def stage1_mla(p: dict, source: str) -> int:
    """Rule 2b (_fwd_grouped_kernel_stage1 with MLA: v = tl.trans(k))."""
    h, n, d, dpe, w, s = (p[k] for k in ("BLOCK_H", "BLOCK_N", "BLOCK_DMODEL", "BLOCK_DPE", "num_warps",
                                         "num_stages"))
    if p["BLOCK_DV"] != d:
        raise CannotPredict(f"BLOCK_DMODEL {d} != BLOCK_DV {p['BLOCK_DV']}: not checked; size it")
    for name, value, scope in (("BLOCK_H", h, (16,)), ("BLOCK_N", n, STAGE1_N), ("BLOCK_DMODEL", d, MLA_D),
                               ("BLOCK_DPE", dpe, (0, 64)), ("num_warps", w, WARPS), ("num_stages", s, (2,))):
        _in(name, value, scope)
    _flags(p, {"PAGE_SIZE": MLA_PAGE[source], "SCORE_MOD": None, "logit_cap": 0.0, "xai_temperature_len": -1,
               "IS_GFX1250": False})
    e = _one_dtype(p, ("bf16", "fp16"))
    return e * (n * d + h * (d + dpe) + dpe * n + MLA_TRANS_SCRATCH[(d, w)])


def stage1(p: dict, source: str) -> int:
    """Rule 2 (_fwd_grouped_kernel_stage1 without MLA; with MLA, rule 2b)."""
    if p.get("HAS_MLA") or p.get("IS_MLA"):
        return stage1_mla(p, source)
    if source != SGLANG_DECODE or p["BLOCK_DPE"]:
        raise CannotPredict(f"{source} without MLA, BLOCK_DPE {p['BLOCK_DPE']}: not checked; size it")
    h, n, d, w, s = (p[k] for k in ("BLOCK_H", "BLOCK_N", "BLOCK_DMODEL", "num_warps", "num_stages"))
    if p["BLOCK_DV"] != d:
        raise CannotPredict(f"BLOCK_DMODEL {d} != BLOCK_DV {p['BLOCK_DV']}: not checked; size it")
    for name, value, scope in (("BLOCK_H", h, STAGE1_H), ("BLOCK_N", n, STAGE1_N), ("BLOCK_DMODEL", d, STAGE1_D),
                               ("num_warps", w, WARPS), ("num_stages", s, (2,))):
        _in(name, value, scope)
    _flags(p, {"PAGE_SIZE": 1, "SCORE_MOD": None, "logit_cap": 0.0, "xai_temperature_len": -1, "IS_GFX1250": False})
    e = _one_dtype(p, tuple(SIZES))
    return e * (h * d + 2 * n * d) + _p_buffer(h, d, n, e)


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
    for name, value, scope in (("HEAD_SIZE", d, UNIFIED_D), ("TILE_SIZE", t, UNIFIED_T), ("BLOCK_M", m, UNIFIED_M),
                               ("num_warps", w, WARPS), ("num_stages", s, UNIFIED_STAGES)):
        _in(name, value, scope)
    e = _one_dtype(p, tuple(SIZES))
    windowed = p["SLIDING_WINDOW"] > 0
    if e == SIZES["fp32"] and m != 16:
        raise CannotPredict(f"fp32 with BLOCK_M {m}: the fp32 reduction scratch was measured with 16 rows only; "
                            "size it")
    index = min(8 * t, 128 * w) if s >= 3 else 0
    window = d * t * e if windowed else 0
    reduction = 64 * min(w, t // 8) if e == SIZES["fp32"] and not windowed else 0
    return e * (m * d + 2 * d * t) + _p_buffer(m, d, t, e) + index + window + reduction


def fwd_kernel(p: dict, source: str) -> int:
    """Rule 4 (SGLang's extend and prefill _fwd_kernel, num_stages 1)."""
    extend = source == SGLANG_EXTEND
    m, n, d, w, s = (p[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_DMODEL", "num_warps", "num_stages"))
    dpe, dv = (p["BLOCK_DPE"], p["BLOCK_DV"]) if extend else (0, d)
    if dv != d or dpe > d or (extend and p["BLOCK_N_PREFIX"] != n):
        raise CannotPredict(f"BLOCK_DMODEL {d}, BLOCK_DV {dv}, BLOCK_N {n}, BLOCK_N_PREFIX {p.get('BLOCK_N_PREFIX')}: "
                            f"BLOCK_DPE {dpe}: checked with one head size for K and V, a rope part no wider, and "
                            "one key block for both loops; size it")
    for name, value, scope in (("BLOCK_M", m, FWD_BLOCKS), ("BLOCK_N", n, FWD_BLOCKS), ("BLOCK_DMODEL", d, FWD_D),
                               ("BLOCK_DPE", dpe, FWD_DPE), ("num_warps", w, WARPS), ("num_stages", s, (1,))):
        _in(name, value, scope)
    if extend:
        _flags(p, EXTEND_FLAGS)
    e = _one_dtype(p, tuple(SIZES))
    return e * (m * (d + dpe) + n * d) + _p_buffer(m, dv, n, e)


def lightning(p: dict, kernel: str) -> int:
    """Rule 5 (vLLM's lightning attention: _fwd_diag_kernel, _fwd_kv_parallel, _fwd_none_diag_kernel), in fp32."""
    c, d, e, w, s = (p[k] for k in ("CBLOCK", "d", "e", "num_warps", "num_stages"))
    for name, value, scope in (("CBLOCK", c, LIGHTNING_C), ("d", d, LIGHTNING_D), ("e", e, LIGHTNING_D),
                               ("num_warps", w, WARPS), ("num_stages", s, UNIFIED_STAGES)):
        _in(name, value, scope)
    if p.get("D_FBLOCK", d) != d or p.get("E_FBLOCK", e) != e:
        raise CannotPredict(f"D_FBLOCK {p.get('D_FBLOCK')}, E_FBLOCK {p.get('E_FBLOCK')} for d {d}, e {e}: checked "
                            "with whole head blocks only; size it")
    _one_dtype(p, ("fp32",))
    f = SIZES["fp32"]
    if kernel == "_fwd_diag_kernel":
        return f * (c * d + (s - 1) * (d * c + c * e)) + _p_buffer(c, e, c, f)
    if kernel == "_fwd_none_diag_kernel":
        return f * (d * e + c * d)
    loop = f * (s - 1) * (d * c + c * e + c)
    if d * e * f > loop:
        raise CannotPredict(f"the {d}x{e} fp32 KV tile's epilogue conversion (up to {d * e * f} B) may outgrow the "
                            f"loop's {loop} B (measured: 32768 B at CBLOCK 16, d 128, e 64, 8 warps); size it")
    return loop


RULES = {"_fwd_kernel_stage2": lambda p, f: 0, "_fwd_kv_reduce": lambda p, f: _one_dtype(p, ("fp32",)) and 0,
         "_fwd_diag_kernel": lambda p, f: lightning(p, "_fwd_diag_kernel"),
         "_fwd_kv_parallel": lambda p, f: lightning(p, "_fwd_kv_parallel"),
         "_fwd_none_diag_kernel": lambda p, f: lightning(p, "_fwd_none_diag_kernel"),
         "_fwd_grouped_kernel_stage1": stage1, "kernel_unified_attention": lambda p, f: unified(p),
         "_fwd_kernel": fwd_kernel}


def predict(kernel: str, params: dict, cc: int, triton_version: str, *, source_sha256: str) -> int:
    """metadata.shared of one launch of the attention `kernel` with `params` (its constexprs, num_warps, num_stages,
    the q / K / V pointers' dtypes as qkv_dtypes); source_sha256: the sha256 of the engine file defining it."""
    source = _check_scope(kernel, triton_version, source_sha256, cc)
    return RULES[kernel](params, source)
