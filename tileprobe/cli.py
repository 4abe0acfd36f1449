"""The command line: thin typer commands that call library functions."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from tileprobe.cli_options import AnyTritonOpt, CacheOpt, CompileAllOpt, NvccOpt, RulesOffOpt, VerifyOpt, VerifySeedOpt
from tileprobe.cli_options import console
from tileprobe.cli_options import mismatch_exit as _mismatch_exit
from tileprobe.cli_options import ints as _ints
from tileprobe.cli_options import split_csv as _split_csv
from tileprobe.triton.predicted import Policy as PredictPolicy, PredictionMismatch
from tileprobe.errors import DOCTOR_HELP, ToolchainError, UsageError

# Start-up time: a command imports the machinery it runs inside its body, and `audit` and `export` (whose modules
# import the audit and export machinery at their top) are built only when named (_Commands), so `tileprobe doctor`,
# `inspect`, `schema` or a bad option no longer import every other command's work first (~1 s of CPU per start
# before, ~0.3 s now). These are start-up choices, not cycle dodges: every module also imports on its own
# (tests/test_imports.py).


def _audit_command():
    from tileprobe import cli_audit

    holder = typer.Typer(add_completion=False, rich_markup_mode=None)
    holder.command()(cli_audit.audit)
    return typer.main.get_group(holder).commands["audit"]


def _export_group():
    from tileprobe import cli_export

    holder = typer.Typer(add_completion=False, rich_markup_mode=None)
    holder.add_typer(cli_export.export_app, name="export")
    return typer.main.get_group(holder).commands["export"]


# name: (the command it is listed after in --help, or None for the end; its builder)
_LAZY = {"audit": ("check-configs", _audit_command), "export": (None, _export_group)}


class _LazyCommands(dict):
    """The group's commands: a lazy one is built on first lookup, so `group.commands["audit"]` works as before."""

    def __missing__(self, name):
        if name not in _LAZY:
            raise KeyError(name)
        self[name] = _LAZY[name][1]()
        return self[name]

    def keys(self):  # the names typer suggests from for a mistyped command ("Did you mean 'audit'?")
        return [*dict.keys(self), *(n for n in _LAZY if not dict.__contains__(self, n))]


class _Commands(TyperGroup):
    """tileprobe's top-level group: the eager commands plus the lazy ones (_LAZY), listed in their usual places."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)

    def list_commands(self, ctx) -> list[str]:
        names = [n for n in super().list_commands(ctx) if n not in _LAZY]
        for name, (after, _) in _LAZY.items():
            names.insert(names.index(after) + 1 if after in names else len(names), name)
        return names

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in _LAZY:
            return self.commands[cmd_name]
        return super().get_command(ctx, cmd_name)


EXAMPLES = """\b
Examples:
  tileprobe sweep                          static probe of the default tiles (no GPU), or launch on this GPU
  tileprobe sweep --family flashinfer-moe --target rtx-pro-6000 --jobs 2 --out fi-results
  tileprobe sweep --tiles 128x128x128,128x256x64B --stages auto,2,3 --target dgx-spark-gb10
  tileprobe sweep --predict-only --tiles 128,256x32..256x128,256      no nvcc: the model's answer
                                           (a..b steps by a: 32..256 is 32, 64, 96, ..., 256; a..b:s steps by s)
  tileprobe sweep --family vllm-moe --target rtx-pro-6000 --static-only     vLLM's own CUTLASS MoE kernels
  tileprobe export flashinfer-blocklist --engine vllm --target rtx-5090 --out bl/
                                           FLASHINFER_TACTICS_BLOCKLIST files for the flashinfer vLLM pins
  tileprobe export triton-configs --engine vllm --workload qwen3-30b-a3b --target rtx-pro-6000 --out cfg/
                                           what vLLM loads there today for the model, made to fit
  tileprobe sweep --shape 64:16:4096:7168 --seed 7      one explicit E:M:N:K problem, reproducible data
  tileprobe explain 128x256x64B --target dgx-spark-gb10
  tileprobe report fi-results --format csv --out rows.csv
  tileprobe diff results-before results-after
  tileprobe inspect kernels.o --dynamic '(Dl+Dr+kv_len)*4' --set Dl=512,Dr=64 --solve kv_len
