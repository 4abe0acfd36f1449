"""Shared by both families: the Sm90 ptr-array TMA epilogue collective and the Sm90 ptr-array grouped-GEMM kernels.

The SM120 block-scaled grouped GEMM reuses both: its epilogue builder returns Sm120PtrArrayTmaWarpSpecialized, which
is served by the Sm90 ptr-array epilogue collective, and GemmUniversal dispatches its
KernelPtrArrayTmaWarpSpecialized{Cooperative,Pingpong}BlockScaledSm120 schedules (which derive from the Sm90 ptr-array
schedules) to the Sm90 ptr-array kernels. These headers are byte-identical in layout between CUTLASS 4.2.0 and 4.5.0
(checked with diff), so there is one rule set here; a family module supplies the version-specific parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tileprobe.predict._layout import Struct, up

BF16 = 2  # ElementD (and ElementC with-c) is cutlass::bfloat16_t in cutlass_harness/kernels.cuh
BARRIER = 8  # cutlass::arch::ClusterBarrier: one uint64_t (include/cutlass/arch/barrier.h)
TMA_DESCRIPTOR = 128  # cute::TmaDescriptor: CUtensorMap, 128 bytes, 64-byte aligned (include/cute/arch/copy_sm90_desc.hpp)


def swizzle_atom_alignment(extent: int, elem_bytes: int) -> int:
    """Alignment in bytes of the smem swizzle atom that ss_smem_selector picks for a contiguous extent.

    include/cutlass/gemm/collective/builders/sm90_common.inl (4.2.0, 4.5.0) ss_smem_selector: the largest of the
    GMMA SW128 / SW64 / SW32 / INTER atoms (128, 64, 32, 16 bytes along the contiguous mode) whose width divides the
    extent; static_assert that the extent is a multiple of 8. include/cutlass/detail/layout.hpp alignment_for_swizzle:
    Swizzle<B,4,3> -> 1 << (B + 4 + 3), i.e. 1024 / 512 / 256 / 128 bytes.
    """
    for width, align in ((128, 1024), (64, 512), (32, 256), (16, 128)):
        if extent % (width // elem_bytes) == 0:
            return align
    raise AssertionError("extent checked by the caller")  # pragma: no cover


@dataclass(frozen=True)
class EpilogueParams:
    """What the epilogue builder decided: epilogue tile, C/D stages, smem reuse, warp groups."""

    epi_m: int
    epi_n: int
    stages_c: int
    stages_d: int
    reuse_smem_c: bool
    has_c: bool
    d_col_major: bool  # swap_ab: LayoutD ColumnMajor -> M-major smem atom
    num_epilogue_warp_groups: int


@lru_cache(maxsize=4096)
def epilogue_storage(p: EpilogueParams) -> tuple[Struct, Struct, Struct]:
    """(TensorStorage, TensorMapStorage, whole SharedStorage) of the Sm90 ptr-array TMA epilogue collective.

    include/cutlass/epilogue/collective/sm90_epilogue_array_tma_warpspecialized.hpp (4.2.0, 4.5.0):
      SmemLayoutC = tile_to_shape(atom, (EPI_M, EPI_N, StagesC)); SmemLayoutD likewise with
        (ReuseSmemC ? StagesC : StagesD) stages; the tiles divide the atoms, so cosize = EPI_M*EPI_N*stages.
      SmemAlignmentC/D = alignment_for_swizzle of the atom: row-major D/C is N-major (K-major atom on EPI_N),
        column-major (swap_ab) is M-major (MN-major atom on EPI_M).
      TensorStorage { collective; FusionStorage thread; } where collective is
        - CollectiveStorageWithoutC (no C): union { array<C,0>; alignas(SmemAlignmentD) D[...] }
        - CollectiveStorageReuseC: union { alignas(MaxSmemAlignment) C[...]; alignas(MaxSmemAlignment) D[...] }
        - CollectiveStorageWithC: struct { alignas(SmemAlignmentC) C[...]; alignas(SmemAlignmentD) D[...] }
        and FusionStorage for LinearCombination is an empty tuple: 1 byte.
      TensorMapStorage : aligned_struct<128> { TmaDescriptor C; array<TmaDescriptor, NumEpilogueWarpGroups> D; }
      PipelineStorage = PipelineTransactionAsync<StagesC>::SharedStorage: full + empty ClusterBarrier per stage.
    """
    tile = p.epi_m * p.epi_n * BF16
    contiguous = p.epi_m if p.d_col_major else p.epi_n
    al = swizzle_atom_alignment(contiguous, BF16)  # C has D's element type and layout here, so one alignment
    coll = Struct("collective")
    if not p.has_c:
        coll.add("D", tile * p.stages_d, al)
    elif p.reuse_smem_c:
        # a union: both members at offset 0, the size of the larger
        coll.add("C_D_union", tile * p.stages_c, al)  # both members hold StagesC stages
    else:
        coll.add("C", tile * p.stages_c, al)
        coll.add("D", tile * p.stages_d, al)
    tensors = Struct("epilogue.TensorStorage")
    tensors.add_struct("collective", coll)
    tensors.add("fusion", 1, 1)
    tmaps = Struct("epilogue.TensorMapStorage", align=128)
    tmaps.add("tensormap_C", TMA_DESCRIPTOR, 64)
    tmaps.add("tensormap_D", TMA_DESCRIPTOR * p.num_epilogue_warp_groups, 64)
    whole = Struct("epilogue.SharedStorage")
    whole.add_struct("tensors", tensors)
    whole.add_struct("tensormaps", tmaps)
    whole.add("pipeline", 2 * BARRIER * p.stages_c, BARRIER)
    return tensors, tmaps, whole


SCHEDULER_PIPELINE_STAGES = 8  # TileSchedulerSelector<GroupScheduler, ..., 8, ...> in the ptr-array kernels
WORK_TILE_INFO = 16  # PersistentTileSchedulerSm90Group::WorkTileInfo: four int32_t


def kernel_storage(ml_tensors: Struct, ml_tensormaps: Struct, ml_stages: int, ep_tensors: Struct,
                   ep_tensormaps: Struct, ep_stages_c: int, pingpong: bool) -> Struct:
    """GemmKernel::SharedStorage of the Sm90 ptr-array TMA warp-specialized kernels.

    include/cutlass/gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp and ..._pingpong.hpp (4.2.0,
    4.5.0), struct SharedStorage:
      TensorStorage : aligned_struct<128> { mainloop TensorStorage; epilogue TensorStorage; } tensors;
      PipelineStorage : aligned_struct<16> { alignas(16) scheduler (PipelineAsyncSharedStorage<8>, from
        include/cutlass/gemm/kernel/sm90_tile_scheduler_group.hpp); alignas(16) mainloop pipeline (PipelineTmaAsync
        <Stages>: 2 barriers a stage); alignas(16) epi_load (PipelineTransactionAsync<StagesC>); alignas(16)
        load_order (OrderedSequenceBarrier<1,2>: 2 barriers); pingpong only: alignas(16) math_wg_order
        (OrderedSequenceBarrier<2,2>: 4 barriers) } pipelines;
      alignas(16) TileSchedulerResponse scheduler_response[8];  (WorkTileInfo, 16 bytes)
      TensorMapStorage : aligned_struct<128> { alignas(128) mainloop TensorMapStorage; alignas(128) epilogue's; }
    """
    tensors = Struct("kernel.TensorStorage", align=128)
    tensors.add_struct("mainloop", ml_tensors)
    tensors.add_struct("epilogue", ep_tensors)
    k = Struct("kernel.SharedStorage")
    k.add_struct("tensors", tensors)
    k.add_struct("pipelines", _kernel_pipelines(ml_stages, ep_stages_c, pingpong))
    k.add("scheduler_response", WORK_TILE_INFO * SCHEDULER_PIPELINE_STAGES, 16)
    k.add_struct("tensormaps", _kernel_tensormaps(ml_tensormaps, ep_tensormaps))
    return k



@lru_cache(maxsize=1024)
def _kernel_pipelines(ml_stages: int, ep_stages_c: int, pingpong: bool) -> Struct:
    pipes = Struct("kernel.PipelineStorage", align=16)
    pipes.add("scheduler", 2 * BARRIER * SCHEDULER_PIPELINE_STAGES, 16)
    pipes.add("mainloop", 2 * BARRIER * ml_stages, 16)
    pipes.add("epi_load", 2 * BARRIER * ep_stages_c, 16)
    pipes.add("load_order", 2 * BARRIER, 16)
    if pingpong:
        pipes.add("math_wg_order", 4 * BARRIER, 16)
    return pipes


@lru_cache(maxsize=256)
def _kernel_tensormaps(ml_tensormaps: Struct, ep_tensormaps: Struct) -> Struct:  # cached by identity: both cached
    tmaps = Struct("kernel.TensorMapStorage", align=128)
    tmaps.add_struct("mainloop", ml_tensormaps, align=128)
    tmaps.add_struct("epilogue", ep_tensormaps, align=128)
    return tmaps
