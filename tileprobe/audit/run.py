"""`tileprobe audit`: every Triton launch an engine's own launchers make for a model on a target, compiled for it.

For each kernel entry of the engine (tileprobe.audit.kernels) that serves the model, each layer window the model has
(full, sliding), each batch and sequence length asked: run the engine's launcher from its wheel under the target's
stand-in device (tileprobe.audit.capture), then compile every distinct launch with tileprobe's Triton backend (the
content-keyed cache) and judge metadata.shared against the target's opt-in limit. One row per distinct launch
(the points that make the same launch are listed in its `problem`), written through the results writer; a terminal
table, report.md and results.csv. Exit 1 when a launch does not fit: one line each.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from tileprobe import preflight, progress
from tileprobe.audit import answers, capture, capture_cache, jobs, loader
from tileprobe.audit import tuned as tuned_mod
from tileprobe.audit.backends import Selection, attention_backend
from tileprobe.audit.entry import Elsewhere
from tileprobe.audit.kernels import AuditKernel, Point, kernels_for
from tileprobe.audit.path import compiled
from tileprobe.audit.path.ahead import Ahead
from tileprobe.audit.nearest import Variant, nearest
from tileprobe.backends.triton.compile import KernelJob, compile_job, compile_many
from tileprobe.backends.triton.toolchain import TritonInstall, cache_root, require_triton
from tileprobe.engines import manifest
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.engines import vllm_registry
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, family
from tileprobe.families import compiled_audit
from tileprobe.families import triton_audit as fam
from tileprobe.models import AttentionConfig, attention_model
from tileprobe.predict import recheck
from tileprobe.results.rows import Outcome, make_row
from tileprobe.results.writer import recording
from tileprobe.targets import DEVICE_NAMES, Target, arch_of_name, resolve_target
from tileprobe.verdict import Verdict
from tileprobe.triton import sweep as triton_sweep
from tileprobe.triton.predicted import Answers, Policy, prediction_columns

MIN_CC = 80  # the engines' Triton attention paths run on sm_80 and newer


@dataclass(frozen=True)
class AuditOptions:
    engine: str
    model: str
    target: str | None
    tp: int = 1
    batches: tuple[int, ...] = (1, 8)
    seq_lens: tuple[int, ...] = (1024,)
    out: Path | None = None
    jobs: int = 1
    cache_dir: str | None = None
    engine_wheel: str | None = None
    command: str = "tileprobe audit"
    kernels: tuple[str, ...] = ()  # --kernel: only these entries (tileprobe.audit.kernels names)
    attention_backend: str | None = None  # --attention-backend: forced, as the engine's own flag spells it
    moe_backend: str | None = None  # --moe-backend: vLLM's own flag (its MXFP4 MoE oracle's explicit branch)
    gpu_name: str | None = None  # --gpu-name: the name the stand-in device reports (default: the target's first SKU)
    policy: Policy = Policy()  # predictor first (rule, else Triton's allocation), --compile-all, --verify N
    rules_off: bool = False  # --rules-off: a release (or a copy) the manifest does not match, every stated rule off
    mm_encoder_attn_backend: str | None = None  # vLLM's --mm-encoder-attn-backend: its ViT attention backend, forced


@dataclass
class Planned:
    kernel: AuditKernel
    launch: capture.Launch
    job: KernelJob
    points: list[Point] = field(default_factory=list)

    def op(self) -> str:
        w = self.points[0].window
        return f"{self.kernel.launcher}" + (f" window {w}" if w else "")


@dataclass
class NotSelected:
    """An entry whose launcher the engine does not run for the model on the target (its `chooses` said so)."""

    kernel: AuditKernel
    elsewhere: Elsewhere
    points: list[Point] = field(default_factory=list)


@dataclass
class Tuned:
    """One @triton.autotune launch: the configs the engine's pruning left (indices into the planned launches, in the
    autotuner's order) and how many its decorator lists."""

    kernel: str
    call_site: str
    listed: int
    planned: tuple[int, ...]


def gpu_name(target: Target, asked: str | None) -> str:
    """The device name the engine's code sees (the tuned-config files are named after it): the one asked, which must
    be a known SKU of the target or a name tileprobe does not know; else the target's first SKU name."""
    if asked is None:
        return DEVICE_NAMES.get(target.name, (target.device_name,))[0]
    known = arch_of_name(asked)
    if known is not None and known[0] != target.name:
        raise UsageError(f"--gpu-name {asked!r} is a {known[0]}, not a {target.name}")
    return asked


