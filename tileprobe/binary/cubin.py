"""Per-kernel resources read from a cubin's own ELF sections: what ptxas `-v` prints and `cudaFuncGetAttributes`
returns, with no GPU and no cuobjdump.

- static shared memory: the size of `.nv.shared.<kernel>`. From sm_90 on, ptxas puts the driver's 1 KiB system reserve
  at the start of that section (sm_100 and later also record its size in the symbol `.nv.reservedSmem.cap`); the
  static bytes a launch is charged for (`sharedSizeBytes`, ptxas's "bytes smem") are the section size minus it. So
  `cuobjdump --dump-resource-usage` shows 5120 for a kernel with 4096 B of static arrays, and 1024 for one with none.
- registers: EIATTR_REGCOUNT in `.nv.info` (else the top byte of the `.text.<kernel>` section's sh_info);
- stack frame (local memory per thread; ptxas's spill slots live in it): EIATTR_FRAME_SIZE;
- launch bounds: EIATTR_MAX_THREADS / EIATTR_REQNTID in `.nv.info.<kernel>`; __maxnreg__: EIATTR_MAXREG_COUNT;
- max threads per block: the launch bound, else what the register file allows (`max_threads_for`), at most 1024.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from dataclasses import asdict, dataclass

from tileprobe.binary.elf import Elf, Image, parse_elf

EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_NUM_BARRIERS = 0x4C
EIFMT_SVAL = 0x04
STO_CUDA_ENTRY = 0x10
RESERVE_SYMBOL = ".nv.reservedSmem.cap"
RESERVE_MARKERS = (".nv.reservedSmem.offset0", "__nv_reservedSMEM_offset_0_alias")
SYSTEM_RESERVE = 1024  # the driver's per-block reserve (cudaDevAttrReservedSharedMemoryPerBlock), sm_80 and later

REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256 (8 per thread)
REGS_PER_PARTITION = 16384  # the 64 K register file is split over 4 schedulers; a warp's registers sit in one
PARTITIONS = 4
MAX_THREADS = 1024


@dataclass(frozen=True)
class Kernel:
    """One kernel's resources in one cubin."""
    name: str  # mangled, as in the binary
    demangled: str
    arch: str  # sm_90a
    sm: int
    suffix: str
    static_smem: int  # bytes a launch is charged for (sharedSizeBytes)
    smem_section: int  # size of .nv.shared.<kernel> as stored (reserve included from sm_90 on)
    reserve: int  # the system reserve inside that section (0 before sm_90)
    registers: int
    stack_frame: int  # bytes per thread of local memory (spills included)
    min_stack: int
    max_threads: int  # per block, as cudaFuncGetAttributes gives it
    launch_bounds: tuple[int, int, int] | None
    reqntid: tuple[int, int, int] | None
    maxreg: int | None
    barriers: int | None
    origin: str

    def as_dict(self) -> dict:
        return asdict(self)


def attributes(blob: bytes) -> list[tuple[int, int, bytes | int]]:
    """The (format, attribute, value) records of an .nv.info section: SVAL records carry bytes, others a u16."""
    out, p = [], 0
    while p + 4 <= len(blob):
        fmt, attr, v = struct.unpack_from("<BBH", blob, p)
        p += 4
        if fmt == EIFMT_SVAL:
            out.append((fmt, attr, blob[p:p + v]))
            p += v
        else:
            out.append((fmt, attr, v))
    return out


def _demangler():
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        lib = ctypes.CDLL(name)
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").free
    free.argtypes = [ctypes.c_void_p]
    return fn, free


_DEMANGLE = _demangler()


def demangle(name: str) -> str:
    """The C++ name through the C++ runtime's own demangler (abi::__cxa_demangle); the name itself when it is not a
    mangled name (extern "C" kernels) or no C++ runtime is loadable."""
    if _DEMANGLE is None or not name.startswith("_Z"):
        return name
    fn, free = _DEMANGLE
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        free(ptr)


