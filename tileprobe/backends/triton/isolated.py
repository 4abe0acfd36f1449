"""Triton launches in a child process: the configs of one problem (a GEMM at one batch) are launched and checked by
`python -m tileprobe.backends.triton.isolated WORK` (a child of its own session), which makes the inputs and their
fp64 reference once and then runs the configs one by one, announcing each before it starts and printing one answer
line per config (the CUTLASS harness's protocol, read by tileprobe.backends.cutlass.runner.run_points).

A config whose launch raises (a Triton OutOfResources, a CUDA error) is answered `launch_status: error` and the
child ends, since a CUDA error can leave the context unusable for every later launch (an illegal address is
sticky); the configs not yet started go to a fresh child. A child that dies during a config (a signal) blames that
config (`crashed`), one that gives no answer within `timeout_s` of the config's start is killed (`timeout`; the
first config's window includes the child's start-up and the reference); later configs are unaffected. A child that
ends before starting any config (it could not make the inputs) gives every remaining config a launch-error row with
its stderr's tail.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

import tileprobe
from tileprobe.backends.cutlass.runner import Answer, Died, Ended, run_points
from tileprobe.backends.triton import runtime as rt
from tileprobe.backends.triton.compile import KernelJob, one_line
from tileprobe.backends.triton.source import KernelSource, load
from tileprobe.results import tolerance
from tileprobe.results.classify import ProbeResult, classify
from tileprobe.verdict import Verdict

DEFAULT_TIMEOUT_S = 600.0  # per config: the first one's includes torch's import, the inputs, the fp64 reference
EXIT_AFTER_ERROR = 3


def run_configs(source: KernelSource, cache: Path, p: rt.Problem, seed: int, jobs: list[KernelJob],
                bounds: list[tolerance.Bound], l2_bytes: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S,
                device: str = "cuda", dtype=None, timed: bool = True,
                corrupt_group: int | None = None) -> list[ProbeResult]:
    """One ProbeResult per job (in order): the check's verdict (classify: ok / incorrect), or launch-error, crashed,
    timeout. Nothing raised for a config's own failure. `corrupt_group` (TILEPROBE_FAULT corrupt at this point): each
    config's output has that group's block corrupted before its check (runtime.corrupt)."""
    results: dict[int, ProbeResult] = {}
    left = list(range(len(jobs)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(tileprobe.__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    expected = p.m * p.top_k * p.n
    while left:
        with tempfile.TemporaryDirectory(prefix="tileprobe-triton-") as tmp:
            work = Path(tmp) / "work.pkl"
            work.write_bytes(pickle.dumps({
                "source": source, "cache": str(cache), "problem": p, "seed": seed, "device": device, "dtype": dtype,
                "l2_bytes": l2_bytes, "timed": timed, "corrupt_group": corrupt_group,
                "jobs": [(i, jobs[i], bool(dict(jobs[i].kwargs).get("naive_block_assignment", False)), bounds[i])
                         for i in left]}))
            cmd = [sys.executable, "-m", "tileprobe.backends.triton.isolated", str(work)]
            ended = None
            for ev in run_points(cmd, timeout_s, env):
                if isinstance(ev, Answer) and ev.point in left and ev.point not in results:
                    results[ev.point] = classify(ev.data, expected)
                elif isinstance(ev, Died) and ev.point in left and ev.point not in results:
                    results[ev.point] = ProbeResult(ev.verdict, ev.reason, {})
                elif isinstance(ev, Ended):
                    ended = ev
        before = len(left)
        left = [i for i in left if i not in results]
        if left and len(left) == before:  # the child started none of them: it cannot make this problem's inputs
            why = (f"the launch process ended before its first config (exit {ended.returncode if ended else '?'})"
                   f"{': ' + ended.stderr_tail if ended and ended.stderr_tail else ''}")
            for i in left:
                results[i] = ProbeResult(Verdict.LAUNCH_ERROR, why, {"launch_status": "error", "launch_reason": why})
            left = []
    return [results[i] for i in range(len(jobs))]


def _say(d: dict) -> None:
    print(json.dumps(d), flush=True)


def main(argv: list[str]) -> int:
    w = pickle.loads(Path(argv[0]).read_bytes())
    p = w["problem"]
    kernel = load(w["source"], Path(w["cache"]))
    prepared = rt.prepare(p, w["seed"], w["device"], w["dtype"])
    for i, job, naive, bound in w["jobs"]:
        _say({"event": "start", "point": i})
        try:
            got = rt.run_point(kernel, job, p, w["seed"], w["device"], bound, w["l2_bytes"], naive, w["dtype"],
                               w["timed"], prepared, w.get("corrupt_group"))
        except Exception as exc:  # the launch's own error: that config's row; the rest go to a fresh process
            _say({"point": i, "launch_status": "error", "launch_reason": one_line(exc)})
            return EXIT_AFTER_ERROR
        got.pop("verified")
        _say({"point": i, "launch_status": "ok", **got})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
