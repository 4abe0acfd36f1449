"""vLLM's Marlin kernels: the MARLIN MoE backend (`moe_wna16_marlin_gemm`, vllm/_moe_C_stable_libtorch.abi3.so; gpt-oss
MXFP4 on sm_120 runs it) and, for kind "dense", the dense Marlin GEMM in vllm/_C_stable_libtorch.abi3.so.

What runs is decided on the host by csrc/moe/marlin_moe_wna16/ops.cu (compiled into the `.so`), and everything it
reads is in the wheel:

- the thread configs `small_batch_thread_configs` / `large_batch_thread_configs` are read from the `.so`'s own data
  (ELF symbols), and the kernels `get_marlin_kernel` can return are the `marlin_moe_wna16::Marlin<a, b, c, s, threads,
  m_blocks, n_blocks, k_blocks, m_block_size_8, stages, group_blocks, zp_float>` instantiations in its fatbin (a config
  without one gets `MarlinDefault` and is skipped);
- `determine_exec_config` keeps the configs whose `get_kernel_cache_size` fits `max_shared_mem - 512` (the opt-in
  limit, cudaDevAttrMaxSharedMemoryPerBlockOptin), ranks them by blocks per SM (registers from the cubin that runs,
  `max_shared_mem / (cache_size + 1536)`, capped at 4 for one M block, 2 otherwise), and `marlin_mm` then launches
  with `max_shared_mem` dynamic bytes: the whole opt-in for one block per SM, `max_shared_mem / blocks_per_sm - 1024`
  otherwise (`cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared_mem);
  kernel<<<blocks, num_threads, max_shared_mem, stream>>>`);
- the Python side (vllm/model_executor/layers/fused_moe/experts/marlin_moe.py) picks `block_size_m` from
  `for block_size_m in [8, 16, 32, 48, 64]: if M * topk / E / block_size_m < 0.9: break`, and the MXFP4 oracle
  (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py) pads the sizes for MARLIN; both are read from the wheel.

The cache-size formula and the launch are quoted from vllm-project/vllm csrc/moe/marlin_moe_wna16/ops.cu (stored copy
@ 025a1342; its signatures differ from the wheel's binary, which drops act-order and 8-bit activations from the MoE
path, so the formula is applied for has_act_order = false, has_zp = false, 16-bit activations, where both agree).
"""

from __future__ import annotations

import math
import re
import struct
import sys
import types
from dataclasses import dataclass

from tileprobe.audit.path import binaries
from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.binary.inspect import runs_on
from tileprobe.errors import TileprobeError

NAME = "marlin-moe"
LIBRARY = "vLLM Marlin (vllm/_moe_C_stable_libtorch.abi3.so; dense: vllm/_C_stable_libtorch.abi3.so)"

MOE_SO = "vllm/_moe_C_stable_libtorch.abi3.so"
DENSE_SO = "vllm/_C_stable_libtorch.abi3.so"
OPS_SRC = "vllm-project/vllm csrc/moe/marlin_moe_wna16/ops.cu @ 025a1342"
MARLIN_PY = "vllm/model_executor/layers/fused_moe/experts/marlin_moe.py"
ORACLE_PY = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"
SCALAR_PY = "vllm/scalar_type.py"

MIN_THREAD_N = MIN_THREAD_K = 64  # marlin.cuh: min_thread_n = 64, min_thread_k = 64
DEVICE_MAX_REG = 255 * 1024  # determine_exec_config: constexpr int device_max_reg_size = 255 * 1024;
# vllm/scalar_type.py ScalarType.id of the types below (used when the wheel's file cannot be run)
IDS = {"bfloat16": 1125899906909960, "float16": 1125899906910725, "float4_e2m1f": 562949953487106,
       "float8_e8m0fnu": 2814749767106568, "float8_e4m3fn": 2814749767172868, "uint4b8": 1125899907892224,
       "uint8b128": 1125899923621888}
# quant -> (weight type, scale type or None for the activation type, bits, default group size)
QUANTS = {"mxfp4": ("float4_e2m1f", "float8_e8m0fnu", 4, 32), "nvfp4": ("float4_e2m1f", "float8_e4m3fn", 4, 16),
          "int4": ("uint4b8", None, 4, 128), "int8": ("uint8b128", None, 8, 128)}
ACTS = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16"}


def _read(ctx: Context, rel: str) -> str | None:
    try:
        return ctx.engine_source.read_text(rel)
    except (TileprobeError, AttributeError):
        return None


