"""A sweep: expand configs, probe them statically (and at runtime where a matching GPU is present), write rows.

This is the one place where an outcome, good or bad, becomes a result row (`make_row`).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.families import Config, Family, arch_for, expand_configs, family, family_for_cc
from tileprobe.results import ResultsWriter, now, row_key
from tileprobe.static_probe import StaticOutcome, occupancy, probe_static
from tileprobe.targets import Target, resolve_target
from tileprobe.toolchain import CutlassTree, Nvcc, find_cutlass, find_nvcc

DEFAULT_TARGET_FOR = {"sm120-nvfp4": "rtx-pro-6000", "sm90-fp8": "h200"}


@dataclass
class Toolchain:
    cutlass: CutlassTree
    nvcc: Nvcc
    cache: Path

    def columns(self) -> dict:
        return {"cutlass_version": self.cutlass.version, "cutlass_source": self.cutlass.source,
                "cutlass_hash": self.cutlass.tree_hash, "nvcc_version": self.nvcc.version_text}


@dataclass
class SweepOptions:
    family: str | None = None
    target: str | None = None
    tiles: list[str] | None = None
    schedules: list[str] | None = None
    stages: list[int] | None = None
    epilogues: list[str] | None = None
    swap_ab: list[bool] | None = None
    cluster: tuple[int, int, int] = (1, 1, 1)
    out: Path = Path("tileprobe-results")
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    regs: bool = False
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


def make_toolchain(cutlass_dir: str | None, nvcc: str | None, cache_dir: str | None) -> Toolchain:
    from tileprobe.build import cache_root  # noqa: PLC0415

    return Toolchain(find_cutlass(cutlass_dir), find_nvcc(nvcc), cache_root(cache_dir))


@dataclass
class Plan:
    family: Family
    target: Target  # what the static verdicts are judged against
    devices: list[Target]  # GPUs that can launch the family's binaries
    foreign: list[Target]  # GPUs present whose arch differs: their rows say not-runnable-here
    configs: list[Config]


def plan(opts: SweepOptions) -> Plan:
    """The family, the target judged against, the devices to run on, and the configs (this shard's)."""
    target, devices = resolve_target(opts.target, opts.gpus)
    fam = family(opts.family) if opts.family else family_for_cc(target.cc)
    arch = arch_for(fam, target.cc)
    foreign = [d for d in devices if arch_for(fam, d.cc) != arch or d.arch != arch]
    if target.is_device and target.arch != arch:
        # e.g. --family sm120-nvfp4 on an H200: judge against the family's offline profile, not the H200's limit
        from tileprobe.targets import profile  # noqa: PLC0415

        target = profile(DEFAULT_TARGET_FOR[fam.name])
    configs = expand_configs(fam, arch, opts.tiles, opts.schedules, opts.stages, opts.epilogues, opts.swap_ab,
                             opts.cluster)
    if opts.shard:
        i, n = opts.shard
        configs = [c for j, c in enumerate(configs) if j % n == i]
    runnable = [d for d in devices if d not in foreign]
    if opts.static_only:
        runnable, foreign = [], []
    return Plan(fam, target, runnable, foreign, configs)


def make_row(config: Config, target: Target, tc: Toolchain, outcome: StaticOutcome, runtime: dict | None = None,
             point: dict | None = None) -> dict:
    """The single place an outcome (static, and runtime if any) becomes a result row."""
    info = outcome.info
    fam = config.fam
    headroom = target.smem_optin - info.smem_bytes if info.smem_bytes is not None else None
    row = {
        "family": config.family, "target": target.name, "device_name": target.device_name, "cc": target.cc,
        "gpu_index": target.gpu_index, "arch": config.arch, "config": config.key, "tile": str(config.tile),
        "tile_bytes_k": config.tile.bytes_k(fam.ab_bits), "schedule": config.schedule, "epilogue": config.epilogue,
        "swap_ab": config.swap_ab, "stages": info.stages if info.stages is not None else config.stages_label,
        "smem_bytes": info.smem_bytes, "smem_mainloop_bytes": info.smem_mainloop_bytes,
        "smem_epilogue_bytes": info.smem_epilogue_bytes, "smem_limit_bytes": target.smem_optin,
        "cutlass_cap_bytes": info.cutlass_cap_bytes, "headroom_bytes": headroom,
        "regs_per_thread": info.regs_per_thread, "spill_bytes": info.spill_bytes,
        "threads_per_cta": info.threads_per_cta, **occupancy(info, target),
        "verdict": outcome.verdict.value, "reason": outcome.reason, "evidence": outcome.verdict.evidence,
        "driver": target.driver, "compile_seconds": info.compile_seconds, "timestamp": now(), **tc.columns(),
    }
    if runtime:
        row.update(runtime)
    if point:
        row.update(point)
    from tileprobe.results import COLUMNS  # noqa: PLC0415

    return {c: row.get(c) for c in COLUMNS}  # every row has every column


def static_rows(opts: SweepOptions, tc: Toolchain, target: Target, configs: list[Config],
                writer: ResultsWriter) -> tuple[list[StaticOutcome], list[dict]]:
    """Probe every config (cached builds make repeats cheap), write the rows not yet recorded, return all outcomes."""
    outcomes = probe_static(configs, target, tc.cutlass, tc.nvcc, tc.cache, opts.jobs, opts.compile_timeout_s,
                            opts.regs)
    rows = []
    for o in outcomes:
        row = make_row(o.config, target, tc, o)
        if not writer.has(row_key(row)):
            writer.write(row)
            rows.append(row)
    return outcomes, rows


def foreign_rows(plan_: Plan, tc: Toolchain, outcomes: list[StaticOutcome], writer: ResultsWriter) -> list[dict]:
    """GPUs present whose arch differs from the family's binaries: a not-runnable-here row per config, not launched."""
    from dataclasses import replace  # noqa: PLC0415

    from tileprobe.verdict import Verdict  # noqa: PLC0415

    rows = []
    for dev in plan_.foreign:
        for o in outcomes:
            if o.verdict in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR):
                continue
            reason = (f"built for {o.config.arch}, GPU {dev.gpu_index} is sm_{dev.cc_int} ({dev.device_name}): "
                      f"not launched; {o.reason if o.reason.startswith('static') else 'static: ' + o.reason}")
            out = replace(o, verdict=Verdict.NOT_RUNNABLE_HERE, reason=reason)
            row = make_row(o.config, plan_.target, tc, out,
                           {"gpu_index": dev.gpu_index, "launch_status": "not-runnable-here", "launch_reason": reason},
                           {"workload": f"on-{dev.name}"})
            if not writer.has(row_key(row)):
                writer.write(row)
                rows.append(row)
    return rows


