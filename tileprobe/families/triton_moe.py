"""Family triton-moe: the serving engines' own Triton `fused_moe_kernel`, compiled per config for a target.

Kernels (read from the installed engine or its wheel, never imported), as the releases of the pin table
(tileprobe.engines.pins.READ_FROM) write them; the engine manifests record whether `launch_job` binds to another
release's kernel (PIECE):
- vLLM: vllm/model_executor/layers/fused_moe/fused_moe.py::fused_moe_kernel, launched by
  `invoke_fused_moe_triton_kernel` from `TritonExperts.apply` (fused_moe/experts/triton_moe.py: the modular kernel
  the fp8 and unquantized oracles choose for the TRITON backend), which passes no router weights to the gate_up
  GEMM (topk_weights None there) and aligns with the layer's own experts when there is no expert map;
- SGLang: sglang/kernels/ops/moe/fused_moe_triton_kernels.py::fused_moe_kernel, launched by
  `invoke_fused_moe_kernel` from sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe.py.

A config is data: engine, quant scheme, GEMM (gate_up: N = 2*I/tp, K = H; down: N = H, K = I/tp), E, N, K, where
the entry came from, and the engine config entry (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages). Its name
is derived. `launch_job` builds the arguments the engine's launcher passes for that call, as stand-ins for Triton's
own binder (tileprobe.backends.triton.compile) for a batch of M tokens, so the specialisation (16-divisible ints,
ints equal to 1, None arguments, constexprs) is the launch's. What each launcher passes, read from its source (the lines are cited by name):

vLLM `invoke_fused_moe_triton_kernel`: SWAP_AB = use_fp8_w8a8 and `enable_swap_ab` (capability 9.0, BLOCK_SIZE_M < 64,
BLOCK_SIZE_N >= 64); USE_TD off (VLLM_TRITON_USE_TD unset: XPU only); SPLIT_K = 1; BLOCK_SIZE_K = min(BLOCK_SIZE_K,
block_shape) for block quant; EM = sorted_token_ids.size(0) (min(that, M*top_k*BLOCK_SIZE_M) when M < BLOCK_SIZE_M),
num_tokens*BLOCK_SIZE_M with the naive assignment (`_prepare_expert_assignment`: no expert map and
M*top_k*4 <= E) where sorted_token_ids is None; `moe_align_block_size`: numel + E*(BLOCK_SIZE_M-1), capped at
numel*BLOCK_SIZE_M when numel < E. The down GEMM is launched with top_k=1 and MUL_ROUTED_WEIGHT=True.
SGLang `invoke_fused_moe_kernel`: swap_ab as vLLM's (`is_sm90_supported`: capability major 9); PDL on capability >= 9
(`is_arch_support_pdl`): USE_GDC=True, launch_pdl=True, GDC_EARLY = A.shape[0] <= 512; even_Ks = K % BLOCK_SIZE_K == 0;
no TMA descriptors (only entries carrying USE_TMA ask for them: rows say `unsupported`), no fused SwiGLU, sum-all-reduce, LoRA or
output mask (their defaults); EM = `moe_align_block_size`'s numel*BLOCK_SIZE_M when numel < E+1, else
numel + (E+1)*(BLOCK_SIZE_M-1), rounded up to 4; the down GEMM gets top_k=1, ROUTER_TOPK=top_k.
Scales: fp8 per-tensor A scale of shape (1,), B scale (E,); fp8 block [128, 128]: A scale (tokens, K/128) row-major,
B scale (E, N/128, K/128) (`per_token_group_quant_fp8` with column_major_scales=False, the default in both).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, replace

from tileprobe.backends.triton.compile import KernelJob
from tileprobe.backends.triton.source import KernelSource
from tileprobe.engines import pins
from tileprobe.errors import UsageError
from tileprobe.families.base import TRITON_OPTIONS, Accumulation, Config, Family, Tile
from tileprobe.families.columns import TRITON_REPORT, batch_range_of, source_fields

NAME = "triton-moe"
QUANTS = ("bf16", "fp8", "fp8-block")
GEMMS = ("gate_up", "down")
BLOCK = 128  # fp8-block: block_shape [128, 128]
TMA_REASON = ("SGLang launches this entry with TMA descriptors (USE_TMA: a_desc/b_desc, c_sorted), which tileprobe "
              "does not reproduce: not compiled")
ENTRY_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# An entry without num_warps / num_stages (SGLang's default configs) launches with Triton's own defaults:
# CUDAOptions in triton/backends/nvidia/compiler.py (3.8.0): num_warps=4, num_stages=3.
TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}


@dataclass(frozen=True)
class EngineKernel:
    engine: str  # "vllm" / "sglang"
    release: str  # the release whose launcher is reproduced
    path: str  # the kernel file inside the package
    default_rule: str  # the engine function that makes a config where no file has one
    function: str = "fused_moe_kernel"

    @property
    def label(self) -> str:
        return f"{self.engine} {self.release}"


ENGINES = {
    "vllm": EngineKernel("vllm", pins.READ_FROM["vllm"], "vllm/model_executor/layers/fused_moe/fused_moe.py",
                         "vllm/model_executor/layers/fused_moe/fused_moe.py::get_default_config"),
    "sglang": EngineKernel("sglang", pins.READ_FROM["sglang"], "sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
                           "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py::"
                           "get_default_config"),
}


def engine_kernel(engine: str) -> EngineKernel:
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} for {NAME}; known: {', '.join(ENGINES)}")
    return ENGINES[engine]


def check_quant(quant: str) -> str:
    if quant not in QUANTS:
        raise UsageError(f"--quant {quant}: tileprobe reproduces the engines' fused_moe_kernel launch for "
                         f"{', '.join(QUANTS)} only")
    return quant


def check_entry(raw: object, tma: bool = False) -> tuple[dict[str, int] | None, str]:
    """The one check of an engine config entry: (the six keys as positive whole numbers, "") or (None, why).
    num_warps / num_stages default to Triton's own when absent; other keys are dropped. An entry asking for TMA
    descriptors (USE_TMA) is not launchable (TMA_REASON), unless `tma`: the caller then marks it unsupported."""
    if not isinstance(raw, dict):
        return None, f"a config entry is a JSON object, not {type(raw).__name__}"
    entry = {**TRITON_DEFAULTS, **raw}
    missing = [k for k in ENTRY_KEYS if k not in entry]
    if missing:
        return None, f"config entry lacks {', '.join(missing)}"
    bad = [k for k in ENTRY_KEYS if isinstance(entry[k], bool) or not isinstance(entry[k], int) or entry[k] < 1]
    if bad:
        return None, f"{', '.join(f'{k}={entry[k]!r}' for k in bad)} not a positive whole number"
    if raw.get("USE_TMA") and not tma:
        return None, "USE_TMA: the TMA-descriptor launch is not reproduced"
    return {k: entry[k] for k in ENTRY_KEYS}, ""


def gemm_shape(gemm: str, hidden: int, inter_shard: int) -> tuple[int, int]:
    """(N, K) as the kernel sees them: gate_up N = 2*I/tp, K = H; down N = H, K = I/tp."""
    return (2 * inter_shard, hidden) if gemm == "gate_up" else (hidden, inter_shard)


def swap_ab(quant: str, entry: dict, cc: int) -> bool:
    """vLLM enable_swap_ab / SGLang should_enable_swap_ab: fp8 w8a8 on capability 9.x, BLOCK_SIZE_M < 64 <= N."""
    return quant != "bf16" and cc // 10 == 9 and entry["BLOCK_SIZE_M"] < 64 and entry["BLOCK_SIZE_N"] >= 64


def _a_dtype(quant: str) -> str:
    return "*bf16" if quant == "bf16" else "*fp8e4nv"


def _scales(quant: str, tokens: int, n: int, k: int, experts: int) -> tuple:
    """(A_scale, B_scale) stand-ins and their shapes' strides: ((ptr, ndim, strides), ...) or None."""
    if quant == "bf16":
        return None, None
    if quant == "fp8":
        return ("*fp32", (1,)), ("*fp32", (experts,))
    nk, nn = math.ceil(k / BLOCK), math.ceil(n / BLOCK)
    return ("*fp32", (tokens, nk)), ("*fp32", (experts, nn, nk))


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _vllm_args(quant: str, gemm: str, experts: int, n: int, k: int, m: int, top_k: int, entry: dict, cc: int,
               ep: int):
    tokens = m if gemm == "gate_up" else m * top_k  # A.size(0)
    launch_top_k = top_k if gemm == "gate_up" else 1
    num_tokens = tokens * launch_top_k  # M * top_k either way
    bm = entry["BLOCK_SIZE_M"]
    naive = ep == 1 and m * top_k * 4 <= experts  # _prepare_expert_assignment: no expert map, weights on the GPU
    if naive:
        em, sorted_ids = num_tokens * bm, None
    else:
        numel = m * top_k
        padded = numel + experts * (bm - 1)
        if numel < experts:
            padded = min(numel * bm, padded)
        em = min(padded, tokens * launch_top_k * bm) if tokens < bm else padded
        sorted_ids = "*i32"
    a_scale, b_scale = _scales(quant, tokens, n, k, experts)
    a_st = _strides(a_scale[1]) if a_scale else ()
    b_st = _strides(b_scale[1]) if b_scale else ()
    b_shape = b_scale[1] if b_scale else ()
    c_shape = (m, top_k, n)
    args = (
        _a_dtype(quant), _a_dtype(quant), "*bf16", None, a_scale[0] if a_scale else None,
        b_scale[0] if b_scale else None, "*fp32" if gemm == "down" else None, sorted_ids, "*i32", "*i32",
        n, k, em, num_tokens,
        k, 1, n * k, 1, k, _strides(c_shape)[1], _strides(c_shape)[2],
        a_st[0] if len(a_st) == 2 else 0, a_st[1] if len(a_st) == 2 else 0,
        b_st[0] if b_scale else 0, b_st[2] if len(b_shape) == 3 else 0,
        b_st[1] if len(b_shape) >= 2 and b_shape[1] > 1 else 0,
        0, 0,
        BLOCK if quant == "fp8-block" else 0, BLOCK if quant == "fp8-block" else 0,
    )
    bk = min(entry["BLOCK_SIZE_K"], BLOCK) if quant == "fp8-block" else entry["BLOCK_SIZE_K"]
    kwargs = dict(MUL_ROUTED_WEIGHT=gemm == "down", top_k=launch_top_k, compute_type="tl.bfloat16",
                  use_fp8_w8a8=quant != "bf16", use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                  naive_block_assignment=naive, HAS_BIAS=False, BLOCK_SIZE_K=bk,
                  SWAP_AB=swap_ab(quant, entry, cc), USE_TD=False,
                  BLOCK_SIZE_M=bm, BLOCK_SIZE_N=entry["BLOCK_SIZE_N"], GROUP_SIZE_M=entry["GROUP_SIZE_M"],
                  num_warps=entry["num_warps"], num_stages=entry["num_stages"], SPLIT_K=1)
    return args, kwargs