def check(opts: AuditOptions) -> None:
    for name, values in (("--batch", opts.batches), ("--seq-len", opts.seq_lens), ("--tp", (opts.tp,))):
        if not values or any(v < 1 for v in values):
            raise UsageError(f"{name} {', '.join(map(str, values)) or '(none)'}: each must be at least 1")


def serving(engine: str, model: AttentionConfig, only: tuple[str, ...] = ()) -> list[AuditKernel]:
    entries = kernels_for(engine)
    unknown = [n for n in only if n not in {k.name for k in entries}]
    if unknown:
        raise UsageError(f"--kernel {', '.join(unknown)}: {engine}'s audited kernels are "
                         f"{', '.join(k.name for k in entries)}")
    if only:
        entries = [k for k in entries if k.name in only]
    served = [k for k in entries if k.serves(model) is None]
    if not served and only:
        raise UsageError(f"--model {model.name}: {engine} does not serve it with the --kernel entries asked "
                         f"({'; '.join(f'{k.name}: {k.serves(model)}' for k in entries)})")
    return served  # none: the model's path has no Triton launcher of ours; its compiled kernels are still audited


@dataclass
class Captured:
    planned: list[Planned]
    not_selected: list[NotSelected]
    tuned: list[Tuned]
    failed: list[tuple[AuditKernel, str]] = field(default_factory=list)  # entries whose capture could not run here


# What an entry's capture may raise when the engine's code is not what tileprobe's stand-ins serve (another release:
# a module moved, a name renamed): the entry is then an `unanswered` row naming the error, never a crash
CAPTURE_ERRORS = (ImportError, AttributeError, LookupError, TypeError, ValueError, NameError, UsageError,
                  NotImplementedError, AssertionError)


def capture_all(src: EngineSource, target: Target, model: AttentionConfig, entries: list[AuditKernel],
                opts: AuditOptions, cc: int, sel: Selection | None = None,
                early: tuple[Callable[[AuditKernel], bool], Callable[[Captured], None]] | None = None) -> Captured:
    """Each entry's launches at every point; launches that compile the same (every argument the compile sees equal:
    pointer dtypes, ints, constexprs, options), set at the same engine lines, are planned once. An entry whose
    `chooses` names another kernel at a point is not launched there; an autotuned launch's configs are one Tuned.
    Each entry's capture comes from tileprobe.audit.capture_cache when an identical one was made before (its key:
    the engine's files, tileprobe's, the target, the model, the points, the options), else it runs and is stored.
    `early` (wanted, told): the entries `wanted` says are captured first, and `told` gets what they captured as soon
    as they are (the MoE entries, whose walk of the engine's MoE choice the path's read-ahead waits for); the result
    is in the entries' own order either way."""
    wanted, told = early or (lambda k: False, None)
    order = sorted(range(len(entries)), key=lambda i: not wanted(entries[i]))
    got: dict[int, object] = {}
    store = None
    for n, i in enumerate(order):
        k = entries[i]
        windows = model.windows() if k.windowed else (None,)
        points = [Point(b, s, opts.tp, w, ph) for w in windows for ph in k.phases for b in opts.batches
                  for s in opts.seq_lens]
        if k.backend is not None and sel is not None and k.backend != sel.backend:
            how = "forced by --attention-backend" if sel.forced else "its own attention backend selection"
            got[i] = NotSelected(k, Elsewhere(f"the {sel.backend} attention backend", sel.line, how), points)
        else:
            store = store or capture_cache.Store(src, target, model, opts, cc)
            got[i] = store.get(k, points)
            if got[i] is None:
                got[i] = _capture_one(k, src, target, model, opts, cc, points)
                store.put(k, points, got[i])
        if told is not None and wanted(k) and (n + 1 == len(order) or not wanted(entries[order[n + 1]])):
            told(_assembled(entries, got, sel))
    return _assembled(entries, got, sel)


