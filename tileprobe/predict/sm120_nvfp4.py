"""Rules for family sm120-nvfp4 (cutlass_harness/kernels.cuh Sm120Nvfp4Kernel): SM120 block-scaled ptr-array grouped
GEMM, nv_float4_t<e2m1> A/B with ue4m3 scale factors per 16 K, bf16 D, optional bf16 C, cluster 1x1x1.

Headers are named as B/ = include/cutlass/gemm/collective/builders/, C/ = include/cutlass/gemm/collective/,
E/ = include/cutlass/epilogue/collective/; '(4.2.0, 4.5.0)' means the rule reads the same in both.
"""

from __future__ import annotations

from functools import lru_cache

from tileprobe.predict import _sm90_array as arr
from tileprobe.predict._common import Prediction, Unbuildable
from tileprobe.predict._layout import Struct

FAMILY = "sm120-nvfp4"
# Rule sets, and the exact releases each was verified against by compiling (layout dumps + static sweeps).
VERSIONS = {"4.2": ("4.2.0",), "4.5": ("4.5.0",)}
ARCHS = ("sm_120a", "sm_121a")

CAPACITY = 101376  # include/cutlass/arch/arch.h sm120_smem_capacity_bytes (4.2.0, 4.5.0)
SF_VECTOR = 16  # nv_float4_t: one ue4m3 scale factor per 16 elements of K
BLK_MN = 128  # include/cutlass/detail/sm100_blockscaled_layout.hpp Sm1xxBlkScaledChunk::Blk_MN (4.2.0, 4.5.0)
EPI_TILE = (64, 32)  # E/builders/sm120_builder.inl sm120_compute_tile_shape_or_override, EpilogueTileAuto (4.2.0, 4.5.0)
EPI_WARP_GROUPS = 2  # E/builders/sm120_builder.inl GetNumEpilogueWarpGroups: 2 unless the schedule says otherwise


def check(m: int, n: int, k: int, schedule: str, arch: str, version: str) -> None:
    """Raise Unbuildable for what nvcc rejects (or tileprobe does not build)."""
    if arch not in ARCHS:
        raise Unbuildable(f"{FAMILY} builds for {', '.join(ARCHS)}, not {arch}", "unsupported")
    if schedule not in ("auto", "cooperative", "pingpong"):
        raise Unbuildable(f"{FAMILY} takes schedules auto, cooperative, pingpong; not {schedule}", "unsupported")
    if m not in (128, 256):
        # tileprobe.families._check_sm120: the scale-factor atom is 128 rows (Blk_MN)
        raise Unbuildable(f"M={m}: the SM120 block-scaled scale-factor atom is 128 rows, so M is 128 or 256",
                          "unsupported")
    if k % 64:
        # B/sm120_blockscaled_mma_builder.inl: PermTileK = 64 for the MXF4/NVF4 instruction (16x8x64)
        raise Unbuildable(f"K={k} is not a multiple of the MMA K (64 elements)", "unsupported")
    if n % 8 or n > 256:
        raise Unbuildable(f"N={n}: the SM120 block-scaled builder needs N a multiple of 8, 8..256", "unsupported")
    if n < 32:
        # B/sm120_blockscaled_mma_builder.inl: static_assert(size<1>(TileShape_MNK{}) >= 32, "Invalid tile shape N.")
        raise Unbuildable(f"N={n}: CUTLASS static_assert 'Invalid tile shape N.' (N >= 32)", "tile")
    if n % EPI_TILE[1]:
        # E/sm90_epilogue_array_tma_warpspecialized.hpp (4.2.0, 4.5.0): static_assert(CTA_N % EPI_TILE_N == 0,
        # "EPI_TILE_N must divide CTA_N") with the SM120 auto epilogue tile 64x32 (nvcc: N = 40, 48, ... fail)
        raise Unbuildable(f"N={n}: CUTLASS static_assert 'EPI_TILE_N must divide CTA_N' (the SM120 epilogue tile is "
                          f"{EPI_TILE[0]}x{EPI_TILE[1]})", "tile")
    if version == "4.5" and n > BLK_MN and n % BLK_MN:
        # 4.5.0: the SF smem atoms hold N/128 whole 128-row blocks (sSFBTileShape_N / Blk_MN) and the SFB TMA box
        # of N rows must tile them: nvcc stops with cute/layout.hpp "Shape Divisibility Condition" for N = 160, 192,
        # 224 (cooperative and pingpong). 4.2.0 builds these (its SFB layout differs; verified 160, 192, 224).
        raise Unbuildable(f"N={n}: CUTLASS 4.5 needs N above 128 to be a multiple of 128 for the SM120 block-scaled "
                          "scale-factor layout (static_assert 'Shape Divisibility Condition')", "tile")


# TensorMapStorage : aligned_struct<128> { 4 TmaDescriptors }: the same for every tile, so one object (its identity
# keys the kernel tensormap cache in _sm90_array).
_ML_TENSORMAPS = Struct("mainloop.TensorMapStorage", align=128)
_ML_TENSORMAPS.add("tensormaps_A_B_SFA_SFB", 4 * arr.TMA_DESCRIPTOR, 64)


