"""`tileprobe audit`: the command (options to tileprobe.audit.run.AuditOptions, the rows printed and written, the
notes, OVER and SET lines, the exit rule). The work is tileprobe.audit.run's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from tileprobe import sweep as sw
from tileprobe.audit import run as audit_run
from tileprobe.audit.path import rows as path_rows
from tileprobe.families import compiled_audit
from tileprobe.backends.triton.toolchain import ANY_TRITON_ENV
from tileprobe.cli_options import (AnyTritonOpt, CacheOpt, CompileAllOpt, RulesOffOpt, VerifyOpt, VerifySeedOpt, ints,
                                   split_csv)
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.reports.report import write_reports
from tileprobe.reports.terminal import WIDTH, print_rows
from tileprobe.triton.predicted import Policy


def audit(
    engine: Annotated[str, typer.Option("--engine", help="vllm or sglang: whose launchers run")],
    model: Annotated[str, typer.Option("--model", help="a Hugging Face config.json (or its folder), a Hugging Face model id (org/name: its config.json through the Hub cache), or a preset: " + ", ".join(ATTENTION_PRESETS))],
    target: Annotated[Optional[str], typer.Option("--target", help="the GPU profile the launchers see (rtx-pro-6000, h200, ...)")] = None,
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel ranks the heads split over")] = 1,
    batch: Annotated[Optional[list[str]], typer.Option("--batch", help="sequences per batch (comma list)")] = None,
    seq_len: Annotated[Optional[list[str]], typer.Option("--seq-len", help="tokens per sequence (comma list)")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="results folder (default audit-ENGINE-MODEL-TARGET)")] = None,
    engine_wheel: Annotated[Optional[str], typer.Option("--engine-wheel", help="the engine's wheel, read as a zip (default: a cached wheel)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    cache_dir: CacheOpt = None,
    kernel: Annotated[Optional[list[str]], typer.Option("--kernel", help="only these audited kernels (comma list; an unknown name is refused with the list)")] = None,
    attention_backend: Annotated[Optional[str], typer.Option("--attention-backend", metavar="NAME", help="the attention backend you pass the engine, spelled as its flag spells it (SGLang: triton, ...; vLLM: TRITON_ATTN, ...); default: the engine's own choice for the model and target")] = None,
    moe_backend: Annotated[Optional[str], typer.Option("--moe-backend", metavar="NAME", help="vLLM's --moe-backend as you pass it (e.g. triton): its MXFP4 MoE oracle's explicit branch (gpt-oss)")] = None,
    mm_encoder_attn_backend: Annotated[Optional[str], typer.Option("--mm-encoder-attn-backend", metavar="NAME", help="vLLM's --mm-encoder-attn-backend as you pass it (e.g. TRITON_ATTN): the vision encoder's attention backend; default: vLLM's own pick for the target")] = None,
    gpu_name: Annotated[Optional[str], typer.Option("--gpu-name", metavar="NAME", help="the device name the engine sees (its tuned-config files are named after it; default: the target's first SKU name)")] = None,
    compile_all: CompileAllOpt = False,
    verify: VerifyOpt = 0,
    verify_seed: VerifySeedOpt = None,
    rules_off: RulesOffOpt = False,
    any_triton: AnyTritonOpt = False,
) -> None:
    """Will the model run on the target with this engine? Every Triton launch the engine would make for it (its own
    backend choices and launchers, from its wheel, under a stand-in device; each launch's bytes by a stated rule, by
    Triton's own allocation pass, or compiled (--compile-all), never launched): one
    row each, what the engine runs instead where it picks another kernel, and what to change; exit 1 with one line
    per launch that does not fit."""
    if any_triton:  # read by require_triton here and in the compile workers (tileprobe.backends.triton.toolchain)
        os.environ[ANY_TRITON_ENV] = "1"
    opts = audit_run.AuditOptions(engine, model, target, tp, tuple(ints(batch, "--batch") or (1, 8)),
                                  tuple(ints(seq_len, "--seq-len") or (1024,)), out, jobs,
                                  cache_dir, engine_wheel, sw.command_line(),
                                  tuple(split_csv(kernel) or ()), attention_backend,
                                  moe_backend, gpu_name, Policy(compile_all, verify, verify_seed), rules_off,
                                  mm_encoder_attn_backend=mm_encoder_attn_backend)
    res = audit_run.run_audit(opts)
    console = Console(width=WIDTH)
    if res.banner:
        console.print(f"[bold yellow]{escape(res.banner)}[/]")
    print_rows([r for r in res.rows if r.get("family") != compiled_audit.NAME], console)
    if res.path:
        console.print(path_rows.terminal_table(res.path, res.target))
    try:
        write_reports(res.out, console, chart_cache=audit_run.kept_answers(opts.cache_dir))
        if res.banner:
            report = res.out / "report.md"
            report.write_text(f"> **{res.banner}**\n\n" + report.read_text())
        if res.path and len(res.path) < len(res.launches):  # with Triton rows the report's table is theirs
            with open(res.out / "report.md", "a") as f:
                f.write("\n" + path_rows.markdown(res.path, res.target))
    except Exception as exc:  # the rows are already safe on disk; a report problem must not fail the audit
        console.print(f"[yellow]report not written: {type(exc).__name__}: {exc}[/]")
    sys.stdout.writelines(f"{line}\n" for line in res.notes)
    sys.stdout.writelines(f"OVER {line}\n" for line in res.failures)
    sys.stdout.writelines(f"COMPILE ERROR {line}\n" for line in res.compile_errors)
    sys.stdout.writelines(f"FAIL {line}\n" for line in res.path_failures)
    sys.stdout.writelines(f"{line}\n" for line in res.remedies)
    sys.stdout.writelines(f"MISMATCH {line}\n" for line in res.mismatches)
    sys.stdout.writelines(f"UNANSWERED {line}\n" for line in res.unanswered)
    a, n = res.answers, res.counts()
    total = sum(n.values())
    sys.stdout.write(f"{total} kernels on the path on {res.target.name} ({res.target.smem_optin} B opt-in; batch "
                     f"{','.join(map(str, opts.batches))}, seq-len {','.join(map(str, opts.seq_lens))}, tp {opts.tp}): "
                     + ", ".join(f"{n.get(v, 0)} {w}" for v, w in EXIT_WORDS)
                     + f" (Triton: capture {res.seconds['capture_s']} s, answers {res.seconds['compile_s']} s; "
                     f"{a.get('predicted', 0)} predicted, {a.get('sized', 0)} sized, {a.get('compiled', 0)} compiled"
                     + (f"; --verify compiled {a['verified']} (seed {res.seed}), {len(res.mismatches)} differ"
                        if a.get("verified") else "")
                     + "; nothing launched)\n")
    raise typer.Exit(exit_code(res, total))


EXIT_WORDS = (("fits", "fit"), ("smem-over-limit", "over"), ("compile-error", "compile error"),
              ("refused", "refused"), ("no-code", "no code"), ("unanswered", "unanswered"))


def exit_code(res, total: int) -> int:
    """0: every kernel on the path answered and fits; 1: one does not fit, is refused, has no code for the target
    or fails to compile (or --verify found a mismatch); 3: none fails but some are unanswered, or nothing was
    answered at all; 2 is bad input (tileprobe.errors.UsageError, raised before)."""
    if res.failures or res.compile_errors or res.path_failures or res.mismatches:
        return 1
    if res.unanswered or total == 0:
        return 3
    return 0
