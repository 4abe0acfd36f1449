"""FlashInfer `cutlass_fused_moe` as vLLM's FLASHINFER_CUTLASS MoE backend runs it (vllm/model_executor/layers/
fused_moe/experts/flashinfer_cutlass_moe.py; vLLM's default for bf16 and NVFP4 MoE on sm_120).

Params: experts, top_k, hidden, inter (per TP rank), dtype (activation: bf16 | fp16 | mxfp8), quant (None | fp8 |
fp8-block | nvfp4 | mxfp4), tokens, activation (silu, the default, is SwiGLU: gated).

Which GEMM runs is FlashInfer's TensorRT-LLM MoE runner, read from the FlashInfer release the engine pins:

- arch: flashinfer/fused_moe/core.py `get_cutlass_fused_moe_module(f"{major * 10 + minor}")` picks the JIT module
  (backend "120"/"121" -> gen_cutlass_fused_moe_sm120_module, "90" -> sm90, ...), whose nvcc flags come from
  compilation_context.py `_normalize_cuda_arch` (12.0 -> compute_120f with CUDA >= 12.9, 12.1 -> compute_121a).
- gate: vLLM's `_supports_current_device` / `_supports_quant_scheme` (evaluated for the target), then the runner:
  on SM120 the TMA warp-specialized grouped GEMM takes only NVFP4 x NVFP4 and MXFP8 x MXFP4
  (`isValidSM120MOESpecialisation`, moe_tma_warp_specialized_traits.h, read by tileprobe.engines.flashinfer);
  bf16 x bf16 gets no TMA-WS config and runs the Ampere-style Sm80 grouped GEMM (`getAmpereConfigs`,
  `dispatchMoeGemmToCutlass<..., cutlass::arch::Sm80, ...>`, moe_gemm_template_dispatch.h); per-tensor FP8 is
  redirected to the Sm89 kernels (`if (sm_ >= 120)`); FP8 block scaling raises "FP8 block scaling not yet implemented
  for Blackwell." (core.py) and W4A16 MXFP4 has no tactic there.
- bytes: the default tactics (no autotune: `setRunnerProfiles` takes the first GEMM1 and the first GEMM2 tactic) and
  every tactic the autotuner may try. Sm80 grouped GEMMs: `stages * (BM*BK + BN*BK) * 2` for the MmaMultistage
  mainloop (a union with the epilogue in MoeFCGemm::SharedStorage), and for the fused gated-activation GEMM1
  (Fused_Moe_Kernel_sm80, taken when `supportsFusedGatedActivation`) `stages * (BM*BK + 2 * BN/2*BK) * 2 + BM*BN/2*2`;
  both compiled here from the release's own headers (sizeof, nvcc front end; cached) when nvcc is at hand.
  SM120 TMA-WS tactics are sized by tileprobe.predict.flashinfer_moe.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, guarded, unanswered
from tileprobe.errors import TileprobeError

NAME = "flashinfer-cutlass-moe"
LIBRARY = "FlashInfer cutlass_fused_moe (TensorRT-LLM MoE GEMMs, JIT-built per GPU)"

VLLM_EXPERTS = "vllm/model_executor/layers/fused_moe/experts/flashinfer_cutlass_moe.py"
DISPATCH = "moe_gemm/moe_gemm_template_dispatch.h"
FUSED_LAUNCHER = "moe_gemm/launchers/fused_moe_gemm_launcher_sm80.inl"
SCHEMES = {("None", "None"): "bf16xbf16", ("kFp8StaticTensorSym", "kFp8StaticTensorSym"): "fp8xfp8",
           ("kMxfp4Static", "None"): "bf16xmxfp4", ("kFp8Static128BlockSym", "kFp8Dynamic128Sym"): "fp8-block",
           ("kMxfp4Static", "kMxfp8Dynamic"): "mxfp8xmxfp4", ("kNvfp4Static", "kNvfp4Dynamic"): "nvfp4xnvfp4"}
TMA_IDS = {"nvfp4xnvfp4": 0, "mxfp8xmxfp4": 1}
_TILE = re.compile(r"CtaShape(\d+)x(\d+)x(\d+)_WarpShape(\d+)x(\d+)x(\d+)")


def pair_of(dtype: str, quant: str | None) -> str:
    if quant in (None, "", "none", "bf16", "fp16"):
        return "bf16xbf16"
    if quant == "mxfp4":
        return "mxfp8xmxfp4" if dtype == "mxfp8" else "bf16xmxfp4"
    return {"fp8": "fp8xfp8", "fp8-block": "fp8-block", "nvfp4": "nvfp4xnvfp4"}.get(quant, f"unknown:{quant}")


# ---------------------------------------------------------------------------------------------------------------
# The FlashInfer tree the engine pins


def flashinfer_tree(ctx: Context):
    """(FlashinferTree, note): ctx.flashinfer when given, else the engine's pin from the wheel cache, else the
    installed flashinfer (said so)."""
    from tileprobe.engines import flashinfer as fi
    from tileprobe.engines import locate, packages

    key = ("flashinfer-tree", getattr(ctx.flashinfer, "origin", None), getattr(ctx.engine_source, "origin", None))
    if key in ctx.memo:
        return ctx.memo[key]
    note, tree = "", None
    try:
        if ctx.flashinfer is not None:
            origin = Path(ctx.flashinfer.origin)
            folder = (packages.unpack_flashinfer(packages.from_wheel(origin), ctx.cache_dir)
                      if str(origin).endswith(".whl") else origin)
            tree = fi.find_flashinfer(folder)
        else:
            src = ctx.engine_source
            pkg = packages.from_wheel(Path(src.origin)) if src.kind == "wheel" else packages.installed(src.engine)
            pin = pkg.pin(locate.FLASHINFER_DIST)
            try:
                tree = fi.find_flashinfer(packages.unpack_flashinfer(locate.find_release(locate.FLASHINFER_DIST, pin),
                                                                     ctx.cache_dir))
            except TileprobeError:
                tree = fi.find_flashinfer()
                note = (f"{src.label()} pins flashinfer-python=={pin}, which is neither installed nor cached: read "
                        f"the installed {tree.label()} instead")
    except (TileprobeError, OSError, AttributeError) as exc:
        tree, note = None, f"no FlashInfer tree to read ({exc})"
    ctx.memo[key] = (tree, note)
    return tree, note


def _source(tree, rel: str) -> str:
    return (tree.root / rel).read_text(errors="replace")


def _kernels(tree) -> Path:
    from tileprobe.engines import flashinfer as fi
    return tree.root / fi._KERNELS


# ---------------------------------------------------------------------------------------------------------------
# arch: the JIT module and its nvcc arch


def module_for(tree, cc: int) -> tuple[str | None, str]:
    """(gen function, quote) get_cutlass_fused_moe_module calls for backend f"{cc}"."""
    text = _source(tree, "fused_moe/core.py")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_cutlass_fused_moe_module":
            for branch in (n for n in ast.walk(node) if isinstance(n, ast.If)):
                t = branch.test
                if not (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "backend"):
                    continue
                vals = {c.value for c in ast.walk(t.comparators[0]) if isinstance(c, ast.Constant)}
                if str(cc) in vals:
                    call = next((c for c in ast.walk(branch.body[0]) if isinstance(c, ast.Call)
                                 and isinstance(c.func, ast.Name)), None)
                    if call is not None:
                        return call.func.id, f"core.py: {ast.unparse(t)} -> {call.func.id}()"
            return None, (f"core.py get_cutlass_fused_moe_module: backend {str(cc)!r} -> "
                          "raise ValueError(\"Invalid backend\")")
    return None, "core.py has no get_cutlass_fused_moe_module"


def nvcc_arch(tree, gen: str, cc: int) -> str | None:
    """The -gencode the module gets for a cc-`cc` device (compilation_context.py `_normalize_cuda_arch`)."""
    body = re.search(rf"def {gen}\(.*?\n(?=def |\Z)", _source(tree, "jit/fused_moe.py"), re.S)
    if body is None:
        return None
    if "sm90a_nvcc_flags" in body.group(0):
        return "compute_90a/sm_90a (sm90a_nvcc_flags)"
    if "sm89_nvcc_flags" in body.group(0):
        return "compute_89/sm_89 (sm89_nvcc_flags)"
    majors = re.search(r"supported_major_versions=\[([\d,\s]+)\]", body.group(0))
    if majors is None or str(cc // 10) not in [m.strip() for m in majors.group(1).split(",")]:
        return None
    text = _source(tree, "compilation_context.py")
    major, minor = divmod(cc, 10)
    if major == 12:
        block = re.search(r"elif major == 12:(.*?)\n        elif", text, re.S)
        if block is None:
            return None
        if minor == 0 and '"0f"' in block.group(1):
            return "compute_120f/sm_120f (CUDA >= 12.9; compute_120a with 12.8)"
        if minor > 0 and 'str(minor) + "a"' in block.group(1):
            return f"compute_{cc}a/sm_{cc}a (CUDA >= 12.9)"
        return None
    return f"compute_{cc}a/sm_{cc}a"


def _arch(tree, ctx: Context) -> Part:
    gen, quote = module_for(tree, ctx.target.cc_int)
    if gen is None:
        return Part(f"FlashInfer {tree.version} builds no fused-MoE module for sm_{ctx.target.cc_int}: {quote}",
                    False, "read")
    arch = nvcc_arch(tree, gen, ctx.target.cc_int)
    if arch is None:
        return unanswered(f"{quote}; its nvcc arch flags could not be read from jit/fused_moe.py")
    return Part(f"JIT module built at first use by {gen} ({quote}): -gencode {arch}, "
                f"flashinfer {tree.version} jit/fused_moe.py + compilation_context.py", True, "read")


# ---------------------------------------------------------------------------------------------------------------
# gate


def _capability(expr, cc: int):
    if isinstance(expr, ast.BoolOp):
        vals = [_capability(v, cc) for v in expr.values]
        return None if None in vals else (any(vals) if isinstance(expr.op, ast.Or) else all(vals))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.args \
            and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, int):
        x = expr.args[0].value
        return {"is_device_capability": cc == x, "is_device_capability_family": cc // 10 == x // 10,
                "has_device_capability": cc >= x}.get(expr.func.attr)
    if isinstance(expr, ast.Call):
        return True  # p.is_cuda(), has_flashinfer_cutlass_fused_moe(): true on the engine's CUDA build
    return None


def vllm_gate(ctx: Context, pair: str) -> tuple[bool | None, str]:
    """vLLM's FlashInferExperts._supports_current_device and _supports_quant_scheme for the pair on the target."""
    try:
        tree = ast.parse(ctx.engine_source.read_text(VLLM_EXPERTS))
    except (TileprobeError, AttributeError, SyntaxError):
        return None, f"{VLLM_EXPERTS} not read (not a vLLM wheel?)"
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    dev = funcs.get("_supports_current_device")
    scheme = funcs.get("_supports_quant_scheme")
    if dev is None or scheme is None:
        return None, f"{VLLM_EXPERTS}: _supports_current_device/_supports_quant_scheme not found"
    ret = next(n for n in ast.walk(dev) if isinstance(n, ast.Return))
    dev_ok = _capability(ret.value, ctx.target.cc_int)
    if not dev_ok:
        return dev_ok, f"{VLLM_EXPERTS} _supports_current_device(): `{ast.unparse(ret.value)}`"
    ret = next(n for n in ast.walk(scheme) if isinstance(n, ast.Return))
    clauses = ret.value.values if isinstance(ret.value, ast.BoolOp) and isinstance(ret.value.op, ast.Or) else []
    for clause in clauses:
        parts = clause.values if isinstance(clause, ast.BoolOp) else []
        listed = next((p for p in parts if isinstance(p, ast.Compare) and isinstance(p.ops[0], ast.In)), None)
        cap = next((p for p in parts if isinstance(p, ast.Call)), None)
        if listed is None or cap is None:
            continue
        pairs = {SCHEMES.get(tuple(ast.unparse(e) for e in t.elts)) for t in ast.walk(listed.comparators[0])
                 if isinstance(t, ast.Tuple)}
        if pair in pairs:
            ok = _capability(cap, ctx.target.cc_int)
            return ok, f"{VLLM_EXPERTS} _supports_quant_scheme: {pair} needs `{ast.unparse(cap)}`"
    return False, f"{VLLM_EXPERTS} _supports_quant_scheme lists no scheme for {pair}"


