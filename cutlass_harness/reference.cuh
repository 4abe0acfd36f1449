// tileprobe runtime harness: device-side data generation, the operand readers (over decode.cuh's decoders, independent
// of CUTLASS's own conversions), the fp32 reference kernels and the element-wise compare kernels.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cute/tensor.hpp"
#include "decode.cuh"
#include "cutlass/bfloat16.h"
#include "cutlass/float8.h"
#include "cutlass/float_subbyte.h"

__host__ __device__ inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

enum FillKind { kRawBytes = 0, kScaleBytes = 1, kFp8 = 2, kBf16 = 3, kScaleUe8m0 = 4 };

// kRawBytes: any byte (two e2m1 codes, all valid); kScaleBytes: ue4m3 with exponent field 6..9 (0.5 .. 7.5);
// kFp8: uniform [-2, 2] as e4m3 (never the NaN codes 0x7F / 0xFF); kBf16: uniform [-1, 1];
// kScaleUe8m0: ue8m0 exponents 124..130 (2^-3 .. 2^3; never the NaN code 0xFF).
__global__ void fill_kernel(void* p, size_t n, uint64_t seed, int kind) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t r = mix64(seed ^ mix64(i));
    float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    switch (kind) {
      case kRawBytes: static_cast<uint8_t*>(p)[i] = uint8_t(r >> 24); break;
      case kScaleBytes: static_cast<uint8_t*>(p)[i] = uint8_t(((6 + ((r >> 32) & 3)) << 3) | ((r >> 40) & 7)); break;
      case kFp8: static_cast<uint8_t*>(p)[i] = cutlass::float_e4m3_t(-2.0f + 4.0f * u).storage; break;
      case kScaleUe8m0: static_cast<uint8_t*>(p)[i] = uint8_t(124 + (r >> 32) % 7); break;
      default: static_cast<cutlass::bfloat16_t*>(p)[i] = cutlass::bfloat16_t(-1.0f + 2.0f * u); break;
    }
  }
}