"""

# Plain click help and errors (rich_markup_mode=None): no markup to misread ("E:M:N:K" is not an emoji), and neither
# --help nor a bad option waits for typer's rich formatter to load.
app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, rich_markup_mode=None, epilog=EXAMPLES,
                  help="Which kernel configs fit a GPU's shared-memory limit (101376 B per block on RTX PRO 6000, "
                       "RTX 5090, DGX Spark), in bytes, with evidence, no GPU needed: every Triton kernel vLLM or "
                       "SGLang launches for your model (audit), vLLM's and SGLang's Triton "
                       "fused-MoE configs (check-configs; export triton-configs writes a folder that fits), "
                       "FlashInfer's CUTLASS MoE tactics (export flashinfer-blocklist), your own kernel binaries "
                       "(inspect), and CUTLASS FP4/FP8 grouped-GEMM tiles, launched and timed where a GPU is present "
                       "(sweep).")

FamilyOpt = Annotated[Optional[str], typer.Option("--family", metavar="NAME", help="sm120-nvfp4, sm90-fp8, flashinfer-moe, vllm-moe or triton-moe (default: by device)")]
TargetOpt = Annotated[Optional[str], typer.Option(
    "--target", metavar="NAME", help="offline profile (rtx-pro-6000, rtx-5090, dgx-spark-gb10, the other SM120 GPUs "
                     "rtx-5080, rtx-5070-ti, rtx-5070, rtx-5060-ti, rtx-pro-5000, rtx-pro-4500, rtx-pro-4000; b200, "
                     "h100, h200); a real GPU wins when present unless this is given")]
CutlassOpt = Annotated[Optional[str], typer.Option("--cutlass-dir", help="CUTLASS checkout or include dir")]


def _shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected i/n, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


@app.command(epilog=EXAMPLES)
def sweep(
    family: FamilyOpt = None,
    target: TargetOpt = None,
    tiles: Annotated[Optional[list[str]], typer.Option("--tiles", metavar="MxNxK[,...]", help="comma list: 128x256x128 or 128x256x64B")] = None,
    schedules: Annotated[Optional[list[str]], typer.Option("--schedules", metavar="auto,cooperative,pingpong", help="auto, cooperative, pingpong")] = None,
    stages: Annotated[Optional[list[str]], typer.Option("--stages", metavar="auto,2,3", help="auto (also spelled 0: the most stages the carveout fits) or explicit counts, e.g. auto,2,3")] = None,
    epilogue: Annotated[Optional[list[str]], typer.Option("--epilogue", metavar="no-c,with-c", help="no-c (bf16 D) and/or with-c (bf16 C source)")] = None,
    swap_ab: Annotated[Optional[list[str]], typer.Option("--swap-ab", metavar="off,on", help="off, on, or off,on")] = None,
    cluster: Annotated[str, typer.Option("--cluster", help="cluster shape; SM120 supports 1x1x1 only")] = "1x1x1",
    dtypes: Annotated[Optional[list[str]], typer.Option("--dtypes", metavar="PAIR[,...]", help="flashinfer-moe: nvfp4xnvfp4, mxfp8xmxfp4 (SM120), fp8xfp8 (SM90); default: every pair the engine dispatches")] = None,
    flashinfer_dir: Annotated[Optional[Path], typer.Option("--flashinfer-dir", help="flashinfer-moe: another flashinfer package folder than the installed one (e.g. to diff two installs)")] = None,
    out: Annotated[Path, typer.Option("--out", help="results folder")] = Path("tileprobe-results"),
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    compile_: Annotated[bool, typer.Option("--compile/--no-compile", help="static: also build device code (evidence 'compiled': ptxas registers and spills; slow). Without it, kernel types are instantiated and sized only (evidence 'sized')")] = False,
    predict_only: Annotated[bool, typer.Option("--predict-only", help="answer from tileprobe's model (of the CUTLASS builders; for triton-moe, of Triton 3.8.0's bytes): no nvcc, no Triton, nothing compiled (evidence 'predicted')")] = False,
    model_skip: Annotated[Optional[bool], typer.Option("--model-skip/--no-model-skip", help="do not compile configs the model says cannot fit (default: on when --tiles has a range a..b)")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="ignore the build cache and rebuild (replacing its entries)")] = False,
    static_only: Annotated[bool, typer.Option("--static-only", help="never launch, even with a GPU")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="keep rows in --out and skip what they cover")] = False,
    shard: Annotated[Optional[str], typer.Option("--shard", help="i/n: probe a deterministic 1/n of the configs")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="GPU indices, e.g. 0,1 (default: all visible)")] = None,
    workload: Annotated[Optional[list[str]], typer.Option("--workload", metavar="PRESET[,...]", help="model preset(s) (default deepseek-v3)")] = None,
    shape: Annotated[Optional[list[str]], typer.Option("--shape", metavar="E:M:N:K[,...]", help="explicit E:M:N:K problem(s)")] = None,
    batch: Annotated[Optional[list[str]], typer.Option("--batch", metavar="1,8,32", help="decode batch sizes (default 1,8,32,128,512)")] = None,
    routing: Annotated[str, typer.Option("--routing", help="uniform, balanced or skewed")] = "uniform",
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel ways (splits I)")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="expert-parallel ways (splits experts)")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="routing and data seed (a whole number; negative: new each run)", show_default="new each run")] = -1,
    compile_timeout: Annotated[Optional[float], typer.Option("--compile-timeout", metavar="SECONDS", help="seconds per nvcc run", show_default="1200")] = None,
    run_timeout: Annotated[float, typer.Option("--run-timeout", help="seconds per runtime probe")] = 120,
    as_json: Annotated[bool, typer.Option("--json", help="print rows as JSON lines instead of a table")] = False,
    peer: Annotated[Optional[str], typer.Option("--peer", help="torch: also time torch._scaled_grouped_mm (FP8) on the same problems; rows gain peer_us and speedup")] = None,
    wide: Annotated[bool, typer.Option("--wide", help="add the evidence and reason columns to the table (they are always in the report and CSV)")] = False,
    ray: Annotated[Optional[str], typer.Option("--ray", help="run the shards as Ray tasks, then merge into --out: 'local' starts Ray here, 'auto' joins this machine's cluster, or a Ray address; --out must be a path every node shares (pip install 'tileprobe[ray]')")] = None,
    ray_shards: Annotated[Optional[int], typer.Option("--ray-shards", help="with --ray: shards, one task each (default: the cluster's GPUs, or CPUs for a static sweep)")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="triton-moe: vllm or sglang (the engine whose fused_moe_kernel, configs and lookup are read)")] = None,
    quant: Annotated[str, typer.Option("--quant", help="triton-moe: bf16, fp8 (w8a8 per-tensor) or fp8-block (w8a8 [128,128])")] = "bf16",
    engine_wheel: Annotated[Optional[Path], typer.Option("--engine-wheel", help="triton-moe: read the engine from this wheel (a zip) instead of the installed package")] = None,
    config_dir: Annotated[Optional[Path], typer.Option("--config-dir", help="triton-moe: the user's config folder the engine reads first (VLLM_TUNED_CONFIG_FOLDER / SGLANG_MOE_CONFIG_DIR)")] = None,
    device_name: Annotated[Optional[list[str]], typer.Option("--device-name", help="triton-moe: the exact device name(s) to answer for (default: every SKU of --target)")] = None,
    any_triton: AnyTritonOpt = False,
    rules_off: RulesOffOpt = False,
    compile_all: CompileAllOpt = False,
    verify: VerifyOpt = 0,
    cutlass_dir: CutlassOpt = None,
    nvcc: NvccOpt = None,
    cache_dir: CacheOpt = None,
) -> None:
    """Probe tiles: static on any machine, runtime where a GPU of the family's arch is present."""
    from tileprobe import families, ray_sweep
    from tileprobe import sweep as sw
    from tileprobe.reports.report import write_reports
    from tileprobe.reports.terminal import print_rows
    from tileprobe.triton import sweep as triton_sweep

    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if predict_only:
        ignored = [o for o, v in (("--compile", compile_), ("--rebuild", rebuild), ("--gpus", gpus),
                                  ("--compile-timeout", compile_timeout is not None)) if v]
        if ignored:
            raise UsageError(f"--predict-only compiles and launches nothing, so {', '.join(ignored)} would be ignored")
    swaps = None
    if swap_ab:
        swaps = []
        for v in _split_csv(swap_ab) or []:
            if v not in ("on", "off", "true", "false", "1", "0"):
                raise UsageError(f"--swap-ab {v!r}: expected on or off")
            swaps.append(v in ("on", "true", "1"))
    gpu_list = _ints([gpus], "--gpus") if gpus else None
    if flashinfer_dir is not None:
        os.environ["TILEPROBE_FLASHINFER_DIR"] = str(flashinfer_dir)  # read by the flashinfer-moe family
    opts = sw.SweepOptions(
        family=family, target=target, tiles=[",".join(tiles)] if tiles else None, schedules=_split_csv(schedules),
        stages=_ints(stages, "--stages"), epilogues=_split_csv(epilogue), swap_ab=swaps, dtypes=_split_csv(dtypes),
        cluster=families.parse_cluster(cluster), out=out, jobs=jobs, compile=compile_, rebuild=rebuild, predict_only=predict_only, model_skip=model_skip, peer=peer, static_only=static_only,
        resume=resume, shard=_shard(shard), gpus=gpu_list,
        compile_timeout_s=1200 if compile_timeout is None else compile_timeout,
        run_timeout_s=run_timeout, cutlass_dir=cutlass_dir, nvcc=nvcc, cache_dir=cache_dir,
        workload={"presets": _split_csv(workload), "shapes": _split_csv(shape),
                  "batches": _ints(batch, "--batch"), "routing": routing, "tp": tp, "ep": ep, "seed": seed},
        triton=triton_sweep.TritonOptions(engine=engine, quant=quant, engine_wheel=engine_wheel and str(engine_wheel),
                                             config_dir=config_dir and str(config_dir),
                                             device_names=_split_csv(device_name), any_triton=any_triton,
                                             rules_off=rules_off, compile_all=compile_all, verify=verify),
    )
    if ray_shards is not None and ray is None:
        raise UsageError("--ray-shards applies with --ray only")
    res = ray_sweep.run(opts, console, ray, ray_shards) if ray else None
    try:
        rows = res.rows if res else sw.run(opts, console)
    except PredictionMismatch as exc:
        _mismatch_exit(exc)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r) + "\n")
    else:
        print_rows(rows, console, wide)
    try:
        write_reports(out, console)
    except Exception as exc:  # the rows are already safe on disk; a report problem must not fail the sweep
        console.print(f"[yellow]report not written: {type(exc).__name__}: {exc}[/]")
    if res and res.failed:
        raise typer.Exit(1)


