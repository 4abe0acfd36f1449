// Static size check for the flashinfer-moe family: no GPU, no device code. Built with the include path holding
// tp_configs.inc, a generated file of TP_CFG(idx, TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch[, ...]) lines
// (the variadic form describe.cu is moving to); prints one JSON object per config.
#include <cstdio>

#include "flashinfer_moe.cuh"

namespace {

template <class K>
void describe(int index, const char* args) {
  using GemmKernel = typename K::GemmKernel;
  using Mainloop = typename K::CollectiveMainloop;
  using Epilogue = typename K::CollectiveEpilogue;
  std::printf(
      "{\"index\": %d, \"args\": \"%s\", \"stages\": %d, \"smem_bytes\": %zu, \"smem_mainloop_bytes\": %zu, "
      "\"smem_epilogue_bytes\": %zu, \"cutlass_cap_bytes\": %d}\n",
      index, args, static_cast<int>(Mainloop::DispatchPolicy::Stages), sizeof(typename GemmKernel::SharedStorage),
      sizeof(typename Mainloop::SharedStorage), sizeof(typename Epilogue::SharedStorage), K::CapacityBytes);
}

}  // namespace

int main() {
#define TP_CFG(idx, ...) describe<tileprobe::FlashinferMoeKernel<__VA_ARGS__>>(idx, #__VA_ARGS__);
#include "tp_configs.inc"
#undef TP_CFG
  return 0;
}
