// tileprobe/guard.h: will this kernel launch with this much dynamic shared memory on this device? One header, no
// library. The answer is exact to the byte: a launch succeeds exactly when
//   static bytes (cudaFuncGetAttributes(...).sharedSizeBytes) + dynamic bytes <= cudaDevAttrMaxSharedMemoryPerBlockOptin
// (measured on an H200 at every request across the limit; see tileprobe's README, "Guard your own kernel's launch").
//
//   #include <tileprobe/guard.h>            // nvcc -I"$(tileprobe include)" ...
//   tileprobe::SmemFit f = tileprobe::smem_fit(my_kernel, bytes);
//   if (!f.fits) { char why[160]; tileprobe::describe(f, why, sizeof why); printf("n/a (%s)\n", why); }
//   else { tileprobe::allow_dynamic_smem(my_kernel, bytes); my_kernel<<<grid, block, bytes>>>(...); }
#ifndef TILEPROBE_GUARD_H
#define TILEPROBE_GUARD_H

#include <cuda_runtime.h>
#include <cstddef>
#include <cstdio>

namespace tileprobe {

struct SmemFit {
  bool fits;                 // static + dynamic <= opt-in
  size_t static_bytes;       // cudaFuncAttributes::sharedSizeBytes
  size_t dynamic_bytes;      // the request asked about
  size_t optin_bytes;        // cudaDevAttrMaxSharedMemoryPerBlockOptin of the device
  size_t max_dynamic_bytes;  // optin - static: the largest dynamic request that launches (0 if static alone is over)
  int device;
  cudaError_t error;         // cudaSuccess unless a query failed (then fits is false)
};

// Run `query` with `device` current, then make the caller's device current again (the runtime answers
// cudaFuncGetAttributes / cudaFuncSetAttribute for the current device only). The first error is returned.
template <class Q>
inline cudaError_t on_device(int device, Q query) {
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e != cudaSuccess) return e;
  if (device < 0 || device == current) return query();
  if ((e = cudaSetDevice(device)) != cudaSuccess) return e;
  e = query();
  cudaError_t back = cudaSetDevice(current);
  return e != cudaSuccess ? e : back;
}

// The answer for `func` (a __global__ function's address) on `device` (-1: the current device). The static bytes
// and the opt-in limit both come from `device`; the current device is left as it was.
inline SmemFit smem_fit(const void* func, size_t dynamic_bytes, int device = -1) {
  SmemFit f{false, 0, dynamic_bytes, 0, 0, device, cudaSuccess};
  if (device < 0 && (f.error = cudaGetDevice(&f.device)) != cudaSuccess) return f;
  cudaFuncAttributes attr;
  if ((f.error = on_device(f.device, [&] { return cudaFuncGetAttributes(&attr, func); })) != cudaSuccess) return f;
  int optin = 0;
  if ((f.error = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, f.device)) != cudaSuccess)
    return f;
  f.static_bytes = attr.sharedSizeBytes;
  f.optin_bytes = static_cast<size_t>(optin);
  f.max_dynamic_bytes = f.optin_bytes > f.static_bytes ? f.optin_bytes - f.static_bytes : 0;
  f.fits = f.static_bytes <= f.optin_bytes && dynamic_bytes <= f.max_dynamic_bytes;
  return f;
}

template <class... Args>
inline SmemFit smem_fit(void (*kernel)(Args...), size_t dynamic_bytes, int device = -1) {
  return smem_fit(reinterpret_cast<const void*>(kernel), dynamic_bytes, device);
}

// The largest dynamic shared memory `func` may request on `device`; 0 with *error set when a query fails.
template <class F>
inline size_t max_dynamic_smem(F func, int device = -1, cudaError_t* error = nullptr) {
  SmemFit f = smem_fit(func, 0, device);
  if (error) *error = f.error;
  return f.error == cudaSuccess ? f.max_dynamic_bytes : 0;
}

// One line with the bytes: "4096 static + 228356 dynamic = 232452 B > 232448 B opt-in (device 0) by 4 B".
inline int describe(const SmemFit& f, char* buf, size_t n) {
  if (f.error != cudaSuccess)
    return snprintf(buf, n, "cannot tell: %s", cudaGetErrorString(f.error));
  size_t need = f.static_bytes + f.dynamic_bytes;
  if (f.fits)
    return snprintf(buf, n, "%zu static + %zu dynamic = %zu B <= %zu B opt-in (device %d), %zu B to spare",
                    f.static_bytes, f.dynamic_bytes, need, f.optin_bytes, f.device, f.optin_bytes - need);
  return snprintf(buf, n, "%zu static + %zu dynamic = %zu B > %zu B opt-in (device %d) by %zu B", f.static_bytes,
                  f.dynamic_bytes, need, f.optin_bytes, f.device, need - f.optin_bytes);
}

// Raise the kernel's dynamic shared memory limit to `dynamic_bytes` on `device` (-1: the current device; needed
// above 48 KiB); the error when it cannot. The current device is left as it was.
template <class F>
inline cudaError_t allow_dynamic_smem(F func, size_t dynamic_bytes, int device = -1) {
  return on_device(device, [&] {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(dynamic_bytes));
  });
}

}  // namespace tileprobe

#endif  // TILEPROBE_GUARD_H