def _flashinfer_gate(tree, pair: str, cc: int) -> Part:
    from tileprobe.engines import flashinfer as fi

    major = cc // 10
    where = f"flashinfer {tree.version}"
    if pair == "fp8-block" and cc != 90:
        text = _source(tree, "fused_moe/core.py")
        if "FP8 block scaling not yet implemented for Blackwell." in text:
            return Part(f"{where} core.py: use_deepseek_fp8_block_scale and device_arch != \"90\" -> raise "
                        "NotImplementedError(\"FP8 block scaling not yet implemented for Blackwell.\")", False,
                        "quoted")
    if major != 12:
        return unanswered(f"{where}: the sm_{cc} module's own dispatch for {pair} is not read here")
    dispatch = (_kernels(tree) / DISPATCH).read_text(errors="replace")
    if pair in TMA_IDS:
        combos = fi.dispatch_combos(tree).get(120, [])
        if any(d == TMA_IDS[pair] for d, _ in combos):
            return Part(f"{where} moe_tma_warp_specialized_traits.h isValidSM120MOESpecialisation admits {pair} "
                        "(TMA warp-specialized grouped GEMM)", True, "read")
        return Part(f"{where} isValidSM120MOESpecialisation does not admit {pair}", False, "read")
    if pair == "bf16xbf16":
        if re.search(r"dispatchMoeGemmToCutlass<T, WeightType, ScaleBiasType,\s*cutlass::arch::Sm80", dispatch):
            return Part(f"{where}: isValidSM120MOESpecialisation admits only FP4 x FP4 and FP8 x FP4, so "
                        "getTmaWarpSpecializedConfigs(120) is empty and getAmpereConfigs supplies the tactics; "
                        "dispatchToArch falls through to dispatchMoeGemmToCutlass<T, WeightType, ScaleBiasType, "
                        "cutlass::arch::Sm80, EpilogueTag> (the Ampere-style grouped GEMM, built for the module's "
                        f"arch) ({DISPATCH})", True, "read")
    if pair == "fp8xfp8":
        if re.search(r"if \(sm_ >= 120\) \{\s*cutlass_kernels_oss::dispatchMoeGemmToCutlass<T, WeightType, "
                     r"ScaleBiasType,\s*cutlass::arch::Sm89", dispatch):
            return Part(f"{where}: \"For SM120+ pure FP8 MoE (not FP8 x FP4), redirect to SM89 (Ada) FP8 kernel "
                        f"implementations\" ({DISPATCH})", True, "read")
    if pair == "bf16xmxfp4":
        return Part(f"{where}: W4A16 MXFP4 has no SM120 TMA-WS specialisation and getAmpereConfigs returns {{}} for "
                    "use_wfp4a16: \"No valid tactics available for fused moe op\"", False, "read")
    return unanswered(f"{where}: the dispatch for {pair} on sm_{cc} is not read here")