@lru_cache(maxsize=16384)
def _mainloop(m: int, n: int, k: int, stages: int, version: str) -> tuple[Struct, Struct, Struct]:
    """(TensorStorage, TensorMapStorage, SharedStorage) of C/sm120_blockscaled_mma_array_tma.hpp.

    struct SharedStorage {
      struct TensorStorage : aligned_struct<128> {
        alignas(1024) ArrayEngine<e2m1, cosize(SmemLayoutA)> smem_A;    // M*K*stages half-bytes
        alignas(1024) ArrayEngine<e2m1, cosize(SmemLayoutB)> smem_B;    // N*K*stages half-bytes
        [alignas(16) in 4.5.0] ArrayEngine<ue4m3, cosize(SmemLayoutSFA)> smem_SFA;  // array_aligned<.,16> anyway
        [alignas(16) in 4.5.0] ArrayEngine<ue4m3, cosize(SmemLayoutSFB)> smem_SFB;
      } tensors;                       // alignment 1024, so its size rounds up to 1024
      struct TensorMapStorage : aligned_struct<128> { 4 TmaDescriptors: A, B, SFA, SFB } tensormaps;
      alignas(16) PipelineTmaAsync<Stages>::SharedStorage pipeline_storage;  // full + empty barrier a stage
    };
    """
    a = stages * m * k // 2
    b = stages * n * k // 2
    sfa = stages * _sf_stage_bytes(m, k)
    sfb = stages * _sfb_stage_bytes(n, k, version) + _sfb_divide_overhang(n, version)
    t = Struct("mainloop.TensorStorage", align=128)
    t.add("A", a, 1024)
    t.add("B", b, 1024)
    t.add("SFA", sfa, 16)
    # cute::array<T, 0> inside array_aligned<T, 0, 16> is an empty struct: sizeof 16 (4.2.0, N < 128)
    t.add("SFB", -(-sfb // 16) * 16 if sfb else 16, 16)  # array_aligned<T, N, 16>: sizeof rounds up to 16
    tm = _ML_TENSORMAPS
    s = Struct("mainloop.SharedStorage")
    s.add_struct("tensors", t)
    s.add_struct("tensormaps", tm)
    s.add("pipeline", 2 * arr.BARRIER * stages, 16)
    return t, tm, s


def _sf_stage_bytes(rows: int, k: int) -> int:
    """One stage of a scale-factor smem layout with rows // 128 atoms of 128 rows: the builder's SmemLayoutAtomSF
    ((rows/128, 32, 4), ((16, 4), 1, K/64)) : ((512, 16, 4), ((0, 1), 4, rows/128*512)) has
    cosize == size(filter_zeros) == rows/128 * 128 * K/16 (B/sm120_blockscaled_mma_builder.inl, 4.2.0 and 4.5.0)."""
    return (rows // BLK_MN) * BLK_MN * (k // SF_VECTOR)


def _sfb_stage_bytes(n: int, k: int, version: str) -> int:
    if version == "4.5":
        # B/sm120_blockscaled_mma_builder.inl (4.5.0): sSFBTileShape_N = max(N, 128)
        return _sf_stage_bytes(max(n, BLK_MN), k)
    # 4.2.0: sSFB_shapeN = N / Blk_MN: 0 for N < 128, so the SFB layout has no rows (cosize 0)
    return _sf_stage_bytes(n, k)


def _sfb_divide_overhang(n: int, version: str) -> int:
    """Extra cosize of SmemLayoutSFB when 4.5.0 logical_divides the 128-row SF layout by an N < 128 that does not
    divide 128 (C/sm120_blockscaled_mma_array_tma.hpp, 4.5.0: SmemLayoutSFB = logical_divide(SmemLayoutSFB_,
    (N, K)) for N < 128). The N mode of SmemLayoutSFB_ is (32,4):(16,4) (span 31*16 + 3*4 = 508). cute's
    logical_divide(L, N) = composition(L, (N, complement(N, 128))) = composition(L, (N, ceil(128/N)):(1, N)), which
    is ((32, N/32), ceil(128/N)) : ((16, 4), 4*N/32): span 31*16 + 4*(N/32 - 1) + 4*(N/32)*(ceil(128/N) - 1).
    N = 32, 64: 508 (no change); N = 96: 516, so cosize grows by 8 (nvcc: 128x96x128 mainloop +1024 B after
    1024-byte rounding, results/predict_calibration/sweep__sm120-nvfp4__cutlass-4.5.0)."""
    if version != "4.5" or n >= BLK_MN:
        return 0
    q, c = n // 32, -(-BLK_MN // n)
    return (31 * 16 + 4 * (q - 1) + 4 * q * (c - 1)) - (31 * 16 + 3 * 4)


def _stage_rule(m: int, n: int, k: int, carveout: int, version: str) -> tuple[int, int, int]:
    """(stages, stage_bytes, capacity) of sm100_compute_stage_count_or_override_blockscaled for
    StageCountAutoCarveout<carveout> (B/sm100_blockscaled_umma_builder.inl), as the SM120 builder calls it.

    stage_bytes = A + B + pipeline + size(filter_zeros(SFA atom)) + size(filter_zeros(SFB atom)); stages =
    (capacity - carveout) / stage_bytes.
      4.2.0: capacity = sm120_smem_capacity_bytes; pipeline = sizeof(PipelineTmaUmmaAsync<1>::SharedStorage) = 16;
             SFB atom rows = N/128*128 (0 for N < 128).
      4.5.0: capacity = ReducedSmemCapacityBytes = 101376 - sizeof(PipelineAsyncSharedStorage<8>) (128, scheduler
             pipeline of a grouped kernel) - 2 * sizeof(TmaDescriptor) (256) - sizeof(PipelineAsync<3>::
             SharedStorage) (48, tensormap-ready pipeline) - CLC response storage (0 for grouped kernels)
             (B/sm120_blockscaled_mma_builder.inl); pipeline = round_up(16, 128) = 128; SFB atom rows = max(N,128).
             The alignas(1024) of A and B and the 1024-byte rounding of the tensor storage are charged by neither.
    """
    a_b = m * k // 2 + n * k // 2
    sfa = _sf_stage_bytes(m, k)
    sfb = _sfb_stage_bytes(n, k, version)
    if version == "4.5":
        capacity = CAPACITY - 2 * arr.BARRIER * 8 - 2 * arr.TMA_DESCRIPTOR - 2 * arr.BARRIER * 3 - 0
        pipeline = 128
    else:
        capacity = CAPACITY
        pipeline = 2 * arr.BARRIER
    stage_bytes = a_b + pipeline + sfa + sfb
    return (capacity - carveout) // stage_bytes, stage_bytes, capacity


def _epilogue(m: int, n: int, has_c: bool, swap_ab: bool) -> arr.EpilogueParams:
    """E/builders/sm120_builder.inl sm120_get_tma_dispatch_policy (4.2.0, 4.5.0): EpiTiles = (M/64)*(N/32);
    StagesD = min(EpiTiles, 2); ReuseSmem = sizeof_bits(C) == sizeof_bits(D) > 8 (void C: 0 bits, no reuse);
    StagesC = ReuseSmem ? max(min(EpiTiles, 2), StagesD + 1) : StagesD."""
    em, en = EPI_TILE
    epi_tiles = (m // em) * (n // en)
    stages_d = min(epi_tiles, 2)
    reuse = has_c
    stages_c = max(min(epi_tiles, 2), stages_d + 1) if reuse else stages_d
    return arr.EpilogueParams(em, en, stages_c, stages_d, reuse, has_c, swap_ab, EPI_WARP_GROUPS)


def predict(m: int, n: int, k: int, schedule: str, stages: int, epilogue: str, swap_ab: bool, arch: str,
            version: str) -> Prediction:
    check(m, n, k, schedule, arch, version)
    ep = _epilogue(m, n, epilogue == "with-c", swap_ab)
    ep_tensors, ep_tmaps, ep_whole = arr.epilogue_storage(ep)
    carveout = ep_whole.size  # kernels.cuh: StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>
    auto, stage_bytes, capacity = _stage_rule(m, n, k, carveout, version)
    chosen = stages if stages > 0 else auto
    pred = _assemble(m, n, k, schedule, chosen, version, ep, ep_tensors, ep_tmaps, ep_whole, stage_bytes,
                     carveout, capacity, stages == 0)
    if chosen < 2:
        # C/sm120_blockscaled_mma_array_tma.hpp: static_assert(DispatchPolicy::Stages >= 2,
        #   "Specialization requires Stages set to value 2 or more.")
        two = _assemble(m, n, k, schedule, 2, version, ep, ep_tensors, ep_tmaps, ep_whole, stage_bytes, carveout,
                        capacity, False)
        why = (f"the auto carveout fits {chosen} stage(s): ({capacity} - {carveout}) // {stage_bytes}" if stages == 0
               else f"StageCount<{stages}>")
        raise Unbuildable(f"CUTLASS static_assert 'Stages set to value 2 or more': {why}; with 2 stages "
                          f"SharedStorage is {two.smem_bytes} B", "too-few-stages", two)
    return pred


def _assemble(m, n, k, schedule, stages, version, ep, ep_tensors, ep_tmaps, ep_whole, stage_bytes, carveout,
              capacity, auto) -> Prediction:
    ml_tensors, ml_tmaps, ml_whole = _mainloop(m, n, k, max(stages, 1), version)
    kernel = arr.kernel_storage(ml_tensors, ml_tmaps, max(stages, 1), ep_tensors, ep_tmaps, ep.stages_c,
                                pingpong=schedule == "pingpong")
    k_tensors = kernel.member_size("tensors")
    return Prediction(FAMILY, version, stages, kernel.size, ml_whole.size, ep_whole.size, kernel.size - k_tensors,
                      kernel, stage_bytes, carveout, capacity, auto)