// A workspace fill with a 2-, 4- or 8-byte pattern (KernelLibrary::memsetDeviceImpl, for cutlass/workspace.h).
template <class T>
__global__ void pattern_fill_kernel(T* dst, T value, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

// How one operand element type is stored, filled and decoded (the harness's own decoders, not CUTLASS's).
template <class T>
struct Elem;
template <>
struct Elem<cutlass::float_e2m1_t> {  // packed: element i in byte i/2, low nibble first
  static constexpr int kFill = kRawBytes;
  __device__ static float at(const uint8_t* p, size_t i) { return decode_e2m1((p[i >> 1] >> ((i & 1) * 4)) & 15); }
};
template <>
struct Elem<cutlass::float_e4m3_t> {  // one byte each
  static constexpr int kFill = kFp8;
  __device__ static float at(const uint8_t* p, size_t i) { return decode_e4m3(p[i]); }
};

// Scale-factor types: NVFP4's ue4m3 (per 16 along K), MX's ue8m0 (per 32).
template <class T>
struct Scale;
template <>
struct Scale<cutlass::float_ue4m3_t> {
  static constexpr int kFill = kScaleBytes;
  __device__ static float dec(uint8_t b) { return decode_ue4m3(b); }
};
template <>
struct Scale<cutlass::float_ue8m0_t> {
  static constexpr int kFill = kScaleUe8m0;
  __device__ static float dec(uint8_t b) { return decode_ue8m0(b); }
};

// Operand readers for the reference: A is MxK row-major, B is NxK with K contiguous, each of its own element type;
// block-scaled (TSF not void): times its scale factor, read through the kernel's own SF layout (the collective's
// Sm1xxBlkScaledConfig: swizzled, stride 0 within a scale vector).
template <class TA, class TB, class TSF = void, class LSFA = int, class LSFB = int>
struct Operands {
  const uint8_t *a, *b, *sfa, *sfb;
  LSFA lsfa;
  LSFB lsfb;
  int k;
  __device__ float A(long long m, int kk) const {
    float v = Elem<TA>::at(a, size_t(m) * k + kk);
    if constexpr (!std::is_void_v<TSF>) v *= Scale<TSF>::dec(cute::make_tensor(sfa, lsfa)(int(m), kk, 0));
    return v;
  }
  __device__ float B(long long n, int kk) const {
    float v = Elem<TB>::at(b, size_t(n) * k + kk);
    if constexpr (!std::is_void_v<TSF>) v *= Scale<TSF>::dec(cute::make_tensor(sfb, lsfb)(int(n), kk, 0));
    return v;
  }
};

// One warp per output column n and up to kRefRows rows m at a time, fp32 accumulation: the lanes stride over K (so a
// warp reads B's K-contiguous row n and A's rows with coalesced loads, each B element once for all its rows), each lane
// keeps a partial sum per row, and a shuffle reduction adds the 32 partial sums. out is MxN row-major float; C follows
// D's layout. (The order of the additions is not the kernel's; the compare's atol is relative to the group's output
// scale for that reason.) Launch: blockDim.x a multiple of 32, gridDim.x * warps per block >= N.
constexpr int kRefRows = 8;
constexpr int kRefThreads = 256;
template <class Ops>
__global__ void __launch_bounds__(kRefThreads) reference_kernel(Ops ops, int M, int N, int Kd, float alpha, float beta,
                                                                const cutlass::bfloat16_t* C, bool col_major,
                                                                float* out) {
  const int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (n >= N) return;  // the whole warp: n is per warp
  for (int m0 = blockIdx.y * kRefRows; m0 < M; m0 += gridDim.y * kRefRows) {
    const int rows = min(kRefRows, M - m0);
    float acc[kRefRows];
#pragma unroll
    for (int r = 0; r < kRefRows; ++r) acc[r] = 0.0f;
    for (int kk = lane; kk < Kd; kk += 32) {
      const float b = ops.B(n, kk);
#pragma unroll
      for (int r = 0; r < kRefRows; ++r)
        if (r < rows) acc[r] += ops.A(m0 + r, kk) * b;
    }
    for (int r = 0; r < rows; ++r) {
      float v = acc[r];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
      if (lane == 0) {
        const int m = m0 + r;
        float res = alpha * v;
        if (C) res += beta * float(C[col_major ? size_t(n) * M + m : size_t(m) * N + n]);
        out[size_t(m) * N + n] = res;
      }
    }
  }
}

// The same reference for every group of a point in one launch, with a block of kRefRows x kRefCols outputs per
// warp: each lane decodes each of its A and B elements once for the block (reference_kernel decodes an A element
// once per output column) and the groups run side by side instead of one launch after another. Every output element
// sees exactly reference_kernel's additions in its order (lane l sums k = l, l + 32, ... into its partial; then the
// same shuffle tree), so the two give the same bits. blockIdx.z is the group; blocks past a group's M or N return.
constexpr int kRefCols = 8;
template <class Ops>
struct RefGroup {
  Ops ops;
  int m, n, k;
  float alpha, beta;
  const cutlass::bfloat16_t* c;  // null: no C term
  size_t out_offset;             // the group's MxN row-major block in out
};
template <class Ops>
__global__ void __launch_bounds__(kRefThreads) reference_groups_kernel(const RefGroup<Ops>* groups, bool col_major,
                                                                       float* out) {
  const RefGroup<Ops>& g = groups[blockIdx.z];
  const int M = g.m, N = g.n, Kd = g.k;
  const int n0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * kRefCols, lane = threadIdx.x & 31;
  if (n0 >= N) return;  // the whole warp: n0 is per warp
  const int cols = min(kRefCols, N - n0);
  float* o = out + g.out_offset;
  for (int m0 = blockIdx.y * kRefRows; m0 < M; m0 += gridDim.y * kRefRows) {
    const int rows = min(kRefRows, M - m0);
    float acc[kRefRows][kRefCols];
#pragma unroll
    for (int r = 0; r < kRefRows; ++r)
#pragma unroll
      for (int c = 0; c < kRefCols; ++c) acc[r][c] = 0.0f;
    for (int kk = lane; kk < Kd; kk += 32) {
      float a[kRefRows], b[kRefCols];
#pragma unroll
      for (int r = 0; r < kRefRows; ++r) a[r] = r < rows ? g.ops.A(m0 + r, kk) : 0.0f;
#pragma unroll
      for (int c = 0; c < kRefCols; ++c) b[c] = c < cols ? g.ops.B(n0 + c, kk) : 0.0f;
#pragma unroll
      for (int r = 0; r < kRefRows; ++r)
        if (r < rows)
#pragma unroll
          for (int c = 0; c < kRefCols; ++c) acc[r][c] += a[r] * b[c];
    }
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        float v = acc[r][c];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, off);
        if (lane == 0) {
          const int m = m0 + r, n = n0 + c;
          float res = g.alpha * v;
          if (g.c) res += g.beta * float(g.c[col_major ? size_t(n) * M + m : size_t(m) * N + n]);
          o[size_t(m) * N + n] = res;
        }
      }
  }
}

