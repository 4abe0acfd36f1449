"""DeepGEMM's FP8 GEMMs as vLLM vendors them (vllm/third_party/deep_gemm): `fp8_gemm_nt` for the block-FP8 linears
(kind "dense") and `m_grouped_fp8_gemm_nt_contiguous` for DeepGEMM MoE experts (kind "grouped-moe").

DeepGEMM ships no device code: its host library (`_C_extension.abi3.so`) JIT-compiles each kernel with the local nvcc
at first use, for the device it runs on. So:

- arch: the host library's arch specs, read from the wheel's `.so` (the mangled `SM90ArchSpec` / `SM100ArchSpec` /
  `SM120ArchSpec` heuristics and their `smem_size <= <Spec>::smem_capacity` assertions), and vLLM's own
  `support_deep_gemm()` (vllm/platforms/cuda.py, evaluated for the target).
- gate: the recipe and scale-factor checks that failed on SM120 in vLLM 0.24 (vllm#47130 "Unknown recipe",
  vllm#47436 "Unknown SF transformation"): the binary must hold the SM100/SM120 branch of `get_default_recipe`
  (its assertion text `sfb_dtype == ...Float or sfb_dtype == ...Int` exists only in that branch), and vLLM must pass
  `disable_ue8m0_cast=False` (UE8M0 on the 120 family) so that `transform_sf_into_required_layout` takes its
  `(FP32, x, gran_k) on SM100/SM120` branch.
- bytes: csrc/jit_kernels/heuristics/sm120.hpp (vllm-project/DeepGEMM, the fork vLLM vendors): capacity 101376,
  stages = min((capacity - extra) / per_stage, 16), layouts with fewer than 2 stages dropped; every layout kept
  asks for extra + stages * per_stage. Each candidate is sized here with the call's values; the largest is the bytes
  answer (whichever one the latency model picks can ask no more). SM90/SM100 heuristics are not modelled here.

Sources quoted: vllm-project/DeepGEMM csrc/jit_kernels/heuristics/sm120.hpp @ 53a6b148, csrc/utils/layout.hpp @
63aa62a1, csrc/apis/layout.hpp and csrc/apis/sm120_dispatch.hpp @ 92bda0c3 (the binary's own file names,
csrc/apis/sm120_dispatch.hpp among them, are that fork's; the exact vendored commit is not recorded in the wheel).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, guarded, unanswered
from tileprobe.audit.path.binaries import member
from tileprobe.errors import TileprobeError

NAME = "deepgemm"
LIBRARY = "DeepGEMM (vendored in vLLM as vllm/third_party/deep_gemm; kernels JIT-compiled at first use)"

SO = "vllm/third_party/deep_gemm/_C_extension.abi3.so"
SRC = "vllm-project/DeepGEMM"
HEURISTIC = f"{SRC} csrc/jit_kernels/heuristics/sm120.hpp @ 53a6b148"
RECIPE_SRC = f"{SRC} csrc/utils/layout.hpp @ 63aa62a1"
SF_SRC = f"{SRC} csrc/apis/layout.hpp @ 92bda0c3"
DISPATCH_SRC = f"{SRC} csrc/apis/sm120_dispatch.hpp @ 92bda0c3"

# sm120.hpp (SM120ArchSpec)
CAPACITY = 101376  # static constexpr int smem_capacity = 101376;  // 99KB
MAX_STAGES = 16  # constexpr int kNumMaxStages = 16;
BARRIERS = MAX_STAGES * 8 * 2  # const int smem_barriers = kNumMaxStages * 8 * 2;
MIN_BLOCK_M = 64  # kMinBlockM
SUBTILE_M = 64  # kSubTileM
SWAP_AB_M_MAX = 16  # sm120_dispatch.hpp fp8_gemm_nt: constexpr int kSwapAbMMax = 16;
FP8, CD = 1, 2  # bytes of an e4m3 operand element and of the bf16 output

SPECS = {9: "12SM90ArchSpec", 10: "13SM100ArchSpec", 12: "13SM120ArchSpec"}  # arch_major -> mangled spec name
# get_default_recipe's SM100/SM120 branch asserts this (csrc/utils/layout.hpp); the SM90 branch asserts both Float.
RECIPE_BRANCH = b"sfb_dtype == torch::headeronly::ScalarType::Float or sfb_dtype == torch::headeronly::ScalarType::Int"


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _swizzle(nbytes: int) -> int:
    """get_swizzle_mode(block_size, elem_size): the largest of 128, 64, 32, 16 dividing the row's bytes."""
    return next((m for m in (128, 64, 32, 16) if nbytes % m == 0), 0)


