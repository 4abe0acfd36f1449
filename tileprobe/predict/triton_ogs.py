"""Predict the shared bytes of the routing and reduction Triton kernels of vLLM's gpt-oss MXFP4 MoE path (the
vendored triton_kernels: topk, bitmatrix sums, routing memset / compute, matmul_ogs' _reduce_grouped) without
compiling, where the rules below were checked exact against Triton's own metadata.shared; CannotPredict elsewhere.

Keyed by (Triton release, sha256 of the engine files whose text the kernel is built from, FILES: their texts joined
in that order): CHECKED lists the pairs the rules were checked on. Another release or a changed file is
CannotPredict, saying so. The matmuls themselves (_matmul_ogs, _p_matmul_ogs) have no rule here.

Scope: Triton 3.8.0; the pin table's vLLM (by sha256); sm_90 and sm_120 / sm_121 (none of these kernels has a tl.dot:
the same bytes were measured on sm_90a and sm_120a for every launch below). Each kernel is scoped to the constexprs and
num_warps its vLLM launcher passes (the routing launchers pass no num_warps: Triton's default, 4), widened where
measured. metadata.shared is what TritonGPU's AllocateSharedMemory pass lays out: scratch of values live together add,
scratch live at different times shares space (the largest counts). Sizes: i = 4 B (int32 / uint32), e = the element size
of the named tensor.

1. _topk_forward (topk.py's topk_forward: BLOCK_M = BLOCK_N = 32, 4 warps, USE_PROVIDED_INDX False): the [BLOCK_M,
   k] top-k index tile (k = N_EXPTS_ACT) is re-laid out through shared memory for the bitmatrix packing
   (y_indices[:, :, None]), i bytes a value: 32 * k * i; except for fp32 logits loaded as 16 B vectors (stride_xm
   specialised 16-divisible) and stored through a stride_ym specialised neither 1 nor 16-divisible (vLLM's: k
   values a row), with k >= 8, where the tile goes in two passes of 16 rows: 16 * k * i. Measured for k = 1, 2, 4,
   8, 16, N_EXPTS_PAD 32, 64, 96, 128, 160, 192, 256, 384, 512, bf16 / fp16 / fp32 logits, APPLY_SOFTMAX either,
   stride_xm and stride_ym 1, 16-divisible or neither, num_stages 1..4 (nothing is pipelined: the loop's loads feed
   no tl.dot and name no num_stages), every other runtime integer's specialisation. Elsewhere (2 warps measured
   half, 8 warps with fp32 logits and k 8 measured 32 rows; USE_PROVIDED_INDX measured 64 B; other blocks not
   checked): CannotPredict.
2. _sum_bitmatrix_rows (reduce_bitmatrix.py's sum_bitmatrix_rows: BLOCK_M = the partials block, BLOCK_MM =
   BLOCK_M * max(1, 128 // BLOCK_M), 8 warps; vLLM passes BLOCK_M 32): the [TILE_SIZE, 32] popcount tile (TILE_SIZE
   = BLOCK_MM / BLOCK_M) is converted for the column sum and the partials store: TILE_SIZE * 32 * i. Measured for
   BLOCK_M 8..64 with 4 or 8 warps and every runtime integer's specialisation; CannotPredict where it measured
   otherwise: BLOCK_M 128 (TILE_SIZE 1: 128 B with 4 warps but 256 B with 8), and BLOCK_M 8 with 8 warps and the
   partials' stride_pn specialised to 1 (half; vLLM's stride_pn is the partials' row count, at least 4 here).
3. _combined_routing_memset (routing_details/_routing_compute.py; vLLM's _sort_tokens_pow2 passes BLOCK 1024,
   BLOCK_A 512, BLOCK_N 512, BLOCK_M 512, SIZES 4, stride_pm 1): three int32 scans of 512 values live at different
   times; _routing_compute_indx_offs' scan reads PartialHist at expt_id * stride_pn. When stride_pn is specialised
   16-divisible its load is vectorised like the scan, and only the scans' cross-warp partials remain: measured 0 B
   (1 warp), 16 B (2 or 4 warps), 32 B (8 warps). Otherwise (stride_pn 1 or not 16-divisible) its load is scalar
   and the 512-value tile is converted to the scan's 4-values-a-thread layout in rounds of min(BLOCK_M, 4 * 32 *
   num_warps) values: min(BLOCK_M, 128 * num_warps) * i. Measured for 1, 2, 4, 8 warps and every other runtime
   integer's specialisation; stride_pm other than 1 (a strided PartialHist column): CannotPredict.
4. _combined_routing_compute_pow2 (gpt_oss_triton_kernels_moe.py's pow2 routing: BLOCK_M 32, BLOCK 512, SIZES 4,
   BLOCK_SIZE_PADDED P = next_power_of_2(32 * k)): the stable sort (tl.sort) and the keyed run-length scan over P
   int32 keys: 0 B while P <= 32 (one warp's values: shuffles only), P * i while P <= 32 * num_warps (at most one
   key a thread), 2 * P * i beyond. Measured for P 32..512 with 4 and 8 warps, bf16 / fp32 gate scales, every runtime
   integer's specialisation; elsewhere CannotPredict.
5. matmul_ogs_dflt_dflt._reduce_grouped (matmul_ogs.py's reduce_grouped: BLOCK_N 512, 1 warp; no fused activation
   or epilogue, no flex or MX scales): the N loop is `tl.range(..., num_stages=4)`, so each of the K rows' X loads
   (BLOCK_N values of X's dtype) is pipelined with cp.async in num_stages - 1 = 3 buffers: 3 * K * BLOCK_N * e.
   This holds where the loads are whole 16 B-aligned vectors and the loop body has no inner loop: stride_xn 1,
   stride_xm and N specialised 16-divisible, B (split-K count) specialised to 1; measured for K 1, 2, 4, 8, bf16 /
   fp16 / fp32 X, 1, 2 or 4 warps. Elsewhere the loads are not pipelined (bf16 measured 0 B), which was not
   measured for every dtype: CannotPredict.

6. matmul_ogs_{dflt,swiglu}_dflt._matmul_ogs on sm_90 (matmul_ogs.py's non-persistent matmul, as vLLM runs it on
   Hopper: bf16 X, mxfp4 W (uint8 pairs, HOPPER_VALUE layout) with uint8 block scales over 32 values (HOPPER_SCALE
   layout), W_TRANSPOSE, SPLIT_K 1, EPILOGUE_SUBTILE 1, no TMA modes, no flex or X scales, no SWAP_XW, no MXFP8
   epilogue): the K loop's three loads are pipelined with num_stages - 1 buffers each: X (BLOCK_M x BLOCK_K, 2 B),
   W (BLOCK_K / 2 x BLOCK_N, 1 B) and W's scales (BLOCK_N x BLOCK_K / 32, 1 B); plus one more BLOCK_M x BLOCK_K bf16
   buffer (measured on every launch: X's copy in the layout the MMA reads, the weight being upcast in registers).
   A scale tile under 4 B per thread (BLOCK_N * BLOCK_K / 32 < 4 * 32 * num_warps) is not pipelined: one copy.
   (S - 1) * (BM*BK*2 + BK*BN/2 [+ BN*BK/32]) [+ BN*BK/32] + BM*BK*2. After the loop, the epilogue converts the
   fp32 accumulator through shared memory in space the loop's buffers leave (the larger of the two counts). Its
   size depends on BLOCK_M, BLOCK_N, num_warps and the fused activation only, so it was measured at each such
   combination's smallest loop in scope (BLOCK_K 64, 2 stages): with no fused activation it was never the larger
   (so never larger than any loop in scope); with swiglu (the output pairs reduced along N) it was the larger for
   five, SWIGLU_EPILOGUE (the whole fp32 tile up to 32768 B), and the answer is max(loop, that). Measured exact on
   the 8 captured h200 launches, 48 at the smallest loops and 240 random ones (BLOCK_M 16..128, BLOCK_N 128 /
   256 (256 with 8 warps: the kernel asserts BLOCK_N % (32 * num_warps) == 0), BLOCK_K 64..256, num_stages 2..5, 4
   or 8 warps, EVEN_K either, gather (swiglu) / scatter (no activation) as vLLM launches them).

CannotPredict, because measurements found the rules wrong there or nothing checked them: every scope named above
(other blocks, warps, flags, dtypes, layouts), another kernel (_p_matmul_ogs: the persistent TMA matmul vLLM runs
on sm_100 / sm_120; a fused-activation _reduce_grouped), another capability (rule 6: sm_90 only; sm_120 runs
_p_matmul_ogs), Triton release or engine file.

Checked: every launch `tileprobe audit --engine vllm --model gpt-oss-120b` captures on h200 and on rtx-pro-6000 with
--moe-backend triton (batches 1 and 8, seq 2048: 40 distinct committed launches, all answered and equal to the
committed bytes; `--verify` compiled all 24 / 26 launches of each audit: 0 differ), the grids named in each rule,
and at least 80 random variations per kernel after the last change to its answers (tests/predict/test_triton_ogs.py's
draws, sm_90 or sm_120), against Triton 3.8.0's own passes up to AllocateSharedMemory; the test file draws new ones
every run. Random draws found two exceptions now stated (rule 1's stride_ym, rule 2's BLOCK_M 8 / stride_pn 1) and
the swiglu epilogue of rule 6.
"""