def _sglang_args(quant: str, gemm: str, experts: int, n: int, k: int, m: int, top_k: int, entry: dict, cc: int,
                 ep: int):
    tokens = m if gemm == "gate_up" else m * top_k  # A.shape[0]
    bm = entry["BLOCK_SIZE_M"]
    numel = m * top_k  # topk_ids.numel()
    padded = numel * bm if numel < experts + 1 else numel + (experts + 1) * (bm - 1)
    em = (padded + 3) // 4 * 4
    a_scale, b_scale = _scales(quant, tokens, n, k, experts)
    a_st = _strides(a_scale[1]) if a_scale else ()
    b_shape = b_scale[1] if b_scale else ()
    b_st = _strides(b_shape) if b_scale else ()
    c_row = n  # C.stride(-2): gate_up writes (tokens*top_k, N), down (M, top_k, H) or (1, M, H)
    args = (
        _a_dtype(quant), None, _a_dtype(quant), None, None, "*bf16",
        a_scale[0] if a_scale else None, b_scale[0] if b_scale else None,
        "*fp32", "*i32", "*i32", "*i32", None,
        n, k, em, numel,
        k, 1, n * k, 1, k, 0, 0, c_row, 1,
        a_st[0] if len(a_st) == 2 else 0, a_st[1] if len(a_st) == 2 else 0,
        b_st[0] if len(b_shape) >= 2 else 0, b_st[2] if len(b_shape) == 3 else 0,
        b_st[1] if len(b_shape) >= 2 else 0,
        BLOCK if quant == "fp8-block" else 0, BLOCK if quant == "fp8-block" else 0,
    )
    pdl = {"USE_GDC": True, "launch_pdl": True, "GDC_EARLY": tokens <= 512} if cc >= 90 else {}
    kwargs = dict(MUL_ROUTED_WEIGHT=gemm == "down", top_k=top_k if gemm == "gate_up" else 1,
                  compute_type="tl.bfloat16", use_fp8_w8a8=quant != "bf16", use_int8_w8a8=False,
                  use_int8_w8a16=False, per_channel_quant=False, even_Ks=k % entry["BLOCK_SIZE_K"] == 0,
                  c_sorted=False, swap_ab=swap_ab(quant, entry, cc), FUSE_ADD_TO_OUTPUT=False, A_OUTPUT_SLICES=1,
                  A_OUTPUT_SLICE_WIDTH=0, A_OUTPUT_SLICE_K=0, MASK_OUTPUT=False, FUSE_SUM_ALL_REDUCE=False,
                  ROUTER_TOPK=1 if gemm == "gate_up" else top_k, FUSE_SWIGLU=False, **pdl,
                  **{key: entry[key] for key in ENTRY_KEYS})
    return args, kwargs


