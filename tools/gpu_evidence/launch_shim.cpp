// LD_PRELOAD shim: records what a library asks the CUDA runtime for at each kernel launch (the kernel's name, the
// dynamic shared memory of the launch, the MaxDynamicSharedMemorySize it sets) into $TILEPROBE_LAUNCH_LOG, one JSON
// line each, then calls the real function. Nothing is changed: every call goes on to libcudart unaltered.
// Launch paths seen: __cudaLaunchKernel (nvcc 12.4+ stubs, <<<>>>), cudaLaunchKernel (a stub pointer: FlashInfer's
// FA2/FA3 dispatchers without PDL), cudaLaunchKernelExC (cudaLaunchKernelEx: FlashInfer with PDL, whose
// cudaLaunchConfig_t carries dynamicSmemBytes). Each launch line says which API ("api").
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

static std::mutex mu;

static void write_raw(const char* line) {
  const char* path = getenv("TILEPROBE_LAUNCH_LOG");
  if (!path) return;
  std::lock_guard<std::mutex> g(mu);
  FILE* f = fopen(path, "a");
  if (f) {
    fputs(line, f);
    fclose(f);
  }
}

__attribute__((constructor)) static void loaded() { write_raw("{\"event\": \"shim-loaded\"}\n"); }

// nvcc 12.4+ launch stubs call __cudaLaunchKernel with a cudaKernel_t (a CUkernel); its name and static bytes
// come from the driver (cuKernelGetName, cuKernelGetAttribute), resolved from the libcuda already loaded.
static void log_kernel(const void* kernel, long long smem, int blocks) {
  using name_t = int (*)(const char**, const void*);
  using attr_t = int (*)(int*, int, const void*, int);
  // libcudart opens libcuda privately: take its symbols from that library's own handle
  static void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  static name_t get_name = (name_t)dlsym(libcuda ? libcuda : RTLD_DEFAULT, "cuKernelGetName");
  static attr_t get_attr = (attr_t)dlsym(libcuda ? libcuda : RTLD_DEFAULT, "cuKernelGetAttribute");
  const char* name = nullptr;
  if (!get_name || get_name(&name, kernel) != 0 || !name) name = "?";
  int dev = 0, stat = -1, maxdyn = -1;
  cudaGetDevice(&dev);
  if (get_attr) {
    get_attr(&stat, 1 /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */, kernel, dev);
    get_attr(&maxdyn, 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, kernel, dev);
  }
  int status = 0;
  char* dem = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = "{\"event\": \"launch\", \"api\": \"__cudaLaunchKernel\", \"value\": " + std::to_string(smem) + ", \"extra\": " +
                    std::to_string(blocks) + ", \"static_smem\": " + std::to_string(stat) +
                    ", \"max_dynamic\": " + std::to_string(maxdyn) + ", \"name\": \"";
  for (const char* p = (status == 0 && dem) ? dem : name; *p; ++p) {
    if (*p == '"' || *p == '\\') out += '\\';
    out += *p;
  }
  out += "\"}\n";
  free(dem);
  write_raw(out.c_str());
}

extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t smem,
                                          cudaStream_t stream) {
  using fn_t = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "__cudaLaunchKernel");
  log_kernel((const void*)kernel, (long long)smem, (int)(grid.x * grid.y * grid.z));
  return real(kernel, grid, block, args, smem, stream);
}

extern "C" cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t smem,
                                               cudaStream_t stream) {
  using fn_t = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "__cudaLaunchKernel_ptsz");
  log_kernel((const void*)kernel, (long long)smem, (int)(grid.x * grid.y * grid.z));
  return real(kernel, grid, block, args, smem, stream);
}

// A libcudart function, from the process's global scope, else from the libcudart already loaded (by its own handle:
// a library loaded RTLD_LOCAL, as Python extensions are, is not in the global scope).
static void* cudart_sym(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (p) return p;
  for (const char* so : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    void* h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    if (h && (p = dlsym(h, name))) return p;
  }
  return nullptr;
}

static void log_line(const char* what, const void* func, long long value, int extra, const char* api = nullptr,
                     int attrs = -1) {
  const char* path = getenv("TILEPROBE_LAUNCH_LOG");
  if (!path) return;
  // resolved from the libcudart the process already loaded (the shim links none of its own)
  using name_t = cudaError_t (*)(const char**, const void*);
  using attr_t = cudaError_t (*)(cudaFuncAttributes*, const void*);
  static name_t get_name = (name_t)cudart_sym("cudaFuncGetName");
  static attr_t get_attr = (attr_t)cudart_sym("cudaFuncGetAttributes");
  const char* name = nullptr;
  if (!get_name || get_name(&name, func) != cudaSuccess || !name) name = "?";
  int status = 0;
  char* dem = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  cudaFuncAttributes attr{};
  cudaError_t e = get_attr ? get_attr(&attr, func) : cudaErrorUnknown;
  std::lock_guard<std::mutex> g(mu);
  FILE* f = fopen(path, "a");
  if (f) {
    fprintf(f, "{\"event\": \"%s\", ", what);
    if (api) fprintf(f, "\"api\": \"%s\", \"launch_attrs\": %d, ", api, attrs);
    fprintf(f, "\"value\": %lld, \"extra\": %d, \"static_smem\": %zu, \"max_dynamic\": %d, "
               "\"attr_ok\": %d, \"name\": \"", value, extra, e == cudaSuccess ? attr.sharedSizeBytes : 0,
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
  log_line("launch", func, (long long)smem, (int)(grid.x * grid.y * grid.z), "cudaLaunchKernel");
  return real(func, grid, block, args, smem, stream);
}

// cudaLaunchKernelEx (the C++ template in cuda_runtime.h) calls this: the dynamic shared memory is the config's
// dynamicSmemBytes, the launch attributes (PDL's programmatic stream serialization, say) are counted.
extern "C" cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  using fn_t = cudaError_t (*)(const cudaLaunchConfig_t*, const void*, void**);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "cudaLaunchKernelExC");
  if (config)
    log_line("launch", func, (long long)config->dynamicSmemBytes,
             (int)(config->gridDim.x * config->gridDim.y * config->gridDim.z), "cudaLaunchKernelExC",
             (int)config->numAttrs);
  return real(config, func, args);
}

extern "C" cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  using fn_t = cudaError_t (*)(const cudaLaunchConfig_t*, const void*, void**);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "cudaLaunchKernelExC_ptsz");
  if (config)
    log_line("launch", func, (long long)config->dynamicSmemBytes,
             (int)(config->gridDim.x * config->gridDim.y * config->gridDim.z), "cudaLaunchKernelExC_ptsz",
             (int)config->numAttrs);
  return real(config, func, args);
}

extern "C" cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using fn_t = cudaError_t (*)(const void*, cudaFuncAttribute, int);
  static fn_t real = (fn_t)dlsym(RTLD_NEXT, "cudaFuncSetAttribute");
  cudaError_t r = real(func, attr, value);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) log_line("set_max_dynamic", func, value, (int)r);
  return r;
}
