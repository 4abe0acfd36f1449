// tileprobe runtime harness, the host half's device pass (run.cu compiled by nvcc with __CUDA_ARCH__ defined).
//
// A split build (build.py) compiles the GEMM kernel in kernel.cu; run.cu's own device code is only the harness's
// kernels: data fill, workspace fill, the fp32 reference, the compare and the fault kernels. Where the family names
// the reference's operand types in a light header (TP_DEVICE_PASS_HEADER, defining tileprobe::DevicePassOps), this
// pass compiles just those kernels, instantiated for those types, instead of parsing CUTLASS's GEMM headers a second
// time for no GEMM code. The host pass is the whole run.cu and holds the family's Harness<K>::Ops to be this very
// type (a static_assert in run.cu); a kernel the host launches that this pass did not instantiate fails the link.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reference.cuh"
#include "faults.cuh"
#include TP_DEVICE_PASS_HEADER

#ifdef __CUDA_ARCH__
// The templates a split harness launches: the check's reference (reference.cuh) for the family's operand reader, and
// the workspace fills of KernelLibrary::memsetDeviceImpl. The other harness kernels are not templates: included above.
// (reference_kernel<Ops> serves --reference-dump, which only block-scaled families have.)
template __global__ void reference_groups_kernel<tileprobe::DevicePassOps>(const RefGroup<tileprobe::DevicePassOps>*,
                                                                           bool, float*);
template __global__ void pattern_fill_kernel<uint16_t>(uint16_t*, uint16_t, size_t);
template __global__ void pattern_fill_kernel<uint32_t>(uint32_t*, uint32_t, size_t);
template __global__ void pattern_fill_kernel<uint64_t>(uint64_t*, uint64_t, size_t);
#endif
