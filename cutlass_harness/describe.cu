// tileprobe static probe: describes compiled kernel configs without touching a GPU.
//
// Built with -DTP_FAMILY_KERNEL=<template>, -DTP_FAMILY_HEADER="families/<f>.cuh" and an include path holding
// tp_configs.inc, a generated file of TP_CFG(idx, <the family template's arguments>) lines; prints one JSON object per config on stdout. With -DTP_WITH_DEVICE each kernel is also instantiated for the device, so
// ptxas reports its registers; the demangled kernel type lets the Python side match ptxas lines to configs.
#include <cstdio>
#include <cxxabi.h>
#include <cstdlib>
#include <typeinfo>

#include "kernels.cuh"

#ifndef TP_FAMILY_KERNEL
#error "TP_FAMILY_KERNEL must name a kernel template from kernels.cuh"
#endif

namespace {

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
}

}  // namespace

int main() {
#define TP_CFG(idx, ...) describe<tileprobe::TP_FAMILY_KERNEL<__VA_ARGS__>>(idx);
#include "tp_configs.inc"
#undef TP_CFG
  return 0;
}
