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
