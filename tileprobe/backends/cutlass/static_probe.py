"""The static probe: compile each config, have the harness describe itself (no GPU), judge it against a target."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

from tileprobe.backends.cutlass import described
from tileprobe.backends.cutlass.build import (BuildRequest, BuildResult, build_many, first_error, harness_batches,
                                             smem_static_assert, too_few_stages)
from tileprobe.errors import OutOfResources, UsageError
from tileprobe.families import Config, family
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.targets import Target
from tileprobe.backends.cutlass.toolchain import CutlassTree, Nvcc
from tileprobe.verdict import Verdict

StaticOutcome = Outcome  # the static probe's outcomes are rows.Outcome records


def judge(config: Config, info: StaticInfo, target: Target) -> StaticOutcome:
    """fits or smem-over-limit, with the bytes. A config at exactly the limit fits."""
    assert info.smem_bytes is not None
    headroom = target.smem_optin - info.smem_bytes
    if headroom < 0:
        err = OutOfResources("SharedStorage", info.smem_bytes, target.smem_optin)
        return StaticOutcome(config, Verdict.SMEM_OVER_LIMIT, f"{err} ({info.stages} stages)", info)
    how = "compiled" if info.compiled else "sized"
    return StaticOutcome(config, Verdict.FITS,
                         f"{how}: SharedStorage {info.smem_bytes} B <= opt-in {target.smem_optin} B, "
                         f"headroom {headroom} B ({info.stages} stages); not launched", info)


def _describe(binary: Path, timeout_s: float = 60, args: tuple[str, ...] = ()) -> dict[int, dict]:
    """The configs' descriptions a binary prints: a describe build with no argument, a runtime harness with
    `--describe` (run.cu: the same object, from the binary that is launched). No GPU is needed."""
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"describe exited {proc.returncode}: {proc.stderr.strip()[:200]}")
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out[int(d["index"])] = d
    return out


def _sizes(desc: dict) -> dict:
    """The StaticInfo fields a harness's description gives (describe.cuh's JSON)."""
    return dict(stages=desc["stages"], smem_bytes=desc["smem_bytes"], smem_mainloop_bytes=desc["smem_mainloop_bytes"],
                smem_epilogue_bytes=desc["smem_epilogue_bytes"], cutlass_cap_bytes=desc["cutlass_cap_bytes"],
                threads_per_cta=desc["max_threads"], min_blocks=desc["min_blocks"])


def _info_from(desc: dict, build: BuildResult, index: int = 0) -> StaticInfo:
    """Sizes from the harness's description (config `index` of the build). A batched build sized several configs in
    one translation unit (or one runtime harness's host half): each row's compile_seconds is its share (the build's
    seconds / the configs in it), compile_configs says how many."""
    ptxas = build.ptxas(index) if build.request.with_device else {}
    n = max(1, len(build.request.configs))
    return StaticInfo(
        **_sizes(desc), regs_per_thread=ptxas.get("regs"),
        spill_bytes=(ptxas["spill_stores"] + ptxas["spill_loads"]) if ptxas else None,
        compile_seconds=round(build.seconds / n, 2), compile_configs=n, compiled=build.request.with_device)


def _info_kept(d: described.Described) -> StaticInfo:
    """Sizes kept from the sizes build that described the config before (described.py): that build's share."""
    return StaticInfo(**_sizes(d.desc), compile_seconds=round(d.seconds, 2), compile_configs=d.configs,
                      compiled=False)


def _failed(config: Config, build: BuildResult) -> StaticOutcome:
    is_assert, required, limit = smem_static_assert(build.log)
    info = StaticInfo(compile_seconds=round(build.seconds, 1), compile_configs=1)  # failed builds are single
    if is_assert:
        nums = f": {required} B > {limit} B" if required and limit else ""
        info.smem_bytes = required
        return StaticOutcome(config, Verdict.SMEM_OVER_LIMIT,
                             f"CUTLASS static_assert 'SMEM usage exceeded capacity'{nums}", info, build.log)
    return StaticOutcome(config, Verdict.COMPILE_ERROR, first_error(build.log), info, build.log)


def probe_static(configs: list[Config], target: Target, cutlass: CutlassTree, nvcc: Nvcc, cache: Path, jobs: int,
                 timeout_s: float, regs: bool = False, rebuild: bool = False,
                 progress: bool = True, on_outcome=None) -> list[StaticOutcome]:
    """Outcome for every config, in input order. Unsupported configs are not compiled.

    Without `regs`, a config some earlier sizes build described (in any batch: described.py, by content key) is
    judged from that description, and the others are batched into translation units of up to CONFIGS_PER_TU
    consecutive configs, `jobs` built at a time (sizes_batches; sizes need no device code); a batch that
    fails falls back to one build per config so one bad config never hides the others. `rebuild` sizes every
    config again. With `regs`, each config is
    built with its device code so ptxas reports registers and spills: as its runtime harness (run.cu, the binary a
    GPU sweep launches: the same content-keyed cache entry, so one compile serves `--compile` and a later launch),
    described by `--describe`; a config whose harness does not build is built again as a describe unit with device
    code, whose log decides the row (the error is the kernel's, not the harness's).
    `on_outcome(outcome)`, when given, is called once per config as soon as its outcome is final (a batch's configs
    when that batch is described), in the order they become final: a sweep writes their rows then, not at the end.
    """
    outcomes: dict[str, StaticOutcome] = {}

    def final(o: StaticOutcome) -> None:
        outcomes[o.config.key] = o
        if on_outcome is not None:
            on_outcome(o)

    todo = []
    for c in configs:
        if c.unsupported_reason:
            final(StaticOutcome(c, Verdict.UNSUPPORTED, c.unsupported_reason))
        else:
            todo.append(c)
    singles: list[Config] = []
    if regs:
        singles = list(todo)
    else:
        unsized = []
        for c in todo:
            kept = None if rebuild else described.load(cache, c, cutlass, nvcc)
            if kept is None:
                unsized.append(c)
            else:
                final(judge(c, _info_kept(kept), target))
        groups: dict[tuple[str, str], list[Config]] = {}  # a unit is one family and arch (BuildRequest)
        for c in unsized:
            groups.setdefault((c.family, c.arch), []).append(c)
        batches = [b for g in groups.values() for b in _split(g, sizes_batches(len(g), jobs))]

        def batch_done(k: int, res: BuildResult) -> None:
            batch = batches[k]
            if not res.ok:
                singles.extend(batch)
                return
            try:
                desc = _describe(res.binary)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                singles.extend(batch)
                return
            for i, c in enumerate(batch):
                info = _info_from(desc[i], res)
                described.store(cache, c, cutlass, nvcc, desc[i], info.compile_seconds, len(batch),
                                res.binary.parent.name)
                final(judge(c, info, target))

        on_batch = _once(batch_done)
        _each(build_many([BuildRequest("describe", tuple(b), with_device=False) for b in batches], cutlass, nvcc,
                         cache, jobs, timeout_s, "sizing (batched)", rebuild, progress, on_result=on_batch), on_batch)
        order = {c.key: i for i, c in enumerate(todo)}
        singles.sort(key=lambda c: order[c.key])  # batches finish in any order; singles are built in input order
    retry: list[Config] = []
    if regs:  # the runtime harnesses a GPU sweep of these configs launches (build.harness_batches: the same entries)
        fallback = _harness_pass(harness_batches(singles), target, cutlass, nvcc, cache, jobs, timeout_s, rebuild,
                                 progress, final)
        order = {c.key: i for i, c in enumerate(todo)}
        singles = sorted(fallback, key=lambda c: order[c.key])

    def single_done(k: int, res: BuildResult) -> None:
        c = singles[k]
        if not res.ok:
            o = _failed(c, res)
            if c.stages == 0 and family(c.family).explicit_stages and too_few_stages(res.log):
                outcomes[c.key] = o  # not final: the two-stage build below puts bytes on it
                retry.append(c)
            else:
                final(o)
            return
        try:
            desc = _describe(res.binary)[0]
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            final(StaticOutcome(c, Verdict.COMPILE_ERROR, f"describe failed: {exc}", log=res.log))
            return
        info = _info_from(desc, res)
        if not regs:
            described.store(cache, c, cutlass, nvcc, desc, info.compile_seconds, 1, res.binary.parent.name)
        final(judge(c, info, target))

    on_single = _once(single_done)
    _each(build_many([BuildRequest("describe", (c,), with_device=regs) for c in singles], cutlass, nvcc, cache, jobs,
                     timeout_s, "compiling" if regs else "sizing (per config)", rebuild, progress,
                     on_result=on_single), on_single)
    for c, o in zip(retry, _two_stage_numbers(retry, target, cutlass, nvcc, cache, jobs, timeout_s, progress)):
        final(o)
    return [outcomes[c.key] for c in configs]


def _harness_pass(groups: list[tuple[Config, ...]], target: Target, cutlass: CutlassTree, nvcc: Nvcc, cache: Path,
                  jobs: int, timeout_s: float, rebuild: bool, progress: bool, final) -> list[Config]:
    """Build the runtime harnesses of `groups` (each one host half and a kernel half per config) and give `final`
    the outcome of every config its harness describes. A group of several that does not build says nothing about
    which config broke it: its configs are built again one per harness. Returns the configs whose own harness did
    not build or describe itself (the caller sizes them the static probe's way)."""
    fallback: list[Config] = []
    alone: list[Config] = []

    def done(k: int, res: BuildResult) -> None:
        group = groups[k]
        if not res.ok and len(group) > 1:
            alone.extend(group)
            return
        for c in group:
            o = static_from_run(c, res, target)
            if o is None:
                fallback.append(c)
            else:
                final(o)

    on_done = _once(done)
    _each(build_many([BuildRequest("run", g) for g in groups], cutlass, nvcc, cache, jobs, timeout_s, "compiling",
                     rebuild, progress, on_result=on_done), on_done)
    if alone:
        fallback += _harness_pass([(c,) for c in alone], target, cutlass, nvcc, cache, jobs, timeout_s, rebuild,
                                  progress, final)
    return fallback


def _once(handle):
    """`handle(i, result)` that remembers which i it was given (.seen), so _each does not give them again."""
    def h(i: int, res: BuildResult) -> None:
        h.seen.add(i)
        handle(i, res)
    h.seen = set()
    return h


def _each(results: list[BuildResult], handle) -> None:
    """Hand over the results build_many returned that its on_result did not (a stand-in build_many calls none)."""
    for i, res in enumerate(results):
        if i not in handle.seen:
            handle(i, res)


def _two_stage_numbers(configs: list[Config], target: Target, cutlass: CutlassTree, nvcc: Nvcc, cache: Path,
                       jobs: int, timeout_s: float, progress: bool = True) -> list[StaticOutcome]:
    """For auto-carveout configs that died on CUTLASS's 'Stages set to value 2 or more' static_assert: build the
    same tile with exactly 2 stages to put bytes on why (the smallest pipeline, and how far over the limit it is)."""
    twos = [replace(c, stages=2) for c in configs]
    out = []
    twos_out = probe_static(twos, target, cutlass, nvcc, cache, jobs, timeout_s, progress=progress) if twos else []
    for c, two in zip(configs, twos_out):
        why = "CUTLASS static_assert 'Stages set to value 2 or more': the auto carveout fits fewer than 2 stages"
        if two.verdict is Verdict.SMEM_OVER_LIMIT and two.info.smem_bytes is not None:
            err = OutOfResources("SharedStorage", two.info.smem_bytes, target.smem_optin)
            out.append(StaticOutcome(c, Verdict.SMEM_OVER_LIMIT, f"{why}; with 2 stages {err}", two.info, two.log))
        else:
            out.append(StaticOutcome(c, Verdict.COMPILE_ERROR, f"{why}; with 2 stages: {two.verdict.value}: "
                                                               f"{two.reason}", two.info, two.log))
    return out


# A sizes-only translation unit is nearly all fixed cost: parsing CUTLASS and CuTe once; each config adds only the
# class-level instantiation of its kernel type. Measured (results/benchmarks/static_tu.jsonl, 2 cores): the 18-config
# default sm120 set cost 20.7 CPU s in one unit and 42.5 in two of 9. So a unit holds up to this many configs before
# another is started: splitting a smaller set only buys wall time where idle cores absorb a second parse. The cap
# holds with any --jobs (a set of more than 32 configs is built in ceil(n / 32) units, --jobs at a time): that costs
# one parse per 32 configs where a single unit would have held them all, and buys rows on disk unit by unit.
CONFIGS_PER_TU = 32
CONFIGS_PER_TU_ENV = "TILEPROBE_CONFIGS_PER_TU"  # a smaller cap: less memory per nvcc, rows on disk sooner


def configs_per_tu() -> int:
    """CONFIGS_PER_TU, or $TILEPROBE_CONFIGS_PER_TU when set (a whole number >= 1; anything else is one line)."""
    raw = os.environ.get(CONFIGS_PER_TU_ENV)
    if raw is None:
        return CONFIGS_PER_TU
    if not raw.strip().isdigit() or int(raw) < 1:
        raise UsageError(f"{CONFIGS_PER_TU_ENV}={raw!r}: must be a whole number of at least 1")
    return int(raw)


def sizes_batches(n: int, jobs: int) -> int:
    """How many sizes-only translation units `n` configs are built in: ceil(n / configs_per_tu()), `jobs` at a
    time. A unit never holds more than that many configs, so a large sweep's rows land unit by unit (probe_static's
    on_outcome) and a killed sweep loses at most the units it was compiling, not the whole set."""
    return max(1, -(-n // configs_per_tu()))


def _split(items: list, n: int) -> list[list]:
    """Into at most n non-empty runs of consecutive items, as equal as can be (stable content for a stable cache
    key; consecutive, so the first unit to finish gives the first rows in config order)."""
    n = min(n, len(items))
    size, extra = divmod(len(items), n) if n else (0, 0)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def static_from_run(config: Config, build: BuildResult, target: Target) -> StaticOutcome | None:
    """The static outcome of a config from its runtime harness build (run.cu --describe): sizes from the binary that
    is launched, registers and spills from its ptxas report (evidence `compiled`). None when that build failed or
    cannot describe itself: the caller sizes the config the static probe's own way (probe_static)."""
    if not build.ok or build.binary is None:
        return None
    index = build.index_of(config)
    try:
        desc = _describe(build.binary, args=("--describe", "--config-index", str(index)))[index]
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError, OSError):
        return None
    return judge(config, _info_from(desc, build, index), target)
