"""The main job with a GPU: one compile per config serves its static row and its launches, and compiles overlap
launches.

Each config's runtime harness is built once: one nvcc process per config for its GEMM kernel (kernel.cu) and one
host half (run.cu) for a batch of configs (the first alone, then two, then three: build.harness_batches), all at
once (build.py). The compilers run below the harness that launches (nice 1: a launch never waits for a core) and
each later build's one CPU priority lower still, so that the first builds finish first when the compilers outnumber
the cores. A batch that does not build is built again one config per harness, so that a config's compile error is
its own. The static probe reads the config's sizes from that very binary
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

from tileprobe.backends.cutlass.build import BuildRequest, BuildResult, build, harness_batches
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
            pending: dict[Future, tuple[str, tuple[Config, ...], BuildResult | None]] = {}
            builds = 0

            def submit(group: tuple[Config, ...]) -> None:  # compilers below the harness that launches (nice 1 and
                # up: build's `nice`), each later build's one CPU priority lower still: the first finish first
                nonlocal builds
                pending[pool.submit(build, BuildRequest("run", group), tc.cutlass, tc.nvcc, tc.cache,
                                    job.compile_timeout_s, job.rebuild, min(19, 1 + builds))] = ("run", group, None)
                builds += 1

            launchable = []
            for c in configs:
                if c.unsupported_reason:
                    accept(Outcome(c, Verdict.UNSUPPORTED, c.unsupported_reason), None, launcher)
                elif refusal(c):  # never built as a harness: sized, then its points answered without a launch
                    pending[pool.submit(sized, c)] = ("sized", (c,), None)
                else:
                    launchable.append(c)
            for group in harness_batches(launchable):
                submit(group)
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in [f for f in pending if f in done]:  # several ready at once: in submission order
                    kind, group, harness = pending.pop(fut)
                    if kind == "sized":
                        accept(fut.result(), harness, launcher)
                        continue
                    res = fut.result()
                    if not res.ok and len(group) > 1:  # which config broke it is unknown: each one alone
                        for c in group:
                            submit((c,))
                        continue
                    job.phases.setdefault("first_build_s", time.perf_counter() - start)
                    for c in group:
                        o = static_from_run(c, res, target)
                        if o is None:  # the harness did not build or describe itself: size it the static probe's way
                            pending[pool.submit(sized, c)] = ("sized", (c,), res)
                        else:
                            accept(o, res, launcher)
            job.phases["build_s"] = time.perf_counter() - start
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    job.outcomes = [outcomes[c.key] for c in configs]
    return job.outcomes, launcher.rows