@app.command()
def autotune(
    kernel: Annotated[str, typer.Option("--kernel", help="PATH.py:FUNCTION of an @triton.autotune kernel; with --engine, PATH is inside the engine (e.g. sglang/kernels/ops/attention/flash_mla_sm120_triton.py:_tiled_sparse_decode_kernel)")],
    target: TargetOpt = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="read PATH from this engine (vllm, sglang): installed or --engine-wheel")] = None,
    engine_wheel: Annotated[Optional[Path], typer.Option("--engine-wheel", help="the engine's wheel, read as a zip")] = None,
    kernel_args: Annotated[Optional[Path], typer.Option("--kernel-args", help="JSON object: the launch's arguments by parameter name ('*bf16' a bf16 tensor, numbers, true/false, null); built in for SGLang's _tiled_sparse_decode_kernel")] = None,
    any_triton: AnyTritonOpt = False,
    rules_off: RulesOffOpt = False,
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    cache_dir: CacheOpt = None,
) -> None:
    """Size every config of an @triton.autotune kernel for a GPU you don't have: which would be OutOfResources there,
    and what the autotuner is left to choose from."""
    from tileprobe.triton import sweep as triton_sweep

    report = triton_sweep.autotune_report(kernel, target, engine, engine_wheel, kernel_args, any_triton, max(1, jobs),
                                          cache_dir, rules_off)
    sys.stdout.write("\n".join(report) + "\n")


