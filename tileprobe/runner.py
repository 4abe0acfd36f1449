"""Running harnesses: one process (and process group) per probe, with a timeout, on one or more GPUs.

A probe's fate - a JSON answer, a crash, a hang, garbage - is classified here into a verdict and a one-line reason;
`sweep.make_row` turns it into a row. The sweep goes on whatever one probe does.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tileprobe.build import BuildRequest, build_many
from tileprobe.families import Config
from tileprobe.static_probe import StaticOutcome
from tileprobe.targets import Target
from tileprobe.verdict import Verdict
from tileprobe.workloads import Point, points_for


@dataclass
class ProbeResult:
    verdict: Verdict
    reason: str
    data: dict  # the harness's JSON ({} when it gave none)


class Stopped(Exception):
    """The sweep was interrupted while this probe ran; its process group was killed and no row is written."""


def run_isolated(cmd: list[str], timeout_s: float, env: dict | None = None,
                 stop: threading.Event | None = None) -> ProbeResult:
    """Run a harness for one point in its own session and classify what happened."""
    return next(iter(run_points(cmd, 1, timeout_s, env, stop)))


def run_points(cmd: list[str], count: int, timeout_s: float, env: dict | None = None,
               stop: threading.Event | None = None):
    """Run one harness process (own session, own process group) that answers `count` points, one JSON line each.

    Yields a ProbeResult per point as soon as its line arrives. `timeout_s` bounds the wait for each point. If the
    process crashes, hangs or prints garbage, the point it was on gets crashed/timeout and the generator stops; the
    caller starts a fresh process for the points that remain. The child is in its own session, so a Ctrl-C on the
    terminal does not reach it: `stop` is polled instead, and when set the child's group is killed and Stopped raised.
    """
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    except OSError as exc:
        yield ProbeResult(Verdict.CRASHED, f"cannot start harness: {exc.strerror}", {})
        return
    lines: queue.Queue = queue.Queue()
    err_tail: list[str] = []
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    threading.Thread(target=_pump_tail, args=(proc.stderr, err_tail), daemon=True).start()
    answered = 0
    try:
        while answered < count:
            deadline = time.monotonic() + timeout_s
            line = None
            while True:
                if stop is not None and stop.is_set():
                    raise Stopped()
                try:
                    line = lines.get(timeout=min(0.25, max(0.01, deadline - time.monotonic())))
                    break
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        _kill_group(proc)
                        proc.wait()
                        yield ProbeResult(Verdict.TIMEOUT,
                                          f"no answer within {timeout_s:.0f} s; process group killed", {})
                        return
            if line is None:  # stdout closed: the process is ending
                rc = proc.wait()
                tail = (err_tail[-1] if err_tail else "")[:160]
                if rc < 0:
                    sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
                    yield ProbeResult(Verdict.CRASHED, f"harness killed by {sig}; stderr: {tail}", {})
                elif answered == 0 or rc != 0:
                    yield ProbeResult(Verdict.CRASHED, f"unparsable harness output (exit code {rc}); stderr: {tail}",
                                      {})
                return  # exited cleanly after some points: the caller restarts for the rest
            data = _parse_line(line)
            if data is None:
                continue  # noise between answers
            answered += 1
            yield classify(data)
    except BaseException:  # Ctrl-C, stop, or the consumer closing the generator early
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()


def _pump(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _pump_tail(stream, tail: list[str]) -> None:
    for line in stream:
        if line.strip():
            tail.append(line.strip())
            del tail[:-5]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parse_line(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        d = json.loads(line)
    except json.JSONDecodeError:
        return None
    return d if isinstance(d, dict) and "launch_status" in d else None


def classify(data: dict, returncode: int = 0, rel_tol: float | None = None) -> ProbeResult:
    status = data.get("launch_status")
    reason = data.get("launch_reason") or ""
    if status == "not-runnable-here":
        return ProbeResult(Verdict.NOT_RUNNABLE_HERE, reason, data)
    if status != "ok":
        return ProbeResult(Verdict.LAUNCH_ERROR, reason or f"launch status {status!r}", data)
    if returncode:
        return ProbeResult(Verdict.CRASHED, f"harness reported ok but exited {returncode}", data)
    return ProbeResult(Verdict.OK, "", data)


def check_correct(result: ProbeResult, rel_tol: float) -> ProbeResult:
    if result.verdict is not Verdict.OK:
        return result
    rel, bad = result.data.get("rel_err"), result.data.get("nonfinite") or 0
    if rel is None:
        return replace(result, reason="launched; correctness not checked")
    if bad or not math.isfinite(rel) or rel > rel_tol:
        why = f"{bad} non-finite outputs (unwritten or NaN); " if bad else ""
        return ProbeResult(Verdict.INCORRECT, f"{why}rel. Frobenius error {rel:.3g} > tolerance {rel_tol:g}",
                           result.data)
    return replace(result, reason=f"verified: rel. Frobenius error {rel:.2e} <= {rel_tol:g}")


def timing_columns(data: dict, point: Point, config: Config, device: Target, copy_gbps: float | None) -> dict:
    us = [float(x) for x in data.get("us") or [] if x and x > 0]
    if not us:
        return {}
    med = statistics.median(us)
    fam = config.fam
    nbytes = point.bytes_moved(fam.ab_bits, fam.sf_vector, config.epilogue == "with-c")
    gbps = nbytes / (med * 1e-6) / 1e9
    return {"us_median": round(med, 3), "us_spread": round(max(us) - min(us), 3),
            "tflops": round(point.flops() / (med * 1e-6) / 1e12, 2), "gbps": round(gbps, 1),
            "pct_peak_bw": round(100 * gbps / device.peak_gbps, 1) if device.peak_gbps else None,
            "pct_copy_bw": round(100 * gbps / copy_gbps, 1) if copy_gbps else None}


def rotation_sets(point: Point, config: Config, device: Target) -> int:
    """Enough input sets that rotating through them spans 4x the L2, so small problems are not timed in cache."""
    fam = config.fam
    per_set = point.bytes_moved(fam.ab_bits, fam.sf_vector, config.epilogue == "with-c")
    return max(1, min(16, math.ceil(4 * device.l2_bytes / max(per_set, 1))))


_COPY_SNIPPET = """
import torch, sys
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device='cuda'); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize(); s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize()
print(2 * x.numel() * 20 / (s.elapsed_time(e) * 1e-3) / 1e9)
"""


def measure_copy_gbps(gpu_index: int) -> float | None:
    """Device-to-device copy bandwidth (bytes read + written), measured once per device in a child process."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu_index))
    try:
        p = subprocess.run([sys.executable, "-c", _COPY_SNIPPET], capture_output=True, text=True, timeout=120,
                           env=env)
        return round(float(p.stdout.strip().splitlines()[-1]), 1)
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        return None