// ---- Element-wise compare of one group's D against its reference ----
// Element (m, n) of the MxN output is bad when D is non-finite, the reference is non-finite, or
// |D - ref| > atol * rms(ref) + rtol * |ref|, where rms(ref) is the root mean square of the group's reference (so atol
// is relative to the group's output scale: accumulation-order differences grow with the partial sums, not with the
// element itself, and an absolute atol would mean something else for every K and data range). Its ratio is |D - ref| / (atol + rtol * |ref|) (infinite when either value is
// non-finite, or when the tolerance is 0 and the difference is not). The worst element is kept as one 64-bit key,
// ratio bits (non-negative floats order like their bits) over the complemented row-major index (ties: first).
struct GroupStats {
  unsigned long long checked, bad, nonfinite, worst_key;
  double num, den;  // pooled Frobenius sums over finite outputs: sum (D - ref)^2, sum ref^2
  double ref_sq;    // sum of ref^2 over the whole group (ref_sq_kernel, before the compare): the atol scale
  float worst_value, worst_ref;
};

constexpr int kCompareThreads = 256;

__host__ __device__ inline size_t worst_index(unsigned long long key) { return size_t(0xFFFFFFFFull - (key & 0xFFFFFFFFull)); }

__global__ void __launch_bounds__(kCompareThreads) ref_sq_kernel(const float* ref, size_t mn, GroupStats* st) {
  double acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < mn; i += size_t(gridDim.x) * blockDim.x) {
    double r = ref[i];
    if (isfinite(r)) acc += r * r;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xFFFFFFFFu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&st->ref_sq, acc);
}

__global__ void __launch_bounds__(kCompareThreads)
    compare_kernel(const cutlass::bfloat16_t* d, const float* ref, int M, int N, bool col_major, double atol,
                   double rtol, GroupStats* st) {
  size_t mn = size_t(M) * N;
  atol *= sqrt(st->ref_sq / double(mn > 0 ? mn : 1));  // in units of the group's reference RMS
  unsigned long long bad = 0, nonfinite = 0, key = 0, seen = 0;
  double num = 0, den = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < mn; i += size_t(gridDim.x) * blockDim.x) {
    ++seen;  // counted, not assumed: checked_elements is what the compare visited
    size_t m = i / size_t(N), n = i % size_t(N);
    double r = ref[i];
    double v = float(d[col_major ? n * size_t(M) + m : i]);
    bool fin = isfinite(v), rfin = isfinite(r);
    double diff = fabs(v - r), tol = atol + rtol * fabs(r);
    float ratio;
    if (!fin || !rfin) ratio = INFINITY;
    else if (tol > 0) ratio = float(diff / tol);  // past FLT_MAX this rounds to infinity
    else ratio = diff > 0 ? INFINITY : 0.0f;
    if (!fin) ++nonfinite;
    else num += (v - r) * (v - r), den += r * r;
    if (!fin || !rfin || diff > tol) ++bad;
    unsigned long long k = (static_cast<unsigned long long>(__float_as_uint(ratio)) << 32) | (0xFFFFFFFFull - i);
    key = k > key ? k : key;
  }
  for (int o = 16; o > 0; o >>= 1) {
    bad += __shfl_down_sync(0xFFFFFFFFu, bad, o);
    seen += __shfl_down_sync(0xFFFFFFFFu, seen, o);
    nonfinite += __shfl_down_sync(0xFFFFFFFFu, nonfinite, o);
    num += __shfl_down_sync(0xFFFFFFFFu, num, o);
    den += __shfl_down_sync(0xFFFFFFFFu, den, o);
    unsigned long long k = __shfl_down_sync(0xFFFFFFFFu, key, o);
    key = k > key ? k : key;
  }
  __shared__ unsigned long long s_bad[32], s_nonfinite[32], s_key[32], s_seen[32];
  __shared__ double s_num[32], s_den[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s_bad[warp] = bad, s_seen[warp] = seen, s_nonfinite[warp] = nonfinite, s_key[warp] = key, s_num[warp] = num, s_den[warp] = den;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < int(blockDim.x + 31) / 32; ++w) {
    bad += s_bad[w], seen += s_seen[w], nonfinite += s_nonfinite[w], num += s_num[w], den += s_den[w];
    key = s_key[w] > key ? s_key[w] : key;
  }
  if (bad) atomicAdd(&st->bad, bad);
  atomicAdd(&st->checked, seen);
  if (nonfinite) atomicAdd(&st->nonfinite, nonfinite);
  atomicAdd(&st->num, num);
  atomicAdd(&st->den, den);
  atomicMax(&st->worst_key, key);
}

// After compare_kernel (same stream): the worst element's D and reference values, while ref still holds this group.
__global__ void worst_values_kernel(const cutlass::bfloat16_t* d, const float* ref, int M, int N, bool col_major,
                                    GroupStats* st) {
  size_t i = worst_index(st->worst_key), m = i / size_t(N), n = i % size_t(N);
  st->worst_value = float(d[col_major ? n * size_t(M) + m : i]);
  st->worst_ref = ref[i];
}
