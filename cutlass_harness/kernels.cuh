// tileprobe: the kernel header of the family being built. build.py passes -DTP_FAMILY_HEADER="families/<f>.cuh";
// each family's header defines its template (TP_FAMILY_KERNEL) and exposes GemmKernel, Gemm, the collectives and
// the element/layout types the harnesses read.
#pragma once

#ifdef TP_FAMILY_HEADER
#include TP_FAMILY_HEADER
#else
#include "families/sm120_nvfp4.cuh"
#include "families/sm90_fp8.cuh"
#endif

#ifdef TP_ARCH
namespace tileprobe {
// Only the family's own arch can launch a config: an nvfp4 sm_90a build exists just to serve --reference-dump (its
// kernel.cu then holds no kernel, and the harness never loads one).
template <class Cfg>
inline constexpr bool kLaunchableOn = Cfg::BlockScaled ? TP_ARCH >= 120 : TP_ARCH == 90;
}  // namespace tileprobe
#endif