# ---------------------------------------------------------------------------------------------------------------
# bytes: Sm80/Sm89 grouped GEMM tactics


@dataclass(frozen=True)
class Tactic:
    name: str  # CtaShape32x128x64_WarpShape32x32x64
    m: int
    n: int
    k: int
    wm: int
    wn: int
    wk: int
    stages: int

    def label(self) -> str:
        return f"{self.name} {self.stages} stages"


def ampere_tactics(tree, sm: int, fp8: bool) -> list[Tactic]:
    """getAmpereConfigs(sm) -> get_candidate_configs: get_candidate_tiles (GROUPED_GEMM, and FP8_ONLY for fp8) x
    stages min_stages..max_stages, in the engine's order (cutlass_heuristic.cpp)."""
    from tileprobe.engines import flashinfer as fi

    path = _kernels(tree) / "cutlass_heuristic.cpp"
    text = path.read_text(errors="replace")
    tiles_fn = fi._not_fast_build(fi._strip_comments(fi._function_body(text, "get_candidate_tiles", path)))
    if fp8:
        m = re.search(r"if \(sm == 89 \|\| sm == 120 \|\| sm == 121\) \{\s*return \{(.*?)\};", tiles_fn, re.S)
        if m is None or sm not in (89, 120, 121):
            return []
        names = _TILE.findall(m.group(1))
    else:
        base = re.search(r"base_configs\{(.*?)\};(.*?)switch", tiles_fn, re.S)
        if base is None:
            raise TileprobeError(f"structure not recognized in {path}: get_candidate_tiles base_configs")
        names = _TILE.findall(base.group(1)) + (_TILE.findall(base.group(2)) if sm >= 75 else [])
    cfg = fi._strip_comments(fi._function_body(text, "get_candidate_configs", path))
    lo = re.search(r"min_stages = \(sm == 89\) \? 3 : int8_configs_only \? 3 : 2;", cfg)
    hi = re.search(r"max_stages = int8_configs_only \? 6 : \(sm >= 80 \? 4 : 2\);", cfg)
    if lo is None or hi is None:
        raise TileprobeError(f"structure not recognized in {path}: get_candidate_configs stage range")
    stages = range(3 if sm == 89 else 2, (4 if sm >= 80 else 2) + 1)
    return [Tactic(f"CtaShape{a}x{b}x{c}_WarpShape{d}x{e}x{f}", *map(int, (a, b, c, d, e, f)), s)
            for a, b, c, d, e, f in names for s in stages]


