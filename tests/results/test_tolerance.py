"""The correctness bound (tileprobe/results/tolerance.py) against an independent model of the hardware: an sm_90 fp8
MMA accumulator emulated here (partial sums of 32 exact products added into an accumulator truncated to 14
significant bits, never promoted over K; bf16 output) must pass at every K (main's absolute atol 0.02 fails it from
K = 4096 on), while corrupted elements are caught;
the CUTLASS families' command-line numbers are the families' own below the K where the fp8 term passes them."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

from tileprobe.backends.cutlass.timing import check_bound, harness_options  # noqa: E402
from tileprobe.families import FAMILIES, expand_configs  # noqa: E402
from tileprobe.families import triton_moe as tm  # noqa: E402
from tileprobe.families.base import Accumulation  # noqa: E402
from tileprobe.results import tolerance  # noqa: E402
from tileprobe.workloads import points_for  # noqa: E402

REDUCED = Accumulation("fp8-reduced", None, "test: reduced precision over all of K")


def _e4m3(x):
    """Uniform values scaled to e4m3's range and rounded to it, back as fp64 (the dequantized operand)."""
    s = x.abs().amax() / 448.0
    return (x / s).to(torch.float8_e4m3fn).double() * s


def _truncate(x, bits: int):
    """Round toward zero to `bits` significant bits (the fp8 MMA accumulator's behaviour, as reported)."""
    m, e = torch.frexp(x)  # x = m * 2^e, 0.5 <= |m| < 1
    return torch.ldexp(torch.trunc(m * 2.0**bits) / 2.0**bits, e)


def _emulated(a, b, bits: int = 14, mma_k: int = 32):
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float64)
    for k0 in range(0, a.shape[1], mma_k):
        acc = _truncate(acc + a[:, k0:k0 + mma_k] @ b[:, k0:k0 + mma_k].T, bits)
    return acc.to(torch.bfloat16).double()


def _problem(rng: random.Random, k: int):
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    rows, n = rng.choice([32, 48, 64]), rng.choice([128, 256])
    a = _e4m3(torch.rand(rows, k, generator=g, dtype=torch.float64) * 2 - 1)
    b = _e4m3(torch.rand(n, k, generator=g, dtype=torch.float64) * 2 - 1)
    groups = torch.tensor([rng.randrange(4) for _ in range(rows)])
    return a, b, groups


def test_bound_grows_with_k_only_where_the_accumulation_is_reduced_precision(rng):
    k = rng.randrange(768, 4096)
    floor = rng.uniform(1e-3, 5e-3)
    per_tensor = [tolerance.derive(floor, 2e-2, kk, tm.accumulation("fp8", 90, 128)).atol for kk in (k, 2 * k, 4 * k)]
    assert per_tensor[0] < per_tensor[1] < per_tensor[2]
    assert per_tensor[2] / per_tensor[1] == pytest.approx(2, rel=0.01)  # linear in K: (2/3) u n with n = K / 32
    block = {tolerance.derive(floor, 2e-2, kk, tm.accumulation("fp8-block", 90, 128)).atol for kk in (k, 4 * k)}
    fp32 = {tolerance.derive(floor, 2e-2, kk, tm.accumulation(q, cc, 128)).atol
            for kk in (k, 4 * k) for q, cc in (("bf16", 90), ("fp8", 120))}
    assert block == fp32 == {floor}  # promoted every 128 of K / fp32: the floor at every K


@pytest.mark.parametrize("k", [768, 2048, 4096, 7168])
def test_emulated_fp8_accumulation_passes_and_corruption_is_caught(k, rng):
    a, b, groups = _problem(rng, k)
    ref = a @ b.T
    out = _emulated(a, b)
    fam = FAMILIES["triton-moe"]
    bound = tolerance.derive(fam.atol, fam.rtol, k, tm.accumulation("fp8", 90, 128))
    got = tolerance.check(out, ref, groups, bound)
    assert got["bad_elements"] == 0 and got["nonfinite"] == 0 and got["worst_ratio"] < 1, got
    if k >= 4096:  # main's Triton check (absolute atol 0.02) called this output incorrect
        assert int(((out - ref).abs() > 0.02 + 0.02 * ref.abs()).sum()) > 0
    assert got["checked_elements"] == out.numel() and got["groups"] == len(set(groups.tolist()))
    assert got["tolerance"].startswith(f"|out - ref| <= {bound.atol:.3g}*rms(ref_group) + ") and f"K={k}" in \
        got["tolerance"]
    # corrupt a few random elements by more than the bound could allow (10% of the group's rms + 10% of |ref|)
    bad = out.clone()
    picks = {(rng.randrange(out.shape[0]), rng.randrange(out.shape[1])) for _ in range(rng.randint(1, 6))}
    rms = ref.pow(2).mean().sqrt()
    for r, c in picks:
        bad[r, c] += rng.choice([-1, 1]) * rng.uniform(1, 3) * (0.3 * rms + 0.1 * ref[r, c].abs())
    caught = tolerance.check(bad, ref, groups, bound)
    assert caught["bad_elements"] == len(picks) and caught["worst_ratio"] > 1
    assert (caught["worst_row"], caught["worst_col"]) in picks
    assert caught["bad_groups"] == len({int(groups[r]) for r, _ in picks})
    bad[next(iter(picks))] = math.nan  # an element never written
    assert tolerance.check(bad, ref, groups, bound)["nonfinite"] == 1


def test_cutlass_numbers_are_the_families_own_below_the_fp8_crossover(rng):
    for name, arch, tile, sched in (("sm90-fp8", "sm_90a", "128x128x128", "cooperative"),
                                    ("sm120-nvfp4", "sm_120a", "128x128x128", "cooperative")):
        (cfg,) = expand_configs(FAMILIES[name], arch, [tile], [sched])
        k = rng.choice([256, 768, 2048, 4096, 5888])
        (p,) = points_for(None, [f"{rng.randint(1, 16)}:{rng.choice([1, 8])}:{rng.choice([512, 1024])}:{k}"], [1],
                          "uniform", 1, 1, rng.randrange(10**6))
        opts = harness_options(cfg, 1, check_bound(cfg, [p]))
        fam = FAMILIES[name]
        assert opts[opts.index("--atol") + 1] == repr(fam.atol) and opts[opts.index("--rtol") + 1] == repr(fam.rtol)
    (cfg,) = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["128x128x128"], ["cooperative"])
    (p,) = points_for(None, ["8:8:1024:7168"], [1], "uniform", 1, 1, rng.randrange(10**6))
    opts = harness_options(cfg, 1, check_bound(cfg, [p]))
    assert float(opts[opts.index("--atol") + 1]) > FAMILIES["sm90-fp8"].atol  # fast accum at K=7168: raised
