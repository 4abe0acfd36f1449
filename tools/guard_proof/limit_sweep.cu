// The H200 proof of the launch guard (tileprobe/guard.h): for kernels with different static shared memory, every
// dynamic request from 0 to past the opt-in limit, one byte at a time, is asked of the guard and then really tried
// (cudaFuncSetAttribute to that size, a launch, and, after one synchronize, a check that each launch ran: it wrote its
// own marker).
// Prints one JSON object per kernel: the guard's flip byte, the real flip byte, and every disagreement (expected: none).
// Also prints cudaFuncGetAttributes for every kernel, to compare with what `tileprobe inspect` reads from the binary.
//   nvcc -O2 -I"$(tileprobe include)" -gencode arch=compute_90a,code=sm_90a -o limit_sweep limit_sweep.cu
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <tileprobe/guard.h>

// Each launch writes its marker into its own slot out[dyn]; the host checks every slot after one synchronize.
__device__ __forceinline__ unsigned marker(unsigned dyn) { return dyn * 2654435761u ^ 0x5a5a5a5au; }

template <int STATIC>
__global__ void with_static(unsigned* out, unsigned dyn) {
  __shared__ unsigned char fixed[STATIC];
  extern __shared__ unsigned char dyn_t[];
  // threads that share a slot write the same value; thread 0 reads back one written by another thread
  fixed[threadIdx.x % STATIC] = (unsigned char)((threadIdx.x % STATIC) * 7 + 3);
  if (dyn && threadIdx.x == 0) dyn_t[dyn - 1] = 2;  // touch the last dynamic byte
  __syncthreads();
  unsigned j = dyn % (STATIC < 64 ? STATIC : 64);
  unsigned check = fixed[j] ^ (unsigned char)(j * 7 + 3);
  if (threadIdx.x == 0) out[dyn] = (marker(dyn) ^ check) + (dyn ? dyn_t[dyn - 1] - 2u : 0u);
}

extern "C" __global__ void no_static(unsigned* out, unsigned dyn) {
  extern __shared__ unsigned char dyn_c[];
  if (dyn && threadIdx.x == 0) dyn_c[dyn - 1] = 2;
  __syncthreads();
  if (threadIdx.x == 0) out[dyn] = marker(dyn) + (dyn ? dyn_c[dyn - 1] - 2u : 0u);
}

// Kernels for the attribute comparison only: a launch bound, a local array, a register cap that spills.
extern "C" __global__ void __launch_bounds__(384) bounded(float* out) { out[threadIdx.x] = threadIdx.x; }
extern "C" __global__ void local_array(float* out, const int* idx, int n) {
  float a[96];
  for (int i = 0; i < 96; ++i) a[i] = out[i * n + threadIdx.x];
  out[threadIdx.x] = a[idx[threadIdx.x] % 96];
}
#define HUNGRY(NAME, CAP)                                                                      \
  extern "C" __global__ void __maxnreg__(CAP) NAME(double* out, const double* in, int n) {     \
    double acc[40];                                                                            \
    for (int i = 0; i < 40; ++i) acc[i] = in[i * n + threadIdx.x];                             \
    for (int r = 0; r < n; ++r)                                                                \
      for (int i = 0; i < 40; ++i) acc[i] = acc[i] * acc[(i + r) % 40] + in[(r * 40 + i) % n]; \
    double s = 0;                                                                              \
    for (int i = 0; i < 40; ++i) s += acc[i] * i;                                              \
    out[threadIdx.x] = s;                                                                      \
  }
HUNGRY(hungry_40, 40)
HUNGRY(hungry_72, 72)
HUNGRY(hungry_128, 128)
HUNGRY(hungry_168, 168)
HUNGRY(hungry_255, 255)

static bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

template <class K>
static void attrs(const char* name, K k) {
  cudaFuncAttributes a;
  if (!check(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(k)), name)) return;
  printf("{\"attributes\": \"%s\", \"sharedSizeBytes\": %zu, \"numRegs\": %d, \"localSizeBytes\": %zu, "
         "\"maxThreadsPerBlock\": %d, \"maxDynamicSharedSizeBytes\": %d}\n",
         name, a.sharedSizeBytes, a.numRegs, a.localSizeBytes, a.maxThreadsPerBlock, a.maxDynamicSharedSizeBytes);
}

static unsigned host_marker(unsigned dyn) { return dyn * 2654435761u ^ 0x5a5a5a5au; }