PIECE = "triton-moe-launch"  # the engine manifests' name for launch_job and the config lookup
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl"})  # Triton's, not the kernel's


def launch_binds(engine: str, source: KernelSource) -> str:
    """'' when launch_job's arguments bind to the release's fused_moe_kernel parameters as Python binds a call (every
    positional one to a parameter, every keyword one a parameter's name, no parameter given twice, every parameter
    without a default given); else why not (a release whose kernel takes other parameters: the launch, re-typed from
    the engine's launcher, is not that release's)."""
    fn = next((n for n in ast.parse(source.text).body if isinstance(n, ast.FunctionDef) and n.name == source.function),
              None)
    if fn is None:
        return f"no {source.function} in {source.origin}"
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    required = params[:len(params) - len(fn.args.defaults)]
    job = launch_job(engine, source, "bf16", "gate_up", 8, 256, 512, 1, 2,
                     {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
                      "num_stages": 2}, 120)
    names = {k for k, _ in job.kwargs if k not in LAUNCH_OPTIONS}
    if len(job.args) > len(params):
        return (f"{source.function} takes {len(params)} parameters, tileprobe's launch passes {len(job.args)} "
                "positionally")
    given = params[:len(job.args)]
    problems = sorted(set(names) - set(params)) and [f"no parameter {', '.join(sorted(set(names) - set(params)))}"]
    problems = list(problems or []) + ([f"{', '.join(sorted(set(given) & set(names)))} given twice"]
                                       if set(given) & set(names) else [])
    missing = [p for p in required if p not in given and p not in names]
    if missing:
        problems.append(f"{', '.join(missing)} not given (the release's {source.function} takes them)")
    return "; ".join(problems)