@dataclass(frozen=True)
class Layout:
    block_m: int
    block_n: int
    block_k: int
    store_m: int
    swizzle_cd: int
    per_stage: int
    extra: int
    stages: int

    @property
    def smem(self) -> int:
        return self.extra + self.stages * self.per_stage

    def label(self) -> str:
        return f"BM{self.block_m} BN{self.block_n} BK{self.block_k}"


def _smem_d(block_n: int, swizzle_cd: int, store_m: int) -> int:
    """get_smem_d_size_for_swizzle: (block_n * cd / swizzle) * swizzle * store_m when the row fills whole swizzles."""
    row = block_n * CD
    if swizzle_cd > 0 and row >= swizzle_cd and row % swizzle_cd == 0:
        return row // swizzle_cd * swizzle_cd * store_m
    return 0


def size_layout(block_m: int, block_n: int, block_k: int, cd_n_contiguous: bool = True,
                capacity: int = CAPACITY) -> Layout:
    """get_storage_config + get_pipeline_config of SM120ArchSpec for FP8 x FP8 with Kernel1D1D scale factors."""
    per_stage = block_m * block_k * FP8 + block_n * block_k * FP8 + _align(block_m * 4, 128) + _align(block_n * 4, 128)
    swizzle_cd = 128 if cd_n_contiguous and block_n * CD >= 128 else 0
    full = min((capacity - BARRIERS - _smem_d(block_n, swizzle_cd, block_m)) // per_stage, MAX_STAGES)
    store_m = block_m
    if swizzle_cd > 0 and block_m > SUBTILE_M:  # supports_subtile: kernel_type != KernelNoSF (1D1D has SF)
        sub = min((capacity - BARRIERS - _smem_d(block_n, swizzle_cd, SUBTILE_M)) // per_stage, MAX_STAGES)
        if sub > full:
            store_m = SUBTILE_M
    extra = BARRIERS + _smem_d(block_n, swizzle_cd, store_m)  # + tensormaps only for KGroupedContiguous
    stages = min((capacity - extra) // per_stage, MAX_STAGES)
    return Layout(block_m, block_n, block_k, store_m, swizzle_cd, per_stage, extra, stages)


def candidates(m: int, n: int, kind: str) -> tuple[list[Layout], list[Layout], bool]:
    """(kept, dropped, swap_ab): every layout get_layout_candidates can form for the call on SM120. BLOCK_M 64 and
    128 are both sized (which one the runtime alignment allows depends on DeepGEMM state set at run time)."""
    swap = kind == "dense" and 1 <= m <= SWAP_AB_M_MAX
    eff_m, eff_n = (n, m) if swap else (m, n)
    small_n = 0 < eff_n <= 32
    block_ns = ([16] + ([32] if eff_n > 16 else [])) if small_n else [i for i in range(8, 257, 8) if i % 64 == 0
                                                                        and i <= 128]
    block_ks = ([64] if eff_m >= 2048 else []) + [128]  # not mixed: BK 64 only for expected_m >= 2048
    kept, dropped = [], []
    for bm in (64, 128):
        for bk in block_ks:
            for bn in block_ns:
                lay = size_layout(bm, bn, bk, cd_n_contiguous=not swap)
                if not small_n and (_swizzle(bk * FP8) < 64):
                    dropped.append(lay)
                elif lay.stages < 2:
                    dropped.append(lay)
                else:
                    kept.append(lay)
    return kept, dropped, swap


# ---------------------------------------------------------------------------------------------------------------


def _capability(expr: ast.AST, cc: int) -> bool | None:
    """vLLM's platform predicates, evaluated for compute capability `cc` (major*10+minor); None if not one."""
    if isinstance(expr, ast.BoolOp):
        vals = [_capability(v, cc) for v in expr.values]
        if None in vals:
            return None
        return any(vals) if isinstance(expr.op, ast.Or) else all(vals)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and len(expr.args) == 1 \
            and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, int):
        x = expr.args[0].value
        return {"is_device_capability": cc == x, "is_device_capability_family": cc // 10 == x // 10,
                "has_device_capability": cc >= x}.get(expr.func.attr)
    return None


def vllm_supports(ctx: Context) -> tuple[bool | None, str]:
    """vLLM's `support_deep_gemm()` (vllm/platforms/cuda.py) evaluated for the target."""
    try:
        text = ctx.engine_source.read_text("vllm/platforms/cuda.py")
    except (TileprobeError, AttributeError) as exc:
        return None, f"vLLM's platform file could not be read ({exc})"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "support_deep_gemm":
            ret = next((n for n in ast.walk(node) if isinstance(n, ast.Return)), None)
            if ret is not None:
                ok = _capability(ret.value, ctx.target.cc_int)
                if ok is not None:
                    return ok, f"vllm/platforms/cuda.py support_deep_gemm(): `{ast.unparse(ret.value)}`"
    return None, "vllm/platforms/cuda.py has no support_deep_gemm() tileprobe can read"


def _binary(ctx: Context) -> bytes | None:
    key = ("deepgemm-host", ctx.engine_source.origin)
    if key not in ctx.memo:
        try:
            ctx.memo[key] = member(ctx.engine_source.origin, ctx.engine_source.kind, SO, ctx.cache_dir).read_bytes()
        except (TileprobeError, OSError):
            ctx.memo[key] = None
    return ctx.memo[key]


def _arch(ctx: Context, blob: bytes | None, vllm_ok: bool | None, vllm_why: str) -> Part:
    major = ctx.target.cc_int // 10
    if blob is None:
        return unanswered(f"{ctx.engine_source.label()} has no {SO} to read")
    have = [f"sm{k}" for k, v in sorted(SPECS.items()) if v.encode() in blob]
    spec = SPECS.get(major)
    if spec is None or spec.encode() not in blob:
        return Part(f"{SO} has arch specs for {', '.join(have) or 'none'}, none for cc {ctx.target.cc}: DeepGEMM's JIT "
                    "has no heuristic for this GPU", False, "read")
    if vllm_ok is False:
        return Part(f"{SO} holds {spec[2:]} but vLLM does not use DeepGEMM on cc {ctx.target.cc}: {vllm_why}",
                    False, "read")
    assert_ok = f"smem_size <= {spec[2:]}::smem_capacity".encode() in blob
    return Part(f"no prebuilt code: {SO} (arch specs {', '.join(have)}) JIT-compiles with the local nvcc "
                f"(--gpu-architecture=sm_<device>; nvcc >= 12.9 asserted) using {spec[2:]}"
                + (f", which asserts smem_size <= {spec[2:]}::smem_capacity" if assert_ok else "")
                + (f"; {vllm_why} holds for cc {ctx.target.cc}" if vllm_ok else ""), True, "read")


def _gate(ctx: Context, blob: bytes | None, quant: str) -> Part:
    major = ctx.target.cc_int // 10
    if quant not in ("fp8-block", "fp8"):
        return Part(f"DeepGEMM's FP8 path takes block-FP8 (recipe 128x128), not {quant!r}", False, "quoted")
    if blob is None:
        return unanswered(f"{SO} could not be read")
    if major == 9:
        return Part(f"get_default_recipe on arch_major 9 returns (1, 128, 128) for FP32 scale factors ({RECIPE_SRC}); "
                    "transform_sf_into_required_layout keeps (FP32, 1|128, 128) on SM90", True, "quoted")
    if major not in (10, 12):
        return Part(f"get_default_recipe: DG_HOST_UNREACHABLE(\"Unknown recipe\") for arch_major {major} "
                    f"({RECIPE_SRC})",
                    False, "quoted")
    if RECIPE_BRANCH not in blob:
        return Part(f"{SO} lacks get_default_recipe's SM100/SM120 branch (its assertion text is absent): FP8 block "
                    "GEMMs hit \"Unknown recipe\" (vllm#47130) on this GPU", False, "read")
    try:
        envs = ctx.engine_source.read_text("vllm/envs.py")
    except (TileprobeError, AttributeError):
        envs = ""
    e8m0 = re.search(r'os\.getenv\(\s*"VLLM_USE_DEEP_GEMM_E8M0",\s*"(\d)"\s*\)', envs)
    e8m0_on = e8m0 is None or e8m0.group(1) == "1"
    if not e8m0_on:
        return Part("vLLM's VLLM_USE_DEEP_GEMM_E8M0 defaults to 0: disable_ue8m0_cast=True, and "
                    "transform_sf_into_required_layout has no FP32 (1,128,128) branch for arch_major "
                    f"{major} without UE8M0 (\"Unknown SF transformation\", vllm#47436; {SF_SRC})", False, "quoted")
    return Part(f"{SO} holds get_default_recipe's arch_major 10/12 branch (`{RECIPE_BRANCH.decode()}` asserted: "
                f"FP32 scales -> recipe (1, 128, 128), {RECIPE_SRC}); vLLM passes disable_ue8m0_cast = not "
                "is_deep_gemm_e8m0_used() (VLLM_USE_DEEP_GEMM_E8M0 default 1), so the FP32 (x, 128) scales take "
                f"`(FP32, x, gran_k) on SM100/SM120` -> packed UE8M0 (1, 128) ({SF_SRC}), not \"Unknown SF "
                "transformation\" (vllm#47130, #47436 were the 0.24 release's)", True, "read")


def _bytes(ctx: Context, m: int, n: int, k: int, kind: str) -> tuple[Part, int | None, str]:
    if ctx.target.cc_int // 10 != 12:
        why = (f"tileprobe models DeepGEMM's SM120 heuristic only ({HEURISTIC}); the SM{ctx.target.cc_int} spec's "
               "layouts are not sized here")
        return unanswered(why), None, ""
    kept, dropped, swap = candidates(m, n, kind)
    if not kept:
        return Part(f"get_layout_candidates keeps no layout (DG_HOST_ASSERT(not candidates.empty()) fails): every "
                    "layout has fewer than 2 stages", False, "quoted"), None, ""
    big = max(kept, key=lambda lay: lay.smem)
    over = [lay for lay in kept if lay.smem > ctx.target.smem_optin]
    rows = "; ".join(f"{lay.label()}: {lay.stages} stages x {lay.per_stage} + {lay.extra} = {lay.smem} B"
                     for lay in kept)
    text = (f"{HEURISTIC}: per_stage = BM*BK + BN*BK + align(BM*4,128) + align(BN*4,128) (FP8, 1D1D scale factors), "
            f"extra = {BARRIERS} (barriers) + smem_d, stages = min(({CAPACITY} - extra) / per_stage, {MAX_STAGES}), "
            f"< 2 stages dropped ({len(dropped)} dropped); kept: {rows}"
            + (" (AB swapped: M <= 16 becomes N)" if swap else "")
            + f"; the largest asks {big.smem} B")
    ok = not over and big.smem <= ctx.target.smem_optin
    return Part(text, ok, "quoted"), big.smem, big.label()


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    kind = call.param("kind", "dense")
    quant = call.param("quant", "fp8-block")
    m, n, k = (int(call.param(x, 0) or 0) for x in ("m", "n", "k"))
    if kind == "grouped-moe" and not m:
        m = int(call.param("tokens", 0) or 0) * int(call.param("top_k", 1) or 1)
    kernel = {"dense": "fp8_gemm_nt", "grouped-moe": "m_grouped_fp8_gemm_nt_contiguous"}.get(kind)
    if kernel is None or min(m, n, k) <= 0:
        why = f"need kind dense|grouped-moe and positive m, n, k (got kind={kind!r}, m={m}, n={n}, k={k})"
        return CompiledAnswer(f"DeepGEMM {kind}", unanswered(why), unanswered(why), unanswered(why))
    blob = _binary(ctx)
    vllm_ok, vllm_why = vllm_supports(ctx)
    arch = _arch(ctx, blob, vllm_ok, vllm_why)
    gate = _gate(ctx, blob, quant)
    sized, smem, label = _bytes(ctx, m, n, k, kind)
    impl = "sm120_fp8_fp4_gemm_1d1d" if ctx.target.cc_int // 10 == 12 else "arch-specific FP8 GEMM"
    notes = [f"k={k}: {math.ceil(k / 128)} K blocks of 128 (scale-factor granularity)"]
    if kind == "grouped-moe":
        notes.append("grouped contiguous GEMM: BLOCK_M must divide DeepGEMM's mk alignment, set at run time")
    return CompiledAnswer(f"DeepGEMM {kernel} -> {impl} (m={m}, n={n}, k={k}, {quant}"
                          + (f"; largest layout {label})" if label else ")"),
                          arch, gate, sized, smem_bytes=smem, notes=tuple(notes))


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The call's answer; anything unreadable becomes an unanswered row, never a traceback."""
    return guarded(NAME, _answer, call, ctx)


__all__ = ["NAME", "LIBRARY", "answer", "candidates", "size_layout", "vllm_supports"]
