// tileprobe family sm90-fp8: the reference's operand types for the host half's device pass (device_pass.cuh), with
// no CUTLASS GEMM header. run.cu holds Harness<K>::Ops of every sm90-fp8 config to be this type.
#pragma once

#include "cutlass/float8.h"
#include "reference.cuh"

namespace tileprobe {
using DevicePassOps = Operands<cutlass::float_e4m3_t, cutlass::float_e4m3_t>;  // no block scales
}  // namespace tileprobe