def _assembled(entries: list[AuditKernel], got: dict, sel: Selection | None) -> Captured:
    """The Captured of the entries captured so far (`got`: index -> EntryCapture, or NotSelected for an entry of
    another attention backend), in the entries' order."""
    plans: list[Planned] = []
    others: dict[tuple, NotSelected] = {}
    tuned: dict[tuple, Tuned] = {}
    failed: list[tuple[AuditKernel, str]] = []
    for i, k in enumerate(entries):
        g = got.get(i)
        if g is None:
            continue
        if isinstance(g, NotSelected):
            others[(k.name, sel.backend)] = g
            continue
        base = len(plans)  # the entry's own indices, after the entries before it
        plans += [Planned(k, launch, job, list(pts)) for launch, job, pts in g.plans]
        for other, pts in g.others:
            others.setdefault((k.name, other), NotSelected(k, other)).points.extend(pts)
        for kernel, site, listed, idx in g.tuned:
            idx = tuple(base + i for i in idx)
            tuned.setdefault((kernel, site, idx), Tuned(kernel, site, listed, idx))
        if g.failed is not None:
            failed.append((k, g.failed))
    return Captured(plans, list(others.values()), list(tuned.values()), failed)


def _capture_one(k: AuditKernel, src: EngineSource, target: Target, model: AttentionConfig, opts: AuditOptions,
                 cc: int, points: list) -> capture_cache.EntryCapture:
    """One entry's capture as plain data (what it planned before a failure is kept, with the failure)."""
    planned: dict[tuple, int] = {}
    plans: list[Planned] = []
    others: dict[tuple, NotSelected] = {}
    tuned: dict[tuple, Tuned] = {}
    failed = None
    try:
        _capture_entry(k, src, target, model, opts, cc, points, planned, plans, others, tuned)
    except CAPTURE_ERRORS as exc:
        failed = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return capture_cache.EntryCapture([(p.launch, p.job, p.points) for p in plans],
                                      [(n.elsewhere, n.points) for n in others.values()],
                                      [(t.kernel, t.call_site, t.listed, t.planned) for t in tuned.values()], failed)


def _capture_entry(k: AuditKernel, src: EngineSource, target: Target, model: AttentionConfig, opts: AuditOptions,
                   cc: int, points: list, planned: dict, plans: list, others: dict, tuned: dict) -> None:
    cut = jobs.kernel_source if k.compile_from == "extract" else \
        (lambda s, launch, k=k: loader.module_source(k, s, target, launch.kernel))
    with capture.engine_session(src, target, k.allow, k.stand_ins, opts.cache_dir,
                                {"moe_backend": opts.moe_backend,
                                 "mm_encoder_attn_backend": opts.mm_encoder_attn_backend}) as session:
        launcher = None if k.drive else getattr(session.module(k.module), k.launcher)
        for pt in points:
            other = k.chooses(session, model, pt) if k.chooses else None
            if other is not None:
                others.setdefault((k.name, other), NotSelected(k, other)).points.append(pt)
                continue
            start = len(session.launches)
            if k.drive is not None:
                k.drive(session, model, pt)
            else:
                args, kwargs = k.arguments(model, pt)
                launcher(*args, **kwargs)
            groups: dict[tuple, list[int]] = {}
            for launch in session.launches[start:]:
                job = jobs.job_of(src, launch, cc, cut)
                key = (k.name, job, launch.call_site, launch.branches)
                if key not in planned:
                    planned[key] = len(plans)
                    plans.append(Planned(k, launch, job))
                i = planned[key]
                if pt not in plans[i].points:
                    plans[i].points.append(pt)
                if launch.autotune is not None:
                    groups.setdefault((launch.kernel, launch.call_site, launch.autotune[2]), []).append(i)
            for (kernel, site, listed), idx in groups.items():
                tuned.setdefault((kernel, site, tuple(idx)), Tuned(kernel, site, listed, tuple(idx)))


def _launch_hash(p: Planned) -> str:
    return hashlib.sha256(json.dumps([p.kernel.name, p.job.key("-"), p.launch.call_site,
                                      list(p.launch.branches)]).encode()).hexdigest()[:10]


def branch_line(launch: capture.Launch) -> str:
    """The engine line that set the launch's parameters: the last device branch taken in the launching file (a
    helper module's import-time branches do not count), else the launch call."""
    here = launch.call_site.rsplit(":", 1)[0] + ":"
    # a device flag evaluated False at import (vLLM's IS_TURING) set nothing by itself
    mine = [b.split(" ", 1)[0] for b in launch.branches if b.startswith(here) and not b.endswith(" -> False")]
    return mine[-1] if mine else launch.call_site


