"""FlashAttention as vLLM ships it (vllm-flash-attn): `flash_attn_varlen_func` (vllm/vllm_flash_attn/
flash_attn_interface.py), called from FlashAttentionImpl.forward (vllm/v1/attention/backends/flash_attn.py) with the
paged KV cache (block_table, seqused_k, a dummy cu_seqlens_k, num_splits = 0: vLLM's FA2 metadata never sets
max_num_splits, only 1 under VLLM_BATCH_INVARIANT), which calls `_vllm_fa2_C.varlen_fwd` (FA2) or `_vllm_fa3_C.fwd`
(FA3).

Which version: vllm/v1/attention/backends/fa_utils.py `get_flash_attn_version` takes FA3 when
`device_capability.major == 9` (and FA3 is supported), FA4 when `major == 10`, else FA2; FA3 asked for on
`major >= 10` falls back to FA4 or FA2; flash_attn_interface.py `_is_fa3_supported` is cc 9.x only and FA4 9.x, 10.x,
11.x. So on SM120 (cc 12.0 / 12.1) vLLM runs FA2 for every head size it accepts. That function is run here too (the
wheel's text, tileprobe.audit.vllm_selection's stand-ins) and a note says when it disagrees with the call's
`fa_version`.

Call params (tileprobe.audit.path.forward): fa_version (2 or 3; 4 is answered `unanswered`: CuTe DSL, JIT-compiled
at run time, not in the .so), head_dim, head_dim_v, heads and kv_heads (per rank), dtype ("bf16"/"fp16"),
kv_cache_dtype ("auto"), paged (True), page_size (16), window (None or the model's sliding window: vLLM passes
(window - 1, 0)), softcap (0 = none), sinks (False), causal (True), and optionally num_splits (what vLLM passes:
0; 1 under VLLM_BATCH_INVARIANT) and alibi (False). call.phase: "prefill" means a step with max_seqlen_q > 1 (any
prefill or spec-decode token in the batch), "decode" a pure decode step (max_seqlen_q == 1).

Source quoted: github.com/vllm-project/flash-attention at 617264c1 (2026-08-06, the newest commit of the snapshot
read here); csrc/flash_attn last changed in 28e862d2 "Make vllm's FA2 ABI stable (#175)". The GIT_TAG the vLLM
releases of the manifests build (cmake/external_projects/vllm_flash_attn.cmake) is not in their wheels and could not
be read (the vLLM repository snapshot was too large to fetch; the indexed copy of that file is older). What ties the wheels' .so to
this source: both FA2 .so import the torch stable ABI (aoti_torch_*, #175); every check message quoted below is in
the .so's .rodata (the gate says so, read per audit); every kernel the dispatch below names is instantiated in the
.so (the arch part finds it by its demangled name, or says it did not); the wheels' cute/ files match no commit of the
snapshot (they are newer or from another branch), so line numbers may have moved; the checks are the .so's own.

1. arch [read]: `_vllm_fa2_C.abi3.so` holds sm_80 cubins and compute_80 PTX only (76 + 76 images, 2224 distinct
   kernels in each vLLM release with a manifest), so on sm_120/sm_121 (and sm_90: an sm_80 cubin runs only on 8.x)
   the driver JIT-compiles the kernel's compute_80 PTX; `_vllm_fa3_C.abi3.so` holds sm_90a cubins only: no code on SM120
   ("no kernel image is available"). The kernel is the exact instantiation the dispatch below names (its mangled
   name, in the cubin and as a PTX .entry).
2. gate [quoted, with vLLM's own checks run]: csrc/flash_attn/flash_api.cpp `mha_varlen_fwd`:
     :596 `STD_TORCH_CHECK(is_sm8x_min, ...)` with `is_sm8x_min = cc_major >= 8`
     :599 `q_dtype == ScalarType::Half || q_dtype == ScalarType::BFloat16` ("only support fp16 and bf16")
     :637 `!paged_KV || page_block_size % 16 == 0` ("Paged KV cache block size must be divisible by 16")
     :658 `head_size <= 256`; :659 `head_size % 8 == 0`; :660 `num_heads % num_heads_k == 0`
     :672 `CHECK_SHAPE(v, num_blocks, page_block_size, num_heads_k, head_size)` (V's head size is Q's)
     :763 paged and not swapped: `num_splits <= 1` ("num_splits > 1 is not supported for varlen paged KV")
   the wheel's flash_attn_interface.py (FA2 branch): `raise NotImplementedError("FA2 does not support s_aux")`
   (sinks) and "... num_splits > 1"; and vLLM's `FlashAttentionBackend.validate_configuration` (vllm/v1/attention/
   backend.py; supports_head_size: % 8 and <= 256 unless FA4 is supported, dtypes fp16/bf16, block sizes
   MultipleOf(16), cc >= 8.0, sinks only with FA3/FA4, FP8 KV only with FA3/FA4) run from the wheel. FA3: hopper/
   flash_api.cpp `mha_fwd` :782 dtype fp16/bf16/e4m3, :843 `head_size <= max_headdim` (256), :844 heads % kv_heads,
   :933 `head_size % alignment == 0` (8), and the interface's `_is_fa3_supported` (cc 9.x).
3. bytes [quoted, traits read]: `run_mha_fwd(params, stream, /*force_split_kernel=*/paged_KV)` (:798) sends a paged
   call to src/flash_fwd_launch_template.h `run_mha_fwd_splitkv_dispatch`: kBlockM 64, 4 warps, kBlockN =
   `Headdim <= 64 ? 256 : (Headdim <= 128 ? 128 : 64)` (:184), except `params.num_splits == 1` (:185), which takes
   `run_mha_fwd_splitkv_align`: kBlockN_standard = `Headdim <= 64 ? 128 : 64` (:175). Headdim is HEADDIM_SWITCH's
   (static_switch.h: 32, 64, 96, 128, 192, 256). A pure-decode GQA step (:646 seqlenq_ngroups_swapped: max_seqlen_q
   == 1, heads > kv_heads, no window, no alibi) gets num_splits from `num_splits_heuristic` (:361; 1 when
   batch * kv_heads * m_blocks >= 0.8 * 2 * SMs): one split runs the aligned kernel, more run Split=true and then
   `flash_fwd_splitkv_combine_kernel<traits, kBlockM = d % 128 == 0 ? 4 : (d % 64 == 0 ? 8 : 16), Log_max_splits,
   Is_even_K>` with 0 dynamic bytes (:140-158). Any other paged call keeps vLLM's num_splits (0: main kernel,
   Split=false). A call with `paged=False` runs `run_mha_fwd_hdim<d>` instead, where `is_sm8x = cc_major == 8 &&
   cc_minor > 0` is false on 12.x (the A100 side) and hdim 256 tests `max_smem_per_block >= 2*256*(128+2*64) &&
   max_smem_per_sm < 4*256*(64+2*64)` against the target's opt-in and per-SM bytes. The kernel's template flags are
   the launch template's (:120): <traits, Is_causal, Is_local && !Is_causal, Has_alibi, Is_even_MN (false: vLLM
   always passes cu_seqlens_k), Is_even_K (d == Headdim), Is_softcap, Split, Append_KV>, with mha_varlen_fwd's
   `is_causal = false` for max_seqlen_q == 1 (:639) and set_params_fprop's `is_causal = window_size_left < 0 &&
   window_size_right == 0` (:183). Dynamic shared memory: src/kernel_traits.h Flash_fwd_kernel_traits (:107-109)
   `kSmemSize = Share_Q_K_smem ? max(kSmemQSize, kSmemKVSize) : kSmemQSize + kSmemKVSize`, kSmemQSize = kBlockM *
   kHeadDim * sizeof(Element), kSmemKVSize = kBlockN * kHeadDim * 2 * sizeof(Element), with the traits parsed from the
   kernel's demangled name in the binary; plus the cubin's static bytes. (FA3's bytes are sizeof its CUTLASS shared
   storage: `unanswered`.) Registers are the sm_80 cubin's and only reported where that cubin is what runs.
"""

