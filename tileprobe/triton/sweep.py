"""triton-moe's part of a sweep (the driver, tileprobe.sweep, checks the options, records run.json, resumes and writes
the rows): for every batch size M the engine runs on the target's GPUs, which config it launches (the engine's own
lookup: tileprobe.engines.triton_lookup) and whether it fits, from the compiled kernel's bytes.

`prepare` checks the options and plans the launches; `rows` yields a row per launch as it is known. Each distinct
launch is compiled once (tileprobe.backends.triton.compile, cached by content; evidence `compiled`: a cubin was built
for the arch), or answered by the predictor (--predict-only, evidence `predicted`); on a GPU of the arch the
engine's configs are launched too. Predictor first (tileprobe.triton.predicted): a launch the predictor answers
exactly is not compiled (evidence `predicted`) unless --compile-all or the --verify sample asks; a compiled row
carries the prediction beside its bytes.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileprobe import preflight, progress
from tileprobe.backends.triton import autotune, isolated
from tileprobe.backends.triton import runtime as rt
from tileprobe.backends.triton.compile import KernelJob, TritonBuild, TritonCompileError, compile_many
from tileprobe.backends.triton.source import KernelSource, extract
from tileprobe.backends.triton.toolchain import TritonInstall, cache_root, require_triton
from tileprobe.engines import manifest
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, family
from tileprobe.families import triton_moe as tm
from tileprobe.predict import triton_moe as predict_tm
from tileprobe.predict import CannotPredict
from tileprobe.triton import predicted as pred_mod
from tileprobe.results import tolerance
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.targets import Target, resolve_target
from tileprobe.verdict import Verdict
from tileprobe.workloads import DEFAULT_PRESET, PRESETS, MoEModel, check_split


@dataclass
class TritonOptions:
    engine: str | None = None
    quant: str = "bf16"
    engine_wheel: str | None = None
    config_dir: str | None = None  # the user's folder (VLLM_TUNED_CONFIG_FOLDER / SGLANG_MOE_CONFIG_DIR), if any
    device_names: list[str] | None = None
    any_triton: bool = False
    rules_off: bool = False  # --rules-off: an engine release the manifest does not match, every launch compiled
    max_m: int = triton_lookup.DEFAULT_MAX_M
    compile_all: bool = False  # compile every launch, even those the predictor answers
    verify: int = 0  # compile this many predicted launches (a seeded sample) and fail on a mismatch
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Shape:
    """The model as one rank sees it: local experts (the file's E), N of the file (I / tp), hidden, top-k."""
    model: MoEModel
    tp: int
    ep: int

    @property
    def experts_local(self) -> int:
        return self.model.experts // self.ep

    @property
    def inter(self) -> int:
        return self.model.inter // self.tp


def shape_for(presets: list[str] | None, tp: int, ep: int) -> Shape:
    names = presets or [DEFAULT_PRESET]
    if len(names) != 1:
        raise UsageError("--family triton-moe answers for one --workload at a time")
    if names[0] not in PRESETS:
        raise UsageError(f"unknown workload {names[0]!r}; known: {', '.join(PRESETS)}")
    model = PRESETS[names[0]]
    check_split(model, tp, ep)
    return Shape(model, tp, ep)


def engine_release(engine: str, wheel: str | None, rules_off: bool = False, needs: str | None = tm.PIECE
                   ) -> tuple[tc.EngineSource, str]:
    """The engine's files, under the one release rule every command applies (tileprobe.engines.manifest.check): a
    release with no manifest, or files that differ from it, is one UsageError line (exit 2), read instead with
    `rules_off` (--rules-off), and the banner to show then is returned ('' for a release tileprobe answers for).
    `needs`: the manifest piece the command runs (default triton_moe.PIECE, tileprobe's re-typed fused_moe_kernel
    launch: a release whose manifest records it as not checked is refused too); None for a command that forms the
    launch with the engine's own launcher (check-configs and export for vLLM: tileprobe.triton.captured)."""
    src = tc.find_engine(engine, wheel)
    return src, manifest.check(src, rules_off, needs=needs).text


def engine_kernel_source(engine: str, wheel: str | None, rules_off: bool = False
                         ) -> tuple[tc.EngineSource, KernelSource]:
    """The engine's files and its fused_moe_kernel module (source.extract: the kernel and the @triton.jit functions it
    calls), for any release engine_release accepts."""
    src, _ = engine_release(engine, wheel, rules_off)
    return src, kernel_source(src)


def kernel_source(src: tc.EngineSource) -> KernelSource:
    ek = tm.engine_kernel(src.engine)
    return extract(src.read_text(ek.path), ek.function, f"{src.label()} {ek.path}")


def rules_off_policy(policy: pred_mod.Policy, banner: str) -> pred_mod.Policy:
    """With every stated rule off (a banner), no launch is answered by the predictor: each is compiled."""
    return replace(policy, compile_all=True, verify=0) if banner else policy


@dataclass(frozen=True)
class Planned:
    config: object  # families.base.Config
    job: KernelJob | None  # None: not compiled (the config says why)
    point: dict
    pick: triton_lookup.Pick


def plan(shape: Shape, engine: str, quant: str, source: KernelSource, src: tc.EngineSource, target: Target,
         arch: str, names: tuple[str, ...], batches: list[int] | None, user_dir: str | None, max_m: int
         ) -> list[Planned]:
    """Every (device name, GEMM, M) to answer, with the config the engine picks and the launch to compile."""
    scheme = tc.scheme(quant)
    model, cc = shape.model, tm.arch_cc(arch)
    out = []
    for name in names:
        ps = triton_lookup.picks(engine, src, shape.experts_local, shape.inter, model.hidden, model.top_k, scheme,
                                 target, name, user_dir, max_m)
        for gemm in tm.GEMMS:
            mine = [p for p in ps if p.gemm == gemm]
            bad = [p for p in mine if p.source == "engine-error"]
            if bad:
                raise UsageError(f"{engine} on {name}: {bad[0].note}")
            ms = batches or [p.m_lo for p in mine]
            for m in ms:
                p = next((p for p in mine if p.m_lo <= m and (p.m_hi is None or m <= p.m_hi)), None)
                if p is None:
                    raise UsageError(f"--batch {m}: beyond the M range answered (1..{max_m})")
                entry, why = tm.check_entry(p.config, tma=True)
                if entry is None:
                    raise UsageError(f"{engine} {p.source} config for M={m}: {why}")
                n, k = tm.gemm_shape(gemm, model.hidden, shape.inter)
                where = "default" if p.source == "default" else f"{p.source}:{Path(p.path).name}#{p.key}"
                cfg = tm.make_config(engine, quant, gemm, model.experts, n, k, model.top_k, entry, arch, where,
                                     shape.ep)
                # SGLang's down entry with USE_TMA also changes the gate_up launch (c_sorted): neither is reproduced
                down = [d for d in ps if d.gemm == "down" and d.m_lo <= m and (d.m_hi is None or m <= d.m_hi)]
                if p.config.get("USE_TMA") or (engine == "sglang" and down and down[0].config.get("USE_TMA")):
                    cfg = replace(cfg, unsupported_reason=tm.TMA_REASON)
                job = None if cfg.unsupported_reason else tm.launch_job(
                    engine, source, quant, gemm, model.experts, n, k, m, model.top_k, entry, cc, shape.ep)
                ident = f"{name}|{gemm}|{p.m_text()}|{m}"
                model_text = model.name + (f" tp{shape.tp}" if shape.tp > 1 else "") + (
                    f" ep{shape.ep}" if shape.ep > 1 else "")
                # static rows (no `workload`: nothing is launched); the batch M and the pick's range are the point
                point = {"gemm": gemm, "batch": m, "routing": "engine-pick", "device_name": name,
                         "batch_range": p.m_text().removeprefix("M").removeprefix("="),
                         "problem": f"{model_text} {p.m_text()} E={shape.experts_local} N={n} K={k} ({where})",
                         "problems_hash": hashlib.sha256(ident.encode()).hexdigest()[:12]}
                out.append(Planned(cfg, job, point, p))
    return out


def outcome(cfg, build: TritonBuild | TritonCompileError | None, target: Target, triton: TritonInstall,
            where: str | None = None) -> Outcome:
    """The verdict of one compiled launch against the target's opt-in limit, with Triton's own error text (None:
    not compiled, the config's unsupported_reason says why); `where`, when given, ends each reason (the audit: the
    engine line that launched it)."""
    tail = f"; {where}" if where else ""
    if build is None:
        return Outcome(cfg, Verdict.UNSUPPORTED, cfg.unsupported_reason or "not compiled",
                       StaticInfo(stages=cfg.stages, threads_per_cta=int(cfg.get("num_warps")) * 32))
    if isinstance(build, TritonCompileError):
        return Outcome(cfg, Verdict.COMPILE_ERROR, f"{triton.label()}: {build.line}" + (f" ({where})" if where else ""))
    info = StaticInfo(stages=build.num_stages, smem_bytes=build.shared, regs_per_thread=build.regs,
                      spill_bytes=None if build.spills is None else build.spills * 4,
                      threads_per_cta=build.num_warps * 32, compile_seconds=round(build.seconds, 3),
                      compile_configs=1, compiled=not build.sized)
    how = f"{triton.label()}, {build.arch}" + (": its shared-memory allocation pass, no code generated"
                                                if build.sized else "")
    over = build.fits(target.smem_optin)
    if over is None:
        return Outcome(cfg, Verdict.FITS, f"metadata.shared {build.shared} B <= {target.smem_optin} B opt-in "
                                          f"({how}; not launched{tail})", info)
    sep = "; " if build.sized else ": "
    return Outcome(cfg, Verdict.SMEM_OVER_LIMIT, f"{over.text} ({how}{sep}the engine's first launch on this GPU "
                                                 f"raises OutOfResources{tail})", info)


def predicted_outcome(cfg, target: Target, shared: int, version: str, tail: str | None = None) -> Outcome:
    """The predictor's verdict for one launch: `shared` is tileprobe.triton.predicted.predict_launch's bytes for
    Triton `version` (inside the scope where its rule was exact on every compiled row; never a guess); `tail`, when
    given, ends the reason (the audit: the engine line that launched it)."""
    info = StaticInfo(stages=cfg.stages, smem_bytes=shared, threads_per_cta=int(cfg.get("num_warps")) * 32,
                      predicted=True)
    where = f"predicted for Triton {version}, {cfg.arch}, not compiled" + (f"; {tail}" if tail else "")
    if shared <= target.smem_optin:
        return Outcome(cfg, Verdict.FITS, f"metadata.shared {shared} B <= {target.smem_optin} B opt-in ({where})",
                       info)
    return Outcome(cfg, Verdict.SMEM_OVER_LIMIT, f"out of resource: shared memory, Required: {shared}, Hardware "
                                                 f"limit: {target.smem_optin} ({where}: the engine's first launch "
                                                 "on this GPU raises OutOfResources)", info)


def toolchain_columns(triton: TritonInstall | str) -> dict:
    """The rows' toolchain columns: no CUTLASS or nvcc, the Triton release (installed, or the predictor's)."""
    return {"cutlass_version": None, "cutlass_source": None, "cutlass_hash": None, "nvcc_version": None,
            "host_compiler": None, "triton_version": triton if isinstance(triton, str) else triton.version}


@dataclass
class Prepared:
    """A triton-moe sweep with every option checked and its launches planned (this shard's), nothing compiled: what
    the driver (tileprobe.sweep) records in run.json and checks --resume against, and what `rows` answers."""
    opts: object  # sweep.SweepOptions
    shape: Shape
    target: Target
    devices: list[Target]  # GPUs of the arch (launched on the first); [] static or predicted
    names: tuple[str, ...]
    src: tc.EngineSource
    source: KernelSource
    user_dir: str | None
    every: list[Planned]  # the whole plan (a shard's runtime launches every candidate of its GEMM)
    planned: list[Planned]  # this shard's launches
    triton: TritonInstall | None  # None: --predict-only (the predictor's Triton release)
    phases: dict = field(default_factory=dict)
    predicted: list[Outcome] = field(default_factory=list)  # --predict-only: the predictor's outcomes
    answers: pred_mod.Answers | None = None  # predictor first: which of this shard's launches are compiled
    mismatches: list[str] = field(default_factory=list)  # --verify: sampled launches whose compile differs

    @property
    def mode(self) -> str:
        if self.triton is None:
            return "predicted"
        return self.answers.mode([p.job is not None for p in self.planned]) if self.answers else "compiled"

    @property
    def columns(self) -> dict:
        return toolchain_columns(self.triton or predict_tm.TRITON_VERSIONS[0])

    def run_json(self) -> dict:
        """run.json's fields for this sweep (the driver adds command, date, seed, shard and evidence_mode); the
        toolchain holds what --resume must match: the Triton release, the engine and its kernel's sha256."""
        where = {"triton_root": str(self.triton.root), "cache": str(cache_root(self.opts.cache_dir))} \
            if self.triton else {}
        return {"family": tm.NAME, "target": self.target.as_dict(), "devices": [d.as_dict() for d in self.devices[:1]],
                "configs": len(self.planned), "toolchain": self.columns | where | {
                    "engine": self.src.label(), "kernel_sha256": self.source.sha256},
                "engine_origin": self.src.origin, "quant": self.opts.triton.quant, "device_names": list(self.names),
                "config_dir": self.user_dir, **({"predict_only": True} if self.triton is None else {}),
                **({"answers": self.answers.record([p.job for p in self.planned])} if self.answers else {})}

    def summary(self) -> str:
        what = f"{self.triton.label()}" if self.triton else f"predicted for Triton {predict_tm.TRITON_VERSIONS[0]}"
        if self.answers:
            n = self.answers.counts([p.job for p in self.planned])
            what += (f"; {n['predicted']} predicted, {n['compiled']} to compile ({n['cannot_predict']} cannot be "
                     f"predicted, {n['verified']} --verify" + (f" seed {self.answers.seed}" if self.answers.seed
                                                               is not None else "") + f"; {self.answers.policy.name})")
        return (f"[bold]triton-moe[/] {self.src.label()} {self.opts.triton.quant} {self.shape.model.name} on "
                f"[bold]{self.target.name}[/] (opt-in {self.target.smem_optin} B; {', '.join(self.names)}): "
                f"{len(self.planned)} launches, {len({p.job for p in self.planned if p.job})} distinct, {what}")


def prepare(opts) -> Prepared:
    """Every triton-moe option checked (opts: sweep.SweepOptions; the driver has refused the options the family does
    not take) and the launches planned, this shard's split off as CUTLASS configs are (j % n == i)."""
    topts = opts.triton
    if not topts.engine:
        raise UsageError("--family triton-moe needs --engine vllm or --engine sglang")
    tm.engine_kernel(topts.engine)
    tm.check_quant(topts.quant)
    w = opts.workload
    shape = shape_for(w.get("presets"), w.get("tp", 1), w.get("ep", 1))
    for b in w.get("batches") or ():
        if b < 1:
            raise UsageError(f"batch size {b} must be at least 1")
    if opts.jobs < 1:
        raise UsageError(f"--jobs {opts.jobs}: must be at least 1")
    target, devices = resolve_target(opts.target, opts.gpus)
    devices = [] if opts.static_only or opts.predict_only else devices  # --predict-only launches nothing
    if devices:
        rt.fault_from_env()  # a malformed TILEPROBE_FAULT stops the sweep here, before anything is compiled or written
    arch = arch_for(family(tm.NAME), target.cc)
    if arch is None:
        raise UsageError(f"triton-moe compiles for {', '.join(tm.ARCHS)}; not sm_{target.cc_int} ({target.name})")
    # on a GPU: the name it reports (the engine keys its files by it); offline: every SKU name of the target
    names = (target.device_name,) if target.is_device and not topts.device_names else \
        triton_lookup.device_names(target, topts.device_names)
    triton = None if opts.predict_only else require_triton(topts.any_triton)
    if triton is not None:
        preflight.check_triton(triton, tm.arch_cc(arch), opts.cache_dir)  # a Triton that compiles nothing: one line
    src, banner = engine_release(topts.engine, topts.engine_wheel, topts.rules_off)
    if banner:
        sys.stderr.write(banner + "\n")
    source = kernel_source(src)
    user_dir = topts.config_dir or triton_lookup.engine_module(topts.engine).user_dir_from_env()
    if user_dir is not None and not Path(user_dir).is_dir():
        raise UsageError(f"--config-dir {user_dir}: no such folder")
    start = time.perf_counter()
    every = plan(shape, topts.engine, topts.quant, source, src, target, arch, names, w.get("batches"), user_dir,
                 topts.max_m)
    mine = [p for j, p in enumerate(every) if opts.shard is None or j % opts.shard[1] == opts.shard[0]]
    predicted, answers = [], None
    seed = w.get("seed", -1)  # --seed also seeds the --verify sample (else a fresh one, recorded)
    policy = rules_off_policy(pred_mod.Policy(topts.compile_all, topts.verify,
                                              seed if seed is not None and seed >= 0 else None).check(), banner)
    if opts.predict_only and (policy.compile_all or policy.verify):
        raise UsageError("--predict-only compiles nothing: --compile-all and --verify do not apply")
    version = predict_tm.TRITON_VERSIONS[0]
    for p in mine if triton is None else ():  # before the results folder is touched: a launch not predicted stops
        if p.config.unsupported_reason:
            predicted.append(Outcome(p.config, Verdict.UNSUPPORTED, p.config.unsupported_reason))
            continue
        shared = pred_mod.predict_launch(p.config, source, version)
        if isinstance(shared, CannotPredict):
            raise UsageError(f"--predict-only: {shared} ({p.point['problem']}); run without --predict-only to "
                             "compile instead")
        predicted.append(predicted_outcome(p.config, target, shared, version))
    if triton is not None:
        answers = pred_mod.answer([p.config for p in mine], [p.job for p in mine], source, triton.version, policy)
    return Prepared(opts, shape, target, devices, names, src, source, user_dir, every, mine, triton,
                    {"plan_s": round(time.perf_counter() - start, 2)}, predicted, answers)


def rows(s: Prepared, seed: int | None, console) -> Iterator[dict]:
    """The rows of a prepared sweep, each as soon as it is known: a static row per planned launch (compiled, or the
    predictor's), then on a GPU of the arch the launches' rows. The driver writes them."""
    extra = {"engine": s.src.label(), "engine_hash": s.source.sha256[:16]}
    outs = s.predicted
    cols = [pred_mod.prediction_columns(o.info.smem_bytes, None) if o.info.smem_bytes is not None else {}
            for o in outs]
    if s.triton is not None:
        start = time.perf_counter()
        a = s.answers
        named = [p for i, p in enumerate(s.planned) if p.job is not None and a.compile[i]]
        with progress.track(len(named), "triton-moe") as bar:
            done = iter(compile_many([p.job for p in named], s.opts.jobs, s.opts.cache_dir, s.opts.rebuild,
                                     on_result=bar.each([progress.unit(p.config, p.point["batch"]) for p in named],
                                                        lambda i, b: outcome(named[i].config, b, s.target, s.triton))))
        builds = [next(done) if p.job is not None and a.compile[i] else None for i, p in enumerate(s.planned)]
        s.phases.update(compile_s=round(time.perf_counter() - start, 2),
                        distinct=len({id(b) for b in builds if b is not None}),  # a repeated launch: once
                        compiled=len({id(b) for b in builds if b is not None and not getattr(b, "cached", False)}),
                        cached=len({id(b) for b in builds if getattr(b, "cached", False)}),
                        not_compiled=sum(p.job is None for p in s.planned),
                        **{f"launches_{k}": v for k, v in a.counts().items()})
        outs = [outcome(p.config, b, s.target, s.triton) if a.predicted(i) is None or p.job is None else
                predicted_outcome(p.config, s.target, a.predicted(i), s.triton.version)
                for i, (p, b) in enumerate(zip(s.planned, builds))]
        cols = [pred_mod.prediction_columns(a.predictions[i], b) if p.job is not None else {}
                for i, (p, b) in enumerate(zip(s.planned, builds))]
        s.mismatches = a.mismatches(builds, [f"{p.point['problem']} {p.point['gemm']} M={p.point['batch']}"
                                             for p in s.planned])
    for p, o, c in zip(s.planned, outs, cols):
        yield make_row(p.config, s.target, s.columns, o, point=p.point, extra=extra | c)
    if s.devices and s.shape.ep > 1:
        console.print("[yellow]--ep > 1: the runtime launch holds every expert on one GPU; not launched[/]")
    elif s.devices:
        start = time.perf_counter()
        yield from runtime_rows(s, seed, console)
        s.phases["runtime_s"] = round(time.perf_counter() - start, 2)


def runtime_rows(s: Prepared, seed: int, console) -> Iterator[dict]:
    """On a GPU of the arch: at every (GEMM, M) of the plan (this shard's share of them), launch each config the
    engine uses for that GEMM at any M (its pick among them, so `recommend` says per M whether the engine's choice is
    the fastest), check every element against the fp64 reference under the bound of the kernel's contract
    (tileprobe.results.tolerance), time it from a CUDA graph over rotated routings. Each (GEMM, M)'s configs run in a
    child process (tileprobe.backends.triton.isolated): a faulting or hanging config is its own row, later ones are
    unaffected."""
    device, shape = s.devices[0], s.shape
    cache = cache_root(s.opts.cache_dir)
    fault = rt.fault_from_env()  # TILEPROBE_FAULT corrupt:POINT:GROUP (runtime's docstring); POINT: i below
    model = shape.model
    candidates: dict[str, dict[str, object]] = {}
    for p in s.every:
        if p.job is not None:  # a config not compiled (unsupported) is not launched either
            candidates.setdefault(str(p.config.get("gemm")), {}).setdefault(p.config.key, p.config)
    points = sorted({(str(p.config.get("gemm")), int(p.point["batch"])) for p in s.every})
    for i, (gemm, m) in enumerate(points):
        if s.opts.shard is not None and i % s.opts.shard[1] != s.opts.shard[0]:
            continue
        n, k = tm.gemm_shape(gemm, model.hidden, shape.inter)
        prob = rt.Problem(tm.engine_of(next(iter(candidates[gemm].values()))), str(
            next(iter(candidates[gemm].values())).get("quant")), gemm, model.experts, n, k, m, model.top_k)
        cfgs = list(candidates[gemm].values())
        group = fault.group_at(i) if fault else None
        if group is not None:
            console.print(f"[yellow]TILEPROBE_FAULT corrupt: point {i} ({gemm} M={m}) group {group}: each config's "
                          "output corrupted after its launch, before the check[/]")
        results = isolated.run_configs(s.source, cache, prob, seed + i, [tm.job_of(cfg, s.source, m) for cfg in cfgs],
                                       [tolerance.for_config(cfg, k, device.cc_int) for cfg in cfgs], device.l2_bytes,
                                       corrupt_group=group)
        for cfg, res in zip(cfgs, results):
            got = {key: v for key, v in res.data.items() if key not in ("point", "launch_status", "launch_reason")}
            verdict, reason, status = res.verdict, res.reason, res.data.get("launch_status") or res.verdict.value
            info = StaticInfo(stages=cfg.stages, threads_per_cta=int(cfg.get("num_warps")) * 32)
            o = Outcome(cfg, verdict, reason, info)
            ident = f"{device.device_name}|{gemm}|{m}|{seed + i}"
            point = {"workload": model.name, "gemm": gemm, "batch": m, "routing": "uniform",
                     "experts_active": None, "problem": f"M={m} E={model.experts} N={n} K={k} top_k={model.top_k}",
                     "problems_hash": hashlib.sha256(ident.encode()).hexdigest()[:12], "seed": seed + i,
                     "point_id": i}
            runtime = {**got, "gpu_index": device.gpu_index, "launch_status": status, "launch_reason": reason}
            yield make_row(cfg, device, s.columns, o, runtime, point)
        console.print(f"  {gemm} M={m}: {len(candidates[gemm])} config(s) launched on {device.device_name}")


def autotune_report(kernel: str, target_name: str | None, engine: str | None, wheel, args_file, any_triton: bool,
                    jobs: int, cache_dir, rules_off: bool = False) -> list[str]:
    """`tileprobe autotune`: the lines that say, per autotune config, its bytes and whether it fits the target."""
    path, sep, function = kernel.rpartition(":")
    if not sep or not path or not function:
        raise UsageError(f"--kernel {kernel!r}: expected PATH.py:FUNCTION")
    target, _ = resolve_target(target_name, None)
    triton = require_triton(any_triton)
    banner = ""
    if engine:
        src, banner = engine_release(engine, wheel, rules_off)
        text, origin = src.read_text(path), f"{src.label()} {path}"
    else:
        try:
            text, origin = Path(path).read_text(), path
        except OSError as exc:
            raise UsageError(f"--kernel {path}: {exc.strerror}") from None
    source = extract(text, function, origin)
    builtin = autotune.BUILTIN_ARGS.get((path, function))
    sized, notes = autotune.size_autotune(
        source, lambda: autotune.read_args(args_file, builtin() if builtin else None), target.cc_int, jobs, cache_dir)
    lines, left = autotune.verdict_lines(sized, target.smem_optin, target.name)
    out = [f"{function} ({origin}), {len(sized)} autotune configs compiled for {target.name} (sm_{target.cc_int}, "
           f"opt-in {target.smem_optin} B) with {triton.label()}; evidence compiled, nothing launched"]
    out += [f"  {ln}" for ln in lines] + [f"note: {n}" for n in notes] + ([banner] if banner else [])
    out.append(f"the autotuner is left with {len(left)} of {len(sized)}: "
               + ("; ".join(s.label() for s in left) if left else "none (every config fails: the launch raises)"))
    return out