@app.command()
def explain(
    tile: Annotated[str, typer.Argument(help="e.g. 128x256x128 or 128x256x64B")],
    family: FamilyOpt = None,
    target: TargetOpt = None,
    schedule: Annotated[str, typer.Option("--schedule")] = "cooperative",
    epilogue: Annotated[str, typer.Option("--epilogue", help="no-c / with-c; flashinfer-moe: default (gemm1) / finalize (gemm2), marked among the variants")] = "no-c",
    stages: Annotated[str, typer.Option("--stages", help="auto (also spelled 0) or a count")] = "auto",
    predict_only: Annotated[bool, typer.Option("--predict-only", help="answer from tileprobe's model (instant, no nvcc)")] = False,
    cutlass_dir: CutlassOpt = None,
    nvcc: NvccOpt = None,
    cache_dir: CacheOpt = None,
) -> None:
    """The shared-memory budget of one config in words and bytes, and which stage count or K would fit."""
    from tileprobe.reports.explain import explain as run_explain

    st = _ints([stages], "--stages")[0]  # type: ignore[index]
    console.print(run_explain(tile, family, target, schedule, epilogue, st, cutlass_dir, nvcc, cache_dir, predict_only), soft_wrap=True,
                  highlight=False)


@app.command()
def devices() -> None:
    """List visible GPUs through cuda-python; with none, the built-in offline target profiles."""
    from tileprobe.reports.report import devices_table

    console.print(devices_table())


ResultsArg = Annotated[Path, typer.Argument(help="a results folder (results.jsonl, run.json)")]


