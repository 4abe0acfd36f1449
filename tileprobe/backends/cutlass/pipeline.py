"""The main job with a GPU: one compile per config serves its static row and its launches, and compiles overlap
launches.

Each config's runtime harness is built once (run.cu and its kernel.cu, two nvcc processes at once: build.py). The
compilers run below the harness that launches (nice 1: a launch never waits for a core) and each later config's one
CPU priority lower still, so that the first builds finish first when the compilers outnumber the cores. The static probe reads the config's sizes from that very binary
(`harness --describe`, the same description describe.cu prints, with the registers and spills of its ptxas report:
evidence `compiled`) and judges them against the target. The config then goes straight to the GPU workers
(runtime.Launcher), which take each config as soon as its build is ready while the other builds go on.

Nothing is weakened on the way: a config whose harness build fails, or cannot describe itself, is sized the static
probe's own way (probe_static: sizes-only build, CUTLASS's static_assert bytes, the two-stage retry) and its points get
the harness build's compile error, as when the two passes were separate. A config the family refuses to launch is
never built as a harness: it is sized the static probe's way and its points say why they were not launched.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable

from tileprobe.backends.cutlass.build import BuildRequest, BuildResult, build
from tileprobe.backends.cutlass.runtime import Launcher, RuntimeJob, refusal
from tileprobe.backends.cutlass.static_probe import probe_static, static_from_run
from tileprobe.families import Config
from tileprobe.results.rows import Outcome
from tileprobe.targets import Target
from tileprobe.verdict import Verdict


def probe_and_launch(configs: list[Config], target: Target, job: RuntimeJob, writer, console,
                     write_static: Callable[[Outcome], None]) -> tuple[list[Outcome], list[dict]]:
    """(static outcomes of `configs`, in input order, each passed to `write_static` as soon as it is known; the
    runtime rows written, through the Launcher, into `writer`). job.outcomes is set to the static outcomes;
    job.phases gets build_s (first submit to last build), first_build_s and the Launcher's phases."""
    tc = job.toolchain
    outcomes: dict[str, Outcome] = {}
    start = time.perf_counter()

    def accept(o: Outcome, harness: BuildResult | None, launcher: Launcher) -> None:
        outcomes[o.config.key] = o
        write_static(o)
        if o.verdict not in (Verdict.UNSUPPORTED, Verdict.COMPILE_ERROR):
            launcher.put(o.config, o, harness)

    def sized(c: Config) -> Outcome:  # the static probe's own way, with no progress bar (the Launcher shows one)
        return probe_static([c], target, tc.cutlass, tc.nvcc, tc.cache, 1, job.compile_timeout_s,
                            rebuild=job.rebuild, progress=False)[0]

    pool = ThreadPoolExecutor(max_workers=max(1, job.jobs))
    try:
        with Launcher(job, writer, console) as launcher:
            pending: dict[Future, tuple[str, Config, BuildResult | None]] = {}
            builds = 0
            for c in configs:
                if c.unsupported_reason:
                    accept(Outcome(c, Verdict.UNSUPPORTED, c.unsupported_reason), None, launcher)
                elif refusal(c):  # never built as a harness: sized, then its points answered without a launch
                    pending[pool.submit(sized, c)] = ("sized", c, None)
                else:  # compilers below the harness that launches (nice 1 and up: build's `nice`), each later
                    # config's one CPU priority lower still, so that the first builds finish first
                    pending[pool.submit(build, BuildRequest("run", (c,)), tc.cutlass, tc.nvcc, tc.cache,
                                        job.compile_timeout_s, job.rebuild, min(19, 1 + builds))] = ("run", c, None)
                    builds += 1
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in [f for f in pending if f in done]:  # several ready at once: in submission order
                    kind, c, harness = pending.pop(fut)
                    if kind == "sized":
                        accept(fut.result(), harness, launcher)
                        continue
                    res = fut.result()
                    job.phases.setdefault("first_build_s", time.perf_counter() - start)
                    o = static_from_run(c, res, target)
                    if o is None:  # the harness did not build or describe itself: size it the static probe's way
                        pending[pool.submit(sized, c)] = ("sized", c, res)
                    else:
                        accept(o, res, launcher)
            job.phases["build_s"] = time.perf_counter() - start
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    job.outcomes = [outcomes[c.key] for c in configs]
    return job.outcomes, launcher.rows
