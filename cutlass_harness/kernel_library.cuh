// tileprobe: the runtime harness's handle on its GEMM kernel, which is not compiled into the harness.
//
// build.py builds a runtime harness as two nvcc processes at once: kernel.cu → kernel.cubin (`nvcc -cubin`: the
// GEMM kernel alone, cicc and ptxas) and run.cu → harness (the host code, the reference and the check, with no GEMM
// device code). Both define CUTLASS_ENABLE_CUDA_HOST_ADAPTER, so in the harness GemmUniversalAdapter never names
// `device_kernel<GemmKernel>`: it builds the workspace, the Params and the grid exactly as always, and hands the launch
// to a CudaHostAdapter, this one, which launches the kernel loaded from kernel.cubin (beside the harness binary)
// through the runtime's library API (a cudaKernel_t is accepted wherever the runtime takes a kernel entry).
// Launches go through CUTLASS's own ClusterLauncher or the plain launch CUTLASS's kernel_launch makes, so the
// launch is CUTLASS's; the one thing the adapter contract leaves to the adapter, the dynamic shared-memory opt-in
// initialize() makes without an adapter, is opt_in_smem() below, the same call under the same rule.
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "cutlass/cluster_launch.hpp"
#include "cutlass/cuda_host_adapter.hpp"
#include "reference.cuh"  // pattern_fill_kernel

#if !CUTLASS_ENABLE_CUDA_HOST_ADAPTER
#error "kernel_library.cuh needs CUTLASS_ENABLE_CUDA_HOST_ADAPTER=true (build.py passes it to both TUs)"
#endif

struct KernelLibrary final : cutlass::CudaHostAdapter {
  using Status = cutlass::Status;
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  std::string path;
  std::string name;  // the loaded entry's (mangled) name, from the runtime

  // The cubin of config `index` built beside this executable: kernel.<index>.cubin.
  static std::string default_path(int index) {
    std::string file = "kernel." + std::to_string(index) + ".cubin";
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return file;
    std::string exe(buf, size_t(n));
    return exe.substr(0, exe.rfind('/') + 1) + file;
  }

  // Load once; "" or why not (the error the runtime gave, with the file). `config_id` is the config this harness
  // runs (its TP_CFG_ID), `index` its index in the harness: the cubin names its own config (kernel.cu's
  // tp_config_id), so a cubin of another config is refused, never launched with this config's Params.
  std::string load(const char* config_id, int index) {
    if (kernel) return "";
    path = default_path(index);
    cudaError_t e = cudaLibraryLoadFromFile(&library, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e != cudaSuccess) return "cudaLibraryLoadFromFile(" + path + "): " + cudaGetErrorName(e) + " — " + cudaGetErrorString(e);
    void* id_ptr = nullptr;
    size_t id_bytes = 0;
    std::string id;
    if (cudaLibraryGetGlobal(&id_ptr, &id_bytes, library, "tp_config_id") == cudaSuccess && id_bytes > 0) {
      std::vector<char> text(id_bytes);
      if (cudaMemcpy(text.data(), id_ptr, id_bytes, cudaMemcpyDeviceToHost) == cudaSuccess) id.assign(text.data(), strnlen(text.data(), id_bytes));
    }
    cudaGetLastError();
    if (id != config_id) return path + " holds config '" + id + "', not this harness's '" + config_id + "'";
    unsigned count = 0;
    e = cudaLibraryGetKernelCount(&count, library);
    if (e != cudaSuccess) return std::string("cudaLibraryGetKernelCount: ") + cudaGetErrorString(e);
    if (count != 1) return path + " holds " + std::to_string(count) + " kernels; kernel.cu builds exactly one";
    e = cudaLibraryEnumerateKernels(&kernel, 1, library);
    if (e != cudaSuccess) return std::string("cudaLibraryEnumerateKernels: ") + cudaGetErrorString(e);
    const char* nm = nullptr;
    if (cudaFuncGetName(&nm, fn()) == cudaSuccess && nm) name = nm;
    kernel_handles[0] = reinterpret_cast<void*>(kernel);
    kernel_count = 1;
    return "";
  }

  const void* fn() const { return reinterpret_cast<const void*>(kernel); }

