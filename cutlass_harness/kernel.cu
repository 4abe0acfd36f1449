// tileprobe runtime harness, the kernel half: one config's GEMM kernel alone, built with `nvcc -cubin` into
// kernel.<idx>.cubin at the same time as run.cu builds the host half (build.py); the harness loads it (kernel_library.cuh).
// The same flags as run.cu and CUTLASS_ENABLE_CUDA_HOST_ADAPTER as there, and its config's lines of run.cu's
// tp_configs.inc, so both halves see the same types. tests/backends/cutlass/test_split_build.py holds this kernel's code equal to the kernel a
// single-TU build compiles.
#ifndef NDEBUG
#define NDEBUG
#endif
#include "kernels.cuh"

// This kernel half's own tp_configs.inc (build.py) holds its one config: a TP_CFG line and a TP_CFG_ID line, at index 0
// whatever the config's index in the host half it serves (nothing here reads it), so one compile serves every batch
// (build.py's kernel cache). The name is which config this cubin is: the harness reads it back
// (cudaLibraryGetGlobal) and launches nothing from a cubin of another config.
#define TP_CFG(idx, ...) using K = tileprobe::TP_FAMILY_KERNEL<__VA_ARGS__>;
#define TP_CFG_ID(idx, name) extern "C" __device__ __attribute__((used)) const char tp_config_id[] = name;
#include "tp_configs.inc"
#undef TP_CFG_ID
#undef TP_CFG

// The kernel, where the harness can launch it (else an empty cubin: the harness never loads one). Taking its address
// in a host function is what makes the device pass compile it, as in describe.cu.
template <class Cfg>
const void* tp_gemm_entry() {
  if constexpr (tileprobe::kLaunchableOn<Cfg>) return reinterpret_cast<const void*>(&cutlass::device_kernel<typename Cfg::GemmKernel>);
  else return nullptr;
}
template const void* tp_gemm_entry<K>();
