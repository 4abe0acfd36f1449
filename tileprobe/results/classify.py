"""What a harness answer means: the launch status and the correctness policy, as one verdict and a reason.

Correctness (documented in the README): every element of every group is checked against an independent reference
(the CUTLASS harness's fp32 one; the Triton runtime's fp64 one, tileprobe/results/tolerance.check): an element is
wrong when it is not finite or |out - ref| > atol * rms + rtol * |ref|, rms being the root mean square of the
group's reference (a grouped-GEMM problem; an expert's slots for Triton fused_moe), with atol/rtol derived from the
kernel's numeric contract by tileprobe/results/tolerance.py (the family's floor, atol raised with K where the
accumulation is reduced-precision; the row's `tolerance` column says which). A point is `ok` only when no element
is wrong; the pooled relative Frobenius error is kept as a column, never used to pass a point. A launch without a
check is `unchecked`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tileprobe.verdict import Verdict


@dataclass
class ProbeResult:
    verdict: Verdict
    reason: str
    data: dict  # the harness's JSON ({} when it gave none)


def classify(data: dict, expected_elements: int | None = None) -> ProbeResult:
    """Verdict of one harness answer: not-runnable-here, launch-error, or the correctness verdict. With
    `expected_elements` (the point's output size), a check that counted another number of elements verifies nothing."""
    status = data.get("launch_status")
    reason = data.get("launch_reason") or ""
    if status == "not-runnable-here":
        return ProbeResult(Verdict.NOT_RUNNABLE_HERE, reason, data)
    if status != "ok":
        return ProbeResult(Verdict.LAUNCH_ERROR, reason or f"launch status {status!r}", data)
    return correctness(data, expected_elements)


def correctness(data: dict, expected_elements: int | None = None) -> ProbeResult:
    rel = data.get("rel_err")
    bad = data.get("bad_elements")
    if rel is None or bad is None:
        why = "correctness not checked" if rel is None else "no element-wise check in the harness answer"
        return ProbeResult(Verdict.UNCHECKED, f"launched and ran; {why}: launched evidence only", data)
    checked = data.get("checked_elements")
    if expected_elements is not None and checked != expected_elements:
        return ProbeResult(Verdict.UNCHECKED, f"launched and ran; the check counted {checked} elements but the point "
                                              f"has {expected_elements}: not verified, launched evidence only", data)
    tol = f"|out - ref| <= {_g(data.get('atol'))}*rms(ref) + {_g(data.get('rtol'))}*|ref|"
    pooled = f"pooled rel. Frobenius error {_g(rel)}"
    nonfinite = int(data.get("nonfinite") or 0)
    if bad or nonfinite or not _finite(rel):
        where = (f"worst in group {data.get('worst_group')} at (row {data.get('worst_row')}, col "
                 f"{data.get('worst_col')}): out {_g(data.get('worst_value'))} vs ref {_g(data.get('worst_ref'))}")
        return ProbeResult(Verdict.INCORRECT,
                           f"{bad} of {data.get('checked_elements')} elements outside {tol} in "
                           f"{data.get('bad_groups')} of {data.get('groups')} group(s)"
                           f"{f', {nonfinite} non-finite' if nonfinite else ''}; {where}; {pooled}", data)
    return ProbeResult(Verdict.OK, f"verified: all {data.get('checked_elements')} elements of {data.get('groups')} "
                                   f"group(s) within {tol} (worst at {_g(data.get('worst_ratio'))} of the bound); "
                                   f"{pooled}", data)


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _g(x) -> str:
    if isinstance(x, (int, float)):
        return f"{x:.3g}"
    return "?" if x is None else str(x)
