"""Size every config of an @triton.autotune kernel for a target: which would be OutOfResources there, and so what
the autotuner is left to choose from.

Triton's Autotuner (triton/runtime/autotuner.py `_bench`) catches OutOfResources, CompileTimeAssertionFailure and
PTXASError and records that config's time as inf: on a GPU with less shared memory the autotuner "picks" among the
configs that fit, silently. Here every config is compiled for the target with no GPU (tileprobe.backends.triton),
each with the launch's arguments, which the user supplies as stand-ins by parameter name (JSON): "*bf16" a tensor of
that dtype (16-byte aligned, as torch allocates), a number, true/false, null, or "tl.bfloat16" a dtype. The
autotuner's own `prune_configs_by` hooks run at launch on real tensors and are not reproduced (said when present).

Built in: SGLang's DeepSeek-V4 sparse decode kernel (the pin table's release, tileprobe.engines.pins), with the
arguments `_run_triton_sparse_decode` passes (`sglang/kernels/ops/attention/flash_mla_sm120_triton.py`), for a page size
of 64 tokens, 64 heads and top-k 2048 (override any of them with --kernel-args).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tileprobe.backends.triton.compile import (KernelJob, TritonBuild, TritonCompileError, compile_many, jit_function,
                                               stand_in_problem)
from tileprobe.backends.triton.source import KernelSource, load
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.errors import UsageError

FLASH_MLA = ("sglang/kernels/ops/attention/flash_mla_sm120_triton.py", "_tiled_sparse_decode_kernel")


def flash_mla_args(page_size: int = 64, heads: int = 64, topk: int = 2048) -> dict:
    """`_run_triton_sparse_decode`'s call: q3 [B, H, 512] bf16, three views of the paged cache (576 data bytes + 8
    scale bytes per token), indices [B, topk] int32, topk_length (a tensor either way), out bf16, lse fp32."""
    d = 512
    return {"Q_ptr": "*bf16", "cache_fp8_ptr": "*fp8e4nv", "cache_uint8_ptr": "*u8", "cache_bf16_ptr": "*bf16",
            "indices_ptr": "*i32", "topk_len_ptr": "*i32", "O_ptr": "*bf16", "LSE_ptr": "*fp32",
            "sm_scale": 0.0416, "page_size": page_size, "page_bytes": page_size * 584,
            "scale_section_off": page_size * 576, "H": heads, "topk": topk, "topk_rounded": topk,
            "has_topk_len": True, "stride_qb": heads * d, "stride_qh": d, "stride_ob": heads * d, "stride_oh": d,
            "stride_ib": topk, "NOPE_PAD": 512, "ROPE_DIM": 64, "NOPE_DIM_RT": 448}


BUILTIN_ARGS = {FLASH_MLA: flash_mla_args}


@dataclass(frozen=True)
class Sized:
    config: dict  # the autotune config: its kwargs plus num_warps / num_stages (Config.all_kwargs())
    build: TritonBuild | TritonCompileError

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items())


def read_args(path: Path | None, builtin: dict | None) -> dict:
    if path is None:
        if builtin is None:
            raise UsageError("--kernel-args FILE is needed: a JSON object of the launch's arguments by parameter "
                             "name ('*bf16' for a bf16 tensor, numbers, true/false, null, 'tl.float32')")
        return builtin
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"--kernel-args {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--kernel-args {path}: malformed JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--kernel-args {path}: expected an object of parameter names to values")
    return {**(builtin or {}), **doc}


def size_autotune(source: KernelSource, args, cc: int, jobs: int = 1, cache_dir=None,
                  rebuild: bool = False) -> tuple[list[Sized], list[str]]:
    """Every autotune config compiled for capability `cc` with `args` (a dict, or a callable giving it once the
    kernel is known to be autotuned); and notes (pruning hooks not reproduced)."""
    kernel = load(source, cache_root(cache_dir))
    configs = getattr(kernel, "configs", None)
    if not configs:
        raise UsageError(f"{source.origin}: {source.function} is not an @triton.autotune kernel (no configs)")
    args = args() if callable(args) else args
    fn = jit_function(kernel)
    tuned = {k for c in configs for k in c.kwargs}
    wanted = [n for n in fn.arg_names if n not in tuned]
    missing = [n for n in wanted if n not in args and not fn.params[fn.arg_names.index(n)].has_default]
    unknown = [n for n in args if n not in fn.arg_names]
    if missing or unknown:
        raise UsageError(f"{source.function}: " + "; ".join(
            p for p in (f"missing launch argument(s) {', '.join(missing)}" if missing else "",
                        f"unknown parameter(s) {', '.join(unknown)}" if unknown else "") if p))
    bad = next(((n, args[n], why) for n in wanted if n in args for why in [stand_in_problem(args[n])] if why), None)
    if bad:
        raise UsageError(f"--kernel-args: {bad[0]}={bad[1]!r}: {bad[2]}")
    notes = []
    if getattr(kernel, "early_config_prune", None) or getattr(kernel, "perf_model", None):
        notes.append("the autotuner's prune_configs_by hooks run at launch on real tensors: not reproduced here")
    sized_cfgs = [c.all_kwargs() for c in configs]
    job_list = [KernelJob(source, (), tuple({**{k: args[k] for k in wanted if k in args}, **c}.items()), cc)
                for c in sized_cfgs]
    builds = compile_many(job_list, jobs, cache_dir, rebuild)
    return [Sized(c, b) for c, b in zip(sized_cfgs, builds)], notes


def verdict_lines(sized: list[Sized], limit: int, target_name: str) -> tuple[list[str], list[Sized]]:
    """One line per config (bytes, registers, and Triton's own error where it would fail), and those left."""
    lines, left = [], []
    for s in sized:
        b = s.build
        if isinstance(b, TritonCompileError):
            lines.append(f"{s.label()}: compile error: {b.line}")
            continue
        over = b.fits(limit)
        head = f"{s.label()}: {b.shared} B shared, {b.regs} regs, {b.spills} spills"
        if over is None:
            left.append(s)
            lines.append(f"{head}: fits {target_name} ({limit} B)")
        else:
            lines.append(f"{head}: OutOfResources on {target_name}: {over.text}")
    return lines, left
