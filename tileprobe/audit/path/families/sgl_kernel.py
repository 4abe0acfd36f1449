"""SGLang's own CUDA ops (the sglang-kernel package SGLang pins): RMSNorm, fused-add RMSNorm, SiLU-and-mul and the
rotary embedding of its layers.

- arch (read): sgl_kernel/load_utils.py `_load_architecture_specific_ops` loads `sm90/common_ops` when the compute
  capability is 90 and `sm100/common_ops` for every other one (SM120 and GB10 included); that binary's fatbin is
  read from the pinned sglang-kernel wheel (its version from SGLang's own METADATA `Requires-Dist`), and the
  kernel's cubin that the driver would load is found by its demangled name (tileprobe.audit.path.binaries).
- gate (quoted): FlashInfer's norm and activation launchers take any hidden size (`vec_size = gcd(16 /
  sizeof(T), d)`): no shape is refused; the rotary kernel likewise.
- bytes: the cubin's static shared memory (read) plus the dynamic bytes the launcher asks for, from FlashInfer's
  norm.cuh as the pinned flashinfer ships it (sgl_kernel compiles FlashInfer's norm kernels; the commit it vendors
  is not in its wheel, so the formula is `quoted` from the flashinfer release SGLang pins): RMSNorm
  `num_warps * sizeof(float)`, fused-add RMSNorm `(ceil_div(num_warps, 4) * 4 + d) * sizeof(float)`, with
  `num_warps = ceil_div(min(1024, d / vec_size), 32)`. SiLU-and-mul and rotary: their launches pass 0 dynamic
  bytes (`<<<grid, block, 0, stream>>>`, quoted from sgl-kernel's own sources, LAUNCH0 below; the wheel does not
  record the commit it was built from), so their bytes are the cubin's static bytes.

Params: kernel (rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding), d (the hidden size, when known),
dtype.
"""

from __future__ import annotations

import math
import re
import zipfile

from tileprobe.audit.path import binaries
from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.engines import locate
from tileprobe.errors import UsageError

NAME = "sgl-kernel"
LIBRARY = "sglang-kernel (sgl_kernel)"
DIST = "sglang-kernel"
KERNELS = {"rms_norm": r"flashinfer::norm::RMSNormKernel<", "fused_add_rms_norm": r"flashinfer::norm::FusedAddRMSNormKernel<",
           "silu_and_mul": r"flashinfer::activation::act_and_mul_kernel<.*silu", "rotary_embedding": r"rotary_embedding_kernel<"}
DTYPES = {"bf16": "__nv_bfloat16", "fp16": "__half"}
LOADER = "sgl_kernel/load_utils.py"


# the launches that pass no dynamic shared memory, quoted from sgl-kernel's sources (stored copies)
LAUNCH0 = {"silu_and_mul": "flashinfer::activation::act_and_mul_kernel<c_type, silu><<<grid, block, 0, stream>>> "
                           "(sgl-project/sglang sgl-kernel/csrc/elementwise/activation.cu @ 0e6ed14d)",
           "rotary_embedding": "rotary_embedding_kernel<scalar_t, is_neox><<<grid, block, 0, stream>>> "
                               "(sgl-project/sglang sgl-kernel/csrc/elementwise/pos_enc.cu @ f9899f51)"}

def pinned(ctx: Context) -> str | None:
    src = ctx.engine_source
    if src.kind != "wheel":
        return None
    with zipfile.ZipFile(src.origin) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode(errors="replace") if meta else ""
    m = re.search(r"^Requires-Dist: sglang-kernel==([\w.]+)", text, re.M)
    return m.group(1) if m else None


def _subdir(loader: str, cc: int) -> tuple[str, str]:
    """load_utils's own rule, found by its text: (subdir, file:line)."""
    lines = loader.splitlines()
    at = next((i for i, ln in enumerate(lines, 1) if "compute_capability == 90" in ln), None)
    if at is None:
        raise UsageError(f"{LOADER} has no `compute_capability == 90` test: tileprobe reads another loader")
    return ("sm90" if cc == 90 else "sm100"), f"{LOADER}:{at}"


def _norm_bytes(kind: str, d: int, dtype: str) -> tuple[int, str]:
    size = 2 if dtype in DTYPES else 4
    vec = math.gcd(16 // size, d)
    warps = -(-min(1024, d // vec) // 32)
    if kind == "rms_norm":
        return warps * 4, f"num_warps * sizeof(float) = {warps} * 4 (d={d}, vec_size={vec})"
    return (-(-warps // 4) * 4 + d) * 4, f"(ceil_div(num_warps, 4) * 4 + d) * sizeof(float) = ({-(-warps // 4) * 4} + {d}) * 4 (num_warps={warps})"


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    kind = call.param("kernel")
    if kind not in KERNELS:
        why = f"tileprobe's sgl-kernel family does not know the op {kind}"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))
    version = pinned(ctx)
    try:
        pkg = locate.find_release(DIST, version)
        wheel = str(pkg.wheel) if pkg.wheel else None
        if wheel is None:
            raise UsageError(f"{DIST} {pkg.version} is installed, not a wheel; tileprobe reads the wheel")
        with zipfile.ZipFile(wheel) as z:
            loader = z.read(LOADER).decode()
        sub, line = _subdir(loader, ctx.target.cc_int)
        rel = f"sgl_kernel/{sub}/common_ops.abi3.so"
        key = ("sgl-kernel", wheel, rel)
        if key not in ctx.memo:
            ctx.memo[key] = binaries.library(binaries.member(wheel, "wheel", rel, ctx.cache_dir))
        lib = ctx.memo[key]
    except (UsageError, OSError, KeyError) as exc:
        why = f"sglang-kernel {version or '(unpinned)'}: {exc}"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))
    pattern = KERNELS[kind] + (f".*{DTYPES[call.param('dtype', 'bf16')]}" if kind != "rotary_embedding" else "")
    a = binaries.arch_part(lib, ctx.target, pattern, f"{DIST} {pkg.version} {rel} (loaded by {line})")
    gate = Part("FlashInfer's launcher takes any hidden size (vec_size = gcd(16 / sizeof(T), d)); no shape refused",
                True, "quoted")
    static = a.kernel.static_smem if a.kernel is not None else None
    d = call.param("d")
    if kind in ("rms_norm", "fused_add_rms_norm") and d and static is not None:
        dyn, how = _norm_bytes(kind, int(d), call.param("dtype", "bf16"))
        total = dyn + static
        b = Part(f"{total} B: dynamic {how} (flashinfer norm.cuh) + {static} B static (cubin)", True, "quoted")
    elif kind in ("rms_norm", "fused_add_rms_norm"):
        total, b = None, unanswered("the hidden size is not known here, and the launch's dynamic bytes depend on it")
    elif kind in LAUNCH0 and static is not None:
        total = static
        b = Part(f"{static} B: dynamic 0 B ({LAUNCH0[kind]}) + {static} B static (cubin)", True, "quoted")
    else:
        total, b = None, unanswered(f"{static} B static in the cubin; the launch's dynamic bytes are not read"
                                    if static is not None else "the launch's bytes are not read")
    name = a.matched[0] if a.matched else kind
    return CompiledAnswer(name, a.part, gate, b, smem_bytes=total, static_smem=static,
                          registers=a.kernel.registers if a.kernel is not None else None)