def launch_job(engine: str, source: KernelSource, quant: str, gemm: str, experts: int, n: int, k: int, m: int,
               top_k: int, entry: dict, cc: int, ep: int = 1) -> KernelJob:
    """The engine launcher's call of fused_moe_kernel for this GEMM, batch M and config entry, on capability cc.
    `experts` is the global expert count (the align step's); with ep > 1 vLLM has an expert map (no naive path)."""
    check_quant(quant)
    if gemm not in GEMMS:
        raise UsageError(f"unknown gemm {gemm!r}; known: {', '.join(GEMMS)}")
    build = _vllm_args if engine_kernel(engine).engine == "vllm" else _sglang_args
    args, kwargs = build(quant, gemm, experts, n, k, m, top_k, entry, cc, ep)
    return KernelJob(source, args, tuple(kwargs.items()), cc)


ARCHS = ("sm_120a", "sm_121a", "sm_100a", "sm_90a", "sm_89", "sm_80")


def arch_cc(arch: str) -> int:
    return int(arch[3:].rstrip("a"))


def make_config(engine: str, quant: str, gemm: str, experts: int, n: int, k: int, top_k: int, entry: dict,
                arch: str, source: str, ep: int = 1) -> Config:
    """The config as data: `experts` is the model's global count (with `ep` ranks: a rank holds experts/ep), N and K
    the GEMM's; `source` says where the entry came from (a file name and its key, or 'default')."""
    cc = arch_cc(arch)
    extra = (("engine", engine_kernel(engine).label), ("quant", quant), ("gemm", gemm), ("experts", str(experts)),
             ("ep", str(ep)), ("gemm_n", str(n)), ("gemm_k", str(k)), ("top_k", str(top_k)),
             ("group_size_m", str(entry["GROUP_SIZE_M"])),
             ("num_warps", str(entry["num_warps"])), ("config_source", source))
    return Config(NAME, Tile(entry["BLOCK_SIZE_M"], entry["BLOCK_SIZE_N"], entry["BLOCK_SIZE_K"]), "triton",
                  entry["num_stages"], "bf16-out", swap_ab(quant, entry, cc), arch, (1, 1, 1), extra)


