"""The sweep driver, for every family: refuse the options a family does not take (Family.options), then its backend
plans and answers and the driver records (results.writer.recording: --resume's provenance check, run.json with the
seed and evidence mode, and Recorder.write, the one path every row takes). The CUTLASS backend is here (plan: family,
target, devices, configs, points; probe statically, then launch where a GPU of the family's arch is present); the
Triton one is tileprobe.triton.sweep. Rows are written as they come (rows.make_row builds every one)."""

from __future__ import annotations

import json
import os
import random
import shlex
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from tileprobe import preflight, progress
from tileprobe.triton import sweep as triton_sweep
from tileprobe.triton import predicted as triton_predicted
from tileprobe.predict import modeled
from tileprobe.backends.cutlass import peer
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.errors import UsageError
from tileprobe.families import Config, Family, arch_for, expand_configs, family, family_for_cc
from tileprobe.families.base import CUTLASS_OPTIONS
from tileprobe.results import provenance
from tileprobe.results.writer import Recorder, recording
from tileprobe.results.rows import Outcome, make_row
from tileprobe.backends.cutlass.pipeline import probe_and_launch
from tileprobe.backends.cutlass.runtime import RuntimeJob
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.targets import Target, profile, resolve_target
from tileprobe.backends.cutlass.toolchain import CutlassTree, Nvcc, family_cutlass, find_cutlass, find_nvcc
from tileprobe.verdict import Verdict
from tileprobe.workloads import Point, points_for

DEFAULT_TARGET_FOR = {"sm120-nvfp4": "rtx-pro-6000", "sm90-fp8": "h200", "flashinfer-moe": "rtx-pro-6000"}


@dataclass
class Toolchain:
    cutlass: CutlassTree
    nvcc: Nvcc
    cache: Path

    def columns(self) -> dict:
        return {"cutlass_version": self.cutlass.version, "cutlass_source": self.cutlass.source,
                "cutlass_hash": self.cutlass.tree_hash, "nvcc_version": self.nvcc.version_text,
                "host_compiler": self.nvcc.host_compiler}


@dataclass
class SweepOptions:
    family: str | None = None
    target: str | None = None
    tiles: list[str] | None = None
    schedules: list[str] | None = None
    stages: list[int] | None = None
    epilogues: list[str] | None = None
    swap_ab: list[bool] | None = None
    dtypes: list[str] | None = None  # families with several operand pairs (flashinfer-moe)
    cluster: tuple[int, int, int] = (1, 1, 1)
    out: Path = Path("tileprobe-results")
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    compile: bool = False  # static: also build device code (evidence `compiled`: registers, spills)
    peer: str | None = None  # "torch": time torch._scaled_grouped_mm on the same problems (FP8 families)
    predict_only: bool = False  # answer from the model (tileprobe.predict): no nvcc, nothing compiled
    model_skip: bool | None = None  # skip compiling configs the model says cannot fit (None: for --tiles ranges)
    rebuild: bool = False  # ignore the build cache and replace its entries
    static_only: bool = False
    resume: bool = False
    shard: tuple[int, int] | None = None  # (i, n), 0-based i
    gpus: list[int] | None = None
    compile_timeout_s: float = 1200
    run_timeout_s: float = 120
    cutlass_dir: str | None = None
    nvcc: str | None = None
    cache_dir: str | None = None
    workload: dict = field(default_factory=dict)  # options for the runtime workloads
    triton: triton_sweep.TritonOptions = field(default_factory=triton_sweep.TritonOptions)  # triton-moe's options


def make_toolchain(cutlass_dir: str | None, nvcc: str | None, cache_dir: str | None,
                   fam: Family | None = None) -> Toolchain:
    """nvcc, the build cache and the CUTLASS `fam` compiles against (tileprobe.backends.cutlass.toolchain.family_cutlass: an engine
    family's own bundled copy, whatever cutlass_dir says)."""
    return Toolchain(cutlass_for(fam, cutlass_dir), find_nvcc(nvcc), cache_root(cache_dir))


def cutlass_for(fam: Family | None, cutlass_dir: str | None) -> CutlassTree:
    """The CUTLASS tree `fam` compiles against and its predictions are keyed by: an engine family's own bundled copy
    (tileprobe.backends.cutlass.toolchain.family_cutlass), else --cutlass-dir / TILEPROBE_CUTLASS_DIR / the defaults."""
    return family_cutlass(fam) if fam is not None and fam.cutlass_root is not None else find_cutlass(cutlass_dir)


