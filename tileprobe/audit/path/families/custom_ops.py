"""vLLM's own CUDA ops on the forward path (vllm/_C_stable_libtorch.abi3.so): rms_norm / fused_add_rms_norm,
rotary_embedding, silu_and_mul, reshape_and_cache_flash, and the CUTLASS fp8 linears cutlass_scaled_mm (per-tensor /
per-token scales) and cutlass_scaled_mm_blockwise (block-FP8 128x128, the same entry point with 2-D scales).

`kernel` names the op; `dtype` (bf16 | fp16 | fp32) its activation type; `kv_cache_dtype` (auto | fp8 | fp8_e4m3 |
fp8_e5m2) the cache for reshape_and_cache_flash. Each op has several template instantiations (vector widths, neox
or not, ...); every one matching the op and dtype is read, and the answer gives the largest static shared memory and
registers among those that run on the target.

- arch: binaries.arch_part over those kernels (SASS for the target, else PTX the driver JIT-compiles, else no code).
- gate: what the op checks before launching, quoted from vllm-project/vllm (stored copies; the wheel's exact commit is
  not recorded; topk_softmax and concat_and_cache_mla as well, each launching with 0 dynamic bytes): the elementwise ops check only contiguity/strides; cutlass_scaled_mm dispatches `version_num >= 120`
  to cutlass_scaled_mm_sm120 and needs 16-byte aligned strides; block FP8 is gated by
  `cutlass_scaled_mm_supports_block_fp8(cc)`.
- bytes: static shared memory and registers from the cubin that runs there ("read"); the elementwise kernels launch
  with `<<<grid, block, 0, stream>>>` (no dynamic bytes, quoted). The CUTLASS 3.x GEMMs take their whole
  `sizeof(GemmKernel::SharedStorage)` as dynamic shared memory, which no section of the cubin records: the stage counts
  in their mangled names are given, the bytes are unanswered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tileprobe.audit.path import binaries
from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, guarded, unanswered
from tileprobe.binary.inspect import runs_on

NAME = "vllm-custom-op"
LIBRARY = "vLLM custom ops (vllm/_C_stable_libtorch.abi3.so)"

SO = "vllm/_C_stable_libtorch.abi3.so"
ENTRY_SRC = "vllm-project/vllm csrc/libtorch_stable/quantization/w8a8/cutlass/scaled_mm_entry.cu @ 06018120"
NORM_SRC = "vllm-project/vllm csrc/layernorm_kernels.cu @ 0112cf23"
LAUNCH0 = "<<<grid, block, 0, stream>>>"
CACHE_SRC = "vllm-project/vllm csrc/cache_kernels.cu (stored copies; the same launch in each)"
TOPK_SRC = "vllm-project/vllm csrc/moe/topk_softmax_kernels.cu @ 0112cf23"
GROUPED_SRC = "vllm-project/vllm csrc/moe/grouped_topk_kernels.cu (stored copies; the same launches in each)"

TORCH_T = {"bf16": "c10::BFloat16", "bfloat16": "c10::BFloat16", "fp16": "c10::Half", "float16": "c10::Half",
           "fp32": "float", "float32": "float"}
CUDA_T = {"bf16": "__nv_bfloat16", "bfloat16": "__nv_bfloat16", "fp16": "unsigned short", "float16": "unsigned short",
          "fp32": "float", "float32": "float"}
KV_DT = {"auto": 0, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 2}  # vllm::Fp8KVCacheDataType {kAuto, kFp8E4M3, kFp8E5M2}


@dataclass(frozen=True)
class Op:
    pattern: str  # regex over the demangled (or mangled) kernel name; {T}/{C}/{KV}/{N} filled per call
    launch: str  # what the launch passes as dynamic shared memory
    gate: str  # what the op checks, quoted ("" for one tileprobe has not read: unanswered)
    gemm: bool = False
    so: str = SO  # the library the kernel ships in
    read_launch: bool = True  # False: the launch's dynamic bytes were not read (the static bytes are still said)


ELEMENTWISE_GATE = "no device or arch check: only {checks} ({src})"
OPS = {
    "rms_norm": Op(r"^void vllm::rms_norm_kernel<{T}, ", f"vllm::rms_norm_kernel<scalar_t>{LAUNCH0} ({NORM_SRC})",
                   ELEMENTWISE_GATE.format(checks="TORCH_CHECK(out.is_contiguous()), TORCH_CHECK(input.stride(-1) == "
                                           "1), TORCH_CHECK(weight.is_contiguous())", src=NORM_SRC)),
    "fused_add_rms_norm": Op(r"vllm::fused_add_rms_norm_kernel<{T}, ",
                             f"LAUNCH_FUSED_ADD_RMS_NORM(width): vllm::fused_add_rms_norm_kernel<scalar_t, width>"
                             f"{LAUNCH0} ({NORM_SRC})",
                             ELEMENTWISE_GATE.format(checks="TORCH_CHECK(residual.is_contiguous()), "
                                                     "TORCH_CHECK(weight.is_contiguous()); width 8 when pointers are "
                                                     "16-byte aligned, else 0", src=NORM_SRC)),
    "rotary_embedding": Op(r"^void vllm::rotary_embedding_kernel<{T}, ",
                           f"vllm::rotary_embedding_kernel<scalar_t, ..., is_neox>{LAUNCH0} "
                           "(vllm-project/vllm csrc/pos_encoding_kernels.cu)",
                           "no device or arch check: positions/query/key shape checks only "
                           "(vllm-project/vllm csrc/pos_encoding_kernels.cu)"),
    "silu_and_mul": Op(r"^void vllm::act_and_mul_kernel<{T}, [^,]+, &\({T} vllm::silu_kernel<",
                       f"LAUNCH_ACTIVATION_GATE_KERNEL: vllm::act_and_mul_kernel<...>{LAUNCH0} "
                       "(vllm-project/vllm csrc/activation_kernels.cu)",
                       "no device or arch check: d = input.size(-1) / 2 "
                       "(vllm-project/vllm csrc/activation_kernels.cu)"),
    "reshape_and_cache_flash": Op(r"^void vllm::reshape_and_cache_flash_kernel<{C}, {KV}, "
                                  r"\(vllm::Fp8KVCacheDataType\){N}>",
                                  f"CALL_RESHAPE_AND_CACHE_FLASH: vllm::reshape_and_cache_flash_kernel<KV_T, CACHE_T, "
                                  f"KV_DTYPE>{LAUNCH0} (vllm-project/vllm csrc/cache_kernels.cu)",
                                  "no device or arch check: TORCH_CHECK(key_cache.stride(0) == value_cache.stride(0)); "
                                  "DISPATCH_BY_KV_CACHE_DTYPE refuses an unknown kv_cache_dtype "
                                  "(vllm-project/vllm csrc/cache_kernels.cu)"),
    "cutlass_scaled_mm": Op(r"{SCALED}", "the CUTLASS 3.x device_kernel<GemmKernel> launch: dynamic shared memory = "
                            "sizeof(GemmKernel::SharedStorage)", "", gemm=True),
    "cutlass_scaled_mm_blockwise": Op(r"{BLOCKWISE}", "the CUTLASS 3.x device_kernel<GemmKernel> launch: dynamic "
                                      "shared memory = sizeof(GemmKernel::SharedStorage)", "", gemm=True),
    "concat_and_cache_mla": Op(r"^void vllm::concat_and_cache_mla_kernel<{C}, {KV}, \(vllm::Fp8KVCacheDataType\){N}",
                               f"CALL_CONCAT_AND_CACHE_MLA: vllm::concat_and_cache_mla_kernel<KV_T, CACHE_T, KV_DTYPE>"
                               f"{LAUNCH0} ({CACHE_SRC})",
                               "no device or arch check: TORCH_CHECK(kv_cache.size(2) == kv_lora_rank + pe_dim) "
                               "(fp8_ds_mla: kv_lora_rank 512, pe_dim 64, 656-byte entries); DISPATCH_BY_KV_CACHE_DTYPE "
                               f"refuses an unknown kv_cache_dtype ({CACHE_SRC})"),
    "topk_softmax": Op(r"^void vllm::moe::(topkGating|moeSoftmax|moeTopK)<",
                       f"topkGatingSoftmaxLauncherHelper: topkGatingSoftmax<...><<<num_blocks, block_dim, 0, stream>>>; "
                       f"other expert counts: moeSoftmax<TPB> / moeTopK<TPB><<<num_tokens, TPB, 0, stream>>> "
                       f"({TOPK_SRC})",
                       "no device or arch check: expert counts that are not a power of two up to 512 or 192 / 320 / "
                       "384 / 448 / 576 take the moeSoftmax + moeTopK path with a workspace the op allocates "
                       f"(TORCH_CHECK(softmax_workspace != nullptr)) ({TOPK_SRC})",
                       so="vllm/_moe_C_stable_libtorch.abi3.so"),
    "grouped_topk": Op(r"^void vllm::moe::grouped_topk_fused(_small_expert_count)?_kernel<",
                       "invokeNoAuxTc: grouped_topk_fused_small_expert_count_kernel with config.dynamicSmemBytes = 0 "
                       "(one group, or few small groups), else grouped_topk_fused_kernel with config.dynamicSmemBytes = "
                       "round_up<256>(n_group * WARP_SIZE * sizeof(T)) + n_group * WARP_SIZE * sizeof(int32_t) + 16 + "
                       f"n_group * sizeof(T) ({GROUPED_SRC})",
                       "TORCH_CHECK(num_experts % n_group == 0), TORCH_CHECK(n_group <= 32), TORCH_CHECK(topk <= 32), "
                       "TORCH_CHECK(topk <= topk_group * (num_experts / n_group)); no device check "
                       f"({GROUPED_SRC})", so="vllm/_moe_C_stable_libtorch.abi3.so"),
}
ALIASES = {"fused_add_rmsnorm": "fused_add_rms_norm", "rmsnorm": "rms_norm", "rope": "rotary_embedding",
           "silu_and_mul_kernel": "silu_and_mul", "scaled_mm": "cutlass_scaled_mm",
           "cutlass_scaled_mm_block": "cutlass_scaled_mm_blockwise", "blockwise": "cutlass_scaled_mm_blockwise"}

# CUTLASS 3.x scaled_mm kernels per arch family (mangled names: the demangler gives up on the longest ones)
SCALED = {12: r"enable_sm120_family.*31MainloopSm120TmaWarpSpecializedI",
          10: r"enable_sm100_to_sm120.*MainloopSm100",
          9: r"device_kernel<vllm::cutlass_3x_gemm(?:_sm90_fp8)?<"}
BLOCKWISE = r"device_kernel<vllm::cutlass_3x_gemm_fp8_blockwise<"


def library(ctx: Context, so: str = SO):
    return binaries.engine_library(ctx, so)


def pattern_for(op: str, call: KernelCall, cc: int) -> str | None:
    dtype = str(call.param("dtype", "bf16"))
    spec = OPS[op]
    if spec.gemm:
        return SCALED.get(cc // 10) if op == "cutlass_scaled_mm" else BLOCKWISE
    kv = str(call.param("kv_cache_dtype", "auto"))
    if dtype not in TORCH_T or kv not in KV_DT:
        return None
    cache_t = CUDA_T[dtype] if KV_DT[kv] == 0 else "unsigned char"
    return (spec.pattern.replace("{T}", re.escape(TORCH_T[dtype])).replace("{C}", re.escape(CUDA_T[dtype]))
            .replace("{KV}", re.escape(cache_t)).replace("{N}", str(KV_DT[kv])))


def running(lib, pattern: str, cc: int):
    """The (image, kernel) pairs matching `pattern` whose cubin runs on cc."""
    rx = re.compile(pattern)
    return [(im, k) for im, k in lib.kernels
            if (rx.search(k.demangled) or rx.search(k.name)) and runs_on("cubin", im.sm, im.suffix, cc)]


def _stages(kernels) -> str:
    """Mainloop stage counts (MainloopSm1x0TmaWarpSpecialized<Stages, ...>, mangled) and tile shapes (demangled
    tuple<C<M>, C<N>, C<K>>) read from CUTLASS 3.x kernel names."""
    stages, tiles = set(), set()
    for k in kernels:
        for m in re.finditer(r"Mainloop\w*?Sm1[02]0\w*?ILi(\d+)E", k.name):
            stages.add(int(m.group(1)))
        m = re.search(r"cute::tuple<cute::C<(\d+)>, cute::C<(\d+)>, cute::C<(\d+)> >", k.demangled)
        if m:
            tiles.add("x".join(m.groups()))
    out = []
    if stages:
        out.append("mainloop stage count(s) " + ", ".join(str(s) for s in sorted(stages)))
    if tiles:
        out.append("tile(s) " + ", ".join(sorted(tiles)))
    return "; ".join(out)


def _gemm_gate(op: str, cc: int) -> Part:
    if op == "cutlass_scaled_mm_blockwise":
        if cc < 90:
            return Part(f"cutlass_scaled_mm_supports_block_fp8({cc}): false below 90 ({ENTRY_SRC})", False, "quoted")
        return Part(f"cutlass_scaled_mm_supports_block_fp8({cc}): cc >= {100 if cc >= 100 else 90} -> CUDA_VERSION >= "
                    f"{12080 if cc >= 100 else 12000} (the wheel ships sm_100f/sm_120f cubins, which need CUDA 12.9+); "
                    "vLLM's CutlassFp8BlockScaledMMKernel then needs activation group_shape (1, 128) "
                    f"({ENTRY_SRC}; vllm/model_executor/kernels/linear/scaled_mm/cutlass.py)", True, "quoted")
    branch = {12: "version_num >= 120 -> cutlass_scaled_mm_sm120", 10: "version_num >= 100 && < 120 -> "
              "cutlass_scaled_mm_sm100", 9: "version_num >= 90 && < 100 -> cutlass_scaled_mm_sm90"}.get(cc // 10)
    if branch is None and cc < 75:
        return Part(f"cutlass_scaled_mm: STD_TORCH_CHECK_NOT_IMPLEMENTED(\"No compiled cutlass_scaled_mm ...\") for "
                    f"{cc} ({ENTRY_SRC})", False, "quoted")
    return Part(f"cutlass_scaled_mm: {branch or 'the c2x sm75/80/89 kernels'}; STD_TORCH_CHECK(a.stride(1) == 1 && "
                "c.stride(1) == 1), STD_TORCH_CHECK(b.stride(0) == 1), STD_TORCH_CHECK(c.stride(0) % 16 == 0 && "
                f"b.stride(1) % 16 == 0) ({ENTRY_SRC})", True, "quoted")


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    op = ALIASES.get(str(call.param("kernel", "")), str(call.param("kernel", "")))
    target = ctx.target
    if op not in OPS:
        why = f"no vLLM custom op {call.param('kernel')!r} here (known: {', '.join(OPS)})"
        return CompiledAnswer(str(call.param("kernel")), unanswered(why), unanswered(why), unanswered(why))
    spec = OPS[op]
    pattern = pattern_for(op, call, target.cc_int)
    path, lib = library(ctx, spec.so)
    if path is None or pattern is None:
        why = (f"{spec.so} could not be read: {lib}" if path is None else
               f"no kernel pattern for {op} with dtype={call.param('dtype')!r}, "
               f"kv_cache_dtype={call.param('kv_cache_dtype', 'auto')!r} on cc {target.cc}")
        return CompiledAnswer(op, unanswered(why), unanswered(why), unanswered(why))
    arch = binaries.arch_part(lib, target, pattern, spec.so)
    runs = running(lib, pattern, target.cc_int)
    n = len({k.name for _, k in runs}) or len(arch.matched)
    label = f"{op}: {n} vLLM kernel instantiation(s) for dtype {call.param('dtype', 'bf16')}"
    gate = _gemm_gate(op, target.cc_int) if spec.gemm else Part(spec.gate, True, "quoted") if spec.gate else \
        unanswered(f"{op}'s own checks were not read by tileprobe")
    if arch.part.ok is False:
        return CompiledAnswer(label, arch.part, gate, unanswered("no code runs there"))
    static = max((k.static_smem for _, k in runs), default=None)
    regs = max((k.registers for _, k in runs), default=None)
    if spec.gemm:
        stages = _stages({k.name: k for _, k in runs}.values())
        why = (f"{spec.launch}, and no section of the cubin records it; the kernels' names give "
               + (f"{stages}, not the epilogue's storage" if stages else "no stage count or tile tileprobe can read")
               + f"; static {static} B, registers up to {regs} read from the cubin")
        return CompiledAnswer(label, arch.part, gate, unanswered(why), static_smem=static, registers=regs)
    if not spec.read_launch:
        return CompiledAnswer(label, arch.part, gate, unanswered(
            f"{spec.launch}; static {static} B, registers up to {regs} read from the cubin"),
            static_smem=static, registers=regs)
    if not runs:
        text = (f"no cubin for {target.arch[:-1]}: the driver JIT-compiles the PTX, whose static bytes are not in "
                f"the binary; the launch asks no dynamic bytes: {spec.launch}")
        return CompiledAnswer(label, arch.part, gate, unanswered(text))
    worst = max(runs, key=lambda c: (c[1].static_smem, c[1].registers))
    if op == "grouped_topk":
        return _grouped_topk(call, target, arch, label, gate, static, regs)
    text = (f"dynamic 0 B: {spec.launch}; static {static} B (largest of {n}; {worst[0].arch} cubin, "
            f"registers up to {regs}) read from {spec.so}")
    return CompiledAnswer(label, arch.part, gate, Part(text, static <= target.smem_optin, "read"),
                          smem_bytes=static, static_smem=static, registers=regs)


def _grouped_topk(call: KernelCall, target, arch, label: str, gate: Part, static: int, regs: int) -> CompiledAnswer:
    """grouped_topk's launch: 0 dynamic bytes on its small-expert-count kernel, else the formula (OPS) with the
    model's n_group and scores of 4-byte floats (the largest T it is instantiated for); which of the two the
    launcher takes is not decided here, so the answer is the larger, and both fit when it does."""
    groups = int(call.param("groups") or 1)
    val = groups * 32 * 4
    dynamic = -(-val // 256) * 256 + groups * 32 * 4 + 16 + groups * 4
    groups_ok = groups <= 32 and call.param("experts", 0) % groups == 0 and call.param("top_k", 0) <= 32
    gate = Part(f"{gate.answer}: n_group {groups}, {call.param('experts')} experts, topk {call.param('top_k')} -> "
                f"{'accepted' if groups_ok else 'refused'}", groups_ok, "quoted")
    total = dynamic + static
    text = (f"at most {total} B: dynamic 0 B (small-expert-count kernel) or {dynamic} B (grouped_topk_fused_kernel, "
            f"n_group {groups}, sizeof(T) 4) + {static} B static; registers up to {regs} read from the cubin "
            f"({OPS['grouped_topk'].launch})")
    return CompiledAnswer(label, arch.part, gate, Part(text, total <= target.smem_optin, "quoted"),
                          smem_bytes=total, static_smem=static, registers=regs)


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The call's answer; anything unreadable becomes an unanswered row, never a traceback."""
    return guarded(NAME, _answer, call, ctx)


__all__ = ["NAME", "LIBRARY", "OPS", "answer", "pattern_for", "running"]
