// tileprobe: print FlashInfer's own CUTLASS fused-MoE tactic list, host code only (no GPU, no kernel instantiated).
//
// Compiled against the flashinfer package's own sources with the flags of its SM120 fused-MoE module
// (jit/fused_moe.py gen_cutlass_fused_moe_sm120_module), linked with its own cutlass_heuristic.cpp. The list is
// what the binding builds (fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu):
//   mAllProfiles = mKernelRunner->getTactics(GEMM_1) ++ mKernelRunner->getTactics(GEMM_2)
// where CutlassMoeFCRunner::getTactics(gemm_id) is
//   filterMxfp8Tactics(moe_gemm_runner_.getConfigs(gemm_id == GEMM_2 && mayHaveFinalizeFused()))
// and mayHaveFinalizeFused() = supportsTmaWarpSpecialized() && sm >= 90 && use_fused_finalize_ && !mixed-input.
// Finalize fusion on: the runner's own static CutlassMoeFCRunner::getTactics(sm, gemm_id) is called (it is the
// instance method with use_fused_finalize_ = true). Finalize fusion off (torch deterministic algorithms, or
// use_fused_finalize=False): the instance method's body with use_fused_finalize_ = false, i.e.
// filterMxfp8Tactics(MoeGemmRunner::getConfigs(sm, false)) for both GEMMs.
//
// Output, one line per tactic, tab separated:
//   runner sm finalize_mode id gemm tma_ws tile cluster mainloop epilogue_schedule fusion swap_ab
// `runner` is the dtype pair, with a suffix for another runner type of the same pair (-prequant, -f16out);
// `tile` is the engine's own name (CutlassGemmConfig::getTileConfigAsName), `id` the integer the autotuner sees.
#include <cstdio>
#include <vector>

#include "tensorrt_llm/kernels/cutlass_kernels/include/moe_kernels.h"
#include "moe_gemm/moe_gemm_template_dispatch.h"

namespace tk = tensorrt_llm::kernels::cutlass_kernels;
namespace ce = tensorrt_llm::cutlass_extensions;

template <class Runner, class GemmRunner>
static void emit(char const* dtypes, int sm, bool finalize) {
  std::vector<ce::CutlassGemmConfig> gemm1, gemm2;
  if (finalize) {
    gemm1 = Runner::getTactics(sm, tk::MoeGemmId::GEMM_1);
    gemm2 = Runner::getTactics(sm, tk::MoeGemmId::GEMM_2);
  } else {
    gemm1 = Runner::filterMxfp8Tactics(GemmRunner::getConfigs(sm, false));
    gemm2 = Runner::filterMxfp8Tactics(GemmRunner::getConfigs(sm, false));
  }
  int id = 0;
  for (int g = 1; g <= 2; ++g) {
    for (auto const& c : (g == 1 ? gemm1 : gemm2)) {
      std::printf("%s\t%d\t%s\t%d\tgemm%d\t%d\t%s\t%s\t%s\t%d\t%s\t%d\n", dtypes, sm, finalize ? "on" : "off", id++,
                  g, int(c.is_tma_warp_specialized), c.getTileConfigAsName().c_str(),
                  ce::get_cluster_shape_name(c.cluster_shape).c_str(),
                  ce::get_mainloop_schedule_name(c.mainloop_schedule), int(c.epilogue_schedule),
                  c.epilogue_fusion_type == ce::CutlassGemmConfig::EpilogueFusionType::FINALIZE ? "finalize" : "none",
                  int(c.swap_ab));
    }
  }
}

// The runner types the binding constructs (switch_output_type, bf16 output):
//   NVFP4 x NVFP4 (isNvfp4Quant, bf16 activations quantized inside): CutlassMoeFCRunner<Fp4, Fp4, bf16, bf16, bf16>
//   FP8/MXFP8 activations x MXFP4 weights (isWMxfp4AMxfp8Quant / isWMxfp4AFp8Quant, sm >= 100):
//     CutlassMoeFCRunner<fp8_e4m3, Fp4, bf16, fp8_e4m3, bf16>
using Nvfp4 = tk::CutlassMoeFCRunner<tk::Fp4Type, tk::Fp4Type, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16>;
using Nvfp4Gemm = tk::MoeGemmRunner<tk::Fp4Type, tk::Fp4Type, __nv_bfloat16, __nv_bfloat16>;
using Nvfp4Prequant = tk::CutlassMoeFCRunner<tk::Fp4Type, tk::Fp4Type, __nv_bfloat16, tk::Fp4Type, __nv_bfloat16>;
using W4A8 = tk::CutlassMoeFCRunner<__nv_fp8_e4m3, tk::Fp4Type, __nv_bfloat16, __nv_fp8_e4m3, __nv_bfloat16>;
using W4A8Gemm = tk::MoeGemmRunner<__nv_fp8_e4m3, tk::Fp4Type, __nv_bfloat16, __nv_bfloat16>;
// fp16 output (switch_output_type's float16 case): the same lists are expected; printed to prove it.
using Nvfp4F16 = tk::CutlassMoeFCRunner<tk::Fp4Type, tk::Fp4Type, half, half, half>;
using Nvfp4F16Gemm = tk::MoeGemmRunner<tk::Fp4Type, tk::Fp4Type, half, half>;
using W4A8F16 = tk::CutlassMoeFCRunner<__nv_fp8_e4m3, tk::Fp4Type, half, __nv_fp8_e4m3, half>;
using W4A8F16Gemm = tk::MoeGemmRunner<__nv_fp8_e4m3, tk::Fp4Type, half, half>;

int main() {
  for (int sm : {120, 121}) {
    for (bool finalize : {true, false}) {
      emit<Nvfp4, Nvfp4Gemm>("nvfp4xnvfp4", sm, finalize);
      emit<Nvfp4Prequant, Nvfp4Gemm>("nvfp4xnvfp4-prequant", sm, finalize);
      emit<W4A8, W4A8Gemm>("mxfp8xmxfp4", sm, finalize);
      emit<Nvfp4F16, Nvfp4F16Gemm>("nvfp4xnvfp4-f16out", sm, finalize);
      emit<W4A8F16, W4A8F16Gemm>("mxfp8xmxfp4-f16out", sm, finalize);
    }
  }
  return 0;
}
