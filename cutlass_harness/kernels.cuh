// tileprobe: kernel type definitions for every family, one template per family.
//
// A config is (TileM, TileN, TileK, Schedule, Stages, Epilogue, SwapAB). The Python side renders a config into
// compile-time defines (see harness.cu); this header turns those numbers into a CUTLASS GemmKernel type.
//   Schedule: 0 = auto (KernelScheduleAuto), 1 = cooperative, 2 = pingpong
//   Stages:   0 = StageCountAutoCarveout (CUTLASS picks), N > 0 = StageCount<N> (forced)
//   Epilogue: 0 = D only (no C source), 1 = D = alpha*acc + beta*C with a bf16 C source
//   SwapAB:   1 = weights as A, tokens land in N; D is then column-major so it is still token-major in memory
#pragma once

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/arch.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace tileprobe {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using ElementD = cutlass::bfloat16_t;
using ElementAccumulator = float;

template <int Stages, int EpilogueCarveoutBytes>
using StageSelect = cute::conditional_t<(Stages > 0), cutlass::gemm::collective::StageCount<(Stages > 0 ? Stages : 1)>,
                                        cutlass::gemm::collective::StageCountAutoCarveout<EpilogueCarveoutBytes>>;

template <int SwapAB>
using LayoutDTag = cute::conditional_t<SwapAB != 0, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

template <int Epilogue>
using ElementCFor = cute::conditional_t<Epilogue != 0, cutlass::bfloat16_t, void>;

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
