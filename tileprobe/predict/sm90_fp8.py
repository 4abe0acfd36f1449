"""Rules for family sm90-fp8 (cutlass_harness/kernels.cuh Sm90Fp8Kernel): Sm90 ptr-array TMA warp-specialized
grouped GEMM, e4m3 x e4m3 -> bf16 with FP8 fast accumulation, optional bf16 C, cluster 1x1x1.

Headers: B/ = include/cutlass/gemm/collective/builders/, C/ = include/cutlass/gemm/collective/,
E/ = include/cutlass/epilogue/collective/.
"""

from __future__ import annotations

import math
from functools import lru_cache

from tileprobe.predict import _sm90_array as arr
from tileprobe.predict._common import Prediction, Unbuildable
from tileprobe.predict._layout import Struct, up

FAMILY = "sm90-fp8"
VERSIONS = {"4.5": ("4.5.0",)}
ARCHS = ("sm_90a",)

CAPACITY = 232448  # B/sm90_common.inl sm90_smem_capacity_bytes (4.2.0, 4.5.0)
ALIGNMENT = 128  # B/sm90_gmma_builder.inl compute_stage_count_or_override: template default alignment = 128
EPI_WARP_GROUPS = 2  # include/cutlass/epilogue/dispatch_policy.hpp PtrArrayTmaWarpSpecialized{Cooperative,Pingpong}


def check(m: int, n: int, k: int, schedule: str, arch: str) -> None:
    if arch not in ARCHS:
        raise Unbuildable(f"{FAMILY} builds for {', '.join(ARCHS)}, not {arch}", "unsupported")
    if schedule not in ("cooperative", "pingpong"):
        # kernels.cuh Sm90Fp8Kernel: static_assert(Schedule == 1 || Schedule == 2)
        raise Unbuildable(f"{FAMILY} takes cooperative or pingpong, not {schedule}", "unsupported")
    # tileprobe.families._check_sm90 and Family.check (mma_k = 32)
    if schedule == "cooperative" and m % 128:
        raise Unbuildable(f"M={m}: the cooperative schedule splits M over two warp groups (M % 128 == 0)",
                          "unsupported")
    if m % 64:
        raise Unbuildable(f"M={m}: wgmma needs M a multiple of 64", "unsupported")
    if n % 8 or n > 256:
        raise Unbuildable(f"N={n}: wgmma needs N a multiple of 8, at most 256", "unsupported")
    if k % 32:
        raise Unbuildable(f"K={k} is not a multiple of the MMA K (32 elements)", "unsupported")