def scalar_ids(ctx: Context) -> tuple[dict[str, int], str]:
    """ScalarType ids computed by the wheel's own vllm/scalar_type.py (pure Python), else the table above."""
    text = _read(ctx, SCALAR_PY)
    if text is None:
        return dict(IDS), "ids from tileprobe's table"
    mod = types.ModuleType("_tileprobe_vllm_scalar_type")
    sys.modules[mod.__name__] = mod  # dataclasses resolve their module while the class body runs
    try:
        exec(compile(text, SCALAR_PY, "exec"), mod.__dict__)  # noqa: S102 - the engine's own pure-Python file
        st = mod.scalar_types
        return {n: getattr(st, n).id for n in IDS}, f"ids computed by the wheel's {SCALAR_PY}"
    except Exception:  # noqa: BLE001 - any failure falls back to the table, said so
        return dict(IDS), "ids from tileprobe's table"
    finally:
        sys.modules.pop(mod.__name__, None)


# ---------------------------------------------------------------------------------------------------------------
# The binary: fatbin kernels and the thread-config tables


def library(ctx: Context, rel: str):
    return binaries.engine_library(ctx, rel)


def config_tables(path, namespace: str = "marlin_moe_wna16") -> dict[str, list[tuple[int, int, int]]]:
    """The `{small,large}_batch_thread_configs` arrays (thread_k, thread_n, num_threads) from the `.so`'s data."""
    blob = path.read_bytes()
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", blob, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    want = {f"_ZN{len(namespace)}{namespace}26{w}_batch_thread_configsE": w for w in ("small", "large")}
    out: dict[str, list[tuple[int, int, int]]] = {}
    for kind in (2, 11):  # SHT_SYMTAB, then SHT_DYNSYM
        for sec in (r for r in raw if r[1] == kind):
            strings = raw[sec[6]][4]
            for i in range(sec[5] // 24):
                st_name, _, _, shndx, value, size = struct.unpack_from("<IBBHQQ", blob, sec[4] + 24 * i)
                end = blob.find(b"\0", strings + st_name)
                name = blob[strings + st_name:end].decode(errors="replace")
                if name in want and 0 < shndx < len(raw) and raw[shndx][1] != 8 and size % 12 == 0:
                    home = raw[shndx]
                    vals = struct.unpack_from(f"<{size // 4}i", blob, home[4] + value - home[3])
                    out[want[name]] = [tuple(vals[j:j + 3]) for j in range(0, len(vals), 3)]
        if len(out) == 2:
            break
    return out


@dataclass(frozen=True)
class Kern:
    name: str  # mangled
    arch: str  # the cubin that runs on the target, or "PTX compute_XX" when the driver JIT-compiles it
    registers: int | None  # from that cubin; None when JIT-compiled from PTX
    static_smem: int | None


def kernel_index(lib, target, prefix: str) -> dict[tuple, Kern]:
    """(threads, m_blocks, n_blocks, k_blocks, m8, stages, group_blocks, zp_float) -> the kernel that runs on target."""
    rx = re.compile(r"void marlin_moe_wna16::Marlin<" + re.escape(prefix) + r", ([^>]*)>")
    found: dict[tuple, list] = {}
    for im, k in lib.kernels:
        m = rx.match(k.demangled)
        if m:
            args = tuple(a.strip() for a in m.group(1).split(","))
            found.setdefault(args, []).append((im, k))
    ptx_archs = sorted(im.sm for im in lib.images
                       if im.kind == "ptx" and runs_on("ptx", im.sm, im.suffix, target.cc_int))
    out = {}
    for args, cands in found.items():
        if len(args) != 8:
            continue
        key = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), args[4] == "true", int(args[5]),
               int(args[6]), args[7] == "true")
        runs = [(im, k) for im, k in cands if runs_on("cubin", im.sm, im.suffix, target.cc_int)]
        if runs:
            im, k = max(runs, key=lambda c: (c[0].sm, {"a": 2, "f": 1}.get(c[0].suffix, 0)))
            out[key] = Kern(k.name, f"{im.arch} SASS", k.registers, k.static_smem)
        elif ptx_archs and cands[0][1].name in lib.ptx_names:
            out[key] = Kern(cands[0][1].name, f"compute_{ptx_archs[-1]} PTX (JIT)", None, None)
    return out