def entry_of(cfg: Config) -> dict[str, int]:
    """The engine config entry a config carries (the inverse of make_config's fields, read from the fields)."""
    return {"BLOCK_SIZE_M": cfg.tile.m, "BLOCK_SIZE_N": cfg.tile.n, "BLOCK_SIZE_K": cfg.tile.k,
            "GROUP_SIZE_M": int(cfg.get("group_size_m")), "num_warps": int(cfg.get("num_warps")),
            "num_stages": cfg.stages}


def accumulation(quant: str, cc: int, block_k: int) -> Accumulation:
    """How fused_moe_kernel accumulates (both engines' source): fp8 per-tensor `accumulator = tl.dot(a, b,
    acc=accumulator)` over all of K; fp8 block `accumulator += tl.dot(a, b) * scales`, a fresh dot per BLOCK_SIZE_K
    (<= 128) added in fp32; bf16 fp32. An fp8 dot on capability 9.0 accumulates in the tensor core's reduced
    precision (triton/backends/nvidia/compiler.py: max_num_imprecise_acc_default = 2**30 if capability == 90);
    elsewhere max_num_imprecise_acc is 0 (fp32)."""
    if quant == "bf16" or cc != 90:
        return Accumulation()
    if quant == "fp8":
        return Accumulation("fp8-reduced", None, "Triton fp8 tl.dot on sm_90 (imprecise accumulation), acc carried "
                                                 "over all of K")
    return Accumulation("fp8-reduced", min(block_k, BLOCK), f"Triton fp8 tl.dot on sm_90 (imprecise accumulation), "
                                                          f"promoted to fp32 every {min(block_k, BLOCK)} of K")


def _accumulation(cfg: Config, cc: int | None) -> Accumulation:
    return accumulation(str(cfg.get("quant")), cc if cc is not None else arch_cc(cfg.arch), cfg.tile.k)


def _bits(cfg: Config) -> int:
    return 16 if cfg.get("quant") == "bf16" else 8


def _expand(arch: str, tiles, epilogues, swap_ab, dtypes=None) -> list[Config]:
    """The configs are the engine's entries for a workload: the triton-moe sweep asks the engine's lookup."""
    raise UsageError("triton-moe configs come from the engine's own files and defaults: run `tileprobe sweep "
                     "--family triton-moe --engine vllm|sglang --workload W` (--tiles/--schedules do not apply)")


def _rules(tile: Tile, schedule: str, cutlass_version: str | None) -> None:
    """Configs come from the engines' entries; Triton decides what compiles."""


