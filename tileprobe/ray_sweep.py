"""`tileprobe sweep --ray ADDRESS`: one Ray task per shard (`--shard i/n` of the same sweep), then `tileprobe merge`.

Each task runs `sweep.run` on its node with the shard's own results folder under `<out>/ray-shards/<i>-of-<n>/`, so
rows are on disk the moment they are measured (append-and-flush, as in every sweep): a task that fails or is killed
loses none of its finished rows, and `--resume` re-runs only the shards that did not finish, each resuming its own
folder. Rows are not returned to the driver for that reason; so `--out` must be a path every node shares. The driver
then merges the shard folders into `<out>` with `merge.merge` (the same code as `tileprobe merge`: unsharded order,
no duplicates, mixed toolchains refused).

Ray is an optional extra (`pip install 'tileprobe[ray]'`). Importing it costs seconds, which every other command
would pay if it were imported at the top: its presence is checked here with find_spec, and the module is a
tileprobe.lazy.LazyModule, loaded only when a `--ray` sweep starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from tileprobe import sweep as sw
from tileprobe.errors import UsageError
from tileprobe.families import family
from tileprobe.lazy import LazyModule
from tileprobe.results.merge import merge
from tileprobe.results.writer import load_rows, row_key
from tileprobe.results.rows import now
from tileprobe.reports.terminal import WIDTH
from tileprobe.backends.cutlass.toolchain import family_cutlass

HAVE_RAY = importlib.util.find_spec("ray") is not None
ray = LazyModule("ray")
SHARDS_DIR = "ray-shards"
SHARD_JSON = "shard.json"  # in each shard folder: where and when it ran; complete once its sweep returned
RAY_JSON = "ray.json"  # in --out: the cluster, the shard count and each shard's fate


@dataclass
class RaySweep:
    out: Path
    shards: int
    rows: list[dict] = field(default_factory=list)  # rows written by the shards that ran this time
    ran: list[int] = field(default_factory=list)  # shard indices run this time
    skipped: list[int] = field(default_factory=list)  # complete from an earlier run (--resume)
    failed: dict[int, str] = field(default_factory=dict)  # shard index -> one line: why


def shard_dir(out: Path, i: int, n: int) -> Path:
    return Path(out) / SHARDS_DIR / f"{i}-of-{n}"


def _ray():
    """The ray module (see the module docstring for why it is loaded here, not at the top)."""
    if not HAVE_RAY:
        raise UsageError("--ray needs Ray, an optional extra: pip install 'tileprobe[ray]'")
    return ray.load()


def _absolute(opts: sw.SweepOptions) -> sw.SweepOptions:
    """Paths the tasks read, made absolute: a Ray worker does not start in the driver's working directory."""

    def ab(p):
        return None if p is None else str(Path(p).expanduser().absolute())

    return replace(opts, out=Path(ab(opts.out)), cutlass_dir=ab(opts.cutlass_dir), cache_dir=ab(opts.cache_dir),
                   nvcc=ab(opts.nvcc) if opts.nvcc and os.sep in opts.nvcc else opts.nvcc)


def validate(opts: sw.SweepOptions) -> None:
    """Every option checked on the driver, before Ray starts: bad input is one line here, not n failed tasks."""
    if opts.gpus is not None:
        raise UsageError("--gpus does not apply with --ray: Ray gives each shard's task one GPU of its node")
    if opts.shard is not None:
        raise UsageError("--shard does not apply with --ray: --ray runs every shard (--ray-shards sets how many)")
    fixed = family(opts.family).cutlass_root if opts.family else None
    if fixed and opts.cutlass_dir:
        raise UsageError(f"{opts.family} compiles against its engine's own CUTLASS; --cutlass-dir does not apply")
    cutlass = family_cutlass(family(opts.family) if opts.family else None, opts.cutlass_dir)
    sw.plan(replace(opts, static_only=True, gpus=None), cutlass.version)


def shard_argv(argv: list[str], i: int, n: int, out: Path, seed: int) -> list[str]:
    """The plain command that sweeps shard i/n into `out`: the driver's arguments without --ray, --ray-shards, --out
    and --seed, then --shard, --out and --seed. It is what the shard's run.json records as its command."""
    drop = {"--ray", "--ray-shards", "--out", "--seed"}
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        elif not any(a.startswith(d + "=") for d in drop):
            kept.append(a)
    return [*kept, "--shard", f"{i}/{n}", "--out", str(out), "--seed", str(seed)]


