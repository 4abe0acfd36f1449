"""FlashInfer's paged attention as vLLM's FLASHINFER backend and SGLang's default `flashinfer` backend call it:
BatchPrefillWithPagedKVCache (prefill) and BatchDecodeWithPagedKVCache (decode), JIT-compiled at first use.

Which kernel runs, read from the engine and the pinned FlashInfer (file:line quoted in every answer):
- prefill: FlashInfer's FA2 kernel (include/flashinfer/attention/prefill.cuh); vLLM asks for backend="auto", which
  picks FA3 (attention/hopper/prefill_sm90.cuh) on SM90 when utils.py's determine_attention_backend allows it;
  SGLang always asks for "fa2".
- decode: with tensor cores (vLLM always: use_tensor_cores=True; SGLang when its should_use_tensor_core says so:
  fp8 KV, or a GQA group >= 4) the decode wrapper runs the FA2 *prefill* kernel with one query row per request;
  without, the CUDA-core decode kernel (attention/decode.cuh).

The three parts:
- arch: the -gencode the JIT passes for the target (the release's own CompilationContext._normalize_cuda_arch, run
  here; _flashinfer.jit_arch). FA2 modules of head dim <= 256 carry no arch flags of their own (the global list);
  larger ones pass supported_major_versions (jit/attention/modules.py _fa2_head_dim_nvcc_flags); FA3 is sm_90a only.
- gate: vLLM's get_supported_head_sizes (quoted); FlashInfer: head dims in 16-wide MMA steps, KernelTraits::IsInvalid
  and its static_asserts (compiled), the decode kernel's DISPATCH_GQA_GROUP_SIZE (quoted).
- bytes: FA2 prefill kernel: the CTA_TILE_Q the scheduler picks (utils.cuh FA2DetermineCtaTileQ) and the NUM_MMA_KV
  the dispatcher sizes from the per-SM and opt-in limits (prefill.cuh BatchPrefillWithPagedKVCacheDispatched), both
  mirrored here with the target's numbers and quoted; the bytes are `sizeof(KernelTraits::SharedStoragePaged)`
  compiled with nvcc from the release's headers (the dispatcher's own final check compares exactly that with the
  opt-in limit). FA3: sizeof(AttentionKernelTraits::SharedStorage), compiled. Decode kernel: decode.cuh's closed
  form, quoted.

Call params: heads, kv_heads (per rank), head_dim, head_dim_v, dtype, kv_cache_dtype ("auto"/"fp8"...), page_size,
window, softcap, sinks, causal; optional `tensor_cores` (bool: the decode wrapper's use_tensor_cores, else the
engine's rule) and `q_len` (decode rows per request, default 1).
"""

from __future__ import annotations

import re

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.audit.path.families import _flashinfer
from tileprobe.errors import UsageError

NAME = "flashinfer-attention"
LIBRARY = "FlashInfer attention (JIT)"

PREFILL = "data/include/flashinfer/attention/prefill.cuh"
DECODE = "data/include/flashinfer/attention/decode.cuh"
UTILS = "data/include/flashinfer/utils.cuh"
SM90 = "data/include/flashinfer/attention/hopper/prefill_sm90.cuh"
MODULES = "jit/attention/modules.py"
VLLM_FI = "vllm/v1/attention/backends/flashinfer.py"
SGLANG_FI = "sglang/srt/layers/attention/flashinfer_backend.py"

DTYPES = {"bf16": ("nv_bfloat16", "cutlass::bfloat16_t", 2), "bfloat16": ("nv_bfloat16", "cutlass::bfloat16_t", 2),
          "fp16": ("half", "cutlass::half_t", 2), "float16": ("half", "cutlass::half_t", 2),
          "half": ("half", "cutlass::half_t", 2)}
KV_FP8 = {"fp8": "__nv_fp8_e4m3", "fp8_e4m3": "__nv_fp8_e4m3", "fp8_e5m2": "__nv_fp8_e5m2"}
NUM_MMA_KV = (8, 4, 2, 1)  # DISPATCH_NUM_MMA_KV (utils.cuh)
DECODE_GROUPS = (1, 2, 3, 4, 6, 8, 16)  # DISPATCH_GQA_GROUP_SIZE (utils.cuh)
SGLANG_PREFILL_FA2 = r'self\.prefill_backend = "fa2"'
VLLM_PREFILL_AUTO = r'backend = "trtllm-gen" if self\.nvfp4_trtllm else "auto"|backend="auto"'
VLLM_PREFILL_FN = r"def _get_prefill_wrapper"


