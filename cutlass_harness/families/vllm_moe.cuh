// tileprobe family `vllm-moe`: the NVFP4 grouped GEMM that vLLM runs for CUTLASS MoE experts
// (`cutlass_fp4_group_mm`, csrc/libtorch_stable/quantization/fp4/nvfp4_blockwise_moe_kernel.cu in vllm 0.33.0), and
// the same composition as sgl-kernel 0.3.21 shipped it (`nvfp4_blockwise_moe`, pingpong). Composed here from the
// CUTLASS builders with the engines' template arguments, so that `GemmKernel` is the type the engine's wheel ships
// (tests/families/test_vllm_moe.py compares the mangled `cutlass::device_kernel<...>` symbol with the one in the wheel).
//
// Template parameters (all int):
//   TM, TN, TK  MMA tile in elements (vllm 0.33.0 and sgl-kernel 0.3.21: 128x128x128 on every arch)
//   Schedule    0 = KernelScheduleAuto (vllm SM120: the builder resolves it to the cooperative block-scaled kernel)
//               2 = KernelPtrArrayTmaWarpSpecializedPingpong (sgl-kernel 0.3.21 SM120)
//               3 = KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100 (vllm sm_100a branch)
//   OutF16      0 = bf16 C/D (the only SM120 output), 1 = fp16 C/D (vllm's sm_100a branch instantiates both)
//   Arch        120 (SM120/SM121, both built from cutlass::arch::Sm120) or 100 (sm_100a branch)
//
// What the engines fix (and this header therefore fixes): nv_float4_t<e2m1> A row-major / B column-major, both
// alignment 32; C = D row-major, alignment 128 bits / element; fp32 accumulate; grouped problem shape of int32
// extents; cluster 1x1x1; StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>.
// SM120 epilogue: OpClassBlockScaledTensorOp, EpilogueTileAuto, EpilogueScheduleAuto, LinearCombination<D, float, C,
// float> (the per-expert alpha pointer array is a runtime argument; beta = 0). SM100 epilogue: OpClassTensorOp, tile
// 128x64, PtrArrayTmaWarpSpecialized1Sm, default fusion.
#pragma once

#include "families/common.cuh"

namespace tileprobe {

namespace vmoe {

using namespace cute;

// int32 extents (vLLM and sgl-kernel: GroupProblemShape<Shape<int32_t, int32_t, int32_t>>).
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int32_t, int32_t, int32_t>>;
using ElementAB = cutlass::nv_float4_t<cutlass::float_e2m1_t>;

template <int Arch, int Schedule>
struct ArchSide;

template <int Schedule>
struct ArchSide<120, Schedule> {
  static_assert(Schedule == 0 || Schedule == 2, "SM120: schedule 0 (auto) or 2 (pingpong)");
  using ArchTag = cutlass::arch::Sm120;
  using EpilogueOpClass = cutlass::arch::OpClassBlockScaledTensorOp;
  using EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
  using EpilogueSchedule = cutlass::epilogue::collective::EpilogueScheduleAuto;
  using KernelSchedule = cute::conditional_t<Schedule == 2, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                             cutlass::gemm::collective::KernelScheduleAuto>;
  static constexpr bool ExplicitFusion = true;
  static constexpr int CapacityBytes = cutlass::arch::sm120_smem_capacity_bytes;
};

template <int Schedule>
struct ArchSide<100, Schedule> {
  static_assert(Schedule == 3, "sm_100a: schedule 3 (1-SM NVF4 ptr-array kernel)");
  using ArchTag = cutlass::arch::Sm100;
  using EpilogueOpClass = cutlass::arch::OpClassTensorOp;
  using EpilogueTile = Shape<_128, _64>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100;
  static constexpr bool ExplicitFusion = false;
  static constexpr int CapacityBytes = cutlass::arch::sm100_smem_capacity_bytes;
};

template <int TM, int TN, int TK, int Schedule, int OutF16, int Arch>
struct Compose {
  using Side = ArchSide<Arch, Schedule>;
  using ElementA = ElementAB;
  using ElementB = ElementAB;
  using DataA = cutlass::float_e2m1_t;
  using DataB = cutlass::float_e2m1_t;
  using ElementSF = cutlass::float_ue4m3_t;
  using ElementC = cute::conditional_t<OutF16 != 0, cutlass::half_t, cutlass::bfloat16_t>;
  using ElementD = ElementC;
  using ElementAccumulator = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutC = cutlass::layout::RowMajor;
  static constexpr int AlignmentAB = 32;
  static constexpr int AlignmentCD = 128 / cutlass::sizeof_bits<ElementC>::value;
  static constexpr int SFVector = 16;
  static constexpr bool BlockScaled = true;
  static constexpr int CapacityBytes = Side::CapacityBytes;

  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, ElementAccumulator, ElementC,
                                                              ElementAccumulator>;

  // SM120 passes the fusion explicitly; the sm_100a branch leaves the builder's default (the same LinearCombination
  // with its default rounding), so the argument list differs and is kept apart.
  template <bool Explicit, int Dummy = 0>
  struct EpilogueFor {
    using type = typename cutlass::epilogue::collective::CollectiveBuilder<
        typename Side::ArchTag, typename Side::EpilogueOpClass, TileShape, ClusterShape, typename Side::EpilogueTile,
        ElementAccumulator, ElementAccumulator, ElementC, LayoutC*, AlignmentCD, ElementD, LayoutC*, AlignmentCD,
        typename Side::EpilogueSchedule, Fusion>::CollectiveOp;
  };
  template <int Dummy>
  struct EpilogueFor<false, Dummy> {
    using type = typename cutlass::epilogue::collective::CollectiveBuilder<
        typename Side::ArchTag, typename Side::EpilogueOpClass, TileShape, ClusterShape, typename Side::EpilogueTile,
        ElementAccumulator, ElementAccumulator, ElementC, LayoutC*, AlignmentCD, ElementD, LayoutC*, AlignmentCD,
        typename Side::EpilogueSchedule>::CollectiveOp;
  };
  using CollectiveEpilogue = typename EpilogueFor<Side::ExplicitFusion>::type;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      typename Side::ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, LayoutA*, AlignmentAB, ElementB,
      LayoutB*, AlignmentAB, ElementAccumulator, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Side::KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Sm1xxBlkScaledConfig = typename CollectiveMainloop::Sm1xxBlkScaledConfig;
  using LayoutSFA = typename CollectiveMainloop::InternalLayoutSFA;
  using LayoutSFB = typename CollectiveMainloop::InternalLayoutSFB;
};

}  // namespace vmoe

template <int TM, int TN, int TK, int Schedule, int OutF16, int Arch>
struct VllmMoeKernel : vmoe::Compose<TM, TN, TK, Schedule, OutF16, Arch> {};

}  // namespace tileprobe
