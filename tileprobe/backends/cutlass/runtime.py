"""The runtime probe: build each config's harness, share configs out to one worker per GPU, and turn every point's
outcome into a row (through rows.make_row) as soon as it is known.

One harness process per config answers all its points in turn. After a crash or hang, the point that was running
gets its crashed/timeout row and a fresh process takes the points not yet started; a process that ends before
starting any point gives its points `not-run` rows (nothing is blamed on a point that never ran).
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tileprobe.backends.cutlass.build import BuildRequest, BuildResult, build_many, first_error
from tileprobe.results.classify import ProbeResult, classify
from tileprobe.families import Config, family
from tileprobe.backends.cutlass import peer
from tileprobe.results.rows import Outcome, make_row, row_key
from tileprobe.backends.cutlass.runner import Answer, Died, Ended, Stopped, run_points
from tileprobe.targets import Target, child_visible_devices
from tileprobe.backends.cutlass.timing import harness_command, measure_refs, point_timeout, rotation_sets, timing_columns
from tileprobe.verdict import Verdict
from tileprobe.workloads import Point


@dataclass
class RuntimeJob:
    """What the runtime probe needs from a sweep."""
    points: list[Point]
    seed: int
    devices: list[Target]
    outcomes: list[Outcome]  # static outcomes; unsupported / compile-error configs are not launched
    toolchain: object  # sweep.Toolchain (cutlass, nvcc, cache, columns())
    jobs: int
    compile_timeout_s: float
    run_timeout_s: float
    rebuild: bool = False
    refs: dict = field(default_factory=dict)  # per GPU index: the reference bandwidths measured by its worker
    peer: str | None = None  # "torch": time torch._scaled_grouped_mm on the same problems (FP8 families)
    peer_us: dict = field(default_factory=dict)  # per GPU index: {point id: µs or None}
    phases: dict = field(default_factory=dict)  # seconds: build_s (harness builds), launch_s (workers, incl. refs)


def runtime_rows(job: RuntimeJob, writer, console) -> list[dict]:
    tc = job.toolchain
    statics = {o.config.key: o for o in job.outcomes if o.verdict not in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR)}
    cfgs = [o.config for o in job.outcomes if o.config.key in statics]
    start = time.perf_counter()
    refused = {c.key for c in cfgs if _refusal(c)}  # never built: their points are answered without a launch
    built = iter(build_many([BuildRequest("run", (c,)) for c in cfgs if c.key not in refused], tc.cutlass, tc.nvcc,
                            tc.cache, job.jobs, job.compile_timeout_s, "runtime harnesses", job.rebuild))
    builds = [None if c.key in refused else next(built) for c in cfgs]
    job.phases["build_s"] = time.perf_counter() - start
    rows: list[dict] = []
    lock = threading.Lock()
    tasks: queue.Queue = queue.Queue()
    for cfg, b in zip(cfgs, builds):
        runs = family(cfg.family).runs_point
        left = [(i, p) for i, p in enumerate(job.points) if (runs is None or runs(cfg, p)) and not any(
            writer.has(row_key({"config": cfg.key, "target": d.name, "seed": job.seed} | p.columns()))
            for d in job.devices[:1])]
        if left:
            tasks.put((cfg, b, left))
    total = sum(len(t[2]) for t in tasks.queue)
    refs = job.refs

    def emit(cfg: Config, device: Target, res: ProbeResult, point: Point, pid: int) -> None:
        static = statics[cfg.key]
        d = res.data
        runtime = {"gpu_index": device.gpu_index, "device_name": device.device_name,
                   "worker": threading.current_thread().name, "launch_status": d.get("launch_status") or res.verdict.value,
                   "launch_reason": d.get("launch_reason"), "smem_limit_device_bytes": d.get("smem_optin"),
                   "seed": job.seed, "point_id": pid,
                   **{k: d.get(k) for k in ("rel_err", "atol", "rtol", "checked_elements", "bad_elements",
                                            "bad_groups", "worst_group", "worst_ratio")},
                   **timing_columns(d, point, cfg, device, refs.get(device.gpu_index, {}))}
        peer_us = job.peer_us.get(device.gpu_index, {}).get(pid) if job.peer else None
        if job.peer:
            runtime.update(peer=job.peer, peer_us=peer_us,
                           speedup=round(peer_us / runtime["us_median"], 3) if peer_us and runtime.get("us_median")
                           else None)
        row = make_row(cfg, device, tc.columns(), Outcome(cfg, res.verdict, res.reason, static.info), runtime,
                       point.columns())
        with lock:
            writer.write(row)
            rows.append(row)
            progress.advance(bar)

    stop = threading.Event()
    finished = [threading.Event() for _ in job.devices]

    def worker(device: Target, done: threading.Event) -> None:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=child_visible_devices(device.gpu_index))
        try:
            if device.gpu_index not in refs:  # each worker measures its own GPU, in parallel with the others
                refs[device.gpu_index] = measure_refs(device.gpu_index)
                if job.peer:
                    cfg0 = statics[next(iter(statics))].config
                    job.peer_us[device.gpu_index] = peer.measure(device.gpu_index, [
                        (i, rotation_sets(p, cfg0, device), [list(x) for x in p.problems])
                        for i, p in enumerate(job.points)])
            while not stop.is_set():
                try:
                    cfg, build, left = tasks.get_nowait()
                except queue.Empty:
                    return
                try:
                    probe_config(cfg, statics[cfg.key], build, left, device, env, job.seed, job.run_timeout_s,
                                 emit, stop)
                except Stopped:
                    return
        finally:
            done.set()

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as progress:
        bar = progress.add_task("launches", total=total)
        start = time.perf_counter()
        for i, (d, done) in enumerate(zip(job.devices, finished)):
            threading.Thread(target=worker, args=(d, done), name=f"gpu{d.gpu_index}-w{i}", daemon=True).start()
        try:
            for done in finished:
                while not done.wait(0.2):  # wake regularly so Ctrl-C reaches the main thread
                    pass
            job.phases["launch_s"] = time.perf_counter() - start
        except KeyboardInterrupt:
            stop.set()  # workers kill their running probes and end; every written row stays
            for done in finished:
                done.wait(30)
            raise
    return rows


def probe_config(cfg: Config, static: Outcome, build: BuildResult, points: list[tuple[int, Point]], device: Target,
                 env: dict, seed: int, timeout_s: float, emit, stop: threading.Event | None = None) -> None:
    """All points of one config on one device. `points` are (stable id, point) pairs; `build` is None for a config
    the family refuses to launch."""
    why = _refusal(cfg)
    if why or build is None:
        for pid, point in points:
            emit(cfg, device, ProbeResult(Verdict.UNSUPPORTED, f"not launched: {why or 'no harness was built'}", {}),
                 point, pid)
        return
    ptxas = build.ptxas() if build.ok else {}
    info = static.info  # updated in place: every row of this config (emit reads the same record) carries them
    info.compile_seconds, info.compile_configs = round(build.seconds, 1), 1  # one harness per config
    if ptxas:
        info.regs_per_thread = ptxas["regs"]
        info.spill_bytes = ptxas["spill_stores"] + ptxas["spill_loads"]
    if not build.ok:
        for pid, point in points:
            emit(cfg, device, ProbeResult(Verdict.COMPILE_ERROR, first_error(build.log), {}), point, pid)
        return
    if cfg.arch != device.arch:
        res = ProbeResult(Verdict.NOT_RUNNABLE_HERE, f"built for {cfg.arch}, GPU {device.gpu_index} is "
                          f"sm_{device.cc_int} ({device.device_name}): not launched", {})
        for pid, point in points:
            emit(cfg, device, res, point, pid)
        return
    by_id = dict(points)
    left = [pid for pid, _ in points]
    while left:
        answered: set[int] = set()
        with tempfile.TemporaryDirectory(prefix="tileprobe-") as tmp:
            problems = Path(tmp) / "problems.txt"
            problems.write_text("".join(
                f"point {rotation_sets(by_id[i], cfg, device)} {i}\n" +
                "".join(f"{m} {n} {k}\n" for m, n, k in by_id[i].kernel_problems(cfg.swap_ab)) for i in left))
            cmd = harness_command(build.binary, problems, cfg, seed, [by_id[i] for i in left])
            ended: Ended | None = None
            for ev in run_points(cmd, point_timeout(timeout_s, [by_id[i] for i in left], device), env, stop):
                if isinstance(ev, Answer) and ev.point in by_id:
                    point = by_id[ev.point]
                    emit(cfg, device, _noted(classify(ev.data, expected_elements(cfg, point, ev.data)), static,
                                             device), point, ev.point)
                    answered.add(ev.point)
                elif isinstance(ev, Died) and ev.point in by_id:
                    emit(cfg, device, ProbeResult(ev.verdict, ev.reason, {}), by_id[ev.point], ev.point)
                    answered.add(ev.point)
                elif isinstance(ev, Ended):
                    ended = ev
        if not answered:  # the process ended without starting any point: they are not run, not crashed
            why = f"harness ended (exit {ended.returncode if ended else '?'}) before starting this point"
            tail = ended.stderr_tail if ended else ""
            for pid in left:
                emit(cfg, device, ProbeResult(Verdict.NOT_RUN, f"{why}; stderr: {tail}" if tail else why, {}),
                     by_id[pid], pid)
            return
        left = [i for i in left if i not in answered]


def expected_elements(cfg: Config, point: Point, data: dict) -> int | None:
    """How many output elements a full check of this point compares: the family's count (an epilogue with its own
    output), else every group's M x N."""
    count = family(cfg.family).checked_count
    return count(cfg, point, data) if count else sum(m * n for m, n, _ in point.problems)


def _refusal(cfg: Config) -> str | None:
    refusal = family(cfg.family).launch_refusal
    return refusal(cfg) if refusal else None


def _noted(res: ProbeResult, static: Outcome, device: Target) -> ProbeResult:
    d = res.data
    if d.get("smem_bytes") is not None and static.info.smem_bytes is not None and d["smem_bytes"] != static.info.smem_bytes:
        res = replace(res, reason=res.reason + f"; note: harness SharedStorage {d['smem_bytes']} B differs from the "
                                               f"static probe's {static.info.smem_bytes} B")
    if res.verdict is Verdict.OK and static.info.smem_bytes is not None and static.info.smem_bytes > device.smem_optin:
        res = replace(res, reason=res.reason + f"; note: SharedStorage {static.info.smem_bytes} B > opt-in "
                                               f"{device.smem_optin} B yet it ran")
    return res
