// tileprobe family `flashinfer-moe`: the grouped-GEMM kernel types that FlashInfer's CUTLASS fused-MoE backend
// builds (TensorRT-LLM's TMA warp-specialized MoE launcher, `moe_gemm_tma_ws_launcher.inl`), composed here from the
// same CUTLASS builders with the same template arguments, so that `GemmKernel` is the very type FlashInfer compiles
// (tests/engines/test_engine_flashinfer.py proves it by comparing mangled kernel symbols).
//
// Template parameters (all int, so a config is a flat list of numbers):
//   TM, TN      CTA tile M and N, as in the engine's tactic name (CtaShape<TM>x<TN>x<TKBytes>B)
//   TKBytes     CTA tile K in BYTES of the activation type, as in the tactic name; the CUTLASS tile K in elements
//               is TKBytes * 8 / bits(activation) (the dispatch's SHAPE_CASE does the same conversion)
//   Dtypes      0 = NVFP4 x NVFP4 (SM120), 1 = MXFP8 activations x MXFP4 weights (SM120), 2 = FP8 e4m3 x e4m3 (SM90)
//   Finalize    0 = default epilogue (gemm1: D = acc, bf16, C type bf16 on SM120 / void on SM90, never read)
//               1 = finalize epilogue (gemm2: router-scaled scatter into token rows, D element void)
//   SwapAB      1 = weights as A, activations as B, transposed (column-major) C/D
//   Arch        120 (SM120/SM121: FlashInfer builds both from cutlass::arch::Sm120) or 90 (Hopper)
//   ClusterM/N  cluster shape (SM120: 1x1 only; SM90 candidates also use 2x1, 1x2, 2x2)
//   OutF16      0 = bf16 output (default), 1 = fp16 output (FlashInfer instantiates both)
//
// Needs on the include path: flashinfer's data/cutlass/include, data/cutlass/tools/util/include and
// data/csrc/nv_internal/tensorrt_llm/cutlass_extensions/include (for the scatter fusion). No TensorRT-LLM runtime
// headers are used; the launcher's type aliases are re-stated below with the engine's spelling noted.
#pragma once

// run.cu includes families/flashinfer_moe_run.cuh (this family's launch arguments, MoE routing and check) when set.
#define TP_FAMILY_FLASHINFER_MOE 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cutlass/arch/arch.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp"

