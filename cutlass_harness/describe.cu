// tileprobe static probe: describes compiled kernel configs without touching a GPU.
//
// Built with -DTP_FAMILY_KERNEL=<template>, -DTP_FAMILY_HEADER="families/<f>.cuh" and an include path holding
// tp_configs.inc, a generated file of TP_CFG(idx, <the family template's arguments>) lines; prints one JSON object per
// config on stdout (describe.cuh). With -DTP_WITH_DEVICE each kernel is also instantiated for the device, so ptxas
// reports its registers; the demangled kernel type lets the Python side match ptxas lines to configs.
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
