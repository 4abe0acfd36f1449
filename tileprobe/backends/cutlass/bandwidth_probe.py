"""The child process of tileprobe.backends.cutlass.bandwidth: measures one GPU's reference bandwidths through cuda-python and prints
one JSON line. Run as `python -m tileprobe.backends.cutlass.bandwidth_probe --gpu N` (tileprobe.backends.cutlass.bandwidth.measure does); its job is
to touch the GPU, so it imports cuda-python at the top."""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys

import cuda.bindings
from cuda.bindings import driver, nvrtc
from cuda.bindings import runtime as cudart

from tileprobe.backends.cutlass.bandwidth import GiB, failed as _failed

REPEATS = 5  # timings per measurement; the median is reported, the best beside it
ITERS = 10  # copies / kernel launches per timing

_READ_KERNEL = r"""
extern "C" __global__ void read_stream(const uint4* __restrict__ src, unsigned long long n, unsigned int* out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {  // four 16-byte loads in flight per thread
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) { uint4 a = src[i]; acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ unsigned int warp_acc[32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;  // one value per block, stored, so no load can be optimized away
  for (unsigned int w = 1; w < (blockDim.x + 31) / 32; ++w) acc ^= warp_acc[w];
  out[blockIdx.x] = acc;
}
"""


class CudaError(RuntimeError):
    """A CUDA driver or NVRTC call failed; the message names the call and the error."""


