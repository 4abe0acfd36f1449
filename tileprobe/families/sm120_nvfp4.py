"""Family sm120-nvfp4: NVFP4 x NVFP4 -> bf16 on the Sm120 block-scaled ptr-array grouped GEMM (CUTLASS builders)."""

from __future__ import annotations

from tileprobe.errors import UnsupportedConfig
from tileprobe.families.base import Family, Tile, version_tuple

# CUTLASS 4.2.0 and 4.5.0 (the releases tileprobe has read), gemm/collective/builders/
# sm120_blockscaled_mma_builder.inl: static_assert(size<1>(TileShape_MNK{}) >= 32, "Invalid tile shape N.").
# Later releases add N = 8/16 tiles; for a version newer than those read, N < 32 is left to the compiler.
LAST_VERSION_WITH_N32 = (4, 5, 99)


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    if tile.m not in (128, 256):
        raise UnsupportedConfig(f"M={tile.m}: the SM120 block-scaled scale-factor atom is 128 rows, so M is 128 or 256")
    if tile.n % 8 or tile.n < 8 or tile.n > 256:
        raise UnsupportedConfig(f"N={tile.n}: the SM120 block-scaled builder needs N a multiple of 8, 8..256")
    v = version_tuple(cutlass_version)
    if tile.n < 32 and (not v or v <= LAST_VERSION_WITH_N32):
        raise UnsupportedConfig(f"N={tile.n}: CUTLASS {cutlass_version or '<= 4.5'} sm120_blockscaled_mma_builder.inl "
                                f"static_assert(N >= 32, \"Invalid tile shape N.\")")
    if schedule == "pingpong" and tile.n < 16:
        raise UnsupportedConfig(f"N={tile.n}: the SM120 pingpong schedule needs N >= 16")


FAMILY = Family(
    name="sm120-nvfp4",
    kernel_template="Sm120Nvfp4Kernel",
    header="sm120_nvfp4.cuh",
    archs=("sm_120a", "sm_121a"),
    ab_bits=4,
    sf_vector=16,
    schedules=("auto", "cooperative", "pingpong"),
    default_schedules=("cooperative", "pingpong"),
    default_tiles=("128x128x128", "128x256x128", "256x128x128", "128x128x256", "128x64x128", "128x32x128",
                   "128x128x64", "128x256x64", "256x128x64"),
    mma_k=64,
    # bf16 output (8 bits of mantissa: half-ulp 2^-9 ~ 2e-3) of K-long sums of products of e2m1 x ue4m3 values; the
    # reference accumulates the same exactly representable products in fp32, so the error is the bf16 rounding of D
    # plus accumulation-order differences: rtol 2e-2 leaves 10x margin; atol (in units of the group's reference
    # RMS) covers outputs that cancel to ~0.
    atol=1e-2,
    rtol=2e-2,
    description="NVFP4 x NVFP4 (e2m1, ue4m3 SF per 16) -> bf16, Sm120 block-scaled ptr-array grouped GEMM",
    rules=_rules,
    # sm120_blockscaled_mma_builder.inl: IsCooperative = !(pingpong tags), so KernelScheduleAuto builds cooperative.
    resolves={"auto": "cooperative"},
)
