"""The correctness bound of a launch, derived from the kernel's numeric contract, and the element-wise check that uses
it. One rule for both backends (the CUTLASS harness applies it in C++, reference.cuh's compare_kernel; the Triton
runtime here, `check`):

    an element is wrong when it or its reference is not finite, or |out - ref| > atol * rms(ref_group) + rtol * |ref|

rms(ref_group) being the root mean square of the reference over the element's group (CUTLASS: one grouped-GEMM
problem; Triton fused_moe: the (token, expert) slots of one expert), so `atol` is in units of the group's output
size and means the same at every K and data range. The columns `atol`, `rtol` and `tolerance` of a runtime row are
these numbers and this sentence, for both backends.

Derivation (for products of K terms a_k * b_k whose reference is exact: the reference computes the products of the
same quantized values the kernel reads, in fp32 (harness) or fp64 (Triton), so only the kernel's own rounding is
judged):

1. Output rounding. D is rounded once to its dtype: |err| <= u_out |D|, u_out the unit roundoff (bf16 2^-8, fp16
   2^-11, fp32 2^-24). `rtol` covers it: rtol = max(family floor, RTOL_MARGIN * u_out) (bf16: 4 * 2^-8 = 1.6e-2;
   every family's floor of 2e-2 or 3e-2 is above it, so rtol is the family's).
2. Accumulation. The kernel's partial sums are rounded every `mma_k` products (one MMA instruction). With
   round-to-nearest fp32 (u = 2^-24) the error is far below anything else. With FP8 on sm_90 the tensor core keeps
   its accumulator in reduced precision: about 14 significant bits, truncated (DeepSeek-V3 technical report,
   arXiv 2412.19437, section 3.3.2: "limited to retaining around 14 bits"), u_acc = 2^-13. This is CUTLASS's
   FP8 fast accumulation (sm90-fp8's kernel schedule) and Triton's default for fp8 `tl.dot` on capability 9.0
   (`max_num_imprecise_acc_default = 2**30` in triton/backends/nvidia/compiler.py: never promoted to fp32 within a
   dot). Over a span of s products accumulated without promotion (n = s / mma_k roundings, mma_k = 32 for sm_90 fp8
   wgmma), step j rounds a partial sum of expected size rms(ref) * sqrt(j / n) of that span; with every rounding
   in the same direction (truncation) the error is at most u_acc * sum_j sqrt(j/n) * rms ~ (2/3) * u_acc * n * rms.
   Spans promoted into an fp32 accumulator (fp8 block-scaled: each BLOCK_SIZE_K <= 128 chunk starts a fresh dot)
   add with independent signs, and the total stays (2/3) * u_acc * (s / mma_k) in units of the whole sum's rms. So
        acc(K) = ACC_MARGIN * (2/3) * u_acc * min(K, span) / mma_k          (units of rms(ref_group))
   grows linearly with K for the per-tensor Triton path and CUTLASS fast accumulation (span = all of K), and stays
   ~1e-3 for block-scaled fp8 (span 128). ACC_MARGIN = 2 covers elements whose partial sums run above their rms
   and the alignment of the 32 products inside one MMA. Figures: K = 768 / 2048 / 4096 / 7168 give 0.0039 /
   0.0104 / 0.0208 / 0.0365.
3. atol = max(family floor, acc(K)). The floor (tileprobe/families/<family>.py: the family's own `atol`) is the
   measured margin for everything else (order of the additions, cancellation to ~0, the finalize epilogue's extra
   roundings); the derivation never makes a bound tighter than it. For the CUTLASS families the floor is today's
   number, so their bounds are unchanged up to the K where acc(K) passes the floor (sm90-fp8: K > 5898).

The bound is a statement about tileprobe's data (operands uniform in [-1, 1) before quantization, zero mean: partial
sums grow as sqrt(j)); it is not a worst case for adversarial data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tileprobe.families import Config, family
from tileprobe.families.base import Accumulation
from tileprobe.lazy import LazyModule

torch = LazyModule("torch")

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}
FP8_ACC_BITS = 14  # significant bits the sm_90 fp8 MMA accumulator keeps (DeepSeek-V3 report, section 3.3.2)
FP8_MMA_K = 32  # products per wgmma instruction for 8-bit operands (m64nNk32)
FP32_MMA_K = 16  # bf16 wgmma/mma.sync k (the fp32 accumulation term is negligible anyway)
ACC_MARGIN = 2.0
RTOL_MARGIN = 4.0
FP32 = "fp32"  # partial sums in fp32, round to nearest
FP8_REDUCED = "fp8-reduced"  # sm_90 fp8 MMA accumulator (~14 bits, truncated) over a span of K


@dataclass(frozen=True)
class Bound:
    atol: float  # units of rms(ref_group)
    rtol: float
    k: int
    accumulation: Accumulation
    out_dtype: str
    acc_term: float  # the derived accumulation term before the floor (units of rms(ref_group))

    @property
    def text(self) -> str:
        """The row's `tolerance` column: the rule with its numbers and what they came from."""
        return (f"|out - ref| <= {_g(self.atol)}*rms(ref_group) + {_g(self.rtol)}*|ref|; {self.accumulation.why}, "
                f"K={self.k}: accumulation term {_g(self.acc_term)}*rms, {self.out_dtype} output")


