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
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe import preflight, progress
from tileprobe.audit import capture, jobs, loader
from tileprobe.audit.kernels import AuditKernel, Point, kernels_for
from tileprobe.backends.triton.compile import KernelJob, compile_many
from tileprobe.backends.triton.toolchain import TritonInstall, require_triton
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.errors import UsageError
from tileprobe.families import arch_for, family
from tileprobe.families import triton_audit as fam
from tileprobe.models import AttentionConfig, attention_model
from tileprobe.results.rows import Outcome, make_row
from tileprobe.results.writer import recording
from tileprobe.targets import Target, resolve_target
from tileprobe.verdict import Verdict
from tileprobe.triton import sweep as triton_sweep

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


@dataclass
class Planned:
    kernel: AuditKernel
    launch: capture.Launch
    job: KernelJob
    points: list[Point] = field(default_factory=list)

    def op(self) -> str:
        w = self.points[0].window
        return f"{self.kernel.launcher}" + (f" window {w}" if w else "")


def check(opts: AuditOptions) -> None:
    for name, values in (("--batch", opts.batches), ("--seq-len", opts.seq_lens), ("--tp", (opts.tp,))):
        if not values or any(v < 1 for v in values):
            raise UsageError(f"{name} {', '.join(map(str, values)) or '(none)'}: each must be at least 1")


def serving(engine: str, model: AttentionConfig) -> list[AuditKernel]:
    entries = kernels_for(engine)
    served = [k for k in entries if k.serves(model) is None]
    if not served:
        raise UsageError(f"--model {model.name}: {engine} does not serve it with an audited kernel "
                         f"({'; '.join(f'{k.name}: {k.serves(model)}' for k in entries)})")
    return served


def capture_all(src: EngineSource, target: Target, model: AttentionConfig, entries: list[AuditKernel],
                opts: AuditOptions, cc: int) -> list[Planned]:
    """Each entry's launches at every point; launches that compile the same (every argument the compile sees equal:
    pointer dtypes, ints, constexprs, options), set at the same engine lines, are planned once."""
    planned: dict[tuple, Planned] = {}
    for k in entries:
        windows = model.windows() if k.windowed else (None,)
        points = [Point(b, s, opts.tp, w) for w in windows for b in opts.batches for s in opts.seq_lens]
        cut = jobs.kernel_source if k.compile_from == "extract" else \
            (lambda s, launch, k=k: loader.module_source(k, s, target, launch.kernel))
        with capture.engine_session(src, target, k.allow, k.stand_ins, opts.cache_dir) as session:
            launcher = getattr(session.module(k.module), k.launcher)
            for pt in points:
                args, kwargs = k.arguments(model, pt)
                start = len(session.launches)
                launcher(*args, **kwargs)
                for launch in session.launches[start:]:
                    job = jobs.job_of(src, launch, cc, cut)
                    key = (k.name, job, launch.call_site, launch.branches)
                    if key not in planned:
                        planned[key] = Planned(k, launch, job)
                    planned[key].points.append(pt)
    return list(planned.values())


def _launch_hash(p: Planned) -> str:
    return hashlib.sha256(json.dumps([p.kernel.name, p.job.key("-"), p.launch.call_site,
                                      list(p.launch.branches)]).encode()).hexdigest()[:10]


def branch_line(launch: capture.Launch) -> str:
    """The engine line that set the launch's parameters: the last device branch taken in the launching file (a
    helper module's import-time branches do not count), else the launch call."""
    here = launch.call_site.rsplit(":", 1)[0] + ":"
    mine = [b.split(" ", 1)[0] for b in launch.branches if b.startswith(here)]
    return mine[-1] if mine else launch.call_site


# The constexprs shown as BLOCK_M / BLOCK_N / BLOCK_DMODEL, the first a kernel takes (the engines' own names)
BLOCK_NAMES = (("BLOCK_M", "BLOCK_H", "BLOCK"), ("BLOCK_N", "TILE_SIZE", "CBLOCK"),
               ("BLOCK_DMODEL", "HEAD_SIZE_PADDED", "BLOCK_DV", "D_FBLOCK"))