def _q(rel: _flashinfer.Release, path: str, pattern: str, start: int = 0) -> str:
    hit = rel.line_of(path, pattern, start)
    return f"flashinfer/{path}:{hit[0]}" if hit else f"flashinfer/{path}"


def _eq(src, path: str, pattern: str, after: str | None = None) -> str | None:
    """`<engine> <path>:<line>` of the first line matching `pattern` (after the first matching `after`)."""
    try:
        lines = src.read_text(path).splitlines()
    except UsageError:
        return None
    start = next((i for i, ln in enumerate(lines) if after and re.search(after, ln)), 0) if after else 0
    for i in range(start, len(lines)):
        if re.search(pattern, lines[i]):
            return f"{src.label()} {path}:{i + 1}"
    return None


# ---- which kernel -------------------------------------------------------------------------------------------------

class Shape:
    def __init__(self, call: KernelCall):
        self.qk = int(call.param("head_dim") or 0)
        self.vo = int(call.param("head_dim_v") or self.qk)
        self.heads, self.kv_heads = int(call.param("heads") or 1), int(call.param("kv_heads") or 1)
        self.group = max(1, self.heads // max(1, self.kv_heads))
        self.dtype = str(call.param("dtype", "bf16"))
        self.kv = str(call.param("kv_cache_dtype", "auto"))
        self.q = DTYPES.get(self.dtype)
        self.kv_type = (self.q[0] if self.q else None) if self.kv in ("auto", self.dtype) else KV_FP8.get(self.kv)
        self.kvb = 2 if self.kv in ("auto", self.dtype) else 1
        self.sinks, self.causal = bool(call.param("sinks")), bool(call.param("causal", True))
        self.q_len = int(call.param("q_len") or 1)


def route(call: KernelCall, ctx: Context, s: Shape) -> tuple[str, str]:
    """("fa2" | "fa3" | "decode" | "other:<why>", the engine line or rule that picks it)."""
    src, eng = ctx.engine_source, getattr(ctx.engine_source, "engine", "")
    cc = ctx.target.cc_int
    if eng == "vllm" and s.sinks and (cc == 90 or cc // 10 == 12):
        return ("other:vLLM serves sinks on SM90/SM12x with BatchAttentionWithAttentionSinkWrapper, another FlashInfer "
                "module not sized here", _eq(src, VLLM_FI, r"BatchAttentionWithAttentionSinkWrapper\(") or VLLM_FI)
    if call.phase == "decode":
        tc = call.param("tensor_cores")
        if tc is None and eng == "vllm":
            tc, why = True, f"{_eq(src, VLLM_FI, r'use_tensor_cores=True') or VLLM_FI}: use_tensor_cores=True"
        elif tc is None and eng == "sglang":
            tc = s.kvb == 1 or s.group >= 4
            why = (f"{_eq(src, SGLANG_FI, r'def should_use_tensor_core') or SGLANG_FI} should_use_tensor_core: fp8 KV "
                   f"or GQA group >= 4 (here {s.kv}, group {s.group}) -> {tc} (SGLANG_FLASHINFER_USE_TENSOR_CORE "
                   "overrides)")
        else:
            why = f"tensor_cores={tc} (the call's)"
        if not tc:
            return "decode", why
        how = ("backend 'auto' -> 'fa2' for 16-bit KV" if s.kvb == 2 else
               "FP8 KV with model-dtype queries: determine_attention_backend -> 'fa2' (FA3 FP8 needs FP8 queries)")
        if eng == "sglang":
            how = "SGLang's decode_backend 'fa2'"
        return "fa2", f"{why}; the decode wrapper runs the FA2 prefill kernel ({how})"
    if eng == "sglang":
        return "fa2", f"{_eq(src, SGLANG_FI, SGLANG_PREFILL_FA2) or SGLANG_FI}: prefill_backend = 'fa2'"
    why = (f"{_eq(src, VLLM_FI, VLLM_PREFILL_AUTO, VLLM_PREFILL_FN) or VLLM_FI}: "
           "backend 'auto' -> determine_attention_backend")
    if cc // 10 == 9:
        if s.kvb == 1:
            return "other:vLLM's FP8 prefill on SM90 uses FP8 queries with FA3's FP8 kernel, not sized here", why
        if s.qk == s.vo and s.qk in (64, 128, 256):
            return "fa3", why + " (SM90, 16-bit KV, head dims FA3 instantiates: fa3)"
    return "fa2", why + " (fa2)"


# ---- FA2 prefill kernel: tile and NUM_MMA_KV (mirrored, quoted) ---------------------------------------------------

def cta_tile(packed: int, s: Shape, optin: int) -> int:
    """utils.cuh FA2DetermineCtaTileQ(avg_packed_qo_len, head_dim_vo, head_dim_qk, kv_dtype_bytes), cc >= 8."""
    if s.vo >= 512:
        return 16 if packed <= 32 else 32
    if s.qk >= 512:
        return 16
    if packed > 64 and s.vo < 256:
        return 128
    if packed > 16:
        return 64
    return 64 if 16 * s.qk * 2 + (s.qk + s.vo) * 16 * 4 * s.kvb > optin else 16


def warps(tile: int, s: Shape) -> tuple[int, int, int]:
    """(NUM_MMA_Q, NUM_WARPS_Q, NUM_WARPS_KV) of the paged dispatcher (kBf16VOSplit, get_num_*)."""
    if s.kvb == 2 and s.vo >= 512 and tile == 32:
        return 1, 2, 2
    nwq = 1 if tile == 32 else (4 if tile > 16 else 1)
    return (2 if tile == 32 or tile > 64 else 1), nwq, 4 // nwq


def num_mma_kv(tile: int, s: Shape, per_sm: int, optin: int) -> tuple[int | None, str]:
    """NUM_MMA_KV BatchPrefillWithPagedKVCacheDispatched picks for this tile on a device with these limits (posenc
    none, no fp16 QK reduction, 16-bit Q), and the arithmetic; None when even one step does not fit."""
    nmq, nwq, nwkv = warps(tile, s)
    qb, kvb, qk, vo = 2, s.kvb, s.qk, s.vo
    repack = kvb == 1 and vo != 64 and vo <= 256 and tile > 16
    shared = vo // 16 > 16 and (vo // 16) % nwkv == 0 and qk == vo and (kvb == 2 or tile > 16)
    vosplit = vo // 16 > 16 and (vo // 16) % nwkv == 0
    per_kv = ((qk * 16 * nwkv * kvb) if shared else ((qk + vo) * 16 * nwkv * kvb)) \
        + (max(qk, vo) * 16 * nwkv * qb if repack else 0) + (tile * nwkv * 16 * qb if vosplit else 0)
    fixed = tile * qk * qb + (nwkv * tile * 8 + 2048 if vosplit else 0)
    min_valid = nwq // 2 if kvb == 1 and nwq > 2 else 1
    ctas = 2 if per_sm >= 2 * (fixed + min_valid * per_kv) else 1
    budget = min(per_sm // ctas, optin)
    reg = 8 // nmq
    fit = int((budget - fixed) / per_kv)  # C++ int division truncates toward zero
    how = (f"kFixedSmem {fixed} + NUM_MMA_KV x {per_kv}; {ctas} CTA/SM -> budget min({per_sm}/{ctas}, {optin}) = "
           f"{budget}; max_num_mma_kv_smem {fit}, _reg {reg}")
    if fit < 1:
        return None, how
    return next(n for n in NUM_MMA_KV if min(fit, reg) >= n), how


def _tiles_for(s: Shape, phase: str, optin: int) -> list[tuple[int, str]]:
    if phase == "decode":
        p = s.q_len * s.group
        return [(cta_tile(p, s, optin), f"packed qo len {p} (one row per request x GQA group {s.group})")]
    seen: dict[int, str] = {}
    for k in list(range(1, 140)) + [1 << 16]:
        p = k * s.group
        t = cta_tile(p, s, optin)
        seen.setdefault(t, f"packed qo len {p}" + ("+" if k > 1 else ""))
    return sorted(seen.items(), reverse=True)


def _fa2_source(rel: _flashinfer.Release, s: Shape, grid: list[tuple[int, int]]) -> str:
    repack = ", kPrefillLauncherRepacksFp4" if "kPrefillLauncherRepacksFp4" in rel.text(PREFILL) else ""
    dq, dkv = s.q[0], s.kv_type
    lines = []
    for tile, nkv in grid:
        nmq, nwq, nwkv = warps(tile, s)
        lines.append(f"  p<{tile}, {nmq}, {nkv}, {nwq}, {nwkv}>();")
    return _flashinfer.host_only(f"""
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>
using namespace flashinfer;
using V = DefaultAttention<false, false, false, false>;
template <uint32_t CTQ, uint32_t NMQ, uint32_t NKV, uint32_t NWQ, uint32_t NWKV>
void p() {{
  using KT = KernelTraits<MaskMode::kCausal, CTQ, NMQ, NKV, {s.qk // 16}, {s.vo // 16}, NWQ, NWKV,
                          PosEncodingMode::kNone, {dq}, {dkv}, {dq}, float, int32_t, V{repack}>;
  printf("t%u_k%u %zu %d\\n", CTQ, NKV, sizeof(typename KT::SharedStoragePaged), (int)KT::IsInvalid());
}}
int main() {{
{chr(10).join(lines)}
}}
""")


def _fa2_grid(s: Shape) -> list[tuple[int, int]]:
    tiles = (16, 32) if s.vo >= 512 else (16,) if s.qk >= 512 else (16, 64, 128)
    return [(t, n) for t in tiles for n in sorted(NUM_MMA_KV)]


def fa2_prefill(call: KernelCall, ctx: Context, rel: _flashinfer.Release, s: Shape, phase: str
                ) -> tuple[Part, Part, int | None, str]:
    """(gate, bytes, smem, kernel) of the FA2 prefill kernel for this call on the target."""
    t = ctx.target
    disp = rel.line_of(PREFILL, r"^cudaError_t BatchPrefillWithPagedKVCacheDispatched")
    d0 = disp[0] if disp else 0
    where_nkv = _q(rel, PREFILL, r"DISPATCH_NUM_MMA_KV\(", d0)
    where_chk = _q(rel, PREFILL, r"if \(smem_size > \(size_t\)max_smem_per_block_optin\)", d0)
    where_tile = _q(rel, UTILS, r"inline uint32_t FA2DetermineCtaTileQ")
    nums, how = _flashinfer.compile_numbers(rel, ctx, f"fa2-{s.qk}-{s.vo}-{s.q[0]}-{s.kv_type}",
                                            _fa2_source(rel, s, _fa2_grid(s)))
    if nums and "__error__" in nums:
        return (Part(f"nvcc, building {rel.label()}'s KernelTraits for head_dim {s.qk}/{s.vo} ({s.dtype}, KV "
                     f"{s.kv}), stops at: {nums['__error__']}", False, "compiled"),
                unanswered("not built: see gate"), None, "FA2 prefill")
    rows, worst, kernel = [], 0, []
    for tile, why in _tiles_for(s, phase, t.smem_optin):
        nkv, arith = num_mma_kv(tile, s, t.smem_per_sm, t.smem_optin)
        if nkv is None:
            return (Part(f"{where_nkv}: \"Even the smallest KV tile for head_dim_qk={s.qk}, head_dim_vo={s.vo}, "
                         f"cta_tile_q={tile} exceeds this GPU's {t.smem_optin} bytes\" ({arith})", False, "quoted"),
                    unanswered("refused before sizing"), None, "FA2 prefill")
        kernel.append(f"CTA_TILE_Q={tile} NUM_MMA_KV={nkv}")
        if nums is None:
            rows.append(f"CTA_TILE_Q={tile} ({why}): NUM_MMA_KV={nkv} ({arith}); sizeof not compiled ({how})")
            continue
        size, invalid = (int(x) for x in nums[f"t{tile}_k{nkv}"].split())
        if invalid:
            return (Part(f"{_q(rel, PREFILL, r'static constexpr bool IsInvalid')} KernelTraits::IsInvalid() is true "
                         f"for CTA_TILE_Q={tile} NUM_MMA_KV={nkv} head_dim {s.qk}/{s.vo} (compiled): \"FlashInfer "
                         "Internal Error: Invalid configuration\"", False, "compiled"),
                    unanswered("refused before launch"), None, "FA2 prefill")
        over = size > t.smem_optin
        rows.append(f"CTA_TILE_Q={tile} ({why}): NUM_MMA_KV={nkv} ({arith}); sizeof(SharedStoragePaged) = {size} B"
                    + (f" > opt-in: {where_chk} refuses it" if over else ""))
        worst = max(worst, size)
    gate = Part(f"FA2 KernelTraits valid for every tile the scheduler picks ({where_tile}; IsInvalid() compiled "
                "false)" if nums else f"FA2 tiles per {where_tile} (IsInvalid not compiled: {how})",
                True, "compiled" if nums else "quoted")
    if nums is None:
        return gate, Part("; ".join(rows), None, "none"), None, "FA2 prefill " + ", ".join(kernel)
    ok = worst <= t.smem_optin
    text = (f"{'; '.join(rows)} (dispatcher {where_nkv}, final check {where_chk}; {how} from {rel.label()}'s "
            f"headers)")
    return gate, Part(text, ok, "compiled"), worst, "FA2 prefill (BatchPrefillWithPagedKVCacheKernel) " + \
        ", ".join(kernel)


# ---- FA3 (SM90) ---------------------------------------------------------------------------------------------------

def fa3_tiles(rel: _flashinfer.Release) -> dict[int, tuple[int, int, int, str]] | str:
    """{head_dim: (CTA_Q, CTA_KV, NUM_STAGES, file:line)} of the SM90 paged dispatcher."""
    text = rel.text(SM90)
    m = re.search(r"cudaError_t BatchPrefillWithPagedKVCacheDispatched\(.*?\n};?\n", text, re.S)
    if not m:
        return f"{rel.label()} {SM90}: no BatchPrefillWithPagedKVCacheDispatched"
    body, base = m.group(0), text.count("\n", 0, m.start()) + 1
    found = list(re.finditer(r"USE_TMA_LOAD_KV=\*/(\w+).*?CTA_Q_=\*/(\d+).*?CTA_KV_=\*/(\d+).*?NUM_STAGES_=\*/(\d+)",
                             body, re.S))
    heads = [int(h) for h in re.findall(r"HEAD_DIM_VO == (\d+)\)\s*\{", body)]
    if len(found) != 3 or heads != [64, 128]:
        return f"structure not recognized in {rel.label()} {SM90} BatchPrefillWithPagedKVCacheDispatched"
    out = {}
    for hd, f in zip((64, 128, 256), found):
        line = base + body.count("\n", 0, f.start(2))
        out[hd] = (int(f.group(2)), int(f.group(3)), int(f.group(4)), f"flashinfer/{SM90}:{line}")
    return out


def fa3_prefill(ctx: Context, rel: _flashinfer.Release, s: Shape) -> tuple[Part, Part, int | None, str]:
    tiles = fa3_tiles(rel)
    if isinstance(tiles, str):
        return unanswered(tiles), unanswered(tiles), None, "FA3 prefill"
    cq, ckv, st, where = tiles[s.qk]
    guard = re.search(r"#ifndef (\w+)", rel.text("data/include/flashinfer/cutlass_utils.cuh"))
    src = _flashinfer.host_only(f"""
#define {guard.group(1) if guard else 'FLASHINFER_CUTLASS_UTILS_CUH_'}
#include <cuda_fp8.h>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include <flashinfer/attention/hopper/kernel_traits.cuh>
using namespace flashinfer;
int main() {{
  using KT = AttentionKernelTraits<false, {s.qk}, {s.vo}, {cq}, {ckv}, {st}, {s.q[1]}, {s.q[1]}, {s.q[1]},
                                   int32_t, int>;
  printf("smem %zu\\n", sizeof(typename KT::SharedStorage));
}}
""")
    nums, how = _flashinfer.compile_numbers(rel, ctx, f"fa3-{s.qk}-{s.q[0]}", src, cutlass=True)
    kernel = f"FA3 prefill (hopper PrefillWithKVCacheKernel) CTA_Q={cq} CTA_KV={ckv} stages={st}"
    gate = Part(f"{_q(rel, 'utils.py', r'def is_fa3_prefill_head_dim_supported')}: FA3 instantiates head dim "
                f"{s.qk} ({where})", True, "quoted")
    if not nums or "__error__" in nums:
        return gate, unanswered(f"sizeof(SharedStorage) not compiled ({how})"), None, kernel
    size = int(nums["smem"])
    return gate, Part(f"sizeof(AttentionKernelTraits<..., CTA_Q={cq}, CTA_KV={ckv}, {st} stages>::SharedStorage) = "
                      f"{size} B ({where}; {how} from {rel.label()}'s headers)", size <= ctx.target.smem_optin,
                      "compiled"), size, kernel


# ---- the CUDA-core decode kernel ----------------------------------------------------------------------------------

def decode_kernel(ctx: Context, rel: _flashinfer.Release, s: Shape) -> tuple[Part, Part, int | None, str]:
    grp = _q(rel, UTILS, r"#define DISPATCH_GQA_GROUP_SIZE")
    if s.group not in DECODE_GROUPS:
        return (Part(f"{grp}: DISPATCH_GQA_GROUP_SIZE has {list(DECODE_GROUPS)}: \"Unsupported group_size: "
                     f"{s.group}\"", False, "quoted"), unanswered("refused"), None, "FA2 decode (CUDA cores)")
    hd, kvb = s.qk, s.kvb
    vec = max(16 // kvb, hd // 32)
    bdx, bdy = hd // vec, s.group
    threads = max(128, bdx * bdy)
    bdz = threads // (bdx * bdy)
    tile = (2 if kvb == 1 else 4) if s.group == 1 else 1
    stages = 2 if ctx.target.cc_int >= 80 else 1
    size = (max(2 * stages * tile * bdy * bdz * hd * kvb, bdz * bdy * hd * 4)
            + max(tile * threads * 8, 2 * bdy * bdz * 4))
    disp = rel.line_of(DECODE, r"^cudaError_t BatchDecodeWithPagedKVCacheDispatched\(")
    where = _q(rel, DECODE, r"const uint32_t smem_size =", disp[0] if disp else 0)
    gate = Part(f"{grp}: GQA group {s.group} in {list(DECODE_GROUPS)}; head_dim {hd}: bdx = {bdx} <= 32", True,
                "quoted")
    text = (f"{where}: max(2*{stages} stages*{tile}*bdy {bdy}*bdz {bdz}*{hd}*{kvb} B, bdz*bdy*{hd}*4) + "
            f"max({tile}*{threads} threads*8, 2*bdy*bdz*4) = {size} B (vec_size {vec}, bdx {bdx})")
    return gate, Part(text, size <= ctx.target.smem_optin, "quoted"), size, \
        f"FA2 decode (BatchDecodeWithPagedKVCacheKernel) bdx={bdx} bdy={bdy} bdz={bdz}"


# ---- the answer ---------------------------------------------------------------------------------------------------

def _engine_gate(call: KernelCall, ctx: Context, s: Shape) -> Part | None:
    """vLLM's own head-size list (None when it accepts or the engine has none)."""
    src = ctx.engine_source
    if getattr(src, "engine", "") != "vllm":
        return None
    try:
        text = src.read_text(VLLM_FI)
    except UsageError:
        return None
    m = re.search(r"def get_supported_head_sizes\(cls\)[^:]*:.*?return \[([\d,\s]+)\]", text, re.S)
    if not m:
        return None
    sizes = [int(x) for x in m.group(1).split(",") if x.strip()]
    line = text.count("\n", 0, m.start()) + 1
    if s.qk in sizes and s.vo in sizes:
        return None
    return Part(f"{src.label()} {VLLM_FI}:{line} get_supported_head_sizes() = {sizes}: head_dim {s.qk}/{s.vo} is not "
                "among them", False, "quoted")


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The three parts; a file of the release that cannot be read as expected is an unanswered row, never a
    traceback."""
    try:
        return _answer(call, ctx)
    except Exception as exc:  # noqa: BLE001 - one row must not stop the audit
        return _flashinfer.failed(f"FlashInfer paged attention (head_dim {call.param('head_dim')})", exc)


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    s = Shape(call)
    label = f"head_dim {s.qk}/{s.vo} {s.dtype} KV {s.kv}"
    rel = _flashinfer.release(ctx)
    if isinstance(rel, str):
        why = f"FlashInfer not read: {rel}"
        return CompiledAnswer(f"FlashInfer paged attention ({label})", unanswered(why), unanswered(why),
                              unanswered(why))
    notes = [rel.note] if rel.note else []
    kind, chosen = route(call, ctx, s)
    notes.append(f"kernel chosen by {chosen}")
    arch = _arch(ctx, rel, s, kind)
    if s.q is None or s.kv_type is None:
        why = f"dtype {s.dtype} / kv_cache_dtype {s.kv} is not sized by this family"
        return CompiledAnswer(f"FlashInfer paged attention ({label})", arch, unanswered(why), unanswered(why),
                              notes=tuple(notes))
    eng = _engine_gate(call, ctx, s)
    if eng is not None:
        return CompiledAnswer(f"FlashInfer paged attention ({label})", arch, eng, unanswered("refused by the engine"),
                              notes=tuple(notes))
    if s.qk % 16 or s.vo % 16 or s.vo < 64:
        gate = Part(f"{_q(rel, PREFILL, r'static constexpr uint32_t HEAD_DIM_QK = NUM_MMA_D_QK')}: FA2 tiles head dims "
                    f"in 16-wide MMA steps and IsInvalid() rejects NUM_MMA_D_VO < 4 (head_dim_v < 64): "
                    f"{s.qk}/{s.vo}", False, "quoted")
        return CompiledAnswer(f"FlashInfer paged attention ({label})", arch, gate, unanswered("refused"),
                              notes=tuple(notes))
    if kind.startswith("other:"):
        why = kind[len("other:"):]
        return CompiledAnswer(f"FlashInfer paged attention ({label})", arch, unanswered(why), unanswered(why),
                              notes=tuple(notes))
    if kind == "decode":
        gate, size_part, smem, kernel = decode_kernel(ctx, rel, s)
    elif kind == "fa3":
        gate, size_part, smem, kernel = fa3_prefill(ctx, rel, s)
    else:
        gate, size_part, smem, kernel = fa2_prefill(call, ctx, rel, s, call.phase)
    notes.append(_flashinfer.prebuilt_note(rel))
    return CompiledAnswer(f"{kernel} ({label})", arch, gate, size_part, smem_bytes=smem, notes=tuple(notes))


def arch_part(call: KernelCall, ctx: Context) -> Part:
    """The arch part alone (no compile): what answer() reports as `arch`."""
    rel = _flashinfer.release(ctx)
    if isinstance(rel, str):
        return unanswered(f"FlashInfer not read: {rel}")
    s = Shape(call)
    return _arch(ctx, rel, s, route(call, ctx, s)[0])


def _arch(ctx: Context, rel: _flashinfer.Release, s: Shape, kind: str) -> Part:
    if kind == "fa3":
        where = _q(rel, "jit/core.py", r"^sm90a_nvcc_flags = \[")
        ok = ctx.target.cc_int == 90
        return Part(f"FA3 modules build with sm90a_nvcc_flags ({where}: -gencode=arch=compute_90a,code=sm_90a)"
                    + ("" if ok else f": no code for {ctx.target.arch[:-1]}"), ok, "read")
    majors, where = None, ""
    if s.qk > 256 or s.vo > 256:
        hit = rel.line_of(MODULES, r"supported_major_versions=\[8, 9", (rel.line_of(
            MODULES, r"^def _fa2_head_dim_nvcc_flags") or (0, ""))[0])
        if hit:
            majors = [int(x) for x in re.findall(r"\d+", hit[1])]
            where = f"flashinfer/{MODULES}:{hit[0]} _fa2_head_dim_nvcc_flags (head dim > 256)"
    else:
        where = (f"{_q(rel, MODULES, r'^def _fa2_head_dim_nvcc_flags')}: head dim <= 256 modules pass no arch flags; "
                 f"{_q(rel, 'jit/cpp_ext.py', r'global_flags = cpp_ext_initial_compilation_context')}: the global list")
    ja = _flashinfer.jit_arch(rel, ctx.target.cc, majors, where)
    return Part(ja.answer, ja.ok, "read" if ja.ok is not None else "none")


__all__ = ["NAME", "LIBRARY", "answer", "arch_part", "route", "cta_tile", "num_mma_kv", "warps", "Shape"]
