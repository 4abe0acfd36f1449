// tileprobe: what the family headers share (includes, problem shape, stage selection, D layout).
//
// A config is (TileM, TileN, TileK, Schedule, Stages, Epilogue, SwapAB). The Python side renders a config into
// compile-time defines (see describe.cu / run.cu); this header turns those numbers into a CUTLASS GemmKernel type.
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

}  // namespace tileprobe