from __future__ import annotations

import inspect
import math
import mmap
import re
from dataclasses import dataclass

from tileprobe.audit import capture_cache
from tileprobe.audit.path import binaries
from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered

NAME = "fa2"
LIBRARY = "FlashAttention (vllm-flash-attn: vllm/vllm_flash_attn/_vllm_fa2_C, _vllm_fa3_C)"

FA2_SO = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
FA3_SO = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
INTERFACE = "vllm/vllm_flash_attn/flash_attn_interface.py"
SOURCE = "vllm-project/flash-attention@617264c1"
API = f"{SOURCE} csrc/flash_attn/flash_api.cpp"
LAUNCH = f"{SOURCE} csrc/flash_attn/src/flash_fwd_launch_template.h"
TRAITS_H = f"{SOURCE} csrc/flash_attn/src/kernel_traits.h"
HOPPER = f"{SOURCE} hopper/flash_api.cpp"

ELEM = {"bf16": "cutlass::bfloat16_t", "fp16": "cutlass::half_t"}
SHORT = {v: k for k, v in ELEM.items()}
ELEM_BYTES = 2
HEADDIMS = (32, 64, 96, 128, 192, 256)  # static_switch.h HEADDIM_SWITCH
FLAGS = {
    "flash_fwd_splitkv_kernel": ("Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K", "Is_softcap",
                                 "Split", "Append_KV"),
    "flash_fwd_kernel": ("Is_dropout", "Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K", "Is_softcap",
                         "Return_softmax"),
}
_NAME = re.compile(r"^void flash::(flash_fwd_\w+)<Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+), (true|false), "
                   r"(true|false), (cutlass::\w+), Flash_kernel_traits<[^<>]*> >, ([^<>]*)>"
                   r"\(flash::Flash_fwd_params\)$")


