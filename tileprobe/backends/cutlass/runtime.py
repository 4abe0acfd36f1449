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
from tileprobe.backends.cutlass.timing import (check_bound, harness_command, measure_refs, point_timeout, rotation_sets,
                                               timing_columns)
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
    """Build every config's harness, then launch each config's points (Launcher). The sweep's main job with a GPU
    goes through tileprobe.backends.cutlass.pipeline instead, where builds and launches overlap."""
    tc = job.toolchain
    statics = {o.config.key: o for o in job.outcomes if o.verdict not in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR)}
    cfgs = [o.config for o in job.outcomes if o.config.key in statics]
    start = time.perf_counter()
    refused = {c.key for c in cfgs if refusal(c)}  # never built: their points are answered without a launch
    built = iter(build_many([BuildRequest("run", (c,)) for c in cfgs if c.key not in refused], tc.cutlass, tc.nvcc,
                            tc.cache, job.jobs, job.compile_timeout_s, "runtime harnesses", job.rebuild))
    builds = [None if c.key in refused else next(built) for c in cfgs]
    job.phases["build_s"] = time.perf_counter() - start
    with Launcher(job, writer, console) as launcher:
        for cfg, b in zip(cfgs, builds):
            launcher.put(cfg, statics[cfg.key], b)
    return launcher.rows


class Launcher:
    """One worker thread per GPU takes configs off a queue as they are put (a config with its static outcome and
    its harness build) and answers their points; every outcome becomes a row (rows.make_row) as soon as it is known.
    Workers start at once and measure their GPU's references while the first builds run; a worker waits only while
    no build is ready, so the GPU is never idle while a built config waits. Phases (seconds, into job.phases):
    launch_s (from start to the last row), refs_s, gpu_busy_s (harness processes running), gpu_idle_s (workers
    waiting for a build), queue_wait_s (built configs waiting for a busy GPU)."""

    def __init__(self, job: RuntimeJob, writer, console):
        self.job, self.writer = job, writer
        self.statics: dict[str, Outcome] = {}
        self.rows: list[dict] = []
        self.lock = threading.Lock()
        self.tasks: queue.Queue = queue.Queue()
        self.fed = threading.Event()  # every config has been put
        self.stop = threading.Event()
        self.finished = [threading.Event() for _ in job.devices]
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
        self.bar = None
        self.total = 0
        for k in ("refs_s", "gpu_busy_s", "gpu_idle_s", "queue_wait_s"):
            job.phases.setdefault(k, 0.0)

    def __enter__(self) -> "Launcher":
        self.progress.start()
        self.bar = self.progress.add_task("launches", total=0)
        self.start = time.perf_counter()
        for i, (d, done) in enumerate(zip(self.job.devices, self.finished)):
            threading.Thread(target=self._worker, args=(d, done), name=f"gpu{d.gpu_index}-w{i}", daemon=True).start()
        return self

    def put(self, cfg: Config, static: Outcome, build: BuildResult | None) -> None:
        """Queue one config's points not yet recorded; `build` None for a config the family refuses to launch."""
        job = self.job
        self.statics[cfg.key] = static
        runs = family(cfg.family).runs_point
        left = [(i, p) for i, p in enumerate(job.points) if (runs is None or runs(cfg, p)) and not any(
            self.writer.has(row_key({"config": cfg.key, "target": d.name, "seed": job.seed} | p.columns()))
            for d in job.devices[:1])]
        if left:
            with self.lock:
                self.total += len(left)
                self.progress.update(self.bar, total=self.total)
            self.tasks.put((cfg, build, left, time.perf_counter()))

    def __exit__(self, exc_type, exc, tb) -> None:
        self.fed.set()
        try:
            if exc_type is not None:
                raise exc
            for done in self.finished:
                while not done.wait(0.2):  # wake regularly so Ctrl-C reaches the main thread
                    pass
            self.job.phases["launch_s"] = time.perf_counter() - self.start
        except BaseException:
            self.stop.set()  # workers kill their running probes and end; every written row stays
            for done in self.finished:
                done.wait(30)
            raise
        finally:
            self.progress.stop()

    def _add(self, key: str, seconds: float) -> None:
        with self.lock:
            self.job.phases[key] = self.job.phases.get(key, 0.0) + seconds

    def emit(self, cfg: Config, device: Target, res: ProbeResult, point: Point, pid: int) -> None:
        job, static = self.job, self.statics[cfg.key]
        d = res.data
        runtime = {"gpu_index": device.gpu_index, "device_name": device.device_name,
                   "worker": threading.current_thread().name, "launch_status": d.get("launch_status") or res.verdict.value,
                   "launch_reason": d.get("launch_reason"), "smem_limit_device_bytes": d.get("smem_optin"),
                   "seed": job.seed, "point_id": pid,
                   **{k: d.get(k) for k in ("rel_err", "atol", "rtol", "tolerance", "checked_elements",
                                            "bad_elements", "bad_groups", "worst_group", "worst_ratio")},
                   **timing_columns(d, point, cfg, device, job.refs.get(device.gpu_index, {}))}
        peer_us = job.peer_us.get(device.gpu_index, {}).get(pid) if job.peer else None
        if job.peer:
            runtime.update(peer=job.peer, peer_us=peer_us,
                           speedup=round(peer_us / runtime["us_median"], 3) if peer_us and runtime.get("us_median")
                           else None)
        row = make_row(cfg, device, job.toolchain.columns(), Outcome(cfg, res.verdict, res.reason, static.info),
                       runtime, point.columns())
        with self.lock:
            self.writer.write(row)
            self.rows.append(row)
            self.progress.advance(self.bar)

    def _worker(self, device: Target, done: threading.Event) -> None:
        job = self.job
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=child_visible_devices(device.gpu_index))
        try:
            if device.gpu_index not in job.refs:  # each worker measures its own GPU, in parallel with the others
                t0 = time.perf_counter()
                job.refs[device.gpu_index] = measure_refs(device.gpu_index)
                self._add("refs_s", time.perf_counter() - t0)
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    cfg, build, left, queued = self.tasks.get(timeout=0.2)
                except queue.Empty:
                    self._add("gpu_idle_s", time.perf_counter() - t0)
                    if self.fed.is_set() and self.tasks.empty():
                        return
                    continue
                taken = time.perf_counter()
                self._add("gpu_idle_s", taken - t0)
                self._add("queue_wait_s", taken - queued)
                if job.peer and device.gpu_index not in job.peer_us:  # the peer's rotation follows the family's bits
                    job.peer_us[device.gpu_index] = peer.measure(device.gpu_index, [
                        (i, rotation_sets(p, cfg, device), [list(x) for x in p.problems])
                        for i, p in enumerate(job.points)])
                try:
                    probe_config(cfg, self.statics[cfg.key], build, left, device, env, job.seed, job.run_timeout_s,
                                 self.emit, self.stop)
                except Stopped:
                    return
                finally:
                    self._add("gpu_busy_s", time.perf_counter() - taken)
        finally:
            done.set()


