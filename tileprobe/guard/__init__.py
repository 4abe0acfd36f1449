"""The runtime guard: will a kernel launch with this much dynamic shared memory on this device? Exact to the byte.

A launch succeeds exactly when static + dynamic <= the device's opt-in limit, where static is the kernel's
`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES` (= `cudaFuncGetAttributes(...).sharedSizeBytes` = ptxas's "bytes smem") and the
limit is `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` (measured on an H200 at every request across the
limit: results/guard/). Nothing else enters.

    from tileprobe.guard import fits, max_dynamic_smem
    f = fits(kernel, (Dl + Dr + kv_len) * 4)  # a cuda-python CUfunction or CUkernel, or a compiled Triton kernel
    if not f:
        print("n/a", f.reason)                    # "... = 101504 B > 101376 B opt-in on NVIDIA GB10 by 128 B"

`device`: None (the current context's device, else device 0), a device ordinal, a cuda-python CUdevice, or an offline
target name ("rtx-pro-6000", "dgx-spark-gb10", ...; tileprobe.targets) to answer for a GPU that is not here: then the
static bytes come from the kernel's cubin (a compiled Triton kernel carries one) and the limit from the profile.

The C++ twin is one header, `tileprobe/guard.h`, in the folder `tileprobe include` prints (`include_dir()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileprobe.binary.cubin import kernels_of
from tileprobe.binary.elf import cubin_arch, parse_elf
from tileprobe.errors import TileprobeError, UsageError
from tileprobe.lazy import LazyModule
from tileprobe.targets import PROFILES, Target, profile

_driver = LazyModule("cuda.bindings.driver")

INCLUDE_DIR = Path(__file__).resolve().parent / "include"


class GuardError(TileprobeError):
    """The driver could not answer (no driver, no context, a bad handle); the message names the call."""


def include_dir() -> Path:
    """The folder to pass to `-I` for `#include <tileprobe/guard.h>`."""
    return INCLUDE_DIR


@dataclass(frozen=True)
class Fit:
    """The guard's answer with its bytes; true when the launch fits."""
    fits: bool
    static_bytes: int
    dynamic_bytes: int
    optin_bytes: int
    device: str  # "NVIDIA H200 (device 0)" or "rtx-pro-6000 (offline profile)"
    kernel: str

    def __bool__(self) -> bool:
        return self.fits

    @property
    def max_dynamic_bytes(self) -> int:
        return max(0, self.optin_bytes - self.static_bytes)

    @property
    def reason(self) -> str:
        need = self.static_bytes + self.dynamic_bytes
        if self.fits:
            return (f"{self.kernel}: {self.static_bytes} static + {self.dynamic_bytes} dynamic = {need} B <= "
                    f"{self.optin_bytes} B opt-in on {self.device}, {self.optin_bytes - need} B to spare")
        return (f"{self.kernel}: {self.static_bytes} static + {self.dynamic_bytes} dynamic = {need} B > "
                f"{self.optin_bytes} B opt-in on {self.device} by {need - self.optin_bytes} B "
                f"(largest dynamic request: {self.max_dynamic_bytes} B)")


