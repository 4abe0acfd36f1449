// LD_PRELOAD shim: records what a library asks the CUDA runtime for at each kernel launch (the kernel's name, the
// dynamic shared memory of the launch, the MaxDynamicSharedMemorySize it sets) into $TILEPROBE_LAUNCH_LOG, one JSON
// line each, then calls the real function. Nothing is changed: every call goes on to libcudart unaltered.
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>

static std::mutex mu;

static void log_line(const char* what, const void* func, long long value, int extra) {
  const char* path = getenv("TILEPROBE_LAUNCH_LOG");
  if (!path) return;
  // resolved from the libcudart the process already loaded (the shim links none of its own)
  using name_t = cudaError_t (*)(const char**, const void*);
  using attr_t = cudaError_t (*)(cudaFuncAttributes*, const void*);
  static name_t get_name = (name_t)dlsym(RTLD_DEFAULT, "cudaFuncGetName");
  static attr_t get_attr = (attr_t)dlsym(RTLD_DEFAULT, "cudaFuncGetAttributes");
  const char* name = nullptr;
  if (!get_name || get_name(&name, func) != cudaSuccess || !name) name = "?";
  int status = 0;
  char* dem = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  cudaFuncAttributes attr{};
  cudaError_t e = get_attr ? get_attr(&attr, func) : cudaErrorUnknown;
  std::lock_guard<std::mutex> g(mu);
  FILE* f = fopen(path, "a");
  if (f) {
    fprintf(f, "{\"event\": \"%s\", \"value\": %lld, \"extra\": %d, \"static_smem\": %zu, \"max_dynamic\": %d, "
               "\"attr_ok\": %d, \"name\": \"", what, value, extra, e == cudaSuccess ? attr.sharedSizeBytes : 0,
            e == cudaSuccess ? attr.maxDynamicSharedSizeBytes : -1, e == cudaSuccess);
    for (const char* p = (status == 0 && dem) ? dem : name; *p; ++p) {
      if (*p == '"' || *p == '\\') fputc('\\', f);
      fputc(*p, f);
    }
    fprintf(f, "\"}\n");
    fclose(f);
  }
  free(dem);
}

extern "C" cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                        cudaStream_t stream) {
  using fn_t = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "cudaLaunchKernel");
  log_line("launch", func, (long long)smem, (int)(grid.x * grid.y * grid.z));
  return real(func, grid, block, args, smem, stream);
}

extern "C" cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using fn_t = cudaError_t (*)(const void*, cudaFuncAttribute, int);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "cudaFuncSetAttribute");
  cudaError_t r = real(func, attr, value);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) log_line("set_max_dynamic", func, value, (int)r);
  return r;
}