def _kernel_fields(engine_label, origin) -> dict:
    """kernel, kernel_file and (for an engine default) config_rule of a launch by `engine_label` ('vllm <release>'):
    the file and rule are those of the release tileprobe reproduces, None for another release."""
    ek = ENGINES.get(str(engine_label or "").split(" ")[0])
    mine = ek is not None and ek.label == engine_label
    return {"kernel": ek.function if ek else "fused_moe_kernel", "kernel_file": ek.path if mine else None,
            "config_rule": ek.default_rule if mine and origin == "default" else None}


def row_fields(cfg: Config) -> dict:
    """The row fields a config fills beyond its own (rows.make_row): the kernel, BLOCK_SIZE_M/N/K, and where its
    entry came from (families.columns.source_fields of the config_source this module's callers compose)."""
    where = source_fields(cfg.get("config_source"))
    return {**_kernel_fields(cfg.get("engine"), where["config_origin"]), "block_m": cfg.tile.m,
            "block_n": cfg.tile.n, "block_k": cfg.tile.k, **where}


_TILE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def fill_row(row: dict) -> dict:
    """A row written before rows carried row_fields' columns, with them filled from its own fields where they follow
    exactly (the tile is BLOCK_SIZE_M x N x K as make_config stores it; config_source and problem as the sweep
    wrote them); what does not follow stays None (shown '–')."""
    missing = [k for k in ("kernel", "block_m", "batch_range", "config_origin") if row.get(k) in (None, "")]
    if not missing:
        return row
    out = dict(row)
    where = source_fields(row.get("config_source"))
    m = _TILE.match(str(row.get("tile") or ""))
    derived = {**_kernel_fields(row.get("engine"), where["config_origin"]), **where,
               "batch_range": batch_range_of(row.get("problem")) if row.get("routing") == "engine-pick" else None}
    if m:
        derived.update(block_m=int(m[1]), block_n=int(m[2]), block_k=int(m[3]))
    for k, v in derived.items():
        if out.get(k) in (None, ""):
            out[k] = v
    return out


REPORT = replace(TRITON_REPORT, fill=fill_row)

FAMILY = Family(
    name=NAME,
    kernel_template="fused_moe_kernel",
    header="",  # a Triton family: the kernel is the engine's own source (ENGINES), no C++ header
    archs=ARCHS,
    ab_bits=16,
    sf_vector=0,
    schedules=("triton",),
    default_schedules=("triton",),
    default_tiles=(),
    mma_k=16,
    # The floor of tileprobe.results.tolerance's bound (atol in units of the expert's reference RMS, as the CUTLASS
    # families'): the e4m3 quantization of the inputs is part of the reference (it dequantizes the same fp8 values),
    # so what is left is the bf16 output's rounding (2^-8 relative: rtol 2e-2) and the order of fp32 additions
    # (atol 1e-2 RMS covers outputs that cancel to ~0); fp8 on sm_90 raises atol with K (`accumulation`).
    atol=1e-2,
    rtol=2e-2,
    description="vLLM's / SGLang's Triton fused_moe_kernel (bf16, fp8 w8a8 per-tensor, fp8 w8a8 block [128,128])",
    rules=_rules,
    extra_fields=("engine", "quant", "gemm", "experts", "ep", "gemm_n", "gemm_k", "top_k", "group_size_m", "num_warps",
                  "config_source"),
    epilogues=("bf16-out",),
    operand_bits=_bits,
    expand=_expand,
    backend="triton",
    accumulation=_accumulation,
    report=REPORT,
    row_fields=row_fields,
    options=TRITON_OPTIONS,
)


def engine_of(cfg: Config) -> str:
    """'vllm <release>' -> 'vllm'."""
    return str(cfg.get("engine")).split()[0]


def job_of(cfg: Config, source: KernelSource, m: int) -> KernelJob:
    """The launch a config stands for at batch M (what a known-good re-check compiles again)."""
    return launch_job(engine_of(cfg), source, str(cfg.get("quant")), str(cfg.get("gemm")), int(cfg.get("experts")),
                      int(cfg.get("gemm_n")), int(cfg.get("gemm_k")), m, int(cfg.get("top_k")), entry_of(cfg),
                      arch_cc(cfg.arch), int(cfg.get("ep") or 1))