def mainloop_bytes(t: Tactic, elem: int) -> int:
    """MmaMultistage::SharedStorage: stages x (BM x BK + BN x BK) elements (no padding for these tensor-op layouts)."""
    return t.stages * (t.m * t.k + t.n * t.k) * elem


def fused_gate_bytes(t: Tactic) -> int:
    """Fused_Moe_Kernel_traits_sm80::SharedStorageGate (16-bit): input BM x BK x stages, gate and up weights
    (BN/2) x BK x stages each, output BM x BN/2 (kTileN = TileN / 2 for a gated activation); the m16 variant it also
    sizes is smaller."""
    half = t.n // 2
    return t.stages * t.m * t.k * 2 + 2 * t.stages * half * t.k * 2 + t.m * half * 2


PROBE = r'''#include "cutlass/detail/dependent_false.hpp"
namespace cutlass { namespace gemm { namespace kernel { using cutlass::detail::dependent_false; } } }
#include "cutlass/gemm/kernel/default_gemm_grouped.h"
#include "cutlass_extensions/arch/mma.h"
#include "cutlass_extensions/epilogue_helpers.h"
#include "cutlass_extensions/gemm/kernel/default_fpA_intB_traits.h"
#include "cutlass_extensions/gemm/kernel/moe_cutlass_kernel.h"
#include "cutlass_extensions/gemm/kernel/fused_moe_kernel.cuh"
template <long... V> struct TILEPROBE_SIZES;
using E = cutlass::bfloat16_t;
template <int M, int N, int K, int WM, int WN, int WK, int S> struct Sizes {
  using Tr = cutlass::gemm::kernel::MixedGemmArchTraits<E, E, cutlass::arch::Sm80>;
  using Acc = typename Tr::AccType;
  using Op = typename tensorrt_llm::cutlass_extensions::Epilogue<E, Tr::ElementsPerAccessC, Acc,
      tensorrt_llm::cutlass_extensions::EpilogueOpDefault>::Op;
  using Tag = typename cutlass::arch::TagOperator<typename Tr::Operator,
      cutlass::WeightOnlyQuantOp::UNDEFINED>::TaggedOperator;
  using K_ = typename cutlass::gemm::kernel::DefaultGemmGrouped<E, cutlass::layout::RowMajor,
      cutlass::ComplexTransform::kNone, Tr::ElementsPerAccessA, E, typename Tr::LayoutB,
      cutlass::ComplexTransform::kNone, Tr::ElementsPerAccessB, E, cutlass::layout::RowMajor, Acc,
      typename Tr::OperatorClass, cutlass::arch::Sm80, cutlass::gemm::GemmShape<M, N, K>,
      cutlass::gemm::GemmShape<WM, WN, WK>, typename Tr::InstructionShape, Op,
      cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle, S,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly, Tag>::GemmKernel;
  using GK = cutlass::gemm::kernel::MoeFCGemm<typename K_::Mma, typename K_::Epilogue,
      typename K_::ThreadblockSwizzle, cutlass::arch::Sm80, K_::kGroupScheduleMode>;
  using FG = fused_moe::Fused_Moe_Kernel_sm80<E, E, E, M, N, K, S, fused_moe::Activation_Type::Swiglu>;
  TILEPROBE_SIZES<M, N, K, S, sizeof(typename GK::SharedStorage), sizeof(typename GK::Mma::SharedStorage),
                  sizeof(typename GK::Epilogue::SharedStorage), FG::kSmemSize> show;
};
'''