def config_of(p: Planned, src: EngineSource, arch: str):
    launch = p.launch
    m, n, d = (next((int(launch.arg(k)) for k in names if isinstance(launch.arg(k), int)), 0) for names in BLOCK_NAMES)
    return fam.make_config(src.label(), launch.kernel, p.op(), m, n, d,
                           int(launch.arg("num_warps", 4)),
                           int(launch.arg("num_stages", 3)), arch, branch_line(launch), _launch_hash(p))


def outcome(cfg, build, target: Target, triton: TritonInstall, p: Planned) -> Outcome:
    """triton-moe's verdict of a compiled launch (tileprobe.triton.sweep.outcome), each reason ending with the engine
    line that launched it and the branch it took."""
    return triton_sweep.outcome(cfg, build, target, triton, f"launched from {p.launch.call_site}; branch: "
                                                            f"{' | '.join(p.launch.branches) or 'none'}")


def _shape(p: Planned) -> str:
    tensors = [f"{n}={v}" for n, v in p.launch.args if isinstance(v, capture.TensorArg) and n[0].isupper()][:1]
    pts = "; ".join(dict.fromkeys(pt.label() for pt in p.points))
    return f"{' '.join(tensors)} ({pts})"


@dataclass
class Audit:
    target: Target
    rows: list[dict]
    failures: list[str]
    out: Path
    seconds: dict


def run_audit(opts: AuditOptions) -> Audit:
    """The audit's rows, written into opts.out (results.jsonl, results.csv, run.json)."""
    check(opts)
    entries = kernels_for(opts.engine)
    model = attention_model(opts.model)
    entries = serving(opts.engine, model)
    target, _ = resolve_target(opts.target)
    arch = arch_for(family(fam.NAME), target.cc)
    if arch is None or target.cc_int < MIN_CC:
        raise UsageError(f"--target {target.name} (sm_{target.cc_int}): tileprobe audits the engines' Triton "
                         f"kernels on {', '.join(fam.ARCHS)}")
    triton = require_triton()
    preflight.check_triton(triton, target.cc_int, opts.cache_dir)
    src = find_engine(opts.engine, opts.engine_wheel)
    t0 = time.perf_counter()
    planned = capture_all(src, target, model, entries, opts, target.cc_int)
    t1 = time.perf_counter()
    configs = [config_of(p, src, arch) for p in planned]
    with progress.track(len(planned), f"audit {opts.engine}") as bar:
        builds = compile_many([p.job for p in planned], opts.jobs, opts.cache_dir,
                              on_result=lambda i, b: bar.done(f"{planned[i].launch.kernel} {planned[i].op()}",
                                                              outcome(configs[i], b, target, triton,
                                                                      planned[i]).verdict))
    t2 = time.perf_counter()
    columns = {"cutlass_version": None, "cutlass_source": None, "cutlass_hash": None, "nvcc_version": None,
               "host_compiler": None, "triton_version": triton.version}
    out = Path(opts.out or f"audit-{opts.engine}-{model.name}-{target.name}")
    meta = {"family": fam.NAME, "target": target.as_dict(), "configs": len(planned),
            "toolchain": columns | {"engine": src.label()}, "engine_origin": src.origin, "model": model.name}
    rows, failures = [], []
    with recording(out, meta, "compiled", opts.command) as rec:
        for p, cfg, b in zip(planned, configs, builds):
            o = outcome(cfg, b, target, triton, p)
            row = make_row(cfg, target, columns, o, point={"problem": f"{model.name}: {_shape(p)}"},
                           extra={"engine": src.label(), "engine_hash": p.job.source.sha256[:16],
                                  "kernel_file": p.launch.kernel_file, "config_source": branch_line(p.launch)})
            rec.write(row)
            rows.append(row)
            if o.verdict is not Verdict.FITS:
                failures.append(f"{src.label()} {p.launch.kernel} ({p.op()}, set at {branch_line(p.launch)}): "
                                f"{o.reason.split(' (')[0]}")
        rec.meta["phases"] = {"capture_s": round(t1 - t0, 2), "compile_s": round(t2 - t1, 2)}
    return Audit(target, rows, failures, out, {"capture_s": round(t1 - t0, 2), "compile_s": round(t2 - t1, 2)})
