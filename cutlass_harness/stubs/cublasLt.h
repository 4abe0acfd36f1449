// tileprobe stub: just enough of cuBLAS's enum for TensorRT-LLM's cudaUtils.h to parse. No kernel type depends on
// cuBLAS; this exists only so that FlashInfer's own MoE launcher compiles on a machine without cuBLAS headers
// (tests/test_engine_flashinfer.py). Values follow the public cuBLAS documentation.
#pragma once
// The real header reaches <math.h> through cublas_api.h -> cuComplex.h; TensorRT-LLM's cudaUtils.h relies on that
// (expf, sqrtf) when a .cpp that includes it is compiled by the host compiler, as FlashInfer's JIT compiles them.
#include <cuComplex.h>
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
