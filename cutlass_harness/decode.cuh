// tileprobe runtime harness: the operand decoders the reference uses (the harness's own, independent of CUTLASS's
// conversions). No CUTLASS include, so tests/backends/cutlass/test_decode.py compiles them alone and holds every code
// of every format to an independent decoding.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

__host__ __device__ inline float float_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The value of an unsigned minifloat code, assembled as the fp32 with the same exponent and mantissa (every value of
// these formats is an fp32 normal): normal codes (1 + m / 2^man_bits) * 2^(e - bias), subnormal m * 2^(1 - bias -
// man_bits). Bit assembly, not ldexpf: the reference decodes every operand element this way, and it is exact.
__host__ __device__ inline float decode_minifloat(int bits, int exp_bits, int man_bits, int bias) {  // no sign, no NaN
  int e = (bits >> man_bits) & ((1 << exp_bits) - 1), m = bits & ((1 << man_bits) - 1);
  if (e == 0) return float(m) * float_from_bits(uint32_t(127 + 1 - bias - man_bits) << 23);
  return float_from_bits((uint32_t(e - bias + 127) << 23) | (uint32_t(m) << (23 - man_bits)));
}
__host__ __device__ inline float decode_e4m3(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return NAN;
  float v = decode_minifloat(b & 0x7F, 4, 3, 7);
  return (b & 0x80) ? -v : v;
}
__host__ __device__ inline float decode_ue4m3(uint8_t b) {  // the sign bit is ignored; 0x7F is NaN, as in e4m3
  return (b & 0x7F) == 0x7F ? NAN : decode_minifloat(b & 0x7F, 4, 3, 7);
}
__host__ __device__ inline float decode_ue8m0(uint8_t b) {  // 2^(b - 127); b = 0 is the fp32 subnormal 2^-127
  return b == 0xFF ? NAN : float_from_bits(b ? uint32_t(b) << 23 : 0x00400000u);
}
__host__ __device__ inline float decode_e2m1(uint8_t nib) {
  float v = decode_minifloat(nib & 7, 2, 1, 1);  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
  return (nib & 8) ? -v : v;
}