def compiled_sizes(tree, tactics: list[Tactic], cache_dir: Path, timeout_s: float = 300):
    """{(m, n, k, stages): (grouped, mainloop, epilogue, fused_gate)} from nvcc's front end over the release's own
    headers (sizeof printed through an incomplete template's error), cached per release, tactics and nvcc; None when
    nvcc is missing or the probe does not build."""
    from tileprobe.backends.cutlass.toolchain import find_nvcc

    try:
        nvcc = find_nvcc()
    except TileprobeError:
        return None
    src = PROBE + "".join(f"template struct Sizes<{t.m}, {t.n}, {t.k}, {t.wm}, {t.wn}, {t.wk}, {t.stages}>;\n"
                          for t in tactics)
    key = hashlib.sha256(f"{tree.tree_hash}\n{nvcc.version_text}\n{src}".encode()).hexdigest()[:16]
    out = Path(cache_dir) / "path-families" / f"flashinfer-ampere-{key}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock", timeout=timeout_s + 60):  # one nvcc run for concurrent audits (path.ahead)
        return _sizes(out, tree, tactics, nvcc, src, timeout_s)


def _sizes(out: Path, tree, tactics: list[Tactic], nvcc, src: str, timeout_s: float):
    if out.is_file():
        data = json.loads(out.read_text())
        return {tuple(json.loads(k)): tuple(v) for k, v in data.items()}
    d = tree.root / "data"
    inc = [d / "cutlass" / "include", d / "csrc" / "nv_internal", d / "csrc" / "nv_internal" / "include",
           d / "csrc" / "nv_internal" / "tensorrt_llm" / "cutlass_extensions" / "include",
           d / "csrc" / "nv_internal" / "tensorrt_llm" / "kernels" / "cutlass_kernels"]
    with tempfile.TemporaryDirectory(prefix="tileprobe-fi-sizes-") as tmp:
        cu = Path(tmp) / "sizes.cu"
        cu.write_text(src)
        cmd = [str(nvcc.path), "-std=c++17", "-arch=sm_80", "-c", "-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4",
               *(f"-I{p}" for p in inc), str(cu), "-o", str(Path(tmp) / "sizes.o")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            return None
    found = {}
    for m in re.finditer(r"TILEPROBE_SIZES<([\dL, ]+)>", proc.stdout + proc.stderr):
        v = [int(x.strip().rstrip("L")) for x in m.group(1).split(",")]
        found[tuple(v[:4])] = tuple(v[4:])
    if len(found) != len(tactics):
        return None
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({json.dumps(list(k)): list(v) for k, v in found.items()}))
    os.replace(tmp, out)
    return found