# The constexprs shown as BLOCK_M / BLOCK_N / BLOCK_DMODEL, the first a kernel takes (the engines' own names)
BLOCK_NAMES = (("BLOCK_M", "BLOCK_H", "BLOCK", "BLOCK_SIZE_M"), ("BLOCK_N", "TILE_SIZE", "CBLOCK", "BLOCK_T",
                                                               "BLOCK_SIZE_N"),
               ("BLOCK_DMODEL", "HEAD_SIZE_PADDED", "BLOCK_DV", "D_FBLOCK", "BLOCK_SIZE_K"))


def config_of(p: Planned, src: EngineSource, arch: str):
    launch = p.launch
    m, n, d = (next((int(launch.arg(k)) for k in names if isinstance(launch.arg(k), int)), 0) for names in BLOCK_NAMES)
    return fam.make_config(src.label(), launch.kernel, p.op(), m, n, d,
                           int(launch.arg("num_warps", 4)),
                           int(launch.arg("num_stages", 3)), arch, branch_line(launch), _launch_hash(p))


def outcome(cfg, build, target: Target, triton: TritonInstall, p: Planned, predicted: int | None = None) -> Outcome:
    """triton-moe's verdict of a compiled (or sized) launch (tileprobe.triton.sweep.outcome), or of its rule's bytes
    (`predicted`, build None), each reason ending with the engine line that launched it and the branch it took."""
    where = f"launched from {p.launch.call_site}; branch: {' | '.join(p.launch.branches) or 'none'}"
    if build is None and predicted is not None:
        release = " ".join(p.job.source.origin.split()[:2])
        note = recheck.engine_note(release, p.launch.kernel, p.launch.kernel_file)
        return triton_sweep.predicted_outcome(cfg, target, predicted, triton.version,
                                              f"{note}; {where}" if note else where)
    o = triton_sweep.outcome(cfg, build, target, triton, where)
    return o if o.info.stages is not None else replace(o, info=replace(o.info, stages=cfg.stages))


def _shape(p: Planned) -> str:
    """The launch's first tensor (by the kernel's parameter name: the engines' capitalised Q / Q_Extend, else the
    first tensor argument) and the points that made it."""
    tensors = [(n, v) for n, v in p.launch.args if isinstance(v, capture.TensorArg)]
    caps = [t for t in tensors if t[0][0].isupper()]
    tensors = [f"{n}={v}" for n, v in (caps[:1] or tensors[:2])]
    pts = "; ".join(dict.fromkeys(pt.label() for pt in p.points))
    return f"{' '.join(tensors)} ({pts})"


@dataclass
class Audit:
    target: Target
    rows: list[dict]
    failures: list[str]  # one line per launch that does not fit (exit 1)
    out: Path
    seconds: dict
    notes: list[str] = field(default_factory=list)  # autotune drops, kernels the engine does not run here
    remedies: list[str] = field(default_factory=list)  # what to set in the engine, one line per failing kernel
    answers: dict = field(default_factory=dict)  # launches predicted / sized / compiled (tileprobe.audit.answers)
    mismatches: list[str] = field(default_factory=list)  # --verify: sampled launches whose compile differs (exit 1)
    seed: int | None = None  # the --verify sample's seed
    path: list = field(default_factory=list)  # the compiled kernels on the path (tileprobe.audit.path.rows.Answered)
    unanswered: list[str] = field(default_factory=list)  # one line per kernel on the path not answered (exit 3)
    compile_errors: list[str] = field(default_factory=list)  # launches whose compile error the engine raises (exit 1)
    path_failures: list[str] = field(default_factory=list)  # compiled kernels that fail there: no code, refused, over
    parallel: list[str] = field(default_factory=list)  # the engine's tensor-parallel rule lines checked
    banner: str = ""  # --rules-off: why every stated rule is off (the table, report.md and run.json say it)

    def counts(self) -> dict:
        """Every kernel on the path by verdict: the Triton launches (autotune configs the autotuner drops apart) and
        the compiled calls."""
        out: dict[str, int] = {}
        for r in self.launches:
            if r.get("family") == compiled_audit.NAME or not r.get("autotune_dropped") or r["verdict"] == "fits":
                out[r["verdict"]] = out.get(r["verdict"], 0) + 1
        return out

    @property
    def launches(self) -> list[dict]:
        """The rows of launches the engine makes (not those of launchers it does not run here)."""
        return [r for r in self.rows if r["verdict"] != str(Verdict.NOT_SELECTED)]


