"""Predict the shared bytes of vLLM's Triton kernels for Mamba / GatedDeltaNet layers that have no tl.dot (the conv1d
prefill and decode kernels, the Mamba selective-state update, and GDN's post-conv prep and two decode kernels)
without compiling, where the rules below were checked exact against Triton's own metadata.shared; CannotPredict
everywhere else.

Keyed by (Triton release, sha256 of the engine module that defines the kernel): CHECKED lists the pairs the rules were
checked on (the engine file, or for the kernels tileprobe cuts out of their file, that cut module). Another release
or a changed file is CannotPredict, saying so.

Without tl.dot, Triton places in shared memory only the scratch of cross-thread work: a reduction across warps, or
a layout conversion (convert_layout) between the layout a tensor is loaded in (the coalesce pass orders each load
by the pointer's contiguity) and the layout it is used in (a slice of a 2-D tile). AllocateSharedMemory gives each
such op its scratch for its own life; none live together here, so metadata.shared is the largest one. These kernels
do their 2-D work on one tile, so which conversion is needed depends on how num_warps and the vector width split the
tile; the rules are therefore stated per launcher-reachable configuration and were measured over the grids named.

Scope: Triton 3.8.0; the pin table's vLLM (kernels by sha256); sm_120 / sm_121 (nothing here is capability-specific in
the lowering, but only these were checked). Sizes: f = 4 B (fp32).

1. _causal_conv1d_fwd_kernel and _causal_conv1d_update_kernel: 0 B. Each program loads [BLOCK_N] feature vectors
   (weights, bias, previous tokens) and one [NP2_STATELEN, BLOCK_N] conv-state tile, whose feature axis is the
   contiguous one in every pointer (unit feature strides); it combines them elementwise and stores them in the same
   feature-major layout: no reduction, no conversion. Checked: BLOCK_N 64..1024, num_warps 1, 2, 4, 8, KERNEL_WIDTH
   2..4 (update also 5, 6), NP2_STATELEN 2..8, BLOCK_M 4..16 (fwd), x / weight / state / out all bf16, fp16 or
   fp32, with or without bias, silu, HAS_NULL_BLOCK. A non-unit feature stride of the conv state measured 2048 B
   (fwd, stride_istate_dim 3): the tile is then loaded token-major and converted; CannotPredict. The update kernel's
   IS_VARLEN / IS_SPEC_DECODING launches were not checked (CannotPredict).
2. _selective_scan_update_kernel: DS * f, DS = BLOCK_SIZE_DSTATE, for num_warps 4 with BLOCK_SIZE_M 2..64 and DS 128
   (fp32 or 16-bit state) or DS 256 (fp32 state). The [BLOCK_SIZE_M, DS] fp32 state tile is dstate-major with
   4 warps; the fp32 B / C vectors ([DS], loaded 1-D) are converted to its column slice, a whole-vector exchange of
   DS * 4 B, and the row sum `out` (tl.sum over dstate) needs less. Other configurations measured between 0 and
   1024 B in ways this rule does not state (8 warps: 16..1024; DS <= 64: the conversion is replicated differently;
   BLOCK_SIZE_M 1: 16 B): CannotPredict. Flags checked: TIE_HDIM, HAS_D, HAS_DT_BIAS, DT_SOFTPLUS either way; HAS_Z,
   IS_VARLEN, IS_SPEC_DECODING, USE_RS_ROUNDING not checked, nor x / B / C other than bf16 (CannotPredict).
3. fused_recurrent_gated_delta_rule_packed_decode_kernel: 128 B for num_warps 1 (the launcher's) and BV 32 (the
   launcher's min(next_pow2(V), 32) for V >= 32): the [BV] fp32 value vector b_v, loaded 1-D, is converted to the
   row slice of the [BV, BK] state tile (tl.sum over K) on one warp: 32 * f. Checked for BK 32..256, activations
   bf16 / fp16 / fp32, state 16-bit or fp32, USE_QK_L2NORM_IN_KERNEL either. BV 4 / 8 / 16 (the launcher's warm-up
   variants) measured 0..64 B depending on BK and dtype, BV 64 / 128 256 B: CannotPredict.
4. fused_sigmoid_gating_delta_rule_update_kernel: BK * f for num_warps 4 (the launcher's) with BK 128 (any state
   dtype) or BK 256 with an fp32 state: the [BK] fp32 q / k vectors, loaded 1-D, are converted to the column slice of
   the [BV, BK] state tile, whose K axis the 4 warps share; a whole-vector exchange. Checked for BV 4..32,
   activations bf16 / fp16 / fp32, USE_QK_L2NORM_IN_KERNEL, IS_VARLEN, IS_CONTINUOUS_BATCHING, INPLACE_FINAL_STATE
   either way. BK 256 with a 16-bit state measured 512 B, BK <= 64 BV * the activation size: not stated here;
   USE_INITIAL_STATE False measured 4096 B, IS_KDA / IS_SPEC_DECODING not checked: CannotPredict.
5. _fused_post_conv_kernel: 0 B. Per program a [BLOCK_T, BK] q / k tile and a [BLOCK_T, BV] v tile, head-dim
   contiguous, L2-normalised along the head dim (tl.sum over BK), which the layout keeps within a warp's row, and
   per-token gating scalars: nothing crosses warps. Checked for BLOCK_T 8..64, BK = BV 64..256, num_warps 1..8,
   16-bit activations, APPLY_L2NORM either way; fp32 activations with BK 256 measured 64..512 B (the row then spans
   warps), fp32 is CannotPredict.

Checked: every launch of these kernels `tileprobe audit --engine vllm --target rtx-pro-6000` captures for
nemotron-h-8b and qwen3-next-80b-a3b (batch 1,8, seq 2048: 11 distinct, all answered, each equal to the committed
compiled bytes; `--verify 40` compiled 40 of nemotron-h-8b's and all 7 of qwen3-next's: 0 differ), and two
sweeps of random launches around them over the parameters named above (800 drawn, 720 answered, 80 outside the
stated scopes and so CannotPredict) against Triton 3.8.0's own passes up to AllocateSharedMemory: 0 differ; the
grids behind each rule's exclusions were measured the same way. tests/predict/test_triton_conv.py draws new
ones every run (one compiled in full).
"""