@dataclass
class Plan:
    family: Family
    target: Target  # what the static verdicts are judged against
    devices: list[Target]  # GPUs that can launch the family's binaries (each named as the real device)
    foreign: list[Target]  # GPUs present whose arch differs: their rows say not-runnable-here
    configs: list[Config]
    points: list[Point]
    arch_reason: str | None = None  # why no config can be built for the target (family/arch mismatch)


def plan(opts: SweepOptions, cutlass_version: str | None = None) -> Plan:
    """The family, the target judged against, the devices, the configs (this shard's) and the workload points.
    Every option is validated here, before any compile or launch, GPU or not."""
    w = opts.workload
    points = points_for(w.get("presets"), w.get("shapes"), w.get("batches"), w.get("routing", "uniform"),
                        w.get("tp", 1), w.get("ep", 1), max(0, w.get("seed", 0)))
    if opts.jobs < 1:
        raise UsageError(f"--jobs {opts.jobs}: must be at least 1")
    if opts.peer:
        why = peer.available(opts.peer)
        if why:
            raise UsageError(why)
    target, devices = resolve_target(opts.target, opts.gpus)
    fam = family(opts.family) if opts.family else family_for_cc(target.cc)
    if target.is_device and arch_for(fam, target.cc) is None and not opts.target:
        # e.g. --family sm120-nvfp4 on an H200: judge against the family's offline profile, not the H200's limit
        target = profile(DEFAULT_TARGET_FOR.get(fam.name, "rtx-pro-6000"))
    arch = arch_for(fam, target.cc)
    arch_reason = None
    if arch is None:
        arch_reason = (f"{fam.name} builds {', '.join(fam.archs)} binaries; an {fam.archs[0]} binary cannot run on "
                       f"{target.name} (sm_{target.cc_int}) at all")
        arch = fam.archs[0]
    if opts.dtypes and "dtypes" not in fam.extra_fields:
        raise UsageError(f"--dtypes applies to families with several operand pairs, not {fam.name}")
    configs = expand_configs(fam, arch, opts.tiles, opts.schedules, opts.stages, opts.epilogues, opts.swap_ab,
                             opts.cluster, cutlass_version, [(("dtypes", d),) for d in opts.dtypes or ()])
    if arch_reason:
        configs = [replace(c, unsupported_reason=arch_reason) for c in configs]
    if opts.shard:
        i, n = opts.shard
        configs = [c for j, c in enumerate(configs) if j % n == i]
    foreign = [d for d in devices if d.arch != arch]
    runnable = [d for d in devices if d.arch == arch and not arch_reason]
    if opts.static_only:
        runnable, foreign = [], []
    return Plan(fam, target, runnable, foreign, configs, points, arch_reason)




def model_skips(opts: SweepOptions, tc: Toolchain, target: Target, configs: list[Config]) -> dict[str, Outcome]:
    """When the user asks for a large space (a `--tiles` range, or --model-skip): the configs the model predicts over
    the limit (or unbuildable), which are not compiled; their rows say so (evidence `predicted`)."""
    skip = opts.model_skip if opts.model_skip is not None else any(".." in t for t in opts.tiles or ())
    modeled_out: dict[str, Outcome] = {}
    if skip:
        for c in configs:
            o = modeled.outcome(c, target, tc.cutlass)
            if o is not None and o.verdict is Verdict.SMEM_OVER_LIMIT:
                modeled_out[c.key] = o
    return modeled_out


def static_writer(tc: Toolchain, target: Target, rec: Recorder):
    """A function that records one static outcome's row."""
    def write(o: Outcome) -> None:
        rec.write(make_row(o.config, target, tc.columns(), o, extra=modeled.columns(o.config, tc.cutlass, o.info)))
    return write


def in_config_order(configs: list[Config], write):
    """A function taking outcomes in any order that calls `write` in config order, each outcome as soon as it and
    every config before it are final (rows land batch by batch, and a shard's file stays in config order, which
    `merge` relies on). Idempotent: an outcome given twice is written once."""
    keys = [c.key for c in configs]
    got: dict[str, Outcome] = {}
    pos = [0]

    def put(o: Outcome) -> None:
        got.setdefault(o.config.key, o)
        while pos[0] < len(keys) and keys[pos[0]] in got:
            write(got[keys[pos[0]]])
            pos[0] += 1
    return put