@dataclass(frozen=True)
class Traits:
    """Flash_fwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps, Is_Q_in_regs, Share_Q_K_smem, elem_type>."""

    head_dim: int
    block_m: int
    block_n: int
    warps: int
    q_in_regs: bool
    share_qk: bool
    elem: str  # cutlass::bfloat16_t

    def short(self) -> str:
        b = lambda v: "true" if v else "false"  # noqa: E731
        return (f"Flash_fwd_kernel_traits<{self.head_dim}, {self.block_m}, {self.block_n}, {self.warps}, "
                f"{b(self.q_in_regs)}, {b(self.share_qk)}, {SHORT.get(self.elem, self.elem)}>")

    def smem(self) -> tuple[int, str]:
        """kernel_traits.h:107-109, with the formula and the values put in."""
        q = self.block_m * self.head_dim * ELEM_BYTES
        kv = self.block_n * self.head_dim * 2 * ELEM_BYTES
        if self.share_qk:
            return max(q, kv), f"kSmemSize = max(kSmemQSize {q}, kSmemKVSize {kv})"
        return q + kv, (f"kSmemSize = kSmemQSize + kSmemKVSize = {self.block_m}*{self.head_dim}*2 + "
                        f"{self.block_n}*{self.head_dim}*2*2 = {q} + {kv} = {q + kv} B")


@dataclass(frozen=True)
class Launch:
    kind: str  # flash_fwd_splitkv_kernel | flash_fwd_kernel
    traits: Traits
    flags: tuple[bool, ...]
    why: str  # the dispatch lines that chose it

    def label(self) -> str:
        on = [n for n, v in zip(FLAGS[self.kind], self.flags) if v]
        return f"{self.kind}<{', '.join([self.traits.short(), *on])}>"


@dataclass(frozen=True)
class Dispatch:
    launches: tuple[Launch, ...]  # the kernels this call may launch (decode: chosen per step at run time)
    combine: Traits | None  # the traits of the split-KV combine kernel, when num_splits > 1 is possible
    notes: tuple[str, ...]


def head_dim_switch(d: int) -> int | None:
    return next((h for h in HEADDIMS if d <= h), None)


def _index(lib) -> dict:
    """(kind, Traits, flags) -> cubin Kernel, parsed from every demangled FA2 kernel name in the binary."""
    out = {}
    for _, k in lib.kernels:
        m = _NAME.match(k.demangled)
        if m is None:
            continue
        kind, hd, bm, bn, w, qr, sh, elem, rest = m.groups()
        flags = tuple(int(x) if x.strip().lstrip("-").isdigit() else x.strip() == "true" for x in rest.split(","))
        out.setdefault((kind, Traits(int(hd), int(bm), int(bn), int(w), qr == "true", sh == "true", elem), flags), k)
    return out


# ------------------------------------------------------------------------------------------------------------------
# dispatch (flash_api.cpp mha_varlen_fwd -> run_mha_fwd -> flash_fwd_launch_template.h)
# ------------------------------------------------------------------------------------------------------------------


def _standard_traits(kd: int, causal: bool, elem: str, target) -> tuple[Traits, str]:
    """run_mha_fwd_hdim<kd> (no dropout), evaluated on the target."""
    major, minor = (int(x) for x in target.cc.split("."))
    sm8x = major == 8 and minor > 0
    t = lambda m, n, w=4: Traits(kd, m, n, w, False, False, elem)  # noqa: E731
    if kd in (32, 64):
        return t(128, 128), f"run_mha_fwd_hdim{kd}"
    if kd in (96, 128):
        pick = (t(64, 64) if causal else t(128, 64 if kd == 96 else 32)) if sm8x else t(128, 64)
        return pick, (f"run_mha_fwd_hdim{kd}: is_sm8x = cc_major == 8 && cc_minor > 0 is {str(sm8x).lower()} "
                      f"on {target.cc}")
    if kd == 192:
        return t(128, 64, 8), "run_mha_fwd_hdim192"
    need_block, need_sm = 2 * kd * (128 + 2 * 64), 4 * kd * (64 + 2 * 64)
    big = target.smem_optin >= need_block and target.smem_per_sm < need_sm
    return (t(128, 64, 8) if big else t(64, 64)), (
        f"run_mha_fwd_hdim256: max_smem_per_block {target.smem_optin} >= {need_block} && max_smem_per_sm "
        f"{target.smem_per_sm} < {need_sm} is {str(big).lower()}")