from __future__ import annotations

from tileprobe.engines import pins
from tileprobe.predict import recheck
from tileprobe.predict._common import CannotPredict, cc_checked, source_checked

VLLM = pins.label("vllm")  # the engine releases whose kernels the tables below were checked on

FAMILY = "triton-conv"
# (Triton release, sha256 of the module defining the kernel) -> what that module is
CHECKED = {
    ("3.8.0", "52f56188b2a08f1214dbe70e04235fb1260f94ffaaae2b5ab8f72f281643fad2"): f"{VLLM} causal_conv1d.py",
    ("3.8.0", "6e765aa767e621cbb79635cf1e9a18e1501e76048685b5e36a75c3ca933cc608"): f"{VLLM} mamba_ssm.py",
    ("3.8.0", "b065f160e94371192ce743bcd1ce3a9c75ddcecf31be243af4d55b39a898685e"): f"{VLLM} fused_recurrent.py",
    ("3.8.0", "23e6670c694b0dbcf946d7460e747583e9bec11016280d64329ff494278c3dc2"):
        f"{VLLM} fused_gdn_prefill_post_conv.py (_fused_post_conv_kernel cut from it)",
    ("3.8.0", "d834fac7e3c716739aa933b632900e137805b4985d718d32465d777f340dc5da"):
        f"{VLLM} fused_sigmoid_gating.py (fused_sigmoid_gating_delta_rule_update_kernel cut from it)",
    # the same two files whole: the driven GDN step (tileprobe.audit.vllm_gdn_step) compiles its kernels from their
    # modules; tests/predict/test_triton_conv.py draws those launches against Triton's own allocation pass
    ("3.8.0", "590717b2107abc90d72548de06b5d315229eb2775c94614f3f545df11cc2b5df"):
        f"{VLLM} fused_gdn_prefill_post_conv.py",
    ("3.8.0", "000ab8996af9788fdb8843a6a3b91833e7a14c8acc0e1ea073a536330f64cb6f"): f"{VLLM} fused_sigmoid_gating.py",
}
TRITON_VERSIONS = tuple(dict.fromkeys(v for v, _ in CHECKED))
CCS = (120, 121)
F32 = 4
SIZES = {"bf16": 2, "fp16": 2, "fp32": 4}
CONV_BLOCK_N = (64, 128, 256, 512, 1024)
CONV_WARPS = (1, 2, 4, 8)
CONV_WIDTHS = {"_causal_conv1d_fwd_kernel": (2, 3, 4), "_causal_conv1d_update_kernel": (2, 3, 4, 5, 6)}
CONV_STATELEN = (2, 4, 8)
CONV_BLOCK_M = (4, 8, 16)
SSU_M = (2, 4, 8, 16, 32, 64)
GDN_BK = (32, 64, 128, 256)
GDN_BV = (4, 8, 16, 32)
POST_T = (8, 16, 32, 64)
POST_K = (64, 128, 256)