def _epilogue(m: int, n: int, schedule: str, has_c: bool, swap_ab: bool) -> arr.EpilogueParams:
    """E/builders/sm90_builder.inl (4.5.0):
    sm90_compute_tile_shape_or_override, EpilogueTileAuto: cooperative (min(128, M), gcd(min(32, N), N));
      pingpong (min(64, M), gcd(min(N_perf, N), N)) with N_perf = 32 for a 16-bit D.
    sm90_get_tma_dispatch_policy: EpiTiles = (M/EPI_M)*(N/EPI_N); StagesD = min(EpiTiles, 2); ReuseSmem =
      sizeof_bits(C) == sizeof_bits(D) > 8; StagesC = ReuseSmem ? max(min(EpiTiles, 4), StagesD + 1)
      : min(EpiTiles, 4)."""
    em = min(128 if schedule == "cooperative" else 64, m)
    en = math.gcd(min(32, n), n)
    epi_tiles = (m // em) * (n // en)
    stages_d = min(epi_tiles, 2)
    reuse = has_c
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse else min(epi_tiles, 4)
    return arr.EpilogueParams(em, en, stages_c, stages_d, reuse, has_c, swap_ab, EPI_WARP_GROUPS)


def _stage_rule(m: int, n: int, k: int, carveout: int) -> tuple[int, int, int]:
    """B/sm90_gmma_builder.inl (4.5.0), the FP8FastAccum builder: Sm90ReducedSmemCapacityBytes =
    sm90_smem_capacity_bytes - (2 TmaDescriptors, 256, for a ptr-array A/B) - (PipelineAsyncSharedStorage<8>, 128,
    when A's stride is a pointer); compute_stage_count_or_override(StageCountAutoCarveout): stage_bytes =
    round_up(A + B, 128) + sizeof(PipelineTmaAsync<1>::SharedStorage) (16); carveout = round_up(carveout, 128);
    capacity = capacity / 128 * 128; stages = (capacity - carveout) / stage_bytes."""
    reduced = CAPACITY - 2 * arr.TMA_DESCRIPTOR - 2 * arr.BARRIER * 8
    capacity = reduced // ALIGNMENT * ALIGNMENT
    stage_bytes = up(m * k + n * k, ALIGNMENT) + 2 * arr.BARRIER
    return (capacity - up(carveout, ALIGNMENT)) // stage_bytes, stage_bytes, capacity


# TensorMapStorage : aligned_struct<128> { 2 TmaDescriptors }: the same for every tile, so one object (its identity
# keys the kernel tensormap cache in _sm90_array).
_ML_TENSORMAPS = Struct("mainloop.TensorMapStorage", align=128)
_ML_TENSORMAPS.add("tensormaps_A_B", 2 * arr.TMA_DESCRIPTOR, 64)


@lru_cache(maxsize=16384)
def _mainloop(m: int, n: int, k: int, stages: int) -> tuple[Struct, Struct, Struct]:
    """C/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp (4.5.0) SharedStorage:
      TensorStorage : aligned_struct<128> { array_aligned<e4m3, cosize(SmemLayoutA)> smem_A; ... smem_B; }
        (ss_smem_selector atoms divide the tile, so cosize = M*K*stages and N*K*stages bytes)
      TensorMapStorage : aligned_struct<128> { TmaDescriptor A, B; }
      PipelineTmaAsync<Stages>::SharedStorage pipeline;  (full + empty barrier a stage)"""
    t = Struct("mainloop.TensorStorage", align=128)
    t.add("A", stages * m * k, 16)
    t.add("B", stages * n * k, 16)
    tm = _ML_TENSORMAPS
    s = Struct("mainloop.SharedStorage")
    s.add_struct("tensors", t)
    s.add_struct("tensormaps", tm)
    s.add("pipeline", 2 * arr.BARRIER * stages, arr.BARRIER)
    return t, tm, s


def predict(m: int, n: int, k: int, schedule: str, stages: int, epilogue: str, swap_ab: bool, arch: str,
            version: str) -> Prediction:
    check(m, n, k, schedule, arch)
    ep = _epilogue(m, n, schedule, epilogue == "with-c", swap_ab)
    ep_tensors, ep_tmaps, ep_whole = arr.epilogue_storage(ep)
    carveout = ep_whole.size  # kernels.cuh: StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>
    auto, stage_bytes, capacity = _stage_rule(m, n, k, carveout)
    chosen = stages if stages > 0 else auto

    def assemble(s: int) -> Prediction:
        ml_tensors, ml_tmaps, ml_whole = _mainloop(m, n, k, s)
        kernel = arr.kernel_storage(ml_tensors, ml_tmaps, s, ep_tensors, ep_tmaps, ep.stages_c,
                                    pingpong=schedule == "pingpong")
        k_tensors = kernel.member_size("tensors")
        return Prediction(FAMILY, version, s, kernel.size, ml_whole.size, ep_whole.size, kernel.size - k_tensors,
                          kernel, stage_bytes, carveout, capacity, stages == 0)

    if chosen < 2:
        # C/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp: static_assert(DispatchPolicy::Stages >= 2,
        #   "Specialization requires Stages set to value 2 or more.")
        two = assemble(2)
        why = (f"the auto carveout fits {chosen} stage(s): ({capacity} - {up(carveout, ALIGNMENT)}) // {stage_bytes}"
               if stages == 0 else f"StageCount<{stages}>")
        raise Unbuildable(f"CUTLASS static_assert 'Stages set to value 2 or more': {why}; with 2 stages "
                          f"SharedStorage is {two.smem_bytes} B", "too-few-stages", two)
    return assemble(chosen)