def accumulation_term(acc: Accumulation, k: int) -> float:
    """acc(K) of the module docstring, in units of rms(ref_group)."""
    if acc.kind == FP8_REDUCED:
        u, mma_k = 2.0**-(FP8_ACC_BITS - 1), FP8_MMA_K
    elif acc.kind == FP32:
        u, mma_k = UNIT_ROUNDOFF["fp32"], FP32_MMA_K
    else:
        raise ValueError(f"accumulation {acc.kind!r}: expected {FP32!r} or {FP8_REDUCED!r}")
    span = k if acc.span is None else min(k, acc.span)
    return ACC_MARGIN * (2.0 / 3.0) * u * max(span, 1) / mma_k


def derive(floor_atol: float, floor_rtol: float, k: int, acc: Accumulation, out_dtype: str = "bf16") -> Bound:
    """The bound of one check: atol = max(floor, acc(K)), rtol = max(floor, RTOL_MARGIN * u_out)."""
    term = accumulation_term(acc, k)
    atol = max(floor_atol, _up(term))
    rtol = max(floor_rtol, _up(RTOL_MARGIN * UNIT_ROUNDOFF[out_dtype]))
    return Bound(atol, rtol, int(k), acc, out_dtype, term)


def for_config(config: Config, k: int, cc: int | None = None) -> Bound:
    """The bound of `config` (its family's floor and accumulation contract) for a GEMM with reduction length `k` on
    a device of compute capability `cc` (e.g. 90; None: the config's arch decides)."""
    fam = family(config.family)
    acc = fam.accumulation(config, cc) if fam.accumulation else Accumulation()
    return derive(fam.atol, fam.rtol, k, acc)


def check(out, ref, groups, bound: Bound) -> dict:
    """Element-wise check of `out` against `ref` (same shape, [slots, n]: one row per output row) where `groups`
    ([slots] ints) names each row's group. Returns the harness's check columns (PROTOCOL.md): checked_elements,
    bad_elements, nonfinite, groups, bad_groups, worst_group, worst_row, worst_col, worst_value, worst_ref,
    worst_ratio, rel_err, atol, rtol, tolerance."""
    out, ref = out.double().reshape(ref.shape[0], -1), ref.double().reshape(ref.shape[0], -1)
    groups = groups.reshape(-1).long().to(ref.device)
    ids, inverse = torch.unique(groups, return_inverse=True)
    sq = torch.zeros(len(ids), dtype=torch.float64, device=ref.device).index_add_(0, inverse, (ref**2).sum(1))
    cnt = torch.zeros(len(ids), dtype=torch.float64, device=ref.device).index_add_(
        0, inverse, torch.full((ref.shape[0],), float(ref.shape[1]), dtype=torch.float64, device=ref.device))
    rms = (sq / cnt.clamp(min=1)).sqrt()[inverse][:, None]
    tol = bound.atol * rms + bound.rtol * ref.abs()
    err = (out - ref).abs()
    finite = torch.isfinite(out) & torch.isfinite(ref)
    ratio = torch.where(finite, err / tol.clamp(min=1e-300), torch.full_like(err, math.inf))
    ratio = torch.where(finite & (err == 0), torch.zeros_like(err), ratio)
    bad = ~finite | (err > tol)
    flat = int(torch.argmax(torch.nan_to_num(ratio, nan=math.inf, posinf=1e30)))
    row, col = divmod(flat, ref.shape[1])
    bad_rows = bad.any(1)
    diff = torch.where(finite, out - ref, torch.zeros_like(err))
    refn = float(torch.where(finite, ref, torch.zeros_like(ref)).norm())
    return {"checked_elements": int(out.numel()), "bad_elements": int(bad.sum()), "nonfinite": int((~finite).sum()),
            "groups": len(ids), "bad_groups": int(torch.unique(inverse[bad_rows]).numel()),
            "worst_group": int(groups[row]), "worst_row": row, "worst_col": col,
            "worst_value": float(out[row, col]), "worst_ref": float(ref[row, col]),
            "worst_ratio": min(float(ratio[row, col]), 1e30),
            "rel_err": float(diff.norm()) / refn if refn else math.inf,
            "atol": bound.atol, "rtol": bound.rtol, "tolerance": bound.text}


def _up(x: float) -> float:
    """Round up to 3 significant digits (the numbers a row and a command line carry)."""
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - 2
    return float(f"{math.ceil(x / 10.0**e - 1e-9) * 10.0**e:.3g}")


def _g(x: float) -> str:
    return f"{x:.3g}"