def _call(name: str, *args):
    why = _driver.missing()
    if why:
        raise GuardError(f"cuda-python driver bindings unavailable: {why}")
    try:
        err, *values = getattr(_driver, name)(*args)
    except Exception as exc:  # no driver library (cuda-python raises its own loader errors), a wrong handle type
        raise GuardError(f"{name}: {type(exc).__name__}: {exc}") from None
    if int(err) != 0:
        raise GuardError(f"{name}: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else values


def _is_triton(fn: Any) -> bool:
    return hasattr(fn, "metadata") and hasattr(fn, "asm")


def _device(device: Any) -> tuple[Any, str, int] | Target:
    """(CUdevice, label, opt-in bytes) for a real device, or the offline Target."""
    if isinstance(device, Target):
        return device
    if isinstance(device, str):
        if device not in PROFILES:
            raise UsageError(f"unknown target {device!r}; known: {', '.join(PROFILES)}")
        return profile(device)
    if device is None:
        _call("cuInit", 0)
        try:
            dev = _call("cuCtxGetDevice")
        except GuardError:  # no current context: the first device
            dev = _call("cuDeviceGet", 0)
    elif isinstance(device, int):
        _call("cuInit", 0)
        dev = _call("cuDeviceGet", device)
    else:
        dev = device
    optin = _call("cuDeviceGetAttribute",
                  _driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)
    name = _call("cuDeviceGetName", 256, dev)
    label = (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
    return dev, f"{label} (device {int(dev)})", int(optin)


def _triton_static_from_cubin(fn: Any) -> int:
    cubin = fn.asm.get("cubin") if isinstance(fn.asm, dict) else None
    if not isinstance(cubin, (bytes, bytearray)):
        raise GuardError("this Triton kernel carries no cubin (asm['cubin']) to read its static shared memory from")
    elf = parse_elf(bytes(cubin), "Triton cubin")
    sm, suffix = cubin_arch(elf)
    found = kernels_of(elf, f"sm_{sm}{suffix}", sm, suffix, "Triton cubin")
    name = getattr(fn.metadata, "name", None) or getattr(fn, "name", None)
    match = [k for k in found if k.name == name] or found
    if len(match) != 1:
        raise GuardError(f"the Triton cubin holds {len(found)} kernels; cannot tell which is {name!r}")
    return match[0].static_smem


def _static(fn: Any, dev: Any, offline: bool) -> tuple[int, str]:
    """(static shared bytes, kernel label) of fn."""
    attr = "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"
    if _is_triton(fn):
        name = str(getattr(fn.metadata, "name", None) or getattr(fn, "name", "triton kernel"))
        handle = getattr(fn, "function", None)
        if handle and not offline:
            cu = _driver.CUfunction(int(handle))
            return int(_call("cuFuncGetAttribute", getattr(_driver.CUfunction_attribute, attr), cu)), name
        return _triton_static_from_cubin(fn), name
    why = _driver.missing()
    if why:
        raise GuardError(f"a {type(fn).__name__} needs the cuda-python driver bindings: {why}")
    kind = "CUfunction" if isinstance(fn, _driver.CUfunction) else "CUkernel" if isinstance(fn, _driver.CUkernel) \
        else None
    if kind is None:
        raise UsageError(f"cannot guard a {type(fn).__name__}: pass a cuda-python CUfunction or CUkernel, or a "
                         "compiled Triton kernel")
    if offline:
        raise UsageError(f"an offline target needs the kernel's cubin; a {kind} handle has none: pass a real device, "
                         "or ask `tileprobe inspect BINARY --target NAME`")
    a = getattr(_driver.CUfunction_attribute, attr)
    if kind == "CUfunction":
        return int(_call("cuFuncGetAttribute", a, fn)), kind
    return int(_call("cuKernelGetAttribute", a, fn, dev)), kind


def fits(fn: Any, dynamic_bytes: int | None = None, device: Any = None) -> Fit:
    """Whether launching `fn` with `dynamic_bytes` of dynamic shared memory fits the device's opt-in limit.

    For a compiled Triton kernel, `dynamic_bytes` defaults to what Triton itself will request (metadata.shared)."""
    if dynamic_bytes is None:
        if not _is_triton(fn):
            raise UsageError("fits(fn, dynamic_bytes): say how many dynamic bytes the launch requests")
        dynamic_bytes = int(fn.metadata.shared)
    if int(dynamic_bytes) < 0:
        raise UsageError(f"dynamic_bytes must be >= 0, not {dynamic_bytes}")
    where = _device(device)
    if isinstance(where, Target):
        static, name = _static(fn, None, True)
        optin, label = where.smem_optin, f"{where.name} (offline profile, {where.source})"
    else:
        dev, label, optin = where
        static, name = _static(fn, dev, False)
    ok = static + int(dynamic_bytes) <= optin
    return Fit(ok, static, int(dynamic_bytes), optin, label, name)


def max_dynamic_smem(fn: Any, device: Any = None) -> int:
    """The largest dynamic shared memory `fn` may request on `device`: opt-in - static (0 when static alone is over)."""
    return fits(fn, 0, device).max_dynamic_bytes
