"""Family sm90-fp8: FP8 e4m3 x e4m3 -> bf16 on the Sm90 ptr-array TMA warp-specialized grouped GEMM."""

from __future__ import annotations

from tileprobe.errors import UnsupportedConfig
from tileprobe.families.base import Accumulation, Family, Tile

# KernelPtrArrayTmaWarpSpecialized{Cooperative,Pingpong}FP8FastAccum (cutlass_harness/families/sm90_fp8.cuh): the
# wgmma accumulator is never promoted to fp32 over K
FAST_ACCUM = Accumulation("fp8-reduced", None, "CUTLASS sm90 FP8 fast accumulation (no fp32 promotion over K)")


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    if schedule == "cooperative" and tile.m % 128:
        raise UnsupportedConfig(f"M={tile.m}: the cooperative schedule splits M over two warp groups (M % 128 == 0)")
    if tile.m % 64:
        raise UnsupportedConfig(f"M={tile.m}: wgmma needs M a multiple of 64")
    if tile.n % 8 or tile.n > 256:
        raise UnsupportedConfig(f"N={tile.n}: wgmma needs N a multiple of 8, at most 256")


FAMILY = Family(
    name="sm90-fp8",
    kernel_template="Sm90Fp8Kernel",
    header="sm90_fp8.cuh",
    device_pass_header="sm90_fp8_device.cuh",
    archs=("sm_90a",),
    ab_bits=8,
    sf_vector=0,
    schedules=("cooperative", "pingpong"),
    default_schedules=("cooperative", "pingpong"),
    default_tiles=("64x64x128", "64x128x128", "64x256x128", "128x64x128", "128x128x128", "128x256x128",
                   "256x128x128"),
    mma_k=32,
    # e4m3 inputs in [-2, 2] are exact in the fp32 reference; FP8 fast-accum keeps partial sums in the tensor core's
    # reduced-precision accumulator (pooled error ~2e-3 of the output RMS on the H200), then bf16 rounding of D
    # (2^-9 relative). atol is in units of the group's reference RMS (the accumulation error scales with the partial
    # sums, not with an element that happens to cancel to ~0): 3e-2 RMS + 2e-2 |ref| is ~10x the observed error.
    # These are the floor: tileprobe.results.tolerance raises atol with K for the fast accumulation (K > 5898).
    atol=3e-2,
    rtol=2e-2,
    description="FP8 e4m3 x e4m3 -> bf16, Sm90 ptr-array TMA warp-specialized grouped GEMM (fast accum)",
    rules=_rules,
    accumulation=lambda cfg, cc: FAST_ACCUM,
)
