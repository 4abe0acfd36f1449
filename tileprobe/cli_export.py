"""`tileprobe export ...`: hand tileprobe's findings to an engine (a FlashInfer tactics blocklist, a Triton config
folder, the FlashInfer tactic-id diff). The commands only; the work is in tileprobe.engines and tileprobe.triton."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from tileprobe import sweep as sw
from tileprobe.backends.cutlass.toolchain import find_nvcc
from tileprobe.cli_options import AnyTritonOpt, CacheOpt, CompileAllOpt, NvccOpt, RulesOffOpt, VerifyOpt, VerifySeedOpt
from tileprobe.cli_options import console
from tileprobe.cli_options import ints as _ints
from tileprobe.cli_options import mismatch_exit as _mismatch_exit
from tileprobe.cli_options import split_csv as _split_csv
from tileprobe.engines import flashinfer_blocklist as blocklist
from tileprobe.engines import flashinfer_blocklist_check as bl_check
from tileprobe.errors import UsageError
from tileprobe.results import resultset
from tileprobe.triton import audit as triton_audit
from tileprobe.triton import export as triton_export
from tileprobe.triton import resolve as triton_resolve
from tileprobe.triton import tune as triton_tune
from tileprobe.triton.predicted import Policy as PredictPolicy, PredictionMismatch

export_app = typer.Typer(no_args_is_help=True, help="Hand tileprobe's findings to an engine (FlashInfer tactics blocklists).")


@export_app.command("flashinfer-blocklist")
def export_flashinfer_blocklist(
    results: Annotated[Optional[Path], typer.Argument(metavar="RESULTS", help="a flashinfer-moe static sweep folder (default: run that sweep into --sweep-out)")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", metavar="vllm|sglang|flashinfer[==VER]", help="the serving engine the file is for: its pinned flashinfer release and its finalize mode, read from --engine-wheel, its install or the wheel cache (default: the flashinfer installed or at --flashinfer-dir)")] = None,
    engine_wheel: Annotated[Optional[Path], typer.Option("--engine-wheel", metavar="WHEEL|DIR", help="the engine's wheel, or a folder of wheels (the engine's and its pinned flashinfer's), read as zips, never installed (default: the install, then the wheel cache `tileprobe engines fetch` fills)")] = None,
    wheels: Annotated[Optional[Path], typer.Option("--wheels", hidden=True, help="deprecated spelling of --engine-wheel DIR")] = None,
    target: Annotated[Optional[str], typer.Option("--target", metavar="NAME", help="rtx-pro-6000, rtx-5090 or dgx-spark-gb10")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", metavar="FILE.json|DIR", help="a .json file (one blocklist) or a folder (one file per GPU name x dtype pair x finalize mode)")] = None,
    dtypes: Annotated[Optional[list[str]], typer.Option("--dtypes", metavar="nvfp4xnvfp4,mxfp8xmxfp4", help="dtype pairs (default: both, one file each)")] = None,
    finalize: Annotated[Optional[list[str]], typer.Option("--finalize", metavar="on,off", help="gemm2 finalize fusion, plain flashinfer only (default on); with --engine vllm|sglang the engine's own mode is used")] = None,
    gpu_name: Annotated[Optional[list[str]], typer.Option("--gpu-name", metavar="NAME", help="the device name(s) to write into _metadata.gpu (default: every SKU name the target profile knows); a name of another arch is refused")] = None,
    any_gpu: Annotated[bool, typer.Option("--any-gpu", help="write gpu '*': the file then loads on every GPU, including ones whose tactic numbering differs")] = False,
    check_file: Annotated[Optional[Path], typer.Option("--check", metavar="FILE", help="instead of exporting: is this blocklist still exact for the flashinfer installed, at --flashinfer-dir or pinned by --engine? exit 1 naming each changed ID")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="refuse unless the numbering is checked against flashinfer's own compiled enumeration (needs nvcc; without --verify a machine with no nvcc gets tileprobe's model, and the file says so)")] = False,
    model_only: Annotated[bool, typer.Option("--model-only", help="skip compiling flashinfer's enumeration (~1 min, cached): the numbering is tileprobe's model, unchecked, and the file says so")] = False,
    allow_predicted: Annotated[bool, typer.Option("--allow-predicted", help="write a blocklist from --predict-only rows (its evidence then says 'predicted')")] = False,
    nvcc: NvccOpt = None,
    flashinfer_dir: Annotated[Optional[Path], typer.Option("--flashinfer-dir", metavar="DIR", help="number the tactics for this flashinfer package folder instead of the installed one")] = None,
    sweep_out: Annotated[Optional[Path], typer.Option("--sweep-out", metavar="DIR", help="where the static sweep goes when no results folder is given", show_default="tileprobe-results")] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", metavar="N", help="parallel compiles for that sweep", show_default="cores")] = None,
    rules_off: RulesOffOpt = False,
    cache_dir: CacheOpt = None,
) -> None:
    """FlashInfer's FLASHINFER_TACTICS_BLOCKLIST file for an SM120 GPU, made without the GPU: the CUTLASS fused-MoE
    tactic IDs whose kernels do not fit, for the flashinfer release and finalize mode an engine runs."""

    if check_file is not None:
        given = [o for o, v in (("RESULTS", results), ("--target", target), ("--out", out), ("--dtypes", dtypes),
                                ("--finalize", finalize), ("--gpu-name", gpu_name), ("--any-gpu", any_gpu),
                                ("--allow-predicted", allow_predicted), ("--sweep-out", sweep_out),
                                ("--jobs", jobs)) if v]
        if given:
            raise UsageError(f"--check reads a written file; {', '.join(given)} only apply to an export")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if verify and model_only:
        raise UsageError("--verify and --model-only contradict each other")
    if wheels is not None:
        if engine_wheel is not None:
            raise UsageError("--wheels is the old spelling of --engine-wheel; give one of them")
        sys.stderr.write("note: --wheels is deprecated; use --engine-wheel\n")
        engine_wheel = wheels
    nv = find_nvcc(nvcc) if verify else blocklist.find_nvcc_or_none(nvcc)
    rel = blocklist.release(engine, engine_wheel, flashinfer_dir, cache_dir, rules_off)
    if rel.banner:
        sys.stdout.write(rel.banner + "\n")
    if check_file is not None:
        res = bl_check.check(check_file, nvcc=nv, model_only=model_only, cache_dir=cache_dir, rel=rel)
        for n in res.notes:
            sys.stdout.write(f"note: {n}\n")
        for p in res.problems:
            sys.stdout.write(f"CHANGED {p}\n")
        sys.stdout.write(f"{check_file}: {res.verdict()} for {res.label}\n")
        if res.problems:
            raise typer.Exit(1)
        return
    if target is None or out is None:
        raise UsageError("export flashinfer-blocklist needs --target and --out (or --check FILE)")
    numbering = None  # with a results folder, export checks the numbering once the rows are read
    if results is None:
        numbering = blocklist.check_numbering(rel.tree, nv, model_only, cache_dir)  # before a sweep is spent
        os.environ["TILEPROBE_FLASHINFER_DIR"] = str(rel.tree.root)  # read by the flashinfer-moe family
        results = sweep_out or Path("tileprobe-results")
        sw.run(sw.SweepOptions(family=blocklist.FAMILY, target=target, static_only=True, out=results,
                               jobs=jobs or os.cpu_count() or 1, nvcc=nvcc, cache_dir=cache_dir), console)
    exports = blocklist.export(resultset.load(results), target, out, _split_csv(dtypes), _split_csv(finalize),
                               gpu_name, any_gpu, rel=rel, nvcc=nv, model_only=model_only,
                               allow_predicted=allow_predicted, cache_dir=cache_dir, numbering=numbering)
    for e in exports:
        sys.stdout.write(e.summary() + "\n")
        for n in e.notes:
            sys.stdout.write(f"warning: {n}\n")
    who = rel.who()
    evidence = ", ".join(sorted({e.evidence for e in exports}))
    numbering = exports[0].numbering
    sys.stdout.write(f"numbering: {numbering.word()} ({numbering.note})\n")
    sys.stdout.write(f"use: export {blocklist.ENV_VAR}=<file> with {who} (evidence: {evidence}; nothing SM120 "
                     "launched)\n")


@export_app.command("triton-configs")
def export_triton_configs(
    target: Annotated[str, typer.Option("--target", help="the GPU to write for (its limit and every SKU name)")],
    out: Annotated[Path, typer.Option("--out", help="the folder to write: VLLM_TUNED_CONFIG_FOLDER / SGLANG_MOE_CONFIG_DIR")],
    inputs: Annotated[Optional[Path], typer.Argument(help="engine config file(s) to start from: a file or folder (e.g. the shipped H200 file for the model); without one, what --engine loads on the target today for --workload or --model")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="vllm or sglang (default: from the input file names)")] = None,
    engine_wheel: Annotated[Optional[str], typer.Option("--engine-wheel", help="the engine's wheel, read as a zip")] = None,
    device_name: Annotated[Optional[list[str]], typer.Option("--device-name", help="write for these SKU names only (default: every name the target profile knows)")] = None,
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="the model's hidden size K, when no workload preset matches the file's E and N")] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    any_triton: AnyTritonOpt = False,
    rules_off: RulesOffOpt = False,
    cache_dir: CacheOpt = None,
    tune: Annotated[bool, typer.Option("--tune", help="on a GPU of the target's arch: each entry becomes the fastest verified config of the engine tuner's own search space that fits (pruned by compiled bytes, screened, confirmed)")] = False,
    batches: Annotated[Optional[str], typer.Option("--batches", help="--tune: only these M keys of the input file(s), e.g. 1,16,64")] = None,
    confirm_top: Annotated[Optional[int], typer.Option("--confirm-top", help="--tune: how many of the screen's fastest get the element-wise check and full timing", show_default="8")] = None,
    screen_reps: Annotated[Optional[int], typer.Option("--screen-reps", help="--tune: timed graph replays per config in the screen", show_default="3")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="--tune: the inputs' seed (default: random, recorded)")] = None,
    prune_only: Annotated[bool, typer.Option("--prune-only", help="--tune: compile and prune the space only (no GPU needed; nothing launched; fills the caches a later --tune reuses)")] = False,
    workload: Annotated[Optional[str], typer.Option("--workload", metavar="PRESET", help="no input file: the model preset whose MoE layer to write for (e.g. qwen3-30b-a3b)")] = None,
    model: Annotated[Optional[Path], typer.Option("--model", metavar="config.json", help="no input file: a Hugging Face config.json to read the MoE layer from (experts, experts per token, sizes, quantization)")] = None,
    tp: Annotated[int, typer.Option("--tp", help="no input file: tensor-parallel ways (the file's N is the expert intermediate size / tp)")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="no input file: expert-parallel ways (the file's E is the experts / ep)")] = 1,
    quant: Annotated[Optional[str], typer.Option("--quant", help="no input file: bf16, fp8 or fp8-block (default: --model's quantization_config, else bf16)")] = None,
    compile_all: CompileAllOpt = False,
    verify: VerifyOpt = 0,
    verify_seed: VerifySeedOpt = None,
) -> None:
    """Engine config files for TARGET in the engine's names and layout, every entry fitting (an over-limit entry
    becomes the nearest fitting config by a stated rule; bytes predicted where exact, else compiled; not timed; provenance beside them). With --tune,
    on a GPU of TARGET's arch, every entry is the fastest verified config of the engine's tuning space instead.
    Without INPUTS: per SKU name, what --engine loads today for the model (its shipped file, or its default
    heuristic), made to fit."""
    tune_only = [o for o, v in (("--batches", batches), ("--confirm-top", confirm_top), ("--screen-reps", screen_reps),
                                ("--seed", seed), ("--prune-only", prune_only or None)) if v is not None]
    if tune_only and not tune:
        raise UsageError(f"{', '.join(tune_only)} apply with --tune only")
    policy = PredictPolicy(compile_all, verify, verify_seed).check()
    if tune and (compile_all or verify or verify_seed is not None):
        raise UsageError("--compile-all, --verify and --verify-seed do not apply with --tune (it compiles its space)")
    if inputs is None:
        if tune:
            raise UsageError("--tune starts from an input file (the shipped file to tune, e.g. the H200 one)")
        try:
            lines = triton_resolve.run(engine, engine_wheel, workload, model, tp, ep, quant, target, out,
                                       _split_csv(device_name), max(1, jobs), cache_dir, any_triton, policy,
                                       rules_off)
        except PredictionMismatch as exc:
            _mismatch_exit(exc)
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    given = [o for o, v in (("--workload", workload), ("--model", model), ("--tp", tp != 1), ("--ep", ep != 1),
                            ("--quant", quant)) if v]
    if given:
        raise UsageError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only without an input file "
                         "(the file's name gives E and N)")
    if tune:
        d = triton_tune.TuneOptions()
        opts = triton_tune.TuneOptions(batches=_ints([batches] if batches else None, "--batches"),
                                       confirm_top=d.confirm_top if confirm_top is None else confirm_top,
                                       screen_reps=d.screen_reps if screen_reps is None else screen_reps,
                                       jobs=max(1, jobs), cache_dir=cache_dir,
                                       any_triton=any_triton, rules_off=rules_off, seed=seed,
                                       prune_only=prune_only)
        tuned, prov = triton_tune.run(inputs, engine, engine_wheel, target, out, _split_csv(device_name), hidden,
                                      opts)
        for line in triton_tune.summary(tuned, prov):
            sys.stdout.write(line + "\n")
        return
    try:
        written = triton_export.run(inputs, engine, engine_wheel, target, out, _split_csv(device_name), hidden,
                                    max(1, jobs), cache_dir, any_triton, policy=policy, rules_off=rules_off)
    except PredictionMismatch as exc:
        _mismatch_exit(exc)
    if written and written[0].banner:
        sys.stdout.write(written[0].banner + "\n")
    for w in written:
        sys.stdout.write(f"{w.path}: {w.entries} entries, {w.substituted} substituted\n")
    env = "VLLM_TUNED_CONFIG_FOLDER" if (engine or triton_audit.guess_engine([w.path.name for w in written])) == "vllm" \
        else "SGLANG_MOE_CONFIG_DIR"
    sys.stdout.write(f"use: export {env}={out.resolve()} (provenance: {out / triton_export.PROVENANCE}; "
                     f"{written[0].evidence if written else 'compiled, not timed'})\n")


@export_app.command("flashinfer-ids-diff")
def export_flashinfer_ids_diff(
    old: Annotated[Path, typer.Argument(metavar="OLD", help="a flashinfer package folder (or the folder holding it)")],
    new: Annotated[Path, typer.Argument(metavar="NEW", help="another flashinfer package folder")],
    dtypes: Annotated[Optional[list[str]], typer.Option("--dtypes", metavar="nvfp4xnvfp4,mxfp8xmxfp4", help="dtype pairs (default both)")] = None,
    finalize: Annotated[Optional[list[str]], typer.Option("--finalize", metavar="on,off", help="finalize modes (default both)")] = None,
    model_only: Annotated[bool, typer.Option("--model-only", help="compare tileprobe's model of each numbering, without compiling either release's own enumeration")] = False,
    nvcc: NvccOpt = None,
    cache_dir: CacheOpt = None,
) -> None:
    """The SM120 CUTLASS fused-MoE tactic IDs that moved between two flashinfer installs."""

    lines, notes = bl_check.diff_installs(old, new, _split_csv(dtypes), _split_csv(finalize),
                                          nvcc=blocklist.find_nvcc_or_none(nvcc), model_only=model_only,
                                          cache_dir=cache_dir)
    for n in notes:
        sys.stdout.write(f"note: {n}\n")
    for line in lines:
        sys.stdout.write(f"MOVED {line}\n")
    sys.stdout.write(f"{len(lines)} tactic variant(s) moved\n")