from __future__ import annotations

import hashlib

from tileprobe.engines import pins
from tileprobe.predict import recheck
from tileprobe.predict._common import CannotPredict, cc_checked, source_checked

VLLM = pins.label("vllm")  # the engine releases whose kernels the tables below were checked on

FAMILY = "triton-ogs"
TK = "vllm/third_party/triton_kernels/"
ROUTING = (f"{TK}routing_details/_routing_compute.py", f"{TK}routing_details/_expt_data.py")
MATMUL = tuple(f"{TK}{f}" for f in (
    "matmul_ogs_details/_matmul_ogs.py", "matmul_ogs_details/_common.py",
    "tensor_details/layout_details/hopper_scale.py", "tensor_details/layout_details/hopper_value.py",
    "tensor_details/layout_details/blackwell_scale.py", "tensor_details/layout_details/cdna4_scale.py",
    "numerics_details/flexpoint.py", "numerics_details/mxfp_details/_downcast_to_mxfp.py", "specialize.py"))
# kernel -> the engine files (paths in the wheel) whose joined text the key's sha256 is taken over
FILES = {
    "_topk_forward": (f"{TK}topk_details/_topk_forward.py",),
    "_sum_bitmatrix_rows": (f"{TK}reduction_details/reduce_bitmatrix.py",),
    "_combined_routing_memset": ROUTING,
    "_combined_routing_compute_pow2": ("vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py",
                                       *ROUTING),
    "matmul_ogs_dflt_dflt._reduce_grouped": (f"{TK}matmul_ogs_details/_reduce_grouped.py",
                                             f"{TK}numerics_details/flexpoint.py", f"{TK}specialize.py"),
    "matmul_ogs_dflt_dflt._matmul_ogs": MATMUL,
    "matmul_ogs_swiglu_dflt._matmul_ogs": (*MATMUL, f"{TK}swiglu_details/_swiglu.py"),
}
# (Triton release, kernel, sha256 of FILES[kernel] joined) -> the engine release whose files those are
CHECKED = {
    ("3.8.0", "_topk_forward", "b96cd075eec221f009d9a32139605b9966f28edf6385ee166108f3768a6599f6"): VLLM,
    ("3.8.0", "_sum_bitmatrix_rows", "83c92ebb11a35556c7185e3aeb487802f4e280de158f291e5dddf95407d725fd"): VLLM,
    ("3.8.0", "_combined_routing_memset", "56061aa9f35fe06fefdda3ca333f5a50c04cc3d338e920035a6830b7f2ded6b0"):
        VLLM,
    ("3.8.0", "_combined_routing_compute_pow2", "9e28a161090cf94eba926a407cb73186cbadd1d113b49fb61ae43e98a787526a"):
        VLLM,
    ("3.8.0", "matmul_ogs_dflt_dflt._reduce_grouped",
     "2324f5a7aff109bec41ecafa692c5173b98e38882782a50264854283f843766e"): VLLM,
    ("3.8.0", "matmul_ogs_dflt_dflt._matmul_ogs", "1023722f2809d309129e639cdf075a5dade813ea01d2677be323dcdfc4db3cd2"):
        VLLM,
    ("3.8.0", "matmul_ogs_swiglu_dflt._matmul_ogs",
     "68756bd0dee5d31c551a0a9d190626ecfdade7e844d02f9f0d9ff270c951de5b"): VLLM,
}
TRITON_VERSIONS = ("3.8.0",)
CCS = (90, 120, 121)
I32 = 4
SIZES = {"bf16": 2, "fp16": 2, "fp32": 4}
MEMSET_ALIGNED = {1: 0, 2: 16, 4: 16, 8: 32}  # rule 3: the scans' cross-warp partials, measured per num_warps
# rule 6: (BLOCK_M, BLOCK_N, num_warps) -> the swiglu epilogue's conversion where it outgrew the smallest loop
SWIGLU_EPILOGUE = {(32, 128, 4): 16384, (16, 256, 4): 16384, (16, 256, 8): 16384, (32, 256, 8): 32768,
                   (64, 256, 8): 32768}
