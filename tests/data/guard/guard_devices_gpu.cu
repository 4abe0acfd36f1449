// On real GPUs (tests/guard/test_guard_header.py, gpu marker): with device 0 current, ask tileprobe/guard.h about
// every device; compare with the runtime asked on that device itself, check device 0 stays current, and launch at the
// guard's largest request and one byte past it on that device. One JSON object per device.
#include <cstdio>

#include <tileprobe/guard.h>

__global__ void with_static(int* out) {
  __shared__ int rows[1024];  // 4096 static bytes
  extern __shared__ int dyn[];
  rows[threadIdx.x] = threadIdx.x;
  dyn[0] = 1;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = rows[5] + dyn[0];
}

static bool launches(int device, size_t bytes) {
  cudaSetDevice(device);
  int* out = nullptr;
  cudaMalloc(&out, sizeof(int));
  cudaGetLastError();
  with_static<<<1, 32, bytes>>>(out);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaFree(out);
  cudaGetLastError();
  cudaSetDevice(0);
  return e == cudaSuccess;
}

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return 3;
  for (int d = 0; d < count; ++d) {
    cudaSetDevice(d);
    cudaFuncAttributes own;
    cudaFuncGetAttributes(&own, reinterpret_cast<const void*>(with_static));
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d);
    cudaSetDevice(0);
    tileprobe::SmemFit f = tileprobe::smem_fit(with_static, 0, d);
    int after = -1;
    cudaGetDevice(&after);
    size_t top = f.max_dynamic_bytes;
    bool set_top = tileprobe::allow_dynamic_smem(with_static, top, d) == cudaSuccess;
    int after_set = -1;
    cudaGetDevice(&after_set);
    bool ran_top = launches(d, top);
    bool ran_over = launches(d, top + 1);
    printf("{\"device\": %d, \"error\": %d, \"static\": %zu, \"own_static\": %zu, \"optin\": %zu, \"own_optin\": %d, "
           "\"current_after_fit\": %d, \"current_after_set\": %d, \"set_top\": %s, \"ran_top\": %s, "
           "\"ran_over\": %s}\n",
           d, static_cast<int>(f.error), f.static_bytes, own.sharedSizeBytes, f.optin_bytes, optin, after, after_set,
           set_top ? "true" : "false", ran_top ? "true" : "false", ran_over ? "true" : "false");
  }
  return 0;
}