def _not_selected_row(n: NotSelected, src: EngineSource, arch: str, target: Target, columns: dict,
                      model: AttentionConfig) -> dict:
    e = n.elsewhere
    cfg = fam.make_config(src.label(), n.kernel.launcher, n.kernel.name, 0, 0, 0, 0, 0, arch, e.line,
                          hashlib.sha256(json.dumps([n.kernel.name, e.runs, e.line]).encode()).hexdigest()[:10])
    reason = f"{src.label()} runs {e.runs} here, not this Triton launcher: {e.line} {e.why}"
    pts = "; ".join(dict.fromkeys(pt.label() for pt in n.points))
    return make_row(cfg, target, columns, Outcome(cfg, Verdict.NOT_SELECTED, reason),
                    point={"problem": f"{model.name}: ({pts})"},
                    extra={"engine": src.label(), "kernel_file": n.kernel.module_file, "config_source": e.line})


def _tuned_notes(tuned: list[Tuned], planned: list[Planned], outcomes: list, target: Target) -> tuned_mod.Groups:
    """Per planned launch the autotuner drops, its autotune_dropped text; per group, one note line; the groups left
    with nothing (the launch then fails); the configs whose compile error the autotuner does not catch (each a
    failure: the engine's first launch raises it). tileprobe.audit.tuned says which is which."""
    return tuned_mod.judge(tuned, planned, outcomes, target)


def _remedy(p: Planned, target: Target, variant: Variant | None = None) -> str:
    if p.kernel.remedy is not None:
        said = p.kernel.remedy(p.launch, target)
        if said:
            return f"SET {p.launch.kernel}: {said}"
    near = (f"; the nearest variant that fits (tileprobe.audit.nearest's rule): {variant.describe()}" if variant
            else "; no variant of it fits by tileprobe.audit.nearest's rule")
    return (f"SET {p.launch.kernel}: nothing to set: this kernel's parameters are code, here is the line: "
            f"{branch_line(p.launch)}{near}")


def _build(planned: list[Planned], configs: list, ans: Answers, opts: AuditOptions, target: Target,
           triton: TritonInstall) -> tuple[list, list]:
    """Each launch's build as the plan says (None: predicted), and per sampled launch the sizing its compile is
    checked against; one progress step per build."""
    primary, checks = answers.jobs(ans, planned), answers.checks(ans, planned)
    todo = [(i, j, False) for i, j in enumerate(primary) if j is not None] + \
        [(i, j, True) for i, j in enumerate(checks) if j is not None]
    builds: list = [None] * len(planned)
    checked: list = [None] * len(planned)

    def done(k: int, b) -> None:
        i, _, check = todo[k]
        if not check:
            bar.done(f"{planned[i].launch.kernel} {planned[i].op()}",
                     outcome(configs[i], b, target, triton, planned[i]).verdict)

    with progress.track(sum(not c for _, _, c in todo), f"audit {opts.engine}") as bar:
        results = compile_many([j for _, j, _ in todo], opts.jobs, opts.cache_dir, on_result=done)
    for (i, _, check), b in zip(todo, results):
        (checked if check else builds)[i] = b
    return builds, checked


def kept_answers(cache_dir) -> Path | None:
    """The build cache root that keeps a config.json's engine view (tileprobe.model_config.engine_view) and report.md's
    charts (tileprobe.reports.chart_cache); None when it cannot be made (the audit says so where it needs the cache)."""
    try:
        return cache_root(cache_dir)
    except UsageError:
        return None


