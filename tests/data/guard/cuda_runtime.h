// A stand-in for the CUDA runtime, for host-compiling tileprobe/guard.h without a GPU (tests/guard/test_guard_header.py).
// It keeps what the guard reads per device, and which device is current, the way the runtime does:
// cudaFuncGetAttributes and cudaFuncSetAttribute answer for the current device; cudaDeviceGetAttribute for the one
// named. Values come from the test (stub_set_device).
#ifndef TILEPROBE_STUB_CUDA_RUNTIME_H
#define TILEPROBE_STUB_CUDA_RUNTIME_H

#include <cstddef>

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidDevice = 101 };
typedef cudaError cudaError_t;
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
  size_t sharedSizeBytes;
};

namespace stub {
const int kDevices = 8;
inline int current = 0;
inline int count = 1;
inline size_t static_bytes[kDevices] = {};  // the kernel's static bytes in the image each device loads
inline int optin[kDevices] = {};
inline int max_dynamic_set[kDevices] = {};  // what cudaFuncSetAttribute last set, per device (-1: never)
inline int switches = 0;                      // cudaSetDevice calls
}  // namespace stub

inline cudaError_t cudaGetDevice(int* d) {
  *d = stub::current;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= stub::count) return cudaErrorInvalidDevice;
  ++stub::switches;
  stub::current = d;
  return cudaSuccess;
}
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  a->sharedSizeBytes = stub::static_bytes[stub::current];
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int d) {
  if (d < 0 || d >= stub::count) return cudaErrorInvalidDevice;
  *v = stub::optin[d];
  return cudaSuccess;
}
inline cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int v) {
  stub::max_dynamic_set[stub::current] = v;
  return cudaSuccess;
}
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stub error"; }

#endif