template <class K>
static void sweep(const char* name, K k, unsigned step_far) {
  tileprobe::SmemFit f0 = tileprobe::smem_fit(k, 0);
  size_t limit = f0.optin_bytes + 2048;
  unsigned* out;
  if (!check(cudaMalloc(&out, (limit + 1) * 4), "cudaMalloc")) return;
  cudaMemset(out, 0xff, (limit + 1) * 4);
  std::vector<char> tried(limit + 1, 0), guard(limit + 1, 0), set_ok(limit + 1, 0), launch_ok(limit + 1, 0);
  for (size_t d = 0; d <= limit; ++d) {
    // every byte within 4 KiB of the guard's bound; below that every step_far-th byte (1: every byte)
    if (d + 4096 < f0.max_dynamic_bytes && d % step_far != 0) continue;
    tried[d] = 1;
    guard[d] = tileprobe::smem_fit(k, d).fits;
    set_ok[d] = tileprobe::allow_dynamic_smem(k, d) == cudaSuccess;
    k<<<1, 64, d>>>(out, (unsigned)d);
    launch_ok[d] = cudaGetLastError() == cudaSuccess;
  }
  cudaError_t sync = cudaDeviceSynchronize();
  std::vector<unsigned> got(limit + 1);
  cudaMemcpy(got.data(), out, (limit + 1) * 4, cudaMemcpyDeviceToHost);
  cudaFree(out);
  size_t n = 0, agree = 0, launched = 0, guard_last_fit = 0, real_last_ok = 0, real_first_fail = 0;
  size_t guard_first_no = 0, set_vs_launch = 0, launched_not_run = 0;
  std::vector<size_t> disagree;
  for (size_t d = 0; d <= limit; ++d) {
    if (!tried[d]) continue;
    ++n;
    bool ran = launch_ok[d] && got[d] == host_marker((unsigned)d);
    if (launch_ok[d] && !ran) ++launched_not_run;
    if (set_ok[d] != launch_ok[d]) ++set_vs_launch;
    if (ran) { ++launched; real_last_ok = d; } else if (!real_first_fail) real_first_fail = d;
    if (guard[d]) guard_last_fit = d; else if (!guard_first_no) guard_first_no = d;
    if ((bool)guard[d] == ran) ++agree; else disagree.push_back(d);
  }
  printf("{\"kernel\": \"%s\", \"static\": %zu, \"optin\": %zu, \"guard_max_dynamic\": %zu, \"requests_tried\": %zu, "
         "\"agree\": %zu, \"launched_and_ran\": %zu, \"guard_last_fit\": %zu, \"guard_first_refused\": %zu, "
         "\"real_last_ran\": %zu, \"real_first_failed\": %zu, \"set_attribute_vs_launch_differ\": %zu, "
         "\"launched_without_marker\": %zu, \"sync\": \"%s\", \"disagreements\": [",
         name, f0.static_bytes, f0.optin_bytes, f0.max_dynamic_bytes, n, agree, launched, guard_last_fit,
         guard_first_no, real_last_ok, real_first_fail, set_vs_launch, launched_not_run, cudaGetErrorString(sync));
  for (size_t i = 0; i < disagree.size() && i < 20; ++i) printf("%s%zu", i ? ", " : "", disagree[i]);
  printf("]}\n");
  fflush(stdout);
}

int main(int argc, char** argv) {
  unsigned step_far = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
  cudaDeviceProp p;
  if (!check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties")) return 1;
  int optin = 0, drv = 0, rt = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"optin\": %d, \"driver_api\": %d, \"runtime\": %d, "
         "\"step_far\": %u}\n", p.name, p.major, p.minor, optin, drv, rt, step_far);
  attrs("no_static", no_static);
  attrs("with_static<4096>", with_static<4096>);
  attrs("with_static<100>", with_static<100>);
  attrs("with_static<12345>", with_static<12345>);
  attrs("with_static<49152>", with_static<49152>);
  attrs("bounded", bounded);
  attrs("local_array", local_array);
  attrs("hungry_40", hungry_40);
  attrs("hungry_72", hungry_72);
  attrs("hungry_128", hungry_128);
  attrs("hungry_168", hungry_168);
  attrs("hungry_255", hungry_255);
  sweep("no_static", no_static, step_far);
  sweep("with_static<4096>", with_static<4096>, step_far);
  sweep("with_static<100>", with_static<100>, step_far);
  sweep("with_static<12345>", with_static<12345>, step_far);
  sweep("with_static<49152>", with_static<49152>, step_far);
  return 0;
}