REDUCE_STAGES = 4  # rule 5: _reduce_grouped's `tl.range(0, N, BLOCK_N, num_stages=4)`


def files_sha256(texts) -> str:
    """The key of a kernel's engine files: the sha256 of their texts (FILES order) joined."""
    return hashlib.sha256("".join(texts).encode()).hexdigest()


def _check_scope(kernel: str, triton_version: str, source_sha256: str, cc: int) -> None:
    # the table's own releases, or one whose reviewed recheck file lists this rule 0-differ (tileprobe.predict.recheck)
    checked = recheck.lookup("triton-ogs", CHECKED, TRITON_VERSIONS, triton_version, kernel, (kernel, source_sha256))
    if kernel not in FILES:
        raise CannotPredict(f"{kernel}: no stated triton-ogs rule (see tileprobe.predict.triton_ogs); size it")
    if checked is None:
        raise source_checked("triton-ogs", kernel, source_sha256, VLLM)
    cc_checked("triton-ogs", CCS, cc)


def _require(p: dict, **want) -> None:
    odd = [f"{k}={p.get(k)!r}" for k, v in want.items() if p.get(k) not in (v if isinstance(v, tuple) else (v,))]
    if odd:
        raise CannotPredict(f"{', '.join(odd)}: outside the launches the rule was checked on ("
                            + ", ".join(f"{k} {v}" for k, v in want.items()) + "); size it")


