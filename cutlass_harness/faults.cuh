// tileprobe runtime harness: the fault switch, TILEPROBE_FAULT, that lets the Python side test its own handling of
// wrong results, sticky CUDA errors and hangs on real hardware. Grammar and effects: PROTOCOL.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cutlass/bfloat16.h"
#include "harness_io.cuh"

struct Fault {
  enum Kind { kNone, kCorrupt, kSticky, kHang } kind = kNone;
  long long point = -1, group = -1;
  std::string text;
  bool at(Kind k, long long point_id) const { return kind == k && point == point_id; }
};

// Rows x columns (in the GEMM's M x N space) of the block that `corrupt` damages, from (0, 0), clipped to M x N.
constexpr int kCorruptRows = 64, kCorruptCols = 128;
// `hang` spins for at most this long, so a forgotten process never holds the GPU for good.
constexpr unsigned long long kHangNs = 600ull * 1000 * 1000 * 1000;

[[noreturn]] inline void fault_usage(const std::string& text) {
  std::fprintf(stderr, "error: bad TILEPROBE_FAULT '%s'\nusage: TILEPROBE_FAULT=corrupt:POINT:GROUP | sticky:POINT | "
               "hang:POINT (POINT: a point ID, GROUP: a group index; non-negative decimal integers)\n", text.c_str());
  std::exit(2);
}

// Unset or empty: no fault. Anything else must match the grammar exactly, or the harness exits 2.
inline Fault read_fault() {
  Fault f;
  const char* env = std::getenv("TILEPROBE_FAULT");
  if (!env || !*env) return f;
  f.text = env;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t c; (c = f.text.find(':', start)) != std::string::npos; start = c + 1) parts.push_back(f.text.substr(start, c - start));
  parts.push_back(f.text.substr(start));
  bool ok = false;
  if (parts[0] == "corrupt" && parts.size() == 3) {
    f.kind = Fault::kCorrupt;
    ok = parse_int(parts[1], 0, INT64_MAX, f.point) && parse_int(parts[2], 0, INT32_MAX, f.group);
  } else if ((parts[0] == "sticky" || parts[0] == "hang") && parts.size() == 2) {
    f.kind = parts[0] == "sticky" ? Fault::kSticky : Fault::kHang;
    ok = parse_int(parts[1], 0, INT64_MAX, f.point);
  }
  if (!ok) fault_usage(f.text);
  return f;
}

// corrupt: every element of the block becomes -(v + 8 sign(v)), so |D - ref| is about 2 |ref| + 8 there.
__global__ void corrupt_kernel(cutlass::bfloat16_t* d, int M, int N, bool col_major) {
  int rows = M < kCorruptRows ? M : kCorruptRows, cols = N < kCorruptCols ? N : kCorruptCols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += gridDim.x * blockDim.x) {
    size_t m = i / cols, n = i % cols;
    cutlass::bfloat16_t& e = d[col_major ? n * size_t(M) + m : m * size_t(N) + n];
    float v = float(e);
    e = cutlass::bfloat16_t(-(v + copysignf(8.0f, v)));
  }
}

// sticky: a store through a pointer no allocation can hold, so the context takes cudaErrorIllegalAddress.
__global__ void sticky_kernel(int* p) { *reinterpret_cast<volatile int*>(p) = 1; }

// hang: spin on the global timer (clock64 as a backstop should the timer not advance) for at most kHangNs.
__global__ void hang_kernel(unsigned long long ns) {
  unsigned long long t0, t, c0 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(100000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns && static_cast<unsigned long long>(clock64() - c0) < ns * 3);
}

// Run the sticky or hang fault for this point (a no-op for other points and kinds). Throws Failure with what
// happened; for sticky that is the CUDA error of the synchronize.
inline void inject_launch_fault(const Fault& fault, long long point_id) {
  if (fault.at(Fault::kSticky, point_id)) {
    sticky_kernel<<<1, 1>>>(reinterpret_cast<int*>(0x10));
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    throw Failure{std::string("TILEPROBE_FAULT sticky: ") + (launch != cudaSuccess ? "launch: " : "cudaDeviceSynchronize: ") +
                  cudaGetErrorName(launch != cudaSuccess ? launch : sync) + " — " +
                  cudaGetErrorString(launch != cudaSuccess ? launch : sync)};
  }
  if (fault.at(Fault::kHang, point_id)) {
    std::fprintf(stderr, "TILEPROBE_FAULT hang: spinning for up to %llu s\n", kHangNs / 1000000000ull);
    hang_kernel<<<1, 1>>>(kHangNs);
    cudaError_t e = cudaDeviceSynchronize();
    throw Failure{std::string("TILEPROBE_FAULT hang: the spin kernel ended (") + cudaGetErrorString(e) +
                  ") without being killed"};
  }
}