def _check_scope(kernel: str, triton_version: str, source_sha256: str, cc: int) -> None:
    # the table's own releases, or one whose reviewed recheck file lists this rule 0-differ (tileprobe.predict.recheck)
    if recheck.lookup("triton-conv", CHECKED, TRITON_VERSIONS, triton_version, kernel, (source_sha256,)) is None:
        raise source_checked("triton-conv", kernel, source_sha256, VLLM)
    if kernel not in RULES:
        raise CannotPredict(f"{kernel}: no stated triton-conv rule (see tileprobe.predict.triton_conv); size it")
    cc_checked("triton-conv", CCS, cc)


def _within(p: dict, allowed: dict) -> None:
    """CannotPredict naming every parameter outside the values the rule was checked for."""
    odd = [f"{k}={p.get(k)!r}" for k, ok in allowed.items() if p.get(k) not in ok]
    if odd:
        raise CannotPredict(f"{', '.join(odd)}: outside what the rule was checked on "
                            f"({'; '.join(f'{k} in {tuple(ok)}' for k, ok in allowed.items())}); size it")


def _one_dtype(p: dict, keys: tuple[str, ...], allowed: tuple[str, ...]) -> str:
    got = {p.get(k) for k in keys if p.get(k) is not None}
    if len(got) != 1 or not got <= set(allowed):
        raise CannotPredict(f"{', '.join(f'{k} {p.get(k)}' for k in keys)}: checked for one dtype of {allowed}; "
                            "size it")
    return got.pop()


def conv(kernel: str, p: dict) -> int:
    """Rule 1 (_causal_conv1d_fwd_kernel, _causal_conv1d_update_kernel)."""
    allowed = {"BLOCK_N": CONV_BLOCK_N, "num_warps": CONV_WARPS, "KERNEL_WIDTH": CONV_WIDTHS[kernel],
               "NP2_STATELEN": CONV_STATELEN}
    if kernel == "_causal_conv1d_fwd_kernel":
        allowed["BLOCK_M"] = CONV_BLOCK_M
    else:
        allowed |= {"IS_VARLEN": (False,), "IS_SPEC_DECODING": (False,)}
    _within(p, allowed)
    strides = {k: v for k, v in p.items() if k.startswith("stride_") and k.endswith("_dim") and k != "stride_w_dim"}
    if not strides or any(v != 1 for v in strides.values()):
        raise CannotPredict(f"feature strides {strides}: checked for unit feature strides only (a token-major conv "
                            "state measured 2048 B); size it")
    _one_dtype(p, ("x_dtype", "w_dtype", "state_dtype", "o_dtype"), tuple(SIZES))
    return 0