def static_rows(opts: SweepOptions, tc: Toolchain, target: Target, configs: list[Config],
                rec: Recorder) -> list[Outcome]:
    """Probe every config (cached builds make repeats cheap), record the rows as their batches finish, return all
    outcomes. Configs the model skips (model_skips) are not compiled."""
    modeled_out = model_skips(opts, tc, target, configs)
    todo = [c for c in configs if c.key not in modeled_out]
    put = in_config_order(configs, static_writer(tc, target, rec))
    with progress.track(len(configs), f"static probe ({target.name})") as bar:  # in place of the builds' bar
        for o in modeled_out.values():
            bar.outcomes(put)(o)
        probed = {o.config.key: o for o in probe_static(todo, target, tc.cutlass, tc.nvcc, tc.cache, opts.jobs,
                                                        opts.compile_timeout_s, opts.compile, opts.rebuild,
                                                        progress=False, on_outcome=bar.outcomes(put))}
    outcomes = [probed.get(c.key) or modeled_out[c.key] for c in configs]
    for o in outcomes:  # any the probe did not hand over as it went
        put(o)
    return outcomes


def gpu_rows(opts: SweepOptions, plan_: Plan, tc: Toolchain, points: list[Point], seed: int, rec: Recorder,
             console) -> tuple[list[Outcome], RuntimeJob]:
    """With a GPU of the family's arch: one harness build per config gives its static row and its launches, and
    builds overlap launches (tileprobe.backends.cutlass.pipeline; its launches' rows go through rec.write too).
    Configs the model skips are neither built nor launched: their static row (evidence `predicted`) is all they get."""
    fam, configs = plan_.family, plan_.configs
    modeled_out = model_skips(opts, tc, plan_.target, configs)
    write = static_writer(tc, plan_.target, rec)
    if modeled_out:
        console.print(f"{len(modeled_out)} config(s) not built or launched: the model says they cannot fit "
                      f"(rows say so, evidence predicted)")
    job = RuntimeJob(points, seed, plan_.devices, [], tc, opts.jobs, opts.compile_timeout_s, opts.run_timeout_s,
                     opts.rebuild, peer=opts.peer if fp8_peer_applies(fam, configs) else None)
    if opts.peer and job.peer is None:
        console.print(f"[yellow]--peer {opts.peer}: torch._scaled_grouped_mm is FP8 x FP8; {fam.name} "
                      "operands here are not, so rows carry no peer[/]")
    todo = [c for c in configs if c.key not in modeled_out]
    with progress.track(len(todo), "builds", bar=False) as bar:  # a terminal shows the Launcher's bar instead
        probed, _ = probe_and_launch(todo, plan_.target, job, rec, console, bar.outcomes(write)) if todo else ([], [])
    by_key = {o.config.key: o for o in probed}
    for c in configs:
        if c.key in modeled_out:
            write(modeled_out[c.key])
    return [by_key.get(c.key) or modeled_out[c.key] for c in configs], job


def foreign_rows(plan_: Plan, tc: Toolchain, outcomes: list[Outcome]) -> list[dict]:
    """GPUs present whose arch differs from the family's binaries: a not-runnable-here row per config, not launched."""
    rows = []
    for dev in plan_.foreign:
        for o in outcomes:
            if o.verdict in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR):
                continue
            what = (f"nothing was built (an {o.config.arch} config; sizes from the model)" if o.info.predicted else
                    f"built for {o.config.arch}")
            reason = (f"{what}, GPU {dev.gpu_index} is sm_{dev.cc_int} ({dev.device_name}): not launched; "
                      f"{'predicted' if o.info.predicted else 'static'} on {plan_.target.name}: {o.reason}")
            out = replace(o, verdict=Verdict.NOT_RUNNABLE_HERE, reason=reason)
            rows.append(make_row(o.config, plan_.target, tc.columns(), out,
                                 {"gpu_index": dev.gpu_index, "launch_status": "not-runnable-here",
                                  "launch_reason": reason},
                                 {"workload": f"on-{dev.name}", **modeled.columns(o.config, tc.cutlass, o.info)}))
    return rows


def engine_meta(fam: Family) -> dict:
    """run.json's toolchain record of the engine whose own tree a family compiles (label, header-tree hash): the
    cutlass_* fields beside it are that engine's bundled CUTLASS. {} for a family that mirrors no engine."""
    if fam.engine is None:
        return {}
    label, tree_hash = fam.engine()
    return {"engine": label, "engine_hash": tree_hash}


