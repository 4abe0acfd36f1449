// tileprobe family sm90-fp8 (tileprobe/families/sm90_fp8.py).
#pragma once

#include "families/common.cuh"

namespace tileprobe {

// ---------------------------------------------------------------------------------------------------------------
// sm90-fp8: FP8 e4m3 x e4m3 -> bf16, Sm90 ptr-array TMA warp-specialized, FP8 fast-accum schedules.
// ---------------------------------------------------------------------------------------------------------------
struct Sm90Fp8Types {
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using DataA = cutlass::float_e4m3_t;
  using DataB = cutlass::float_e4m3_t;
  using ElementSF = void;
  static constexpr int AlignmentAB = 16;
  static constexpr int SFVector = 0;
  static constexpr int CapacityBytes = cutlass::gemm::collective::detail::sm90_smem_capacity_bytes;
  static constexpr bool BlockScaled = false;
};

template <int TM, int TN, int TK, int Schedule, int Stages, int Epilogue, int SwapAB>
struct Sm90Fp8Kernel : Sm90Fp8Types {
  static_assert(Schedule == 1 || Schedule == 2, "sm90-fp8 takes cooperative (1) or pingpong (2)");
  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using ElementC = ElementCFor<Epilogue>;
  using LayoutD = LayoutDTag<SwapAB>;
  static constexpr int AlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr int AlignmentC = AlignmentD;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;
  using EpilogueSchedule = cute::conditional_t<Schedule == 1, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                                               cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
  using MainloopSchedule = cute::conditional_t<Schedule == 1,
                                               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                                               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementC, LayoutD*,
      AlignmentC, ElementD, LayoutD*, AlignmentD, EpilogueSchedule, Fusion>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cutlass::layout::RowMajor*, AlignmentAB, ElementB,
      cutlass::layout::ColumnMajor*, AlignmentAB, ElementAccumulator, TileShape, ClusterShape,
      StageSelect<Stages, static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

}  // namespace tileprobe