@app.command()
def report(
    results: ResultsArg,
    fmt: Annotated[str, typer.Option("--format", help="md (report.md + PNG charts in the folder), csv or json")] = "md",
    out: Annotated[Optional[Path], typer.Option("--out", help="csv/json: write to this file instead of stdout")] = None,
) -> None:
    """The report of a results folder: markdown with charts, or its rows as CSV or JSON."""
    from tileprobe.reports.report import export

    text = export(results, fmt, out)
    if fmt == "md" or out is not None:
        console.print(f"{fmt}: {out or text}", highlight=False)
    else:
        sys.stdout.write(text)


@app.command("check-configs")
def check_configs(
    path: Annotated[Optional[Path], typer.Argument(help="an engine's Triton fused-MoE config file or folder (default with --engine: its shipped tree)")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="vllm or sglang: whose kernel and file layout (default for PATH: from its file names)")] = None,
    engine_wheel: Annotated[Optional[str], typer.Option("--engine-wheel", help="the engine's wheel, read as a zip (default: the installed engine, then a cached wheel)")] = None,
    target: Annotated[Optional[str], typer.Option("--target", help="check every file against this profile (default: each file against the device it is named after)")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="write the rows here, like a sweep's")] = None,
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="the model's hidden size K, for files no workload preset matches (default 4096, marked assumed)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    model: Annotated[Optional[str], typer.Option("--model", help="a workload preset or config.json: with --target, say whether the engine runs the Triton fused MoE (whose files these are) for it there, or what it runs instead")] = None,
    any_triton: AnyTritonOpt = False,
    rules_off: RulesOffOpt = False,
    cache_dir: CacheOpt = None,
    compile_all: CompileAllOpt = False,
    verify: VerifyOpt = 0,
    verify_seed: VerifySeedOpt = None,
) -> None:
    """Every entry's exact shared bytes (from tileprobe's predictor where it is exact, else compiled with Triton for
    the target; not launched). One line per entry that
    does not fit (OVER), that Triton did not compile (COMPILE-ERROR) or that was not checked (NOT-CHECKED); exit 0
    when every entry was checked and fits, 2 when nothing could be checked, else 1."""
    from tileprobe import sweep as sw
    from tileprobe.triton import audit as triton_audit

    res = triton_audit.run(path, engine, engine_wheel, target, out, jobs, cache_dir, hidden, any_triton,
                           sw.command_line(), PredictPolicy(compile_all, verify, verify_seed), rules_off, model)
    for n in res.notes:
        sys.stdout.write(f"note: {n}\n")
    if res.answers.get("verify_seed") is not None:
        sys.stdout.write(f"note: --verify {verify}: {res.answers['verified']} predicted launches compiled, sample "
                         f"seed {res.answers['verify_seed']} (--verify-seed to repeat it)\n")
    for word, lines in (("NOT-CHECKED", res.not_checked), ("COMPILE-ERROR", res.compile_errors), ("OVER", res.over),
                        ("MISMATCH", res.mismatches)):
        sys.stdout.writelines(f"{word} {line}\n" for line in lines)
    if res.exit_code() == 2:
        raise UsageError(f"nothing checked: none of the {len(res.not_checked)} file(s) or entry launches named above "
                         "is one tileprobe can compile")
    s = res.seconds
    sys.stdout.write(f"{len(res.over)} of {res.checked} entry launches do not fit, {len(res.compile_errors)} did not "
                     f"compile ({len(res.not_checked)} not checked; "
                     f"{s['launches_predicted']} distinct launches predicted, {s['distinct']} compiled "
                     f"({s['launches_cannot_predict']} the predictor cannot answer), {s['compiled']} new, "
                     f"{s['cached']} cached; plan {s['plan_s']} s, compile {s['compile_s']} s; evidence: "
                     f"{res.evidence})\n")
    if res.exit_code():
        raise typer.Exit(res.exit_code())


known_good_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Known-good tile sets (results/known_good/<target>__<family>.json).")
app.add_typer(known_good_app, name="known-good")


@known_good_app.command("write")
def known_good_write(
    results: ResultsArg,
    out: Annotated[Optional[Path], typer.Option("--out", help="file to make or update (default: results/known_good/<target>__<family>.json)")] = None,
    accept_versions: Annotated[bool, typer.Option("--accept-versions", help="update a file made with another CUTLASS or nvcc")] = False,
) -> None:
    """Make or update known-good files from a sweep (one per target and family)."""
    from tileprobe.results import known_good, resultset

    for path, notes in known_good.write(resultset.load(results), out, accept_versions=accept_versions):
        doc = known_good.load_file(path)
        sys.stdout.write(f"{path}: {len(doc['tiles'])} known-good tiles, {len(doc['not_good'])} not good\n")
        for n in notes:
            sys.stdout.write(f"  {n}\n")


