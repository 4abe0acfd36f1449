// tileprobe: one kernel config describes itself (sizes the host can read from its types; no GPU needed), as one JSON
// line on stdout. Used by describe.cu (the static probe's own builds) and by run.cu's --describe (a runtime harness
// sizes the very kernel it launches, so one compile serves both).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <typeinfo>

#include "kernels.cuh"

namespace tileprobe_describe {

template <class T>
void print_type_name() {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(T).name(), nullptr, nullptr, &status);
  std::fputc('"', stdout);
  for (const char* p = (status == 0 && name) ? name : typeid(T).name(); *p; ++p) {
    if (*p == '"' || *p == '\\') std::fputc('\\', stdout);
    std::fputc(*p, stdout);
  }
  std::fputc('"', stdout);
  std::free(name);
}

template <class K>
void describe(int index) {
  using GemmKernel = typename K::GemmKernel;
  using Mainloop = typename K::CollectiveMainloop;
  using Epilogue = typename K::CollectiveEpilogue;
#ifdef TP_WITH_DEVICE
  // Take the kernel's address so that its device code is compiled and ptxas reports its resources.
  volatile auto entry = &cutlass::device_kernel<GemmKernel>;
  (void)entry;
#endif
  std::printf(
      "{\"index\": %d, \"stages\": %d, \"smem_bytes\": %zu, \"smem_mainloop_bytes\": %zu, "
      "\"smem_epilogue_bytes\": %zu, \"cutlass_cap_bytes\": %d, \"max_threads\": %u, \"min_blocks\": %u, "
      "\"kernel_type\": ",
      index, static_cast<int>(Mainloop::DispatchPolicy::Stages), sizeof(typename GemmKernel::SharedStorage),
      sizeof(typename Mainloop::SharedStorage), sizeof(typename Epilogue::SharedStorage), K::CapacityBytes,
      static_cast<unsigned>(GemmKernel::MaxThreadsPerBlock), static_cast<unsigned>(GemmKernel::MinBlocksPerMultiprocessor));
  print_type_name<GemmKernel>();
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace tileprobe_describe