def max_threads_for(registers: int, bound: int | None) -> int:
    """Threads per block a launch may use: the launch bound if any, else what the register file holds, at most 1024.

    The register file is 4 partitions of 16 K registers and a warp's registers sit in one partition, so the limit is
    4 x floor(16384 / registers per warp) warps (102 registers: 3328 per warp, 4 x 4 warps = 512 threads, not the
    608 that 65536 / 3328 would give). Measured on the lent H200 (sm_90): cudaFuncGetAttributes's
    maxThreadsPerBlock for 8 to 102 registers, results/guard/h200/proof.json. The same layout (64 K registers per
    SM, 4 partitions) holds from sm_80 to sm_120 by NVIDIA's occupancy tables; not measured on SM120."""
    limit = MAX_THREADS
    if registers > 0:
        per_warp = -(-registers * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limit = min(limit, PARTITIONS * (REGS_PER_PARTITION // per_warp) * 32)
    return min(limit, bound) if bound else limit


def reserve_in(elf: Elf) -> int:
    """The system reserve ptxas laid out at the start of each kernel's `.nv.shared.<kernel>` section: the value of
    `.nv.reservedSmem.cap` (sm_100 and later write it), else 1 KiB when the cubin uses the reserved-shared-memory
    layout at all (`.nv.reservedSmem.offset0` or a `.nv.shared.reserved.*` section: sm_90), else 0 (sm_80 and before:
    the section holds the kernel's own bytes only)."""
    cap = elf.symbol(RESERVE_SYMBOL)
    if cap is not None and cap.value:
        return cap.value
    if any(elf.symbol(m) is not None for m in RESERVE_MARKERS) or \
            any(s.name.startswith(".nv.shared.reserved.") for s in elf.sections):
        return SYSTEM_RESERVE
    return 0


def _triple(value) -> tuple[int, int, int] | None:
    if isinstance(value, bytes) and len(value) >= 12:
        return struct.unpack_from("<III", value, 0)
    return None


def kernels(image: Image) -> list[Kernel]:
    """Every kernel (entry function) of a cubin image, with its resources."""
    if image.kind != "cubin" or image.data is None:
        return []
    elf = parse_elf(image.data, image.origin)
    return kernels_of(elf, image.arch, image.sm, image.suffix, image.origin)


def kernels_of(elf: Elf, arch: str, sm: int, suffix: str, origin: str) -> list[Kernel]:
    per_sym: dict[int, dict[int, int]] = {}
    info = elf.section(".nv.info")
    if info is not None:
        for fmt, attr, value in attributes(info.data(elf.blob)):
            if fmt == EIFMT_SVAL and isinstance(value, bytes) and len(value) >= 8:
                sym, v = struct.unpack_from("<II", value, 0)
                per_sym.setdefault(sym, {})[attr] = v
    reserve = reserve_in(elf)
    out = []
    for sym in elf.symbols:
        if sym.type != 2 or not sym.other & STO_CUDA_ENTRY:
            continue
        text = elf.section(f".text.{sym.name}")
        glob = per_sym.get(sym.index, {})
        own: dict[int, bytes | int] = {}
        sec = elf.section(f".nv.info.{sym.name}")
        if sec is not None:
            own = {attr: value for _, attr, value in attributes(sec.data(elf.blob))}
        shared = elf.section(f".nv.shared.{sym.name}")
        section_size = shared.size if shared is not None else 0
        kernel_reserve = reserve if section_size >= reserve else 0
        regs = glob.get(EIATTR_REGCOUNT)
        if regs is None and text is not None:
            regs = text.info >> 24
        bounds = _triple(own.get(EIATTR_MAX_THREADS))
        reqntid = _triple(own.get(EIATTR_REQNTID))
        bound = None
        for t in (bounds, reqntid):
            if t:
                n = t[0] * max(t[1], 1) * max(t[2], 1)
                bound = n if bound is None else min(bound, n)
        maxreg = own.get(EIATTR_MAXREG_COUNT)
        barriers = own.get(EIATTR_NUM_BARRIERS)
        out.append(Kernel(
            name=sym.name, demangled=demangle(sym.name), arch=arch, sm=sm, suffix=suffix,
            static_smem=section_size - kernel_reserve, smem_section=section_size, reserve=kernel_reserve,
            registers=int(regs or 0), stack_frame=glob.get(EIATTR_FRAME_SIZE, 0),
            min_stack=glob.get(EIATTR_MIN_STACK_SIZE, 0), max_threads=max_threads_for(int(regs or 0), bound),
            launch_bounds=bounds, reqntid=reqntid, maxreg=maxreg if isinstance(maxreg, int) else None,
            barriers=barriers if isinstance(barriers, int) else None, origin=origin))
    return out