def _ok(result, what: str):
    """Unpack a cuda-python (status, *values) tuple; raise CudaError naming the call and the error otherwise."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise CudaError(f"{what}: {_error_name(status)}")
    return values[0] if len(values) == 1 else tuple(values)


def _error_name(status) -> str:
    name = getattr(status, "name", str(status))
    try:
        err, text = driver.cuGetErrorString(status) if isinstance(status, driver.CUresult) else (1, b"")
        return f"{name} ({text.decode()})" if int(err) == 0 and text else name
    except Exception:  # noqa: BLE001 - the name alone still says what failed
        return name


def l2_bytes(gpu_index: int) -> int | None:
    """The L2 cache size of visible GPU `gpu_index` (cudaDevAttrL2CacheSize); None without a GPU or cuda-python."""
    try:
        return int(_ok(cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrL2CacheSize, gpu_index),
                       "cudaDeviceGetAttribute(L2CacheSize)"))
    except Exception:  # noqa: BLE001
        return None


def _compile_read_kernel(cc: tuple[int, int]) -> tuple[bytes, str]:
    """NVRTC: a cubin for sm_XY, else PTX for compute_XY (JIT-compiled by the driver). Returns (image, how)."""
    ver = "%d.%d" % _ok(nvrtc.nvrtcVersion(), "nvrtcVersion")
    errors = []
    for arch, cubin in ((f"sm_{cc[0]}{cc[1]}", True), (f"compute_{cc[0]}{cc[1]}", False)):
        prog = _ok(nvrtc.nvrtcCreateProgram(_READ_KERNEL.encode(), b"read_stream.cu", 0, [], []), "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture={arch}".encode()]
            status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
            if int(status) != 0:
                log = b" " * _ok(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
                nvrtc.nvrtcGetProgramLog(prog, log)
                errors.append(f"{arch}: {status.name}: {log.decode(errors='replace').strip()[:300]}")
                continue
            get_size, get = (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if cubin else \
                (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
            image = b" " * _ok(get_size(prog), get_size.__name__)
            _ok(get(prog, image), get.__name__)
            return image, f"NVRTC {ver} {'cubin' if cubin else 'PTX'} {arch}"
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    raise CudaError(f"NVRTC {ver} could not compile the read kernel: " + "; ".join(errors))


def _time(driver, stream, fn) -> list[float]:
    """Milliseconds per call of fn(), REPEATS timings of ITERS calls each between two CUDA events."""
    start, end = _ok(driver.cuEventCreate(0), "cuEventCreate"), _ok(driver.cuEventCreate(0), "cuEventCreate")
    try:
        for _ in range(2):  # warm-up
            fn()
        _ok(driver.cuStreamSynchronize(stream), "cuStreamSynchronize(warm-up)")
        out = []
        for _ in range(REPEATS):
            _ok(driver.cuEventRecord(start, stream), "cuEventRecord")
            for _ in range(ITERS):
                fn()
            _ok(driver.cuEventRecord(end, stream), "cuEventRecord")
            _ok(driver.cuEventSynchronize(end), "cuEventSynchronize")
            out.append(float(_ok(driver.cuEventElapsedTime(start, end), "cuEventElapsedTime")) / ITERS)
        return out
    finally:
        driver.cuEventDestroy(start), driver.cuEventDestroy(end)


def _gbps(nbytes: int, ms: list[float]) -> tuple[float, float]:
    """(median, best) in GB/s (10^9 bytes per second)."""
    rates = [nbytes / (t * 1e-3) / 1e9 for t in ms if t > 0]
    if not rates:
        raise CudaError(f"no positive timings: {ms}")
    return round(statistics.median(rates), 1), round(max(rates), 1)


def _measure_here(gpu_index: int, buffer_bytes: int = GiB) -> dict:
    """The measurement itself, in this process (the child). Each part fails on its own, with its error text."""
    D = driver.CUdevice_attribute
    out = _failed(gpu_index, "")
    _ok(driver.cuInit(0), "cuInit")
    dev = _ok(driver.cuDeviceGet(gpu_index), f"cuDeviceGet({gpu_index})")

    def attr(a):
        return int(_ok(driver.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})"))

    cc = (attr(D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    out.update(l2_bytes=attr(D.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE), cc=f"{cc[0]}.{cc[1]}",
               device_name=_ok(driver.cuDeviceGetName(256, dev), "cuDeviceGetName").split(b"\0")[0].decode())
    ctx = _ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    errors, methods, ptrs = [], [], []
    try:
        _ok(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        free, _total = _ok(driver.cuMemGetInfo(), "cuMemGetInfo")
        # Two buffers, at most half the free memory.
        out["buffer_bytes"] = nbytes = min(buffer_bytes, int(free) // 4) // 4096 * 4096
        if nbytes < 64 * 1024**2:
            raise CudaError(f"only {int(free)} B free on the device")
        stream = _ok(driver.cuStreamCreate(0), "cuStreamCreate")
        src, dst = ptrs = [_ok(driver.cuMemAlloc(nbytes), "cuMemAlloc") for _ in range(2)]  # freed at exit on error
        for i, p in enumerate(ptrs):
            _ok(driver.cuMemsetD8(p, i + 1, nbytes), "cuMemsetD8")
        try:
            ms = _time(driver, stream, lambda: _ok(driver.cuMemcpyDtoDAsync(dst, src, nbytes, stream),
                                                    "cuMemcpyDtoDAsync"))
            out["copy_gbps"], out["copy_gbps_best"] = _gbps(2 * nbytes, ms)
            methods.append(f"copy: cuda-python {getattr(cuda.bindings, '__version__', '?')} cuMemcpyDtoDAsync of "
                           f"{nbytes} B, counting 2x bytes (read + written), median of {REPEATS} timings of {ITERS}")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"copy: {exc}")
        try:
            image, how = _compile_read_kernel(cc)
            module = _ok(driver.cuModuleLoadData(image), "cuModuleLoadData")
            func = _ok(driver.cuModuleGetFunction(module, b"read_stream"), "cuModuleGetFunction")
            threads = 256  # a full SM's worth of threads on every SM
            blocks = attr(D.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) * max(
                1, attr(D.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) // threads)
            args = [ctypes.c_uint64(int(src)), ctypes.c_uint64(nbytes // 16), ctypes.c_uint64(int(dst))]
            params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
            ms = _time(driver, stream, lambda: _ok(driver.cuLaunchKernel(
                func, blocks, 1, 1, threads, 1, 1, 0, stream, ctypes.addressof(params), 0), "cuLaunchKernel"))
            out["read_gbps"], out["read_gbps_best"] = _gbps(nbytes, ms)
            methods.append(f"read: {how} kernel, {blocks}x{threads} threads, uint4 loads, one value per block; "
                           f"{nbytes} B read, median of {REPEATS} timings of {ITERS}")
            _ok(driver.cuModuleUnload(module), "cuModuleUnload")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"read: {exc}")
    finally:
        for p in ptrs:
            driver.cuMemFree(p)
        driver.cuDevicePrimaryCtxRelease(dev)
    out["method"] = "; ".join(methods) or None
    out["error"] = "; ".join(errors) or None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tileprobe.backends.cutlass.bandwidth_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0, help="visible GPU index (as cuda-python counts them)")
    ap.add_argument("--bytes", type=int, default=GiB, help="buffer size in bytes (default 1 GiB)")
    a = ap.parse_args(argv)
    try:
        res = _measure_here(a.gpu, a.bytes)
    except Exception as exc:  # noqa: BLE001 - anything at all becomes the error text of the one JSON line
        res = _failed(a.gpu, f"{type(exc).__name__}: {exc}")
    print(json.dumps(res), flush=True)
    return 0 if res.get("error") is None else 1


if __name__ == "__main__":
    sys.exit(main())