def dispatch(call: KernelCall, target) -> Dispatch | None:
    """The FA2 kernels `call` launches on `target` (None: HEADDIM_SWITCH has no branch for its head size)."""
    d = int(call.param("head_dim"))
    kd = head_dim_switch(d)
    if kd is None:
        return None
    elem = ELEM.get(call.param("dtype", "bf16"), call.param("dtype", "bf16"))
    heads, kv = int(call.param("heads", 1)), int(call.param("kv_heads", call.param("heads", 1)))
    paged, window = bool(call.param("paged", True)), call.param("window")
    alibi, softcap = bool(call.param("alibi", False)), float(call.param("softcap", 0.0) or 0.0) > 0
    splits = int(call.param("num_splits", 0))
    decode = call.phase == "decode"
    causal = bool(call.param("causal", True)) and not (decode and not alibi)  # :639
    left, right = (int(window) - 1, 0) if window else (-1, -1)  # flash_attn.py FlashAttentionImpl.__init__
    if causal:
        right = 0
    swapped = decode and heads > kv and left < 0 and right < 0 and d % 8 == 0 and not alibi  # :646
    is_causal = left < 0 and right == 0  # set_params_fprop :183
    local = (left >= 0 or right >= 0) and not is_causal
    even_k = d == kd
    notes = []
    if window:
        notes.append(f"window ({left}, {right}) makes the kernel Is_local; a step whose max_seqlen_k <= {left} runs "
                     "it as causal/full attention instead (:662 window_size_left = -1)")

    def split_launch(block_n: int, split: bool, why: str) -> Launch:  # :120 (Is_even_MN: false for varlen)
        flags = (is_causal, local, alibi, False, even_k and not alibi, softcap, split, False)
        return Launch("flash_fwd_splitkv_kernel", Traits(kd, 64, block_n, 4, False, False, elem), flags, why)

    def standard_launch(why: str) -> Launch:  # run_flash_fwd (no dropout, no softmax returned)
        traits, chosen = _standard_traits(kd, is_causal, elem, target)
        flags = (False, is_causal, local, alibi, False, even_k and not alibi, softcap, False)
        return Launch("flash_fwd_kernel", traits, flags, f"{why}: run_mha_fwd_ -> {chosen}")

    main_n, align_n = (256 if kd <= 64 else 128 if kd <= 128 else 64), (128 if kd <= 64 else 64)
    main_why = "run_mha_fwd_splitkv_dispatch (:184 kBlockN = Headdim <= 64 ? 256 : (Headdim <= 128 ? 128 : 64))"
    align_why = "params.num_splits == 1 (:185) -> run_mha_fwd_splitkv_align (:175 kBlockN_standard)"
    combine = None
    if swapped and splits != 1:
        mblocks = math.ceil((heads // kv) / 64)
        need = 0.8 * 2 * target.sms
        least = math.ceil(need / (kv * mblocks))
        launches = (split_launch(main_n, True, f"decode GQA (:646 swapped) num_splits_heuristic > 1: {main_why}"),
                    split_launch(align_n, False, f"decode GQA, num_splits_heuristic == 1: {align_why}"))
        if not paged:  # one split and no force_split_kernel: run_mha_fwd's standard kernel (:291)
            launches = (launches[0], standard_launch("decode GQA, num_splits_heuristic == 1, not paged"))
        combine = launches[0].traits
        notes.append(f"decode: num_splits_heuristic (flash_api.cpp:309) gives 1 split from batch * {kv} kv heads * "
                     f"{mblocks} m-block >= 0.8 * 2 * {target.sms} SMs (batch >= {least}) or a context of one "
                     f"{main_n}-key block, else splits the context and launches flash_fwd_splitkv_combine_kernel")
    elif paged:
        launches = (split_launch(align_n, False, f"paged, vLLM num_splits=1: {align_why}") if splits == 1 else
                    split_launch(main_n, False, f"paged (:798 force_split_kernel), vLLM num_splits={splits}: "
                                 f"{main_why}"),)
    else:
        launches = (standard_launch("not paged"),)
    return Dispatch(launches, combine, tuple(notes))


# ------------------------------------------------------------------------------------------------------------------
# reading the binaries (once per audit: ctx.memo)
# ------------------------------------------------------------------------------------------------------------------


def _library(ctx: Context, rel: str):
    key = ("fa2-library", ctx.engine_source.origin, rel)
    if key not in ctx.memo:
        src = ctx.engine_source
        path = binaries.member(src.origin, src.kind, rel, ctx.cache_dir)
        lib = binaries.library(path)
        ctx.memo[key] = (path, lib, _index(lib) if rel == FA2_SO else {})
    return ctx.memo[key]


def _messages(ctx: Context, path, messages: tuple[str, ...]) -> set[str]:
    """Which of the check messages are in the shipped .so (host code's .rodata)."""
    key = ("fa2-messages", str(path))
    if key not in ctx.memo:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            ctx.memo[key] = {s for s in messages if m.find(s.encode()) >= 0}
    return ctx.memo[key]


# ------------------------------------------------------------------------------------------------------------------
# vLLM's own checks, run from the wheel's text
# ------------------------------------------------------------------------------------------------------------------


def _vllm_checks(call: KernelCall, ctx: Context) -> tuple[list[str] | None, int | None, str]:
    """(validate_configuration's reasons, get_flash_attn_version's pick, why-not) as vLLM runs them on the target."""
    p = call.params
    key = ("fa2-vllm", ctx.engine_source.origin, ctx.target.name, p.get("head_dim"), p.get("head_dim_v"),
           p.get("dtype"), p.get("kv_cache_dtype"), p.get("page_size"), bool(p.get("sinks")),
           p.get("window") is not None, float(p.get("softcap", 0.0) or 0.0) > 0, bool(p.get("alibi")))
    if key in ctx.memo:
        return ctx.memo[key]
    # kept across audits (the engine's files, tileprobe and the inputs in the key): vLLM's own checks need torch and
    # the wheel's modules served, seconds a warm audit need not spend again
    got = capture_cache.memo("fa2-vllm-checks", ctx.engine_source, {"key": list(key[2:])}, ctx.cache_dir,
                             lambda: list(_run_vllm_checks(p, ctx)))
    ctx.memo[key] = out = (got[0], got[1], got[2])
    return out


def _run_vllm_checks(p: dict, ctx: Context) -> tuple[list[str] | None, int | None, str]:
    try:
        import torch

        from tileprobe.audit import vllm_selection
        from tileprobe.audit.selection import DTYPES, device

        mods_key = ("fa2-vllm-modules", ctx.engine_source.origin, ctx.target.name)
        if mods_key not in ctx.memo:  # the wheel's modules, served once per audit and target
            ctx.memo[mods_key] = vllm_selection.vllm_modules(ctx.engine_source, ctx.target)
        mods = ctx.memo[mods_key]
        with device(ctx.target, mods):
            backend = mods.module("vllm.v1.attention.backends.flash_attn").FlashAttentionBackend
            fa_utils = mods.module("vllm.v1.attention.backends.fa_utils")
            decoder = mods.module("vllm.v1.attention.backend").AttentionType.DECODER
            cap = mods.module("vllm.platforms").current_platform.get_device_capability()
            dtype = getattr(torch, DTYPES.get(p.get("dtype", "bf16"), str(p.get("dtype"))), None)
            kw = dict(head_size=int(p["head_dim"]), dtype=dtype, kv_cache_dtype=p.get("kv_cache_dtype", "auto"),
                      block_size=p.get("page_size", 16), use_mla=False, has_sink=bool(p.get("sinks")), use_sparse=False,
                      use_mm_prefix=False, use_per_head_quant_scales=False, device_capability=cap, attn_type=decoder,
                      has_sliding_window=p.get("window") is not None)
            sig = inspect.signature(backend.validate_configuration).parameters
            reasons = list(backend.validate_configuration(**{k: v for k, v in kw.items() if k in sig}))
            fv = dict(requires_alibi=bool(p.get("alibi")), head_size=int(p["head_dim"]),
                      head_size_v=int(p.get("head_dim_v") or p["head_dim"]), has_sinks=bool(p.get("sinks")),
                      requires_softcap=float(p.get("softcap", 0.0) or 0.0) > 0,
                      kv_cache_block_size=p.get("page_size"), supports_fa4_hd256=True)
            sig = inspect.signature(fa_utils.get_flash_attn_version).parameters
            version = fa_utils.get_flash_attn_version(**{k: v for k, v in fv.items() if k in sig})
        out = (reasons, version, "")
    except Exception as exc:  # noqa: BLE001 - a stand-in the wheel's text outgrew: said, never raised
        out = (None, None, f"vLLM's own checks could not be run here ({type(exc).__name__}: {exc})")
    return out


def _interface_line(ctx: Context, text: str) -> str:
    try:
        lines = ctx.engine_source.read_text(INTERFACE).splitlines()
    except Exception:  # noqa: BLE001
        return ""
    n = next((i for i, ln in enumerate(lines, 1) if text in ln), None)
    return f"{INTERFACE}:{n}" if n else ""


# ------------------------------------------------------------------------------------------------------------------
# the three parts
# ------------------------------------------------------------------------------------------------------------------


def _checks_fa2(call: KernelCall, ctx: Context) -> list[tuple[str, bool, str]]:
    """(where and what, passes, the message the .so would raise) for each FA2 check, the call's values put in."""
    d, dv = int(call.param("head_dim")), int(call.param("head_dim_v") or call.param("head_dim"))
    heads, kv = int(call.param("heads", 1)), int(call.param("kv_heads", call.param("heads", 1)))
    dtype, page = call.param("dtype", "bf16"), int(call.param("page_size", 16))
    paged, splits = bool(call.param("paged", True)), int(call.param("num_splits", 0))
    major = int(ctx.target.cc.split(".")[0])
    yes = lambda ok: "yes" if ok else "NO"  # noqa: E731
    out = [
        (f":596 is_sm8x_min = cc_major >= 8 ({major} >= 8: {yes(major >= 8)})", major >= 8,
         "FlashAttention only supports Ampere GPUs or newer"),
        (f":599 q dtype fp16 or bf16 ({dtype}: {yes(dtype in ELEM)})", dtype in ELEM,
         "FlashAttention only support fp16 and bf16 data type"),
        (f":658 head_size <= 256 ({d}: {yes(d <= 256)})", d <= 256,
         "FlashAttention forward only supports head dimension at most 256"),
        (f":659 head_size % 8 == 0 ({d} % 8 = {d % 8}: {yes(d % 8 == 0)})", d % 8 == 0,
         "must have a head_size that is a multiple of 8"),
        (f":660 num_heads % num_heads_k == 0 ({heads} % {kv} = {heads % kv if kv else '-'}: "
         f"{yes(kv > 0 and heads % kv == 0)})", kv > 0 and heads % kv == 0,
         "Number of heads in key/value must divide number of heads in query"),
        (f":672 CHECK_SHAPE(v, ..., head_size) (head_dim_v {dv} == {d}: {yes(dv == d)})", dv == d, ""),
    ]
    if paged:
        out.append((f":637 page_block_size % 16 == 0 ({page} % 16 = {page % 16}: {yes(page % 16 == 0)})",
                    page % 16 == 0, "Paged KV cache block size must be divisible by 16"))
        out.append((f":763 paged: num_splits <= 1 ({splits}: {yes(splits <= 1)})", splits <= 1,
                    "num_splits > 1 is not supported for varlen paged KV"))
    kvd = call.param("kv_cache_dtype", "auto")
    if kvd not in ("auto", None, "bfloat16", "float16"):
        out.append((f":601 k dtype == q dtype (KV cache {kvd} vs {dtype}: NO)", False,
                    "query and key must have the same dtype"))
    if call.param("sinks"):
        out.append((f"{_interface_line(ctx, 'FA2 does not support s_aux') or INTERFACE} FA2 raises for s_aux "
                    "(the model's sinks: NO)", False, ""))
    return out


def _gate(call: KernelCall, ctx: Context, checks: list[tuple[str, bool, str]], where: str, path=None) -> Part:
    """FA's checks (quoted, values put in; their messages looked for in the .so at `path`) and vLLM's (run)."""
    reasons, _, why_not = _vllm_checks(call, ctx)
    fa_fail = [c for c, ok, _ in checks if not ok]
    words = [f"{where}: " + "; ".join(c for c, _, _ in checks)]
    if path is not None:
        msgs = tuple(m for _, _, m in checks if m)
        try:
            found = _messages(ctx, path, msgs)
            missing = [m for m in msgs if m not in found]
            words.append(f"{len(found)} of {len(msgs)} of these checks' messages are in the shipped .so"
                         + (f" (not: {'; '.join(missing)})" if missing else ""))
        except OSError as exc:
            words.append(f"the .so's messages were not read ({exc})")
    if reasons is None:
        words.append(why_not)
    else:
        words.append(f"vLLM {ctx.engine_source.version} FlashAttentionBackend.validate_configuration on cc "
                     f"{ctx.target.cc} [run]: " + ("; ".join(reasons) if reasons else "accepts"))
    if fa_fail:
        return Part("refused: " + "; ".join(fa_fail) + " | " + " | ".join(words), False, "quoted")
    if reasons:
        return Part("vLLM refuses: " + "; ".join(reasons) + " | " + " | ".join(words), False, "run")
    return Part("accepted | " + " | ".join(words), True, "quoted")


def _bytes(disp: Dispatch, index: dict, target, jit: bool) -> tuple[Part, int | None, int | None, list[str]]:
    words, total, static, notes = [], None, None, []
    for ln in disp.launches:
        smem, formula = ln.traits.smem()
        k = index.get((ln.kind, ln.traits, ln.flags))
        st = k.static_smem if k is not None else 0
        here = smem + st
        attr = " (cudaFuncSetAttribute MaxDynamicSharedMemorySize, >= 48 KiB)" if smem >= 48 * 1024 else ""
        words.append(f"{ln.label()}: {formula}{attr} + {st} B static"
                     + (" (sm_80 cubin)" if k is not None else " (kernel not read)") + f" = {here} B")
        if k is not None and static is None:
            static = st
            if jit:
                notes.append(f"the sm_80 cubin of {ln.kind} uses {k.registers} registers; the JIT for "
                             f"{target.arch[:-1]} allocates its own")
        total = here if total is None else max(total, here)
    if disp.combine is not None:
        kd = disp.combine.head_dim
        bm = 4 if kd % 128 == 0 else 8 if kd % 64 == 0 else 16
        found = sorted({k.static_smem for (kind, t, f), k in index.items()
                        if kind == "flash_fwd_splitkv_combine_kernel" and t == disp.combine and f[0] == bm})
        span = f"{found[0]}-{found[-1]} B static (Log_max_splits 1-7, sm_80 cubins)" if found else "static not read"
        words.append(f"flash_fwd_splitkv_combine_kernel<{disp.combine.short()}, {bm}, Log_max_splits, Is_even_K>: "
                     f"0 B dynamic (:144) + {span}")
    ok = total <= target.smem_optin
    tail = (f"max {total} B {'<=' if ok else '>'} {target.smem_optin} B opt-in on {target.name} (kSmemSize: "
            f"{TRAITS_H}:107-109; dispatch: {LAUNCH})")
    return Part(" | ".join(words + [tail]), ok, "quoted"), total, static, notes


def _answer_fa2(call: KernelCall, ctx: Context) -> CompiledAnswer:
    d = call.param("head_dim")
    if d is None:
        why = "the call names no head_dim"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))
    target = ctx.target
    disp = dispatch(call, target)
    try:
        path, lib, index = _library(ctx, FA2_SO)
    except Exception as exc:  # noqa: BLE001
        why = f"{FA2_SO} of {ctx.engine_source.label()} could not be read ({type(exc).__name__}: {exc})"
        path, lib, index = None, None, {}
        arch = unanswered(why)
    notes = list(disp.notes) if disp else []
    kernel_word = f"FlashAttention-2 {call.op}: head_dim {d} has no HEADDIM_SWITCH branch (> 256)"
    registers = static = smem = None
    jit = False
    if disp is not None:
        kernel_word = " or ".join(ln.label() for ln in disp.launches)
        if disp.combine is not None:
            kernel_word += " (+ flash_fwd_splitkv_combine_kernel when split)"
    if lib is not None:
        first = disp.launches[0] if disp else None
        k = index.get((first.kind, first.traits, first.flags)) if first else None
        if disp is None:
            pattern = r"^_ZN5flash24flash_fwd_splitkv_kernel"
        elif k is None:
            pattern = None
        else:
            pattern = "^" + re.escape(k.name) + "$"
        if pattern is None:
            arch = unanswered(f"{FA2_SO} has no instantiation {first.label()} (the dispatch quoted from {SOURCE} "
                              "names it): the wheel's FlashAttention is not the source read here")
        else:
            found = binaries.arch_part(lib, target, pattern, FA2_SO)
            arch = found.part
            jit = "JIT" in arch.answer
            missing = [ln.label() for ln in (disp.launches if disp else ())
                       if (ln.kind, ln.traits, ln.flags) not in index]
            if missing:
                notes.append(f"not instantiated in {FA2_SO}: {', '.join(missing)}")
    if disp is None:
        byte_part = unanswered(f"head_dim {d}: FA2 refuses it before any kernel is chosen (see gate)")
    elif lib is None:
        byte_part = unanswered(arch.answer)
    else:
        byte_part, smem, static, more = _bytes(disp, index, target, jit)
        notes += more
        if not jit and arch.ok:
            k = index.get((disp.launches[0].kind, disp.launches[0].traits, disp.launches[0].flags))
            registers = k.registers if k is not None else None
    gate = _gate(call, ctx, _checks_fa2(call, ctx), f"{API} mha_varlen_fwd", path)
    notes += _version_note(call, ctx)
    return CompiledAnswer(kernel_word, arch, gate, byte_part, smem, static, registers, tuple(notes))