def ssu(p: dict) -> int:
    """Rule 2 (_selective_scan_update_kernel)."""
    _within(p, {"num_warps": (4,), "BLOCK_SIZE_M": SSU_M, "BLOCK_SIZE_DSTATE": (128, 256), "HAS_Z": (False,),
                "IS_VARLEN": (False,), "IS_SPEC_DECODING": (False,), "USE_RS_ROUNDING": (False,),
                "HAS_STATE_BATCH_INDICES": (True,)})
    _one_dtype(p, ("x_dtype", "B_dtype", "C_dtype"), ("bf16",))
    ds, state = p["BLOCK_SIZE_DSTATE"], p["state_dtype"]
    if state not in SIZES or (ds == 256 and state != "fp32"):
        raise CannotPredict(f"state {state} with BLOCK_SIZE_DSTATE {ds}: checked for an fp32 state (DS 128, 256) or "
                            "a 16-bit one (DS 128; DS 256 measured otherwise); size it")
    return ds * F32


def packed_decode(p: dict) -> int:
    """Rule 3 (fused_recurrent_gated_delta_rule_packed_decode_kernel)."""
    _within(p, {"num_warps": (1,), "BV": (32,), "BK": GDN_BK})
    _one_dtype(p, ("qkv_dtype", "o_dtype"), tuple(SIZES))
    _one_dtype(p, ("h0_dtype", "ht_dtype"), tuple(SIZES))
    return 32 * F32


def sigmoid_decode(p: dict) -> int:
    """Rule 4 (fused_sigmoid_gating_delta_rule_update_kernel)."""
    _within(p, {"num_warps": (4,), "BK": (128, 256), "BV": GDN_BV, "USE_INITIAL_STATE": (True,),
                "IS_SPEC_DECODING": (False,), "IS_KDA": (False,)})
    _one_dtype(p, ("q_dtype", "k_dtype", "v_dtype", "o_dtype"), tuple(SIZES))
    state = _one_dtype(p, ("h0_dtype", "ht_dtype"), tuple(SIZES))
    if p["BK"] == 256 and state != "fp32":
        raise CannotPredict(f"BK 256 with a {state} state: measured otherwise (the tile splits K differently); "
                            "size it")
    return p["BK"] * F32


def post_conv(p: dict) -> int:
    """Rule 5 (_fused_post_conv_kernel)."""
    _within(p, {"num_warps": (1, 2, 4, 8), "BLOCK_T": POST_T, "BK": POST_K})
    if p.get("BV") != p["BK"]:
        raise CannotPredict(f"BK {p['BK']}, BV {p.get('BV')}: checked for BK == BV (K == V) only; size it")
    _one_dtype(p, ("qkv_dtype", "q_dtype", "k_dtype", "v_dtype"), ("bf16", "fp16"))
    return 0


RULES = {"_causal_conv1d_fwd_kernel": lambda p: conv("_causal_conv1d_fwd_kernel", p),
         "_causal_conv1d_update_kernel": lambda p: conv("_causal_conv1d_update_kernel", p),
         "_selective_scan_update_kernel": ssu,
         "fused_recurrent_gated_delta_rule_packed_decode_kernel": packed_decode,
         "fused_sigmoid_gating_delta_rule_update_kernel": sigmoid_decode,
         "_fused_post_conv_kernel": post_conv}


def predict(kernel: str, params: dict, cc: int, triton_version: str, *, source_sha256: str) -> int:
    """metadata.shared of one launch of `kernel` with `params` (its block constexprs, num_warps, flags, feature
    strides and pointer dtypes, as tileprobe.audit.conv_rule reads them); source_sha256: the sha256 of the module
    defining the kernel."""
    _check_scope(kernel, triton_version, source_sha256, cc)
    return RULES[kernel](params)
