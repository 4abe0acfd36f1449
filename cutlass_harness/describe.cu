// tileprobe static probe: describes compiled kernel configs without touching a GPU.
//
// Built with -DTP_FAMILY_KERNEL=<template>, -DTP_FAMILY_HEADER="families/<f>.cuh" and an include path holding
// tp_configs.inc, a generated file of TP_CFG(idx, <the family template's arguments>) lines; prints one JSON object per
// config on stdout (describe.cuh). With -DTP_WITH_DEVICE each kernel is also instantiated for the device, so ptxas
// reports its registers; the demangled kernel type lets the Python side match ptxas lines to configs.
//
// Without TP_WITH_DEVICE (sizes only) the device pass sees an empty translation unit: every size is a sizeof or a
// constant the host compile reads from the types, no kernel is instantiated, so the device pass would only parse the
// CUTLASS headers a second time (about a third of a sizes-only build) and produce nothing.
#if defined(__CUDA_ARCH__) && !defined(TP_WITH_DEVICE)
// (device pass of a sizes-only build: nothing to compile)
#else
#include "describe.cuh"

#ifndef TP_FAMILY_KERNEL
#error "TP_FAMILY_KERNEL must name a kernel template from kernels.cuh"
#endif

int main() {
#define TP_CFG(idx, ...) tileprobe_describe::describe<tileprobe::TP_FAMILY_KERNEL<__VA_ARGS__>>(idx);
#include "tp_configs.inc"
#undef TP_CFG
  return 0;
}
#endif