def shard_task(opts: sw.SweepOptions, i: int, n: int, argv: list[str]) -> dict:
    """One shard, inside a Ray worker: the ordinary sweep of configs j with j % n == i into its own folder.
    `argv`: the shard's plain command (shard_argv), set as this worker's sys.argv while it runs, because sweep.run
    records sys.argv as the command (a Ray worker's own argv says nothing about the sweep)."""
    ctx = ray.get_runtime_context()
    folder = Path(opts.out)
    folder.mkdir(parents=True, exist_ok=True)
    info = {"shard": [i, n], "complete": False, "started": now(), "host": socket.gethostname(), "pid": os.getpid(),
            "node_id": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    (folder / SHARD_JSON).write_text(json.dumps(info, indent=1))
    start = time.perf_counter()
    worker_argv, sys.argv = sys.argv, [sys.argv[0], *argv]
    try:
        rows = sw.run(opts, Console(width=WIDTH))  # Ray forwards the worker's output to the driver's terminal
    finally:
        sys.argv = worker_argv
    info.update(complete=True, finished=now(), wall_s=round(time.perf_counter() - start, 2), new_rows=len(rows))
    (folder / SHARD_JSON).write_text(json.dumps(info, indent=1))
    return {"info": info, "rows": rows}


def _complete(folder: Path, n: int) -> bool:
    try:
        info = json.loads((folder / SHARD_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(info.get("complete")) and info.get("shard", [None, None])[1] == n


def _earlier(out: Path) -> dict:
    try:
        return json.loads((out / RAY_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _sayer(console):
    """One progress line, never wrapped (a log is read line by line)."""
    return lambda text: console.print(text, highlight=False, soft_wrap=True)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    cause = getattr(exc, "cause", None)
    if isinstance(cause, UsageError):
        return str(cause)
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run(opts: sw.SweepOptions, console, address: str, shards: int | None = None) -> RaySweep:
    """The sweep as n Ray tasks, merged into opts.out. `address`: 'local' starts Ray in this process (every core and
    GPU of this machine), 'auto' joins the cluster `ray start` made here, anything else is a Ray address."""
    ray = _ray()
    if shards is not None and shards < 1:
        raise UsageError("--ray-shards must be at least 1")
    validate(opts)
    opts = _absolute(opts)
    out = opts.out
    earlier = _earlier(out) if opts.resume else {}
    if earlier.get("shards") and shards and shards != earlier["shards"]:
        raise UsageError(f"--resume: {out} holds a --ray sweep of {earlier['shards']} shards; pass --ray-shards "
                         f"{earlier['shards']} (or leave it out)")
    seed = opts.workload.get("seed", -1)
    if seed < 0 and opts.resume:
        seed = earlier.get("seed", -1)
    if seed < 0:
        seed = random.randrange(2**31)  # one seed for every shard: it is part of each row's identity
    opts = replace(opts, workload=dict(opts.workload, seed=seed))

    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=True)
        else:
            ray.init(address=address, log_to_driver=True)
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    launches = gpus > 0 and not (opts.static_only or opts.predict_only)
    # A launching task asks for one GPU and one CPU (two such tasks must fit a node beside each other); a static task
    # compiles --jobs at once, so it asks for that many CPUs, at most what the largest node has (else it never runs).
    largest = max((int(nd["Resources"].get("CPU", 0)) for nd in ray.nodes() if nd.get("Alive")), default=1)
    cpus = 1 if launches else max(1, min(opts.jobs, largest))
    n = shards or earlier.get("shards") or max(1, gpus if launches else int(resources.get("CPU", 1)) // cpus)
    if not launches:
        opts = replace(opts, static_only=True)  # a task without a GPU of its own must not launch on a shared one
    out.mkdir(parents=True, exist_ok=True)
    res = RaySweep(out, n)
    todo = []
    for i in range(n):
        folder = shard_dir(out, i, n)
        if opts.resume and _complete(folder, n):
            res.skipped.append(i)
        else:
            todo.append(i)
    say = _sayer(console)
    say(f"Ray at {address}: {int(resources.get('CPU', 0))} CPU(s), {gpus} GPU(s) in the cluster; "
        f"{n} shard(s), one task each with {'one GPU' if launches else f'{cpus} CPU(s) (static: no GPU asked)'}; seed "
        f"{seed}; shard folders under {out / SHARDS_DIR}" + (f"; {len(res.skipped)} complete from the earlier run"
                                                             if res.skipped else ""))
    task = ray.remote(num_cpus=cpus, num_gpus=1 if launches else 0, max_retries=0)(shard_task)
    pending = {task.remote(replace(opts, out=shard_dir(out, i, n), shard=(i, n)), i, n,
                           shard_argv(sys.argv[1:], i, n, shard_dir(out, i, n), seed)): i for i in todo}
    record = {"address": address, "shards": n, "seed": seed, "gpu_per_task": 1 if launches else 0, "cpu_per_task": cpus,
              "cluster": {k: resources[k] for k in ("CPU", "GPU") if k in resources}, "date": now(), "shard_runs": {}}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    got = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    res.failed[i] = _one_line(exc)
                    say(f"[red]shard {i}/{n} failed: {res.failed[i]}[/]")
                    continue
                res.ran.append(i)
                res.rows += got["rows"]
                info = got["info"]
                record["shard_runs"][str(i)] = info
                say(f"shard {i}/{n} done on {info['host']} (GPU {','.join(info['gpu_ids']) or 'none'}): "
                    f"{info['new_rows']} new row(s) in {info['wall_s']} s "
                    f"[{len(res.ran) + len(res.skipped)}/{n} complete]")
    finally:
        for i in res.failed:
            record["shard_runs"][str(i)] = {"failed": res.failed[i]}
        record["shard_runs"] = earlier.get("shard_runs", {}) | record["shard_runs"]
        (out / RAY_JSON).write_text(json.dumps(record, indent=1))
    folders = [shard_dir(out, i, n) for i in range(n) if (shard_dir(out, i, n) / "results.jsonl").is_file()]
    if folders:
        merged = merge(folders, out, command=sw.command_line())
        new = {row_key(r) for r in res.rows}
        res.rows = [r for r in load_rows(out) if row_key(r) in new]  # this run's rows, in the merged order
        say(f"merged {len(folders)} shard folder(s) into {out}: {merged.rows} rows"
            + (f", {merged.duplicates} duplicate(s) dropped" if merged.duplicates else ""))
    if res.failed:
        say(f"[red]{len(res.failed)} of {n} shard(s) did not finish ({', '.join(map(str, sorted(res.failed)))})"
            f"; their finished rows are kept; run the same command with --resume to complete[/]")
    return res