def run_audit(opts: AuditOptions) -> Audit:
    """The audit's rows, written into opts.out (results.jsonl, results.csv, run.json)."""
    check(opts)
    opts.policy.check()
    model = attention_model(opts.model, kept_answers(opts.cache_dir))
    entries = serving(opts.engine, model, opts.kernels)
    if opts.moe_backend and not (opts.engine == "vllm" and any(k.name.startswith("vllm-moe-mxfp4") for k in entries)):
        raise UsageError(f"--moe-backend {opts.moe_backend}: tileprobe follows vLLM's --moe-backend for its MXFP4 MoE "
                         f"(gpt-oss) only; {opts.engine} with {model.name} has no such MoE here")
    target, _ = resolve_target(opts.target)
    target = replace(target, device_name=gpu_name(target, opts.gpu_name))
    arch = arch_for(family(fam.NAME), target.cc)
    if arch is None or target.cc_int < MIN_CC:
        raise UsageError(f"--target {target.name} (sm_{target.cc_int}): tileprobe audits the engines' Triton "
                         f"kernels on {', '.join(fam.ARCHS)}")
    triton = require_triton()
    if importlib.util.find_spec("torch") is None:  # the stand-in tensors the engine's launchers run on
        raise UsageError("tileprobe audit runs the engine's launchers on torch meta tensors, and torch is not "
                         "installed: pip install 'tileprobe[audit]' (or use the Python your engine runs in)")
    preflight.check_triton(triton, target.cc_int, opts.cache_dir)
    src = find_engine(opts.engine, opts.engine_wheel)
    gone = vllm_registry.retired(src, model.architecture) if src.engine == "vllm" and model.architecture else None
    if gone:  # the engine's own registry refuses to load the model: nothing of it runs there
        raise UsageError(f"--model {model.name}: vLLM {src.version} does not load {model.architecture} (its registry "
                         f"lists it as supported until v{gone[0]}, refused at {gone[1]}); audit it with a release "
                         "that loads it, or another engine")
    banner = manifest.check(src, opts.rules_off).text  # a release or copy the manifest does not match: exit 2
    if banner:
        opts = replace(opts, policy=Policy(compile_all=True))
    parallel = compiled.check_parallel(src, model, opts.tp)
    # the path's slow reads start in a second process as soon as its calls are known (tileprobe.audit.path.ahead)
    with Ahead(None if opts.kernels else compiled.context(src, target, opts.cache_dir)) as ahead:
        return _audit(opts, model, entries, target, arch, triton, src, banner, parallel, ahead)