namespace tileprobe {

namespace fimoe {

using namespace cute;

// TmaWarpSpecializedGroupedGemmInput::ProblemShape (int64 extents, unlike tileprobe's own families).
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int64_t, int64_t, int64_t>>;
// TmaWarpSpecializedGroupedGemmInput::LayoutA / LayoutB (fixed; swap-AB swaps the operands, not the layouts).
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
// LayoutC/LayoutD, and LayoutC_T/LayoutD_T (the transposes) under swap-AB.
template <int SwapAB>
using LayoutCD = cute::conditional_t<SwapAB != 0, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

// Per dtype pair: activation/weight element (after TllmToCutlassTypeAdapter), the block-scaled mainloop wrappers
// the launcher uses on SM120, the scale-factor type, and the launcher's alignments.
template <int Dtypes>
struct DtypeTraits;

template <>
struct DtypeTraits<0> {  // T = WeightType = Fp4Type (__nv_fp4_e2m1), IsMXFPX = false
  using ElementAct = cutlass::float_e2m1_t;
  using ElementWeight = cutlass::float_e2m1_t;
  using ElementSF = cutlass::float_ue4m3_t;
  using MainloopAct = cutlass::nv_float4_t<ElementAct>;
  using MainloopWeight = cutlass::nv_float4_t<ElementWeight>;
  static constexpr bool BlockScaled = true;
  static constexpr bool IsWFP4AFP8 = false;
  static constexpr bool IsFP8 = false;
  static constexpr int SFVector = 16;
};

template <>
struct DtypeTraits<1> {  // T = __nv_fp8_e4m3, WeightType = Fp4Type, IsMXFPX = true (W4A8 MXFP)
  using ElementAct = cutlass::float_e4m3_t;
  using ElementWeight = cutlass::float_e2m1_t;
  using ElementSF = cutlass::float_ue8m0_t;
  using MainloopAct = cutlass::mx_float8_t<ElementAct>;
  using MainloopWeight = cutlass::mx_float4_t<ElementWeight>;
  static constexpr bool BlockScaled = true;
  static constexpr bool IsWFP4AFP8 = true;
  static constexpr bool IsFP8 = true;
  static constexpr int SFVector = 32;
};

template <>
struct DtypeTraits<2> {  // T = WeightType = __nv_fp8_e4m3, no block scaling (Hopper)
  using ElementAct = cutlass::float_e4m3_t;
  using ElementWeight = cutlass::float_e4m3_t;
  using ElementSF = void;
  using MainloopAct = ElementAct;
  using MainloopWeight = ElementWeight;
  static constexpr bool BlockScaled = false;
  static constexpr bool IsWFP4AFP8 = false;
  static constexpr bool IsFP8 = true;
  static constexpr int SFVector = 0;
};

// Architecture-dependent choices of the launcher (IsSM120 vs Hopper branch).
template <int Arch, class Traits>
struct ArchTraits;

template <class Traits>
struct ArchTraits<120, Traits> {
  static_assert(Traits::BlockScaled, "FlashInfer's SM120 MoE dispatch takes FP4 x FP4 or FP8 x FP4 only");
  using ArchTag = cutlass::arch::Sm120;
  using OpClass = cutlass::arch::OpClassBlockScaledTensorOp;  // IsBlackwell && IsBlockScaled
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;  // EpilogueScheduleSM120
  using KernelSchedule = cutlass::gemm::collective::KernelScheduleAuto;  // KernelScheduleSM120
  static constexpr bool CElementIsD = true;  // EpilogueElementC = ElementCSafe (= ElementD) on SM120
  static constexpr int CapacityBytes = cutlass::arch::sm120_smem_capacity_bytes;
};

template <class Traits>
struct ArchTraits<90, Traits> {
  static_assert(!Traits::BlockScaled, "the Hopper branch of the launcher is not block-scaled");
  using ArchTag = cutlass::arch::Sm90;
  using OpClass = cutlass::arch::OpClassTensorOp;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;  // EpilogueScheduleSM90
  using KernelSchedule = cute::conditional_t<Traits::IsFP8,
                                             cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                                             cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  static constexpr bool CElementIsD = false;  // EpilogueElementC = ElementC = void
  static constexpr int CapacityBytes = cutlass::gemm::collective::detail::sm90_smem_capacity_bytes;
};

template <int TM, int TN, int TKBytes, int Dtypes, int Finalize, int SwapAB, int Arch, int ClusterM, int ClusterN,
          int OutF16>
struct Compose : DtypeTraits<Dtypes> {
  using Types = DtypeTraits<Dtypes>;
  using ArchCfg = ArchTraits<Arch, Types>;
  using ElementAct = typename Types::ElementAct;
  using ElementWeight = typename Types::ElementWeight;
  using ElementSF = typename Types::ElementSF;
  using DataA = cute::conditional_t<SwapAB != 0, ElementWeight, ElementAct>;
  using DataB = cute::conditional_t<SwapAB != 0, ElementAct, ElementWeight>;
  static constexpr bool BlockScaled = Types::BlockScaled;
  static constexpr int CapacityBytes = ArchCfg::CapacityBytes;

  // Tile: the dispatch's SHAPE_CASE turns K bytes into elements of the activation type.
  static constexpr int TileKElements = TKBytes * 8 / cutlass::sizeof_bits<ElementAct>::value;
  static_assert(TileKElements * cutlass::sizeof_bits<ElementAct>::value == TKBytes * 8, "K bytes not whole elements");
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TileKElements>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::Int<1>>;
  static_assert(Arch != 120 || (ClusterM == 1 && ClusterN == 1), "SM120 MoE tactics are cluster 1x1x1");

  // Output and epilogue element types (OutputType is bf16 or half; fp8 never reaches D here).
  using ElementD = cute::conditional_t<OutF16 != 0, cutlass::half_t, cutlass::bfloat16_t>;
  using ElementFinalOutput = ElementD;
  using ElementBias = ElementFinalOutput;
  using ElementRouterScales = float;
  using ElementAccumulator = float;
  using ElementC = cute::conditional_t<ArchCfg::CElementIsD, ElementD, void>;  // no bias is ever read