def _ampere_bytes(tree, ctx: Context, pair: str, inter: int, hidden: int, gated: bool) -> tuple[Part, int | None]:
    fp8 = pair == "fp8xfp8"
    tactics = ampere_tactics(tree, ctx.target.cc_int, fp8)
    if not tactics:
        return unanswered(f"no Ampere-style {pair} tactics for sm_{ctx.target.cc_int}"), None
    fused = gated and not fp8 and inter % 64 == 0 and hidden % 64 == 0  # supportsFusedGatedActivation
    sizes = None if fp8 else compiled_sizes(tree, tactics, ctx.cache_dir)
    how = "compiled (nvcc sizeof over the release's CUTLASS and cutlass_extensions)" if sizes else "quoted"

    def gemm1(t):
        if fused:
            return sizes[(t.m, t.n, t.k, t.stages)][3] if sizes else fused_gate_bytes(t)
        return gemm2(t)

    def gemm2(t):
        return sizes[(t.m, t.n, t.k, t.stages)][0] if sizes else mainloop_bytes(t, 1 if fp8 else 2)

    limit = ctx.target.smem_optin
    first = tactics[0]
    over1 = [t.label() for t in tactics if gemm1(t) > limit]
    over2 = [t.label() for t in tactics if gemm2(t) > limit]
    kind1 = ("fused gated-activation GEMM1 (Fused_Moe_Kernel_sm80 kSmemSize)" if fused else
             "GEMM1 MoeFCGemm SharedStorage" + (" (gated activation not fused: inter or hidden % 64 != 0)"
                                                if gated and not fp8 else ""))
    arch_tag = "Sm89" if fp8 else "Sm80"
    text = (f"{arch_tag} grouped-GEMM tactics (getAmpereConfigs({ctx.target.cc_int}): {len(tactics)}, "
            f"cutlass_heuristic.cpp); default, no autotune (setRunnerProfiles: first GEMM1 and first GEMM2 tactic): "
            f"{first.label()}: {kind1} {gemm1(first)} B, GEMM2 {gemm2(first)} B"
            + ("" if sizes else f" (mainloop stages x (BM*BK + BN*BK) x {1 if fp8 else 2} B; the epilogue shares a "
               "union with it)")
            + f"; over the {limit} B opt-in: GEMM1 {', '.join(over1) or 'none'}; GEMM2 {', '.join(over2) or 'none'}"
            + (" - the autotuner skips these (occupancy 0: \"GPU lacks the shared memory resources\")"
               if over1 or over2 else ""))
    worst = max(gemm1(first), gemm2(first))
    return Part(text, worst <= limit, "compiled" if sizes else "quoted"), worst