def predict_only(opts: SweepOptions, console) -> list[dict]:
    """Rows from the model alone: no nvcc, nothing compiled (evidence `predicted`). A config the model cannot
    predict (unknown family, CUTLASS version or engine release) stops the sweep with one line: never a guess.
    The prediction stands for the tree a compile would use: an engine family's own bundled CUTLASS."""
    cutlass = cutlass_for(family(opts.family) if opts.family else None, opts.cutlass_dir)
    p = plan(replace(opts, static_only=True, gpus=None), cutlass.version)
    tc_cols = {"cutlass_version": cutlass.version, "cutlass_source": cutlass.source, "cutlass_hash": cutlass.tree_hash,
               "nvcc_version": None, "host_compiler": None}
    outs = []
    for c in p.configs:  # every config answered before the folder is touched: one the model cannot answer stops
        o = modeled.outcome(c, p.target, cutlass)
        if o is None:
            raise UsageError(f"--predict-only: {modeled.model(c, cutlass).status} ({c.name}); run without "
                             "--predict-only to compile instead")
        outs.append(o)
    meta = {"family": p.family.name, "target": p.target.as_dict(), "devices": [], "configs": len(p.configs),
            "toolchain": tc_cols | {"cutlass_dir": str(cutlass.root), "nvcc": None} | engine_meta(p.family),
            "predict_only": True}
    with recording(opts.out, meta, "predicted", command_line(), opts.resume, None, opts.shard) as rec:
        console.print(f"[bold]{p.family.name}[/] on [bold]{p.target.name}[/]: {len(p.configs)} configs predicted "
                      f"by tileprobe's model of CUTLASS {cutlass.version} ({cutlass.source}, tree {cutlass.tree_hash}; "
                      "nothing compiled)")
        with progress.track(len(outs), f"predicting ({p.target.name})") as bar:  # after --resume's and the lock's checks
            for o in outs:
                rec.write(make_row(o.config, p.target, tc_cols, o, extra=modeled.columns(o.config, cutlass, o.info)))
                bar.done(progress.unit(o.config), o)
    return rec.rows


def command_line() -> str:
    return shlex.join(["tileprobe", *sys.argv[1:]])


def fp8_peer_applies(fam: Family, configs: list[Config]) -> bool:
    """torch._scaled_grouped_mm (FP8 e4m3 x e4m3) is a peer only where every config's activations and weights are
    8-bit (sm90-fp8; flashinfer-moe fp8xfp8 on SM90), not for FP4 weights."""
    return bool(configs) and all(fam.bits(c) == 8 and fam.wbits(c) == 8 for c in configs)


# Options whose flag is not their field's name spelled --like-this (check_options); a workload key's default.
SPELLED = {"epilogues": "--epilogue", "compile_timeout_s": "--compile-timeout", "run_timeout_s": "--run-timeout",
           "presets": "--workload", "shapes": "--shape", "batches": "--batch", "device_names": "--device-name"}
WORKLOAD_DEFAULTS = {"presets": None, "shapes": None, "batches": None, "routing": "uniform", "tp": 1, "ep": 1,
                     "seed": -1}


def given_options(opts: SweepOptions) -> list[str]:
    """The options of `opts` given a value other than their default, as the command line spells them."""
    given = [(f.name, getattr(o, f.name) != getattr(d, f.name))
             for o, d in ((opts, SweepOptions()), (opts.triton, triton_sweep.TritonOptions()))
             for f in fields(d) if f.name not in ("family", "workload", "triton", "max_m", "extra")]
    given += [(k, opts.workload.get(k, v) != v) for k, v in WORKLOAD_DEFAULTS.items()]
    return [SPELLED.get(name, "--" + name.replace("_", "-")) for name, yes in given if yes]


def check_options(opts: SweepOptions, fam: Family | None) -> None:
    """Refuse, in one line, every option given that the family does not take (Family.options; no --family: the
    family the device picks, a CUTLASS one): an option a sweep would ignore is never silently ignored."""
    bad = [f for f in given_options(opts) if f not in (fam.options if fam else CUTLASS_OPTIONS)]
    if bad:
        who = f"--family {fam.name}" if fam else "the CUTLASS families (--family triton-moe takes the Triton options)"
        raise UsageError(f"{', '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to {who}")


def resolve_seed(opts: SweepOptions) -> int:
    """The routing and data seed: --seed, else (--resume) the folder's own, else a fresh one, recorded."""
    seed = opts.workload.get("seed", -1)
    previous = opts.out / provenance.RUN_JSON
    if seed < 0 and opts.resume and previous.is_file():
        try:  # resume the same routing and data (an unreadable run.json: check_resume refuses the folder)
            seed = json.loads(previous.read_text()).get("seed")
        except (OSError, ValueError, UnicodeDecodeError, AttributeError):
            seed = None
        seed = seed if isinstance(seed, int) else -1
    if seed < 0:
        seed = random.randrange(2**31)  # fresh random inputs every run, recorded for reproduction
    opts.workload["seed"] = seed
    return seed