  static constexpr int AlignmentAct = 128 / cutlass::sizeof_bits<ElementAct>::value;
  static constexpr int AlignmentWeight =
      Types::IsWFP4AFP8 ? 128 : 128 / cutlass::sizeof_bits<ElementWeight>::value;
  static constexpr int AlignmentC = 128 / cutlass::sizeof_bits<ElementAct>::value;  // from the INPUT type
  static constexpr int AlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr int AlignmentA = SwapAB != 0 ? AlignmentWeight : AlignmentAct;
  static constexpr int AlignmentB = SwapAB != 0 ? AlignmentAct : AlignmentWeight;

  using LayoutC = LayoutCD<SwapAB>;
  using LayoutD = LayoutCD<SwapAB>;

  using CollectiveEpilogueDefault = typename cutlass::epilogue::collective::CollectiveBuilder<
      typename ArchCfg::ArchTag, typename ArchCfg::OpClass, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementC, LayoutC*,
      AlignmentC, ElementD, LayoutD*, AlignmentD, typename ArchCfg::EpilogueSchedule>::CollectiveOp;

  using FinalizeFusion = cute::conditional_t<
      SwapAB != 0,
      cutlass::epilogue::fusion::ScaledAccPerRowBiasPerColScaleScatter<LayoutD, ElementFinalOutput, ElementAccumulator,
                                                                       ElementBias, ElementRouterScales>,
      cutlass::epilogue::fusion::ScaledAccPerColBiasPerRowScaleScatter<LayoutD, ElementFinalOutput, ElementAccumulator,
                                                                       ElementBias, ElementRouterScales>>;

  template <int F, int Dummy = 0>
  struct EpilogueSelect {
    using type = CollectiveEpilogueDefault;
  };
  template <int Dummy>
  struct EpilogueSelect<1, Dummy> {
    using type = typename cutlass::epilogue::collective::CollectiveBuilder<
        typename ArchCfg::ArchTag, typename ArchCfg::OpClass, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementC, LayoutC*,
        AlignmentC, void, LayoutD*, AlignmentD, typename ArchCfg::EpilogueSchedule, FinalizeFusion>::CollectiveOp;
  };
  using CollectiveEpilogue = typename EpilogueSelect<Finalize != 0 ? 1 : 0>::type;

  using StageCount = cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
      sizeof(typename CollectiveEpilogue::SharedStorage))>;

  using MainloopA = cute::conditional_t<SwapAB != 0, typename Types::MainloopWeight, typename Types::MainloopAct>;
  using MainloopB = cute::conditional_t<SwapAB != 0, typename Types::MainloopAct, typename Types::MainloopWeight>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      typename ArchCfg::ArchTag, typename ArchCfg::OpClass, MainloopA, LayoutA*, AlignmentA, MainloopB,
      LayoutB*, AlignmentB, ElementAccumulator, TileShape, ClusterShape, StageCount,
      typename ArchCfg::KernelSchedule>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue, void, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

// Block-scaled extras (SM120 only), kept apart so the SM90 type never asks the mainloop for them.
template <class K, bool = K::BlockScaled>
struct Scales {};

template <class K>
struct Scales<K, true> {
  using Sm1xxBlkScaledConfig = typename K::CollectiveMainloop::Sm1xxBlkScaledConfig;
  using LayoutSFA = typename K::CollectiveMainloop::InternalLayoutSFA;
  using LayoutSFB = typename K::CollectiveMainloop::InternalLayoutSFB;
};

}  // namespace fimoe

template <int TM, int TN, int TKBytes, int Dtypes, int Finalize, int SwapAB, int Arch, int ClusterM = 1,
          int ClusterN = 1, int OutF16 = 0>
struct FlashinferMoeKernel
    : fimoe::Compose<TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch, ClusterM, ClusterN, OutF16>,
      fimoe::Scales<fimoe::Compose<TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch, ClusterM, ClusterN, OutF16>> {};

}  // namespace tileprobe