def _tma_bytes(tree, ctx: Context, pair: str) -> tuple[Part, int | None]:
    from tileprobe.dtypes import ACT_BITS
    from tileprobe.engines import flashinfer as fi
    from tileprobe.predict import flashinfer_moe as pred

    tactics = fi.sm120_tactics(TMA_IDS[pair], tree)
    arch = "sm_121a" if ctx.target.cc_int == 121 else "sm_120a"
    known = f"flashinfer {tree.version}" in pred.ENGINES
    rows, over, unbuilt, first = [], [], [], None
    for t in tactics:
        tile = (t.tile_m, t.tile_n, t.k_elements(ACT_BITS[pair]))
        for epi in pred.EPILOGUES:
            for swap in (False, True):
                try:
                    p = pred.predict(*tile, "auto", 0, epi, swap, arch, "4.5", dtypes=pair)
                except TileprobeError:
                    unbuilt.append(f"{t.name} {epi}{' swap' if swap else ''}")
                    continue
                if first is None:
                    first = (t.name, p)
                if p.smem_bytes > ctx.target.smem_optin:
                    over.append(f"{t.name} {epi}")
                rows.append(p.smem_bytes)
    if first is None:
        return unanswered(f"no {pair} tactic of flashinfer {tree.version} could be sized"), None
    text = (f"TMA-WS {pair} tactics (get_candidate_configs_sm120 after pruning: {len(tactics)}); default, no "
            f"autotune: {first[0]} default epilogue, {first[1].stages} stages, SharedStorage {first[1].smem_bytes} B "
            f"(StageCountAutoCarveout; tileprobe.predict.flashinfer_moe"
            + ("" if known else f", whose rules were verified for {', '.join(pred.ENGINES)}, not {tree.version}")
            + f"); all {len(rows)} sized variants (epilogue x swap-AB): {min(rows)}-{max(rows)} B; over the opt-in: "
            f"{', '.join(over) or 'none'}" + (" - an autotune run that tries one fails that tactic's launch and moves "
                                              "on; a tactic forced to it fails" if over else "")
            + (f"; not built: {len(unbuilt)}" if unbuilt else ""))
    return Part(text, first[1].smem_bytes <= ctx.target.smem_optin, "quoted"), first[1].smem_bytes


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    dtype = str(call.param("dtype", "bf16"))
    pair = pair_of(dtype, call.param("quant"))
    inter, hidden = int(call.param("inter", 0) or 0), int(call.param("hidden", 0) or 0)
    gated = str(call.param("activation", "silu")).lower() in ("silu", "swiglu", "gelu", "geglu")
    label = (f"cutlass_fused_moe {pair} (E={call.param('experts')}, top_k={call.param('top_k')}, "
             f"hidden={hidden}, inter={inter}, tokens={call.param('tokens')})")
    tree, note = flashinfer_tree(ctx)
    if tree is None:
        return CompiledAnswer(label, unanswered(note), unanswered(note), unanswered(note))
    notes = (note,) if note else ()
    try:
        arch = _arch(tree, ctx)
        vok, vwhy = vllm_gate(ctx, pair)
        if pair.startswith("unknown"):
            gate = unanswered(f"unknown quant {call.param('quant')!r}")
        elif vok is False:
            gate = Part(f"vLLM does not run FlashInfer CUTLASS MoE for {pair} on cc {ctx.target.cc}: {vwhy}",
                        False, "quoted")
        else:
            fgate = _flashinfer_gate(tree, pair, ctx.target.cc_int)
            gate = Part(f"{vwhy}: holds; {fgate.answer}", fgate.ok, fgate.evidence) if vok else fgate
        if ctx.target.cc_int // 10 != 12:
            sized, smem = unanswered(f"tileprobe sizes this runner's SM120 tactics only (sm_{ctx.target.cc_int}: "
                                     "its own module and tactics)"), None
        elif gate.ok is False or pair.startswith("unknown"):
            sized, smem = unanswered("refused before any tactic runs"), None
        elif pair in TMA_IDS:
            sized, smem = _tma_bytes(tree, ctx, pair)
        elif pair in ("bf16xbf16", "fp8xfp8"):
            sized, smem = _ampere_bytes(tree, ctx, pair, inter, hidden, gated)
        else:
            sized, smem = unanswered(f"{pair} on SM120 is not sized here"), None
    except (TileprobeError, OSError) as exc:
        why = f"flashinfer {tree.version} sources not in the structure tileprobe reads: {exc}"
        return CompiledAnswer(label, unanswered(why), unanswered(why), unanswered(why), notes=notes)
    return CompiledAnswer(f"{label}, flashinfer {tree.version}", arch, gate, sized, smem_bytes=smem, notes=notes)


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The call's answer; anything unreadable becomes an unanswered row, never a traceback."""
    return guarded(NAME, _answer, call, ctx)


__all__ = ["NAME", "LIBRARY", "ampere_tactics", "answer", "compiled_sizes", "flashinfer_tree", "fused_gate_bytes",
           "mainloop_bytes", "module_for", "nvcc_arch", "pair_of", "vllm_gate"]