  // GemmUniversalAdapter::initialize() without an adapter: `if (smem_size >= (48 << 10))` it calls
  // cudaFuncSetAttribute(MaxDynamicSharedMemorySize) and returns kErrorInternal when that fails.
  Status opt_in_smem(int smem_size) const {
    if (smem_size >= (48 << 10)) {
      if (cudaFuncSetAttribute(fn(), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size) != cudaSuccess) {
        cudaGetLastError();
        return Status::kErrorInternal;
      }
    }
    return Status::kSuccess;
  }

  Status query_occupancy(int32_t* device_sms, int32_t* sm_occupancy, int32_t, int32_t thread_count,
                         int32_t smem_size) const override {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(device_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(sm_occupancy, fn(), thread_count, smem_size,
                                                               cudaOccupancyDisableCachingOverride) != cudaSuccess)
      return Status::kErrorInternal;
    return Status::kSuccess;
  }

  // CUTLASS's kernel_launch without PDL: device_kernel<<<grid, block, smem, stream>>>(params).
  Status launch(dim3 const grid, dim3 const block, size_t const smem, cudaStream_t stream, void** params,
                int32_t) const override {
    return cudaLaunchKernel(fn(), grid, block, params, smem, stream) == cudaSuccess ? Status::kSuccess
                                                                                    : Status::kErrorInternal;
  }

  Status launch(dim3 const grid, dim3 const cluster, dim3 const block, size_t const smem, cudaStream_t stream,
                void** params, int32_t) const override {
    return cutlass::ClusterLauncher::launch(grid, cluster, block, smem, stream, fn(), params);
  }

  Status launch(dim3 const grid, dim3 const cluster, dim3 const fallback, dim3 const block, size_t const smem,
                cudaStream_t stream, void** params, int32_t) const override {
    if (fallback.x * fallback.y * fallback.z == 0)
      return cutlass::ClusterLauncher::launch(grid, cluster, block, smem, stream, fn(), params);
    return cutlass::ClusterLauncher::launch_with_fallback_cluster(grid, cluster, fallback, block, smem, stream, fn(),
                                                                 params);
  }

  // Required by the adapter's interface, and not called by the kernels tileprobe builds (CUTLASS builds their TMA
  // descriptors itself): forwarded to the driver as CUTLASS's own wrappers do.
  CUresult tensorMapEncodeIm2col(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                 const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                 const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                 const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                 CUtensorMapFloatOOBfill oob) const override {
    return CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeIm2col)(map, type, rank, address, dims, strides, lower,
                                                                     upper, channels, pixels, element_strides,
                                                                     interleave, swizzle, l2, oob);
  }
  CUresult tensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                CUtensorMapFloatOOBfill oob) const override {
    return CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(map, type, rank, address, dims, strides, box,
                                                                    element_strides, interleave, swizzle, l2, oob);
  }
  CUresult tensorMapReplaceAddress(CUtensorMap* map, void* address) const override {
    using Fn = CUresult (*)(CUtensorMap*, void*);  // CUTLASS wraps Tiled and Im2col only
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", &pfn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess || found != cudaDriverEntryPointSuccess)
      return CUDA_ERROR_UNKNOWN;
    return reinterpret_cast<Fn>(pfn)(map, address);
  }

 protected:
  // Workspace clears and fills (cutlass/workspace.h): 1-, 2- or 4-byte values.
  Status memsetDeviceImpl(void* dst, void const* value, size_t size, size_t count, cudaStream_t stream) const override {
    cudaError_t e = cudaSuccess;
    auto fill = [&](auto v) {
      using T = decltype(v);
      std::memcpy(&v, value, sizeof(T));
      int blocks = int(std::min<size_t>((count + 255) / 256, 1024));
      if (blocks > 0) pattern_fill_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(dst), v, count);
      e = cudaGetLastError();
    };
    if (size == 1) e = cudaMemsetAsync(dst, *static_cast<const unsigned char*>(value), count, stream);
    else if (size == 2) fill(uint16_t{});
    else if (size == 4) fill(uint32_t{});
    else if (size == 8) fill(uint64_t{});
    else return Status::kErrorInternal;
    return e == cudaSuccess ? Status::kSuccess : Status::kErrorInternal;
  }
};