def run_triton(opts: SweepOptions, console) -> list[dict]:
    """A triton-moe sweep: the Triton backend plans and answers (tileprobe.triton.sweep), the driver records."""
    s = triton_sweep.prepare(opts)
    seed = resolve_seed(opts) if s.devices else None
    with recording(opts.out, s.run_json(), s.mode, command_line(), opts.resume, seed, opts.shard) as rec:
        console.print(s.summary())
        for row in triton_sweep.rows(s, seed, console):
            rec.write(row)
        rec.meta["phases"] = s.phases
    if s.mismatches:  # --verify: the rows are written (with MODEL ERROR); the run fails naming each launch
        raise triton_predicted.PredictionMismatch(s.mismatches)
    return rec.rows


def run(opts: SweepOptions, console) -> list[dict]:
    """The whole sweep. Returns the rows written by this run (rows kept from --resume are not repeated)."""
    w = opts.workload
    points_for(w.get("presets"), w.get("shapes"), w.get("batches"), w.get("routing", "uniform"), w.get("tp", 1),
               w.get("ep", 1), 0)  # every workload option is checked before anything else happens
    fam_name = opts.family
    check_options(opts, family(fam_name) if fam_name else None)
    if fam_name and family(fam_name).backend == "triton":
        return run_triton(opts, console)
    fixed = family(fam_name).cutlass_root if fam_name else None
    if fixed and opts.cutlass_dir:
        raise UsageError(f"{fam_name} compiles against its engine's own CUTLASS; --cutlass-dir does not apply "
                         "(point --flashinfer-dir at another flashinfer instead)")
    if opts.predict_only:
        return predict_only(opts, console)
    # an engine family's own bundled CUTLASS, found through the family, not a --cutlass-dir or TILEPROBE_CUTLASS_DIR
    tc = make_toolchain(opts.cutlass_dir, opts.nvcc, opts.cache_dir, family(fam_name) if fam_name else None)
    p = plan(opts, tc.cutlass.version)
    skipped = model_skips(opts, tc, p.target, p.configs)  # what will be compiled: a broken toolchain is one line
    preflight.check_cutlass(tc.cutlass, tc.nvcc, tc.cache, [c for c in p.configs if c.key not in skipped])
    fam, target, devices, configs = p.family, p.target, p.devices, p.configs
    seed = resolve_seed(opts)
    points = points_for(w.get("presets"), w.get("shapes"), w.get("batches"), w.get("routing", "uniform"),
                        w.get("tp", 1), w.get("ep", 1), seed)
    meta = {"family": fam.name, "target": target.as_dict(), "devices": [d.as_dict() for d in devices + p.foreign],
            "configs": len(configs), "toolchain": tc.columns() | {"cutlass_dir": str(tc.cutlass.root),
                                                                  "nvcc": str(tc.nvcc.path)} | engine_meta(fam)}
    mode = provenance.evidence_mode(False, opts.compile)
    with recording(opts.out, meta, mode, command_line(), opts.resume, seed, opts.shard) as rec:
        where = f"{len(devices)} GPU(s)" if devices else "static only (no GPU of this arch here)"
        console.print(f"[bold]{fam.name}[/] on [bold]{target.name}[/] ({target.device_name}, sm_{target.cc_int}, "
                      f"opt-in {target.smem_optin} B): {len(configs)} configs, {where}; CUTLASS "
                      f"{tc.cutlass.version} ({tc.cutlass.source}), nvcc {tc.nvcc.version_text}")
        if p.arch_reason:
            console.print(f"[yellow]{p.arch_reason}: every config is unsupported[/]")
        start = time.perf_counter()
        if devices:  # one build per config for its size and its launches; builds overlap launches
            outcomes, job = gpu_rows(opts, p, tc, points, seed, rec, console)
            phases = {"pipeline_s": round(time.perf_counter() - start, 2)}  # builds, sizes, references, launches
            phases.update({k: round(v, 2) for k, v in job.phases.items()})
            rec.meta["references"] = {str(k): v for k, v in job.refs.items()}  # per GPU: copy/read GB/s, L2, method
        else:
            outcomes = static_rows(opts, tc, target, configs, rec)
            phases = {"static_s": round(time.perf_counter() - start, 2)}
        for row in foreign_rows(p, tc, outcomes):
            rec.write(row)
        rec.meta["phases"] = phases
    return rec.rows