@app.command()
def check(
    files: Annotated[Optional[list[Path]], typer.Argument(help="known-good files or folders (default: results/known_good/)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="parallel compiles", show_default="cores")] = os.cpu_count() or 1,
    cutlass_dir: CutlassOpt = None,
    nvcc: NvccOpt = None,
    cache_dir: CacheOpt = None,
) -> None:
    """Re-probe known-good tiles statically against their targets; exit 1 listing each regression on one line."""
    from tileprobe import sweep as sw
    from tileprobe.results import known_good

    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    paths = known_good.files_in(files)
    toolchain = functools.cache(lambda: sw.make_toolchain(cutlass_dir, nvcc, cache_dir))  # only if a file needs it
    results = known_good.check(paths, toolchain, jobs, cache_dir=cache_dir)
    bad = [line for r in results for line in r.regressions]
    for r in results:
        for n in r.notes:
            sys.stdout.write(f"note: {n}\n" if n.startswith(r.path.name) else f"note: {r.path.name}: {n}\n")
    for line in bad:
        sys.stdout.write(f"REGRESSION {line}\n")
    checked = sum(r.checked for r in results)
    trees = "; ".join(dict.fromkeys(r.tree for r in results))  # per file: an engine family compiles its own CUTLASS
    nvcc_text = f", nvcc {toolchain().nvcc.version_text}" if toolchain.cache_info().currsize else ""
    sys.stdout.write(f"{len(bad)} regression(s) in {checked} tiles of {len(results)} file(s) (static re-probe, "
                     f"{trees}{nvcc_text})\n")
    if bad:
        raise typer.Exit(1)


@app.command()
def diff(
    a: Annotated[Path, typer.Argument(help="results folder A")],
    b: Annotated[Path, typer.Argument(help="results folder B")],
    out: Annotated[Optional[Path], typer.Option("--out", help="also write the markdown here")] = None,
) -> None:
    """Two results folders side by side: verdicts changed, SharedStorage moved, timings moved beyond noise."""
    from tileprobe.reports import compare
    from tileprobe.reports.report import write_text
    from tileprobe.results import resultset

    text = compare.render(compare.diff(resultset.load(a), resultset.load(b)))
    if out is not None:
        write_text(out, text)
    sys.stdout.write(text)


@app.command()
def recommend(
    results: ResultsArg,
    out: Annotated[Optional[Path], typer.Option("--out", help="write the JSON here (default: stdout)")] = None,
    epilogue: Annotated[Optional[str], typer.Option("--epilogue", help="epilogue to recommend for (default no-c)")] = None,
    routing: Annotated[Optional[str], typer.Option("--routing", help="routing, when the rows have several")] = None,
    target: TargetOpt = None,
) -> None:
    """Per workload and GEMM: batch-size buckets -> best verified-correct tile and runner-up, as JSON."""
    from tileprobe.reports import recommend as rec
    from tileprobe.results import resultset

    text = rec.write_recommendations(resultset.load(results), out, epilogue=epilogue, routing=routing, target=target)
    if out is None:
        sys.stdout.write(text)
    else:
        console.print(f"recommendations: {out}", highlight=False)


@app.command()
def merge(
    folders: Annotated[list[Path], typer.Argument(help="results folders: shards, or sweeps from other GPUs")],
    out: Annotated[Path, typer.Option("--out", help="merged results folder")],
    force: Annotated[bool, typer.Option("--force", help="merge even when CUTLASS or nvcc versions differ")] = False,
) -> None:
    """Join results folders into one without duplicate rows; writes results, run.json and report.md into --out."""
    from tileprobe import sweep as sw
    from tileprobe.reports.report import write_reports
    from tileprobe.results.merge import merge as run_merge

    res = run_merge(folders, out, force, sw.command_line())
    console.print(f"merged {res.inputs} folder(s): {res.rows} rows, {res.duplicates} duplicate(s) dropped"
                  + (f", {len(res.disagreeing)} of them disagreeing (first kept)" if res.disagreeing else ""),
                  highlight=False)
    write_reports(out, console)


@app.command()
def inspect(
    binary: Annotated[Path, typer.Argument(help="a cubin, fatbin, object file, executable or shared library with device code")],
    kernel: Annotated[Optional[str], typer.Option("--kernel", help="only kernels whose (demangled) name matches this regular expression")] = None,
    target: Annotated[Optional[list[str]], typer.Option("--target", help="offline profile(s), comma list (default: every profile and every GPU present)")] = None,
    dynamic: Annotated[Optional[str], typer.Option("--dynamic", help="the launch's dynamic shared memory in bytes, e.g. '(Dl+Dr+kv_len)*4' (integers, names, + - * / // and parentheses)")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="values for the expression's names, e.g. Dl=512,Dr=64")] = None,
    solve: Annotated[Optional[str], typer.Option("--solve", help="the name to solve for: its largest value that fits each target")] = None,
    jit: Annotated[bool, typer.Option("--jit/--no-jit", help="for a target only PTX runs on: compile that PTX here with ptxas, as the driver would at load")] = True,
    jit_timeout: Annotated[float, typer.Option("--jit-timeout", metavar="SECONDS", help="the longest one PTX image's compile may take; past it the kernels' rows say so")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    nvcc: NvccOpt = None,
) -> None:
    """Per kernel and arch, read from the binary (no GPU): static shared memory, registers, stack frame, max threads;
    per target: does its code run there, and the largest dynamic shared memory a launch may request."""
    from tileprobe.binary import inspect as binary_inspect
    from tileprobe.binary.jit import find_jit

    if (set_ or solve) and not dynamic:
        raise UsageError("--set and --solve apply with --dynamic only")
    req = binary_inspect.Request(dynamic, binary_inspect.expr.parse_sets(set_), solve) if dynamic else None
    if jit_timeout <= 0:
        raise UsageError(f"--jit-timeout {jit_timeout:g}: must be more than 0 seconds")
    report_ = binary_inspect.inspect(binary, kernel, _split_csv(target), req,
                                     find_jit(nvcc, jit_timeout) if jit else None,
                                     binary_inspect.NO_PTXAS if jit else binary_inspect.NO_JIT)
    sys.stdout.write(json.dumps(report_, indent=1) + "\n" if as_json else binary_inspect.render(report_))


@app.command()
def doctor(
    engine: Annotated[Optional[str], typer.Option("--engine", help="vllm or sglang: check what a triton-moe run for that engine needs (default: what a CUTLASS sweep needs)")] = None,
    target: TargetOpt = None,
    cutlass_dir: CutlassOpt = None,
    nvcc: NvccOpt = None,
    cache_dir: CacheOpt = None,
    engine_wheel: Annotated[Optional[str], typer.Option("--engine-wheel", help="with --engine: the engine's wheel (or a folder of wheels) the runs would be given, checked instead of the install and the wheel cache")] = None,
    rules_off: RulesOffOpt = False,
    any_triton: AnyTritonOpt = False,
) -> None:
    """One line per thing a run needs (nvcc, CUTLASS, host compiler, Triton, the engines, flashinfer, GPU, cache):
    ok, or what is wrong and the command that fixes it; exit 2 when a run of this kind would fail, or when the
    engine or Triton a run would read is a release tileprobe cannot answer for."""
    from tileprobe import doctor as tileprobe_doctor

    checks = tileprobe_doctor.diagnose(engine, target, cutlass_dir, nvcc, cache_dir, engine_wheel, rules_off,
                                       any_triton)
    terminal = console.is_terminal
    for line in tileprobe_doctor.lines(checks, terminal):
        if terminal:
            console.print(line, highlight=False, soft_wrap=True)
        else:
            sys.stdout.write(line + "\n")
    code = tileprobe_doctor.exit_code(checks)
    if code:
        raise typer.Exit(code)


@app.command()
def include() -> None:
    """Print the folder holding the C++ launch guard, for `nvcc -I"$(tileprobe include)"` and
    `#include <tileprobe/guard.h>`."""
    from tileprobe.guard import include_dir

    sys.stdout.write(f"{include_dir()}\n")


engines_app = typer.Typer(no_args_is_help=True, help="The serving engines' wheels tileprobe reads (never installed).")
app.add_typer(engines_app, name="engines")


@engines_app.command("fetch")
def engines_fetch(
    engines: Annotated[Optional[list[str]], typer.Argument(metavar="SPEC", help="vllm, sglang, NAME==VERSION, or flashinfer-python==VERSION (default: vllm and sglang at the releases tileprobe reads)")] = None,
    dest: Annotated[Optional[Path], typer.Option("--dest", metavar="DIR", help="where to put the wheels (default: tileprobe's wheel cache, where every command looks)")] = None,
    flashinfer: Annotated[bool, typer.Option("--flashinfer/--no-flashinfer", help="also fetch the flashinfer-python release each engine pins (read from its wheel's METADATA)")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what would be fetched, download nothing")] = False,
    rules_off: RulesOffOpt = False,
) -> None:
    """Download the engine releases tileprobe reads and the flashinfer releases they pin (pip download --no-deps)
    into the wheel cache, for triton-moe, check-configs and the export commands on a machine without them. An engine
    release tileprobe has no manifest for is cached and refused (exit 2) unless --rules-off; a pinned flashinfer
    release the index does not serve is one line naming the fallback to choose."""
    from tileprobe.engines import fetch

    if dry_run:
        for w in fetch.plan(engines, dest, flashinfer):
            sys.stdout.write(f"{w.dist} {w.version or '(its pin)'}: {w.why}\n")
        return
    missing: list[str] = []
    got = fetch.fetch(engines, dest, flashinfer, missing=missing)
    for w, path in got:
        sys.stdout.write(f"{w.dist} {w.version}: {path}" + (f" (pinned by {w.pinned_by})" if w.pinned_by else "") + "\n")
    sys.stderr.writelines(f"{line}\n" for line in missing)
    sys.stdout.writelines(f"{banner}\n" for banner in fetch.answerable(got, rules_off))


@app.command()
def schema(
    name: Annotated[str, typer.Argument(help="row, run, known-good or recommend")],
) -> None:
    """Print the versioned JSON Schema of a tileprobe format (result rows, run.json, known-good, recommend)."""
    from tileprobe.results import schema as schemas

    if name not in schemas.names():
        raise UsageError(f"unknown schema {name!r}; known: {', '.join(schemas.names())}")
    sys.stdout.write(json.dumps(schemas.schema(name), indent=1) + "\n")


_CLICK_USAGE_ERROR = typer.BadParameter.__mro__[1]  # click's UsageError (typer vendors click in later releases)


INTERRUPTED = ("tileprobe: interrupted (Ctrl-C); finished compiles stay in the cache, so the same command resumes "
               "from them")


def _on_sigint(signum, frame) -> None:
    """Ctrl-C: Python's own KeyboardInterrupt (the work below stops: tileprobe.backends.triton.compile cancels what
    is not started and kills its workers), remembered so main() says so in one line and exits 130 (typer turns the
    KeyboardInterrupt into a bare exit 130). A second Ctrl-C while that stop runs is ignored (it would break the
    stop off halfway); a third ends the process at once, with the same line."""
    _SIGINT[0] += 1
    if _SIGINT[0] == 1:
        raise KeyboardInterrupt
    if _SIGINT[0] >= 3:
        sys.stderr.write(f"{INTERRUPTED}\n")
        sys.stderr.flush()
        os._exit(130)


_SIGINT = [0]  # Ctrl-C presses so far


def _interrupted() -> None:
    try:  # the work has stopped: more Ctrl-C while Python exits change nothing (no second line, exit 130)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        pass
    sys.stderr.write(f"{INTERRUPTED}\n")
    sys.stderr.flush()
    sys.exit(130)


INTERNAL_ERROR = 4  # an unhandled error inside tileprobe (README: exit codes)


def _crash_log(exc: BaseException) -> str:
    """The full traceback: printed with TILEPROBE_DEBUG=1, else written to a log file whose path is returned."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    if os.environ.get("TILEPROBE_DEBUG") == "1":
        sys.stderr.write(text)
        return "traceback above"
    try:
        fd, path = tempfile.mkstemp(prefix="tileprobe-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(" ".join(sys.argv) + "\n" + text)
        return f"traceback: {path}; TILEPROBE_DEBUG=1 prints it"
    except OSError:
        return "TILEPROBE_DEBUG=1 prints the traceback"


def main() -> None:
    """Every bad input, ours or the option parser's (`--seed x`, an unknown option), is one line on stderr, exit 2;
    Ctrl-C is one line and exit 130 (_on_sigint)."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where SIGINT is ignored (nohup, &)
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (an embedding caller): Python's own handling
        pass
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        _interrupted()
    except UsageError as exc:
        sys.stderr.write(f"tileprobe: error: {exc}\n")
        if isinstance(exc, ToolchainError) and DOCTOR_HELP not in str(exc):  # nvcc, CUTLASS or Triton: the doctor
            sys.stderr.write(f"{DOCTOR_HELP}\n")
        sys.exit(2)
    except _CLICK_USAGE_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `tileprobe` / `tileprobe known-good`: the help
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        sys.stderr.write(f"tileprobe: error: {' '.join(exc.format_message().split())}{where}\n")
        sys.exit(2)
    except typer.Abort:
        if _SIGINT[0]:
            _interrupted()
        sys.stderr.write("tileprobe: aborted\n")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a bug in tileprobe: one line and its own code, never 1 ("does not fit")
        sys.stderr.write(f"tileprobe: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                         f"({_crash_log(exc)})\n")
        sys.exit(INTERNAL_ERROR)
    if _SIGINT[0]:
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)