def harness_command(binary: Path, problems_file: Path, seed: int, rotate: int) -> list[str]:
    # Each of 7 repeats times ~10 ms of launches (3..400 launches), after 5 warm-up launches; median over repeats.
    return [str(binary), "--problems", str(problems_file), "--seed", str(seed), "--rotate", str(rotate),
            "--warmup", "5", "--iters", "400", "--target-ms", "10", "--repeats", "7"]


def runtime_rows(opts, tc, target: Target, devices: list[Target], outcomes: list[StaticOutcome], writer,
                 console) -> list[dict]:
    """Build the run harness of every config that compiled, then probe every (config, point) on the devices."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    from tileprobe.sweep import make_row  # noqa: PLC0415

    w = opts.workload
    seed = w["seed"]
    points = points_for(w.get("presets"), w.get("shapes"), w.get("batches"), w.get("routing", "uniform"),
                        w.get("tp", 1), w.get("ep", 1), seed)
    statics = {o.config.key: o for o in outcomes if o.verdict not in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR)}
    todo_cfgs = [o.config for o in outcomes if o.config.key in statics]
    builds = build_many([BuildRequest("run", (c,)) for c in todo_cfgs], tc.cutlass, tc.nvcc, tc.cache, opts.jobs,
                        opts.compile_timeout_s, "runtime harnesses")
    copy_bw = {d.gpu_index: measure_copy_gbps(d.gpu_index) for d in devices}
    rows: list[dict] = []
    lock = threading.Lock()
    tasks: queue.Queue = queue.Queue()
    for cfg, b in zip(todo_cfgs, builds):
        left = [p for p in points if not writer.has(_key({"config": cfg.key, "target": target.name} | p.columns()))]
        if left:
            tasks.put((cfg, b, left))  # one harness process per config answers all its points

    def emit(cfg: Config, static: StaticOutcome, device: Target, result: ProbeResult | None, point: Point) -> None:
        runtime = {"gpu_index": device.gpu_index, "device_name": device.device_name,
                   "worker": threading.current_thread().name}
        if result is not None:
            d = result.data
            runtime.update(launch_status=d.get("launch_status") or result.verdict.value,
                           launch_reason=result.reason, rel_err=d.get("rel_err"),
                           smem_limit_device_bytes=d.get("smem_optin"),
                           **timing_columns(d, point, cfg, device, copy_bw.get(device.gpu_index)))
            out = StaticOutcome(cfg, result.verdict, result.reason, static.info, static.log)
        else:
            out = static
        row = make_row(cfg, replace(device, name=target.name), tc, out, runtime, point.columns())
        with lock:
            writer.write(row)
            rows.append(row)
            progress.advance(bar)

    total = sum(len(t[2]) for t in tasks.queue)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        bar = progress.add_task("runtime probes", total=total)

        stop = threading.Event()

        # Each worker signals an Event when it ends; the main thread waits on those (an interrupted Thread.join
        # can leave a live thread looking finished).
        finished = [threading.Event() for _ in devices]

        def worker(device: Target, done: threading.Event) -> None:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(device.gpu_index))
            try:
                while not stop.is_set():
                    try:
                        cfg, build, left = tasks.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        _probe_config(cfg, statics[cfg.key], build, left, device, env, seed, opts.run_timeout_s,
                                      emit, stop)
                    except Stopped:
                        return
            finally:
                done.set()

        for i, (d, done) in enumerate(zip(devices, finished)):
            threading.Thread(target=worker, args=(d, done), name=f"gpu{d.gpu_index}-w{i}", daemon=True).start()
        try:
            for done in finished:
                while not done.wait(0.2):  # wake regularly so Ctrl-C reaches the main thread
                    pass
        except KeyboardInterrupt:
            stop.set()  # workers kill their running probes and end; every written row stays
            for done in finished:
                done.wait(30)
            raise
    return rows


def _key(row: dict) -> str:
    from tileprobe.results import row_key  # noqa: PLC0415

    return row_key(row)


def _probe_config(cfg: Config, static_outcome: StaticOutcome, build, points: list[Point], device: Target, env: dict,
                  seed: int, timeout_s: float, emit, stop: threading.Event | None = None) -> None:
    """All points of one config: one harness process answers them in turn; after a crash or hang, a fresh process
    takes the points that remain, so one bad point never costs the others."""
    ptxas = build.ptxas() if build.ok else {}
    info = replace(static_outcome.info, compile_seconds=round(build.seconds, 1))
    if ptxas:
        info.regs_per_thread = ptxas["regs"]
        info.spill_bytes = ptxas["spill_stores"] + ptxas["spill_loads"]
    static = StaticOutcome(cfg, Verdict.COMPILE_ERROR, "", info)
    if not build.ok:
        from tileprobe.build import first_error  # noqa: PLC0415

        for point in points:
            emit(cfg, replace(static, reason=first_error(build.log)), device, None, point)
        return
    if cfg.arch != device.arch:
        res = ProbeResult(Verdict.NOT_RUNNABLE_HERE, f"built for {cfg.arch}, device {device.gpu_index} is "
                          f"sm_{device.cc_int} ({device.device_name}): not launched", {})
        for point in points:
            emit(cfg, static, device, res, point)
        return
    left = list(points)
    while left:
        with tempfile.TemporaryDirectory(prefix="tileprobe-") as tmp:
            problems = Path(tmp) / "problems.txt"
            problems.write_text("".join(
                f"point {rotation_sets(p, cfg, device)}\n" + "".join(f"{m} {n} {k}\n" for m, n, k in
                                                                   p.kernel_problems(cfg.swap_ab)) for p in left))
            cmd = harness_command(build.binary, problems, seed, 1)
            done = 0
            for res in run_points(cmd, len(left), timeout_s, env, stop):
                _emit_result(cfg, static, device, left[done], res, emit)
                done += 1
        left = left[done:]


def _emit_result(cfg: Config, static: StaticOutcome, device: Target, point: Point, res: ProbeResult, emit) -> None:
    d = res.data
    if d.get("smem_bytes") is not None and d["smem_bytes"] != static.info.smem_bytes:
        res = replace(res, reason=res.reason + f"; note: harness SharedStorage {d['smem_bytes']} B differs from the "
                                               f"static probe's {static.info.smem_bytes} B")
    res = check_correct(res, cfg.fam.rel_tol)
    if res.verdict is Verdict.OK and static.info.smem_bytes is not None and static.info.smem_bytes > device.smem_optin:
        res = replace(res, reason=res.reason + f"; note: SharedStorage {static.info.smem_bytes} B > opt-in "
                                               f"{device.smem_optin} B yet it ran")
    emit(cfg, static, device, res, point)