def _version_note(call: KernelCall, ctx: Context) -> list[str]:
    _, version, _ = _vllm_checks(call, ctx)
    asked = int(call.param("fa_version", 2))
    if version is None:
        return []
    if version != asked:
        return [f"vLLM {ctx.engine_source.version} fa_utils.get_flash_attn_version picks FA{version} on cc "
                f"{ctx.target.cc} for this layer [run], not FA{asked}"]
    return [f"vLLM {ctx.engine_source.version} fa_utils.get_flash_attn_version picks FA{version} on cc "
            f"{ctx.target.cc} [run]"]


def _answer_fa3(call: KernelCall, ctx: Context) -> CompiledAnswer:
    d = int(call.param("head_dim"))
    dv = int(call.param("head_dim_v") or d)
    dtype = call.param("dtype", "bf16")
    rnd = lambda x: next((h for h in (64, 96, 128, 192, 256) if x <= h), x)  # noqa: E731 - round_up_headdim :554
    elem = re.escape(ELEM.get(dtype, dtype))
    shape = r"cute::tuple<cute::C<\d+>, cute::C<\d+>, cute::C<{}> >".format  # cluster, then tile <M, N, hdim>
    pattern = (r"FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<\d+, " + shape(r"\d+") + ", " + shape(rnd(d))
               + f", {rnd(dv)}, {elem},")
    kernel = f"FlashAttnFwdSm90<CollectiveMainloopFwdSm90<..., tile <M, N, {rnd(d)}>, {rnd(dv)}, {dtype}, ...>> (FA3)"
    try:
        _, lib, _ = _library(ctx, FA3_SO)
        found = binaries.arch_part(lib, ctx.target, pattern, FA3_SO)
        arch, k = found.part, found.kernel
        if found.matched:
            kernel += f", {len(found.matched)} instantiations for this head size in {FA3_SO}"
    except Exception as exc:  # noqa: BLE001
        k = None
        arch = unanswered(f"{FA3_SO} of {ctx.engine_source.label()} could not be read ({type(exc).__name__}: {exc})")
    major = int(ctx.target.cc.split(".")[0])
    heads, kv = int(call.param("heads", 1)), int(call.param("kv_heads", call.param("heads", 1)))
    yes = lambda ok: "yes" if ok else "NO"  # noqa: E731
    checks = [
        (f":782 q dtype fp16, bf16 or e4m3 ({dtype}: {yes(dtype in ELEM or dtype == 'fp8')})",
         dtype in ELEM or dtype == "fp8", ""),
        (f":843 head_size <= max_headdim 256 ({d}: {yes(d <= 256)})", d <= 256, ""),
        (f":844 num_heads % num_heads_k == 0 ({heads} % {kv}: {yes(kv > 0 and heads % kv == 0)})",
         kv > 0 and heads % kv == 0, ""),
        (f":933 head_size % 8 == 0 ({d}: {yes(d % 8 == 0)})", d % 8 == 0, ""),
        (f"{_interface_line(ctx, 'FA3 is only supported on devices') or INTERFACE} _is_fa3_supported: cc 9.x "
         f"({ctx.target.cc}: {yes(major == 9)})", major == 9, ""),
    ]
    gate = _gate(call, ctx, checks, f"{HOPPER} mha_fwd")
    why = ("FA3's dynamic shared memory is sizeof its CUTLASS SharedStorage (hopper/flash_fwd_launch_template.h), "
           "which no file read here states")
    static = k.static_smem if (k is not None and arch.ok) else None
    regs = k.registers if (k is not None and arch.ok) else None
    return CompiledAnswer(kernel, arch, gate, unanswered(why), None, static, regs, tuple(_version_note(call, ctx)))


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    try:
        version = int(call.param("fa_version", 2))
        if version == 2:
            return _answer_fa2(call, ctx)
        if version == 3:
            return _answer_fa3(call, ctx)
        why = (f"FlashAttention {version} (vllm/vllm_flash_attn/cute, CuTe DSL) is compiled at run time, not shipped "
               "in the .so: tileprobe does not answer it")
        return CompiledAnswer(f"FA{version} {call.op}", unanswered(why), unanswered(why), unanswered(why),
                              notes=tuple(_version_note(call, ctx)))
    except Exception as exc:  # noqa: BLE001 - a row that says why, never a traceback
        why = f"tileprobe's fa2 family failed on this call ({type(exc).__name__}: {exc})"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))


__all__ = ["LIBRARY", "NAME", "Dispatch", "Launch", "Traits", "answer", "dispatch", "head_dim_switch"]
