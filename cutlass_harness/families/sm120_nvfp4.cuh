// tileprobe family sm120-nvfp4 (tileprobe/families/sm120_nvfp4.py).
#pragma once

#include "families/common.cuh"

namespace tileprobe {

// ---------------------------------------------------------------------------------------------------------------
// sm120-nvfp4: NVFP4 x NVFP4 (e2m1 data, ue4m3 scale factors per 16 along K) -> bf16, Sm120 block-scaled ptr-array.
// ---------------------------------------------------------------------------------------------------------------
struct Sm120Nvfp4Types {
  using ElementA = cutlass::nv_float4_t<cutlass::float_e2m1_t>;
  using ElementB = cutlass::nv_float4_t<cutlass::float_e2m1_t>;
  using DataA = cutlass::float_e2m1_t;
  using DataB = cutlass::float_e2m1_t;
  using ElementSF = cutlass::float_ue4m3_t;
  static constexpr int AlignmentAB = 32;  // 16 bytes of e2m1
  static constexpr int SFVector = 16;
  static constexpr int CapacityBytes = cutlass::arch::sm120_smem_capacity_bytes;
  static constexpr bool BlockScaled = true;
};

template <int Schedule>
using Sm120MainloopSchedule = cute::conditional_t<
    Schedule == 1, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
    cute::conditional_t<Schedule == 2, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                        cutlass::gemm::collective::KernelScheduleAuto>>;

template <int TM, int TN, int TK, int Schedule, int Stages, int Epilogue, int SwapAB>
struct Sm120Nvfp4Kernel : Sm120Nvfp4Types {
  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using ElementC = ElementCFor<Epilogue>;
  using LayoutD = LayoutDTag<SwapAB>;
  static constexpr int AlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr int AlignmentC = Epilogue != 0 ? AlignmentD : AlignmentD;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementC, LayoutD*,
      AlignmentC, ElementD, LayoutD*, AlignmentD, cutlass::epilogue::collective::EpilogueScheduleAuto,
      Fusion>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, cutlass::layout::RowMajor*,
      AlignmentAB, ElementB, cutlass::layout::ColumnMajor*, AlignmentAB, ElementAccumulator, TileShape, ClusterShape,
      StageSelect<Stages, static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      Sm120MainloopSchedule<Schedule>>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Sm1xxBlkScaledConfig = typename CollectiveMainloop::Sm1xxBlkScaledConfig;
  using LayoutSFA = typename CollectiveMainloop::InternalLayoutSFA;
  using LayoutSFB = typename CollectiveMainloop::InternalLayoutSFB;
};

}  // namespace tileprobe