def topk(p: dict) -> int:
    """Rule 1 (_topk_forward)."""
    _require(p, BLOCK_M=32, BLOCK_N=32, num_warps=4, USE_PROVIDED_INDX=False, N_EXPTS_ACT=(1, 2, 4, 8, 16),
             X_dtype=tuple(SIZES))
    pad = p["N_EXPTS_PAD"]
    if pad % 32 or not 32 <= pad <= 512:
        raise CannotPredict(f"N_EXPTS_PAD {pad}: checked for multiples of 32 in 32..512; size it")
    k = p["N_EXPTS_ACT"]
    ym = p["stride_ym"]
    rows = 16 if SIZES[p["X_dtype"]] == 4 and p["stride_xm_aligned"] and ym != 1 and ym % 16 and k >= 8 else 32
    return rows * k * I32


def sum_bitmatrix(p: dict) -> int:
    """Rule 2 (_sum_bitmatrix_rows)."""
    _require(p, BLOCK_M=(8, 16, 32, 64), num_warps=(4, 8))
    tile = max(1, 128 // p["BLOCK_M"])
    _require(p, BLOCK_MM=p["BLOCK_M"] * tile)
    if p["BLOCK_M"] == 8 and p["num_warps"] == 8 and p["stride_pn"] == 1:
        raise CannotPredict("BLOCK_M 8 with 8 warps and stride_pn 1: measured half the rule's bytes; size it")
    return tile * 32 * I32


def routing_memset(p: dict) -> int:
    """Rule 3 (_combined_routing_memset)."""
    _require(p, BLOCK=1024, BLOCK_A=512, BLOCK_N=512, BLOCK_M=512, SIZES=4, stride_pm=1,
             num_warps=tuple(MEMSET_ALIGNED))
    if p["stride_pn_aligned"]:
        return MEMSET_ALIGNED[p["num_warps"]]
    return min(p["BLOCK_M"], 128 * p["num_warps"]) * I32


def routing_compute(p: dict) -> int:
    """Rule 4 (_combined_routing_compute_pow2)."""
    _require(p, BLOCK_M=32, BLOCK=512, SIZES=4, num_warps=(4, 8), BLOCK_SIZE_PADDED=(32, 64, 128, 256, 512))
    padded, w = p["BLOCK_SIZE_PADDED"], p["num_warps"]
    if p["BLOCK_M"] * p["N_EXPTS_ACT"] > padded:
        raise CannotPredict(f"BLOCK_SIZE_PADDED {padded} under BLOCK_M * N_EXPTS_ACT: not a launch vLLM makes")
    if padded <= 32:
        return 0
    return padded * I32 if padded <= 32 * w else 2 * padded * I32


def reduce_grouped(p: dict) -> int:
    """Rule 5 (matmul_ogs_dflt_dflt._reduce_grouped)."""
    _require(p, BLOCK_N=512, num_warps=(1, 2, 4), K=(1, 2, 4, 8), ACTIVATION_REDUCTION_N=1, HAS_IN_MX_SCALE=False,
             HAS_OUT_MX_SCALE=False, X_dtype=tuple(SIZES), flex=False)
    if not (p["stride_xn"] == 1 and p["stride_xm_aligned"] and p["N_aligned"] and p["B"] == 1):
        raise CannotPredict(f"stride_xn {p['stride_xn']}, stride_xm / N 16-divisible {p['stride_xm_aligned']} / "
                            f"{p['N_aligned']}, B {p['B']}: X's loads are not 16 B vectors in a single loop, so "
                            "whether they are pipelined was not measured for every dtype; size it")
    return (REDUCE_STAGES - 1) * p["K"] * p["BLOCK_N"] * SIZES[p["X_dtype"]]


MATMUL_FLAGS = dict(SWIZZLE_MX_VALUE="HOPPER_VALUE", SWIZZLE_MX_SCALE="HOPPER_SCALE", W_TRANSPOSE=True, SPLIT_K=1,
                    EPILOGUE_SUBTILE=1, X_TMA_MODE=None, Y_TMA_MODE=None, SWAP_XW=False, IS_EPILOGUE_QUANT_MXFP8=False,
                    X_dtype="bf16", W_dtype="u8", WMxScale_dtype="u8", flex=False)


def matmul_sm90(p: dict) -> int:
    """Rule 6 (_matmul_ogs on sm_90)."""
    if p["cc"] != 90:
        raise CannotPredict(f"_matmul_ogs on sm_{p['cc']}: rule 6 was checked on sm_90 (wgmma) only; size it")
    _require(p, BLOCK_M=(16, 32, 64, 128), BLOCK_N=(128, 256), BLOCK_K=(64, 128, 256), num_stages=(2, 3, 4, 5),
             num_warps=(4, 8), **MATMUL_FLAGS)
    bm, bn, bk, s, w = (p[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps"))
    if bn % (32 * w):
        raise CannotPredict(f"BLOCK_N {bn} with {w} warps: the kernel asserts BLOCK_N % (32 * num_warps) == 0")
    x, weight, scale = bm * bk * 2, bk // 2 * bn, bn * bk // 32
    scales = (s - 1) * scale if scale >= 4 * 32 * w else scale
    loop = (s - 1) * (x + weight) + scales + x
    return max(loop, SWIGLU_EPILOGUE.get((bm, bn, w), 0)) if p["swiglu"] else loop


RULES = {"_topk_forward": topk, "_sum_bitmatrix_rows": sum_bitmatrix, "_combined_routing_memset": routing_memset,
         "_combined_routing_compute_pow2": routing_compute, "matmul_ogs_dflt_dflt._reduce_grouped": reduce_grouped,
         "matmul_ogs_dflt_dflt._matmul_ogs": matmul_sm90, "matmul_ogs_swiglu_dflt._matmul_ogs": matmul_sm90}


def predict(kernel: str, params: dict, cc: int, triton_version: str, *, source_sha256: str) -> int:
    """metadata.shared of one launch of `kernel` with `params` (its constexprs, num_warps, the dtypes and the
    specialisations each rule reads); source_sha256: the sha256 of FILES[kernel]'s texts joined."""
    _check_scope(kernel, triton_version, source_sha256, cc)
    return RULES[kernel]({**params, "cc": cc, "swiglu": kernel.startswith("matmul_ogs_swiglu_")})