# ---------------------------------------------------------------------------------------------------------------
# ops.cu, restricted to no act-order, no zero points, 16-bit activations


def cache_size(tk: int, tn: int, thread_m_blocks: int, num_bits: int, group_size: int, stages: int) -> int:
    """get_kernel_cache_size (ops.cu) with has_act_order = is_zp = false and 16-bit A."""
    pack_factor = 32 // num_bits
    tb_m = thread_m_blocks * 16
    block_meta = tb_m * 16
    sh_a = stages * (tb_m * tk) * 2
    sh_b = stages * (tk * tn // pack_factor) * 4
    sh_red = tb_m * (tn + 8) * 2
    sh_bias = tn * 2
    tmp = max(max(sh_b, sh_red), min(sh_b, sh_red) + sh_bias)
    groups = 1 if group_size == -1 else math.ceil(tk / (32 if group_size == 0 else group_size))
    sh_s = groups * tn * 2 * stages
    return tmp + sh_a + sh_s + block_meta


@dataclass(frozen=True)
class Exec:
    tk: int
    tn: int
    threads: int
    blocks_per_sm: int
    cache: int
    kern: Kern
    dynamic: int  # the launch's dynamic shared memory request
    why: str


def exec_config(tables, index, prob_m: int, prob_n: int, prob_k: int, top_k: int, block_size_m: int, num_bits: int,
                group_size: int, stages: int, optin: int, sms: int) -> tuple[Exec | None, list[str]]:
    """determine_exec_config + marlin_mm's launch, for one GEMM. Returns the chosen config and why others were left."""
    thread_m_blocks = math.ceil(block_size_m / 16)
    m8 = block_size_m == 8
    configs = tables["large" if thread_m_blocks > 1 else "small"]
    group_blocks = -1 if group_size == -1 else group_size // 16
    best, count, left = None, 0, []
    for tk, tn, th in configs:
        name = f"{{{tk}, {tn}, {th}}}"
        if prob_k % tk or prob_n % tn:
            left.append(f"{name}: {prob_k}x{prob_n} not divisible by thread_k x thread_n")
            continue
        if tn < MIN_THREAD_N or tk < MIN_THREAD_K or th < 128:
            left.append(f"{name}: below min thread_n/thread_k or 128 threads")
            continue
        cache = cache_size(tk, tn, thread_m_blocks, num_bits, group_size, stages)
        if cache > optin - 512:
            left.append(f"{name}: cache {cache} B > max_shared_mem - 512 = {optin - 512} B")
            continue
        kern = index.get((th, thread_m_blocks, tn // 16, tk // 16, m8, stages, group_blocks, False))
        if kern is None:
            left.append(f"{name}: no Marlin<..., {th}, {thread_m_blocks}, {tn // 16}, {tk // 16}, "
                        f"{'true' if m8 else 'false'}, {stages}, {group_blocks}, false> in the binary (MarlinDefault)")
            continue
        by_smem = optin // (cache + 1536)
        allow = by_smem if kern.registers is None else min(DEVICE_MAX_REG // (max(kern.registers, 1) * th * 4), by_smem)
        allow = max(min(allow, 4 if thread_m_blocks == 1 else 2), 1)
        if prob_n // tn * prob_m * top_k * 4 < sms * allow:
            allow = max(prob_n // tn * prob_m * top_k * 4 // sms, 1)
        if kern.registers is None:
            allow = 1  # registers of the JIT-compiled kernel are unknown: the launch that asks for the most
        if allow > count:
            count, best = allow, (tk, tn, th, cache, kern)
    if best is None:
        return None, left
    tk, tn, th, cache, kern = best
    dynamic = optin if count == 1 else optin // count - 1024
    why = (f"{{{tk}, {tn}, {th}}}: get_kernel_cache_size {cache} B <= {optin} - 512; {count} block(s) per SM "
           + (f"(registers {kern.registers} from {kern.arch})" if kern.registers is not None else
              "(assumed: the JIT-compiled kernel's registers are not in the binary; with fewer, a config with more "
              "blocks per SM may win, and every one asks at most the opt-in)")
           + f" -> launch asks {'max_shared_mem' if count == 1 else f'max_shared_mem / {count} - 1024'} = {dynamic} B")
    return Exec(tk, tn, th, count, cache, kern, dynamic, why), left


def _python_rules(ctx: Context) -> tuple[list[int], float, tuple[int, int] | None, list[str]]:
    """block_size_m candidates and threshold (marlin_moe.py), and the MARLIN padding (mxfp4 oracle)."""
    notes = []
    text = _read(ctx, MARLIN_PY) or ""
    m = re.search(r"for block_size_m in \[([\d,\s]+)\]:\s*\n\s*if M \* topk / E / block_size_m < ([\d.]+):", text)
    if m:
        sizes, thresh = [int(x) for x in m.group(1).split(",")], float(m.group(2))
    else:
        sizes, thresh = [8, 16, 32, 48, 64], 0.9
        notes.append(f"{MARLIN_PY}: block_size_m loop not found; vLLM 0.33's [8, 16, 32, 48, 64] / 0.9 assumed")
    text = _read(ctx, ORACLE_PY) or ""
    pad = None
    blk = re.search(r"elif backend in \(Mxfp4MoeBackend\.MARLIN, Mxfp4MoeBackend\.BATCHED_MARLIN\):(.*?)\n    elif",
                    text, re.S)
    if blk:
        inter = re.search(r"intermediate_size = round_up\(intermediate_size, (\d+)\)", blk.group(1))
        hid = re.search(r"else:\s*\n\s*hidden_size = round_up\(hidden_size, (\d+)\)", blk.group(1))
        if inter and hid:
            pad = (int(inter.group(1)), int(hid.group(1)))
    if pad is None:
        notes.append(f"{ORACLE_PY}: MARLIN padding rule not found; sizes used as given")
    return sizes, thresh, pad, notes


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _moe(call: KernelCall, ctx: Context) -> CompiledAnswer:
    target = ctx.target
    quant = call.param("quant", "mxfp4")
    act = ACTS.get(str(call.param("dtype", "bf16")))
    experts, top_k = int(call.param("experts", 0) or 0), int(call.param("top_k", 0) or 0)
    hidden, inter = int(call.param("hidden", 0) or 0), int(call.param("inter", 0) or 0)
    tokens = int(call.param("tokens", 1) or 1)
    if quant not in QUANTS or act is None or min(experts, top_k, hidden, inter) <= 0:
        why = (f"need quant in {', '.join(QUANTS)}, dtype bf16|fp16 and positive experts, top_k, hidden, inter "
               f"(got {call.label()})")
        return CompiledAnswer("Marlin MoE", unanswered(why), unanswered(why), unanswered(why))
    wtype, stype, bits, default_group = QUANTS[quant]
    group = int(call.param("group_size", default_group) or default_group)
    ids, ids_how = scalar_ids(ctx)
    prefix = ", ".join(f"{ids[t]}l" for t in (act, wtype, act, stype or act))
    sizes, thresh, pad, notes = _python_rules(ctx)
    if pad is not None and quant == "mxfp4":
        hidden_p, inter_p = _round_up(hidden, pad[1]), _round_up(inter, pad[0])
        if (hidden_p, inter_p) != (hidden, inter):
            notes.append(f"MARLIN pads MXFP4 sizes ({ORACLE_PY}): hidden {hidden} -> {hidden_p}, "
                         f"intermediate {inter} -> {inter_p}")
        hidden, inter = hidden_p, inter_p
    block_size_m = sizes[-1]
    for b in sizes:
        block_size_m = b
        if tokens * top_k / experts / b < thresh:
            break
    path, lib = library(ctx, MOE_SO)
    label = (f"marlin_moe_wna16::Marlin<{act}, {wtype}, {act}, {stype or act}> (block_size_m {block_size_m}, "
             f"group {group}; gemm1 {2 * inter}x{hidden}, gemm2 {hidden}x{inter})")
    if path is None:
        why = f"{MOE_SO} could not be read: {lib}"
        return CompiledAnswer(label, unanswered(why), unanswered(why), unanswered(why), notes=tuple(notes))
    if target.cc_int < 75:
        part = Part("marlin_mm: TORCH_CHECK(major * 10 + minor >= 75, \"marlin kernel only support Turing or newer "
                    "GPUs.\")", False, "quoted")
        return CompiledAnswer(label, part, part, unanswered("refused before launch"), notes=tuple(notes))
    stages = 2 if target.cc_int == 75 else 4  # marlin_mm: int stages = 4; Turing (7.5): stages = 2
    key = ("marlin-index", str(path), target.cc_int, prefix)
    if key not in ctx.memo:
        ctx.memo[key] = kernel_index(lib, target, prefix)
    index = ctx.memo[key]
    tables = config_tables(path)
    if len(tables) != 2:
        why = f"{MOE_SO}: the thread-config tables are not in its symbol table"
        return CompiledAnswer(label, unanswered(why), unanswered(why), unanswered(why), notes=tuple(notes))
    gemms = {"gemm1": (tokens, 2 * inter, hidden, top_k), "gemm2": (tokens * top_k, hidden, inter, 1)}
    chosen, refusals = {}, []
    for g, (pm, pn, pk, tk_) in gemms.items():
        ex, left = exec_config(tables, index, pm, pn, pk, tk_, block_size_m, bits, group, stages,
                               target.smem_optin, target.sms)
        if ex is None:
            refusals.append(f"{g} (M={pm}, N={pn}, K={pk}): no config left ({'; '.join(left)}) -> marlin_mm "
                            "TORCH_CHECK(is_valid_config(...)) \"Invalid thread config\"")
        else:
            chosen[g] = ex
    tab = f"thread configs read from {MOE_SO}: small {tables['small']}, large {tables['large']}"
    if refusals:
        gate = Part("; ".join(refusals) + f" ({tab}; {OPS_SRC})", False, "read")
    else:
        gate = Part("determine_exec_config keeps, for " + "; ".join(f"{g}: {ex.why.split(':')[0]}"
                    for g, ex in chosen.items()) + f" ({tab}; kernel instantiations read from the fatbin; {ids_how}; "
                    f"{OPS_SRC})", True, "read")
    # arch: the chosen kernels (or every kernel of these types when none was chosen)
    if chosen:
        pattern = "|".join(re.escape(ex.kern.name) for ex in chosen.values())
    else:
        pattern = re.escape(f"void marlin_moe_wna16::Marlin<{prefix}, ")
    arch = binaries.arch_part(lib, target, pattern, MOE_SO).part
    if not chosen:
        return CompiledAnswer(label, arch, gate, unanswered("no config is launched"), notes=tuple(notes))
    top = max(chosen.values(), key=lambda ex: ex.dynamic)
    static = max((ex.kern.static_smem or 0) for ex in chosen.values())
    regs = next((ex.kern.registers for ex in chosen.values() if ex.kern.registers is not None), None)
    text = ("; ".join(f"{g}: {ex.why}" for g, ex in chosen.items())
            + f" (marlin_mm: cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
              f"max_shared_mem); kernel<<<blocks, num_threads, max_shared_mem, stream>>>; {OPS_SRC})")
    ok = top.dynamic + static <= target.smem_optin
    kernels = ", ".join(f"{g} {{{ex.tk}, {ex.tn}, {ex.threads}}} x {ex.blocks_per_sm}/SM" for g, ex in chosen.items())
    return CompiledAnswer(f"{label}: {kernels}", arch, gate, Part(text, ok, "quoted"),
                          smem_bytes=top.dynamic + static, static_smem=static, registers=regs, notes=tuple(notes))


def _dense(call: KernelCall, ctx: Context) -> CompiledAnswer:
    path, lib = library(ctx, DENSE_SO)
    label = f"marlin::Marlin (gptq_marlin_gemm, {call.param('quant', 'int4')})"
    if path is None:
        why = f"{DENSE_SO} could not be read: {lib}"
        return CompiledAnswer(label, unanswered(why), unanswered(why), unanswered(why))
    arch = binaries.arch_part(lib, ctx.target, r"^void marlin::Marlin<", DENSE_SO).part
    why = ("dense Marlin's marlin_mm splits M over max_par rounds before determine_exec_config; tileprobe models the "
           "MoE launcher only")
    return CompiledAnswer(label, arch, unanswered(why), unanswered(why))


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    if call.param("kind", "moe") == "dense":
        return _dense(call, ctx)
    return _moe(call, ctx)


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The call's answer; anything unreadable becomes an unanswered row, never a traceback."""
    try:
        return _answer(call, ctx)
    except (TileprobeError, OSError, ValueError, KeyError, IndexError, SyntaxError, struct.error) as exc:
        why = f"{NAME}: the engine's files are not in the structure tileprobe reads ({type(exc).__name__}: {exc})"
        return CompiledAnswer(call.op, unanswered(why), unanswered(why), unanswered(why))


__all__ = ["NAME", "LIBRARY", "answer", "cache_size", "config_tables", "exec_config", "kernel_index"]