def command_line() -> str:
    return shlex.join(["tileprobe", *sys.argv[1:]])


def run(opts: SweepOptions, console) -> list[dict]:
    """The whole sweep. Returns the rows written by this run (rows kept from --resume are not repeated)."""
    import json  # noqa: PLC0415

    import random  # noqa: PLC0415

    p = plan(opts)
    fam, target, devices, configs = p.family, p.target, p.devices, p.configs
    tc = make_toolchain(opts.cutlass_dir, opts.nvcc, opts.cache_dir)
    seed = opts.workload.get("seed", -1)
    previous = opts.out / "run.json"
    if seed < 0 and opts.resume and previous.is_file():
        seed = json.loads(previous.read_text()).get("seed", -1)  # resume the same routing and data
    if seed < 0:
        seed = random.randrange(2**31)  # fresh random inputs every run, recorded for reproduction
    opts.workload["seed"] = seed
    with ResultsWriter(opts.out, resume=opts.resume) as writer:
        (opts.out / "run.json").write_text(json.dumps({
            "command": command_line(), "date": now(), "seed": seed, "family": fam.name, "target": target.as_dict(),
            "devices": [d.as_dict() for d in devices + p.foreign], "configs": len(configs), "shard": opts.shard,
            "toolchain": tc.columns() | {"cutlass_dir": str(tc.cutlass.root), "nvcc": str(tc.nvcc.path)},
        }, indent=1))
        where = f"{len(devices)} GPU(s)" if devices else "static only (no GPU of this arch here)"
        console.print(f"[bold]{fam.name}[/] on [bold]{target.name}[/] ({target.device_name}, sm_{target.cc_int}, "
                      f"opt-in {target.smem_optin} B): {len(configs)} configs, {where}; CUTLASS "
                      f"{tc.cutlass.version} ({tc.cutlass.source}), nvcc {tc.nvcc.version_text}")
        outcomes, rows = static_rows(opts, tc, target, configs, writer)
        rows += foreign_rows(p, tc, outcomes, writer)
        if devices:
            from tileprobe.runner import runtime_rows  # noqa: PLC0415

            rows += runtime_rows(opts, tc, target, devices, outcomes, writer, console)
    return rows