def _audit(opts: AuditOptions, model: AttentionConfig, entries: list[AuditKernel], target: Target, arch: str,
           triton, src: EngineSource, banner: str, parallel: list[str], ahead: Ahead) -> Audit:
    t0 = time.perf_counter()
    sel = capture_cache.selection(src, target, model, opts.attention_backend, opts.cache_dir,
                                  lambda: attention_backend(src, target, model, opts.attention_backend)) \
        if any(k.backend for k in entries) or opts.attention_backend or model.heads > 0 else None
    ahead.add(compiled.planner(src, target, model, opts, sel))
    # the MoE entries first: their walk of the engine's MoE choice names the experts' kernel, read ahead from then on
    early = (lambda k: compiled.is_moe(k.name), lambda part: ahead.add(compiled.planner(src, target, model, opts,
                                                                                         sel, part))) \
        if ahead.running else None
    cap = capture_all(src, target, model, entries, opts, target.cc_int, sel, early)
    ahead.add(compiled.planner(src, target, model, opts, sel, cap))
    planned = cap.planned
    t1 = time.perf_counter()
    configs = [config_of(p, src, arch) for p in planned]
    ans = answers.plan(planned, opts.policy, triton.version, banner)
    builds, checks = _build(planned, configs, ans, opts, target, triton)
    t2 = time.perf_counter()
    mismatches = ans.mismatches(builds, [f"{p.launch.kernel} ({p.op()}, {_launch_hash(p)})" for p in planned], checks)
    outcomes = [outcome(cfg, b, target, triton, p, pr if isinstance(pr, int) else None)
                for p, cfg, b, pr in zip(planned, configs, builds, ans.predictions)]
    tuned = _tuned_notes(cap.tuned, planned, outcomes, target)
    in_tuned = {i for t in cap.tuned for i in t.planned}
    over = [i for i, o in enumerate(outcomes) if o.verdict is Verdict.SMEM_OVER_LIMIT and i not in in_tuned]
    answer_one = (lambda j: compile_job(j.compiled(), opts.cache_dir)) if answers.sizing(opts.policy) \
        else (lambda j: compile_job(j.sized(), opts.cache_dir))
    variants = {i: nearest(planned[i].launch, planned[i].job, target.smem_optin, answer_one) for i in over}
    outcomes = [replace(o, reason=f"{o.reason}; nearest fitting variant: {variants[i].describe()}")
                if variants.get(i) else o for i, o in enumerate(outcomes)]
    t3 = time.perf_counter()
    columns = {"cutlass_version": None, "cutlass_source": None, "cutlass_hash": None, "nvcc_version": None,
               "host_compiler": None, "triton_version": triton.version}
    out = Path(opts.out or f"audit-{opts.engine}-{model.name}-{target.name}")
    meta = {"family": fam.NAME, "target": target.as_dict(), "configs": len(planned),
            "toolchain": columns | {"engine": src.label()}, "engine_origin": src.origin, "model": model.name}
    res = Audit(target, [], [], out, {"capture_s": round(t1 - t0, 2), "compile_s": round(t2 - t1, 2),
                                      "nearest_s": round(t3 - t2, 2)}, answers=ans.counts(),
                mismatches=mismatches, seed=ans.seed)
    head = []
    if sel is not None:
        meta["attention_backend"] = {"backend": sel.backend, "line": sel.line, "forced": sel.forced,
                                     "triton": sel.triton, "valid": list(sel.valid), "notes": list(sel.notes)}
        head = [f"ATTENTION {src.label()} runs the {sel.backend} backend for {model.name} on {target.name}"
                         f" ({'forced; ' if sel.forced else ''}{sel.line}"
                         f"{'; a Triton backend' if sel.triton else '; not a Triton backend: no attention kernel of it is audited'})"
                         + "".join(f"; {n}" for n in sel.notes)]
    meta["answers"] = ans.record()
    if banner:
        meta["rules_off"] = banner
        head.insert(0, banner)
        res.banner = banner
    with recording(out, meta, ans.mode(), opts.command, fsync_each=False) as rec:
        for i, (p, cfg, o) in enumerate(zip(planned, configs, outcomes)):
            row = make_row(cfg, target, columns, o, point={"problem": f"{model.name}: {_shape(p)}"},
                           extra={"engine": src.label(), "engine_hash": p.job.source.sha256[:16],
                                  "kernel_file": p.launch.kernel_file, "config_source": branch_line(p.launch),
                                  "autotune_dropped": tuned["marks"].get(i),
                                  "phase": "+".join(dict.fromkeys(pt.phase for pt in p.points)),
                                  **prediction_columns(ans.predictions[i], builds[i])})
            rec.write(row)
            res.rows.append(row)
            # an autotune config the autotuner drops is not a crash; one whose compile error it does not catch is
            if o.verdict is not Verdict.FITS and i not in in_tuned or i in tuned["crash"]:
                (res.compile_errors if o.verdict is Verdict.COMPILE_ERROR else res.failures).append(
                    f"{src.label()} {p.launch.kernel} ({p.op()}, set at {branch_line(p.launch)}): "
                    f"{o.reason.split(' (')[0]}")
                res.remedies.append(_remedy(p, target, variants.get(i)))
        for n in cap.not_selected:
            row = _not_selected_row(n, src, arch, target, columns, model)
            rec.write(row)
            res.rows.append(row)
            res.notes.append(f"NOT RUN {n.kernel.name}: {row['reason']}")
        for k, why in cap.failed:  # an entry whose capture could not run with this engine release: unanswered
            n = NotSelected(k, Elsewhere("(capture failed)", k.module_file, why))
            row = _not_selected_row(n, src, arch, target, columns, model)
            row.update(verdict=str(Verdict.UNANSWERED), evidence="none",
                       reason=f"tileprobe could not run {k.launcher} from {src.label()} here: {why}")
            rec.write(row)
            res.rows.append(row)
            res.unanswered.append(f"{k.name} ({k.launcher}, {src.label()}): its capture failed: {why}"[:400])
        for t in tuned["empty"]:
            p = planned[t.planned[0]]
            res.failures.append(f"{src.label()} {t.kernel} ({p.op()}, autotuned at {t.call_site}): every config "
                                f"the autotuner has is over {target.smem_optin} B")
            res.remedies.append(_remedy(p, target))
        # --kernel asks for those Triton entries only; without it the whole forward pass is answered
        res.path = [] if opts.kernels else compiled.answer_path(src, target, model, opts, sel, cap, arch, columns,
                                                                           rec, ahead.running)
        res.rows += [a.row for a in res.path]
        res.path_failures = compiled.failures(res.path)
        res.unanswered += compiled.unanswered(res.path)
        res.parallel = parallel
        res.notes = [*head, *tuned["notes"], *res.notes]
        res.remedies = list(dict.fromkeys(res.remedies))
        rec.meta["phases"] = res.seconds
    return res