def probe_config(cfg: Config, static: Outcome, build: BuildResult, points: list[tuple[int, Point]], device: Target,
                 env: dict, seed: int, timeout_s: float, emit, stop: threading.Event | None = None) -> None:
    """All points of one config on one device. `points` are (stable id, point) pairs; `build` is None for a config
    the family refuses to launch."""
    why = refusal(cfg)
    if why or build is None:
        for pid, point in points:
            emit(cfg, device, ProbeResult(Verdict.UNSUPPORTED, f"not launched: {why or 'no harness was built'}", {}),
                 point, pid)
        return
    index = build.index_of(cfg)  # the config's place in its harness (one host half may serve several)
    ptxas = build.ptxas(index) if build.ok else {}
    info = static.info  # updated in place: every row of this config (emit reads the same record) carries them
    n = len(build.request.configs)  # the build's seconds shared by the configs it built, as a batched sizing's
    info.compile_seconds, info.compile_configs = round(build.seconds / n, 1), n
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
            cmd = harness_command(build.binary, problems, cfg, seed, [by_id[i] for i in left], index)
            bound = check_bound(cfg, [by_id[i] for i in left])  # what harness_command passed
            ended: Ended | None = None
            for ev in run_points(cmd, point_timeout(timeout_s, [by_id[i] for i in left], device), env, stop):
                if isinstance(ev, Answer) and ev.point in by_id:
                    point = by_id[ev.point]
                    if ev.data.get("bad_elements") is not None:
                        ev.data["tolerance"] = bound.text
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


def refusal(cfg: Config) -> str | None:
    """Why the family will not launch this config (it is then never built as a harness), or None."""
    refuse = family(cfg.family).launch_refusal
    return refuse(cfg) if refuse else None


def _noted(res: ProbeResult, static: Outcome, device: Target) -> ProbeResult:
    d = res.data
    if d.get("smem_bytes") is not None and static.info.smem_bytes is not None and d["smem_bytes"] != static.info.smem_bytes:
        res = replace(res, reason=res.reason + f"; note: harness SharedStorage {d['smem_bytes']} B differs from the "
                                               f"static probe's {static.info.smem_bytes} B")
    if res.verdict is Verdict.OK and static.info.smem_bytes is not None and static.info.smem_bytes > device.smem_optin:
        res = replace(res, reason=res.reason + f"; note: SharedStorage {static.info.smem_bytes} B > opt-in "
                                               f"{device.smem_optin} B yet it ran")
    return res
