"""Isolation without a GPU: fake harnesses that crash, hang, print garbage or fail prove every status."""

import _thread
import json
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tileprobe import runner
from tileprobe.build import BuildResult
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results import ResultsWriter, load_rows
from tileprobe.static_probe import StaticInfo, StaticOutcome
from tileprobe.targets import profile
from tileprobe.verdict import Verdict


def fake(tmp_path: Path, body: str, name: str = "harness") -> Path:
    p = tmp_path / name
    p.write_text(f"#!{sys.executable}\nimport json, os, signal, subprocess, sys, time\n" + textwrap.dedent(body))
    p.chmod(0o755)
    return p


def ok_json(rel_err, nonfinite=0, us=None):
    return json.dumps({"launch_status": "ok", "launch_reason": None, "rel_err": rel_err, "nonfinite": nonfinite,
                       "us": us or [10.0, 11.0, 9.5], "smem_optin": 232448, "smem_bytes": 1000, "stages": 4})


def test_segfault_is_crashed(tmp_path):
    r = runner.run_isolated([str(fake(tmp_path, "os.kill(os.getpid(), signal.SIGSEGV)\n"))], 30)
    assert r.verdict is Verdict.CRASHED and "SIGSEGV" in r.reason


def test_hang_is_timeout_and_the_whole_group_dies(tmp_path):
    pidfile = tmp_path / "child.pid"
    body = f"""
    c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open({str(pidfile)!r}, "w").write(str(c.pid))
    time.sleep(600)
    """
    start = time.monotonic()
    r = runner.run_isolated([str(fake(tmp_path, body))], 2)
    assert r.verdict is Verdict.TIMEOUT and "2 s" in r.reason
    assert time.monotonic() - start < 30
    grandchild = int(pidfile.read_text())
    time.sleep(0.3)
    stat = Path(f"/proc/{grandchild}/stat")
    # gone, or a zombie waiting for a reaper: either way no longer running
    assert not stat.exists() or stat.read_text().split(")")[1].split()[0] in ("Z", "X")


@pytest.mark.parametrize("body,verdict,needle", [
    ("print('Segmentation fault? no, just noise')\n", Verdict.CRASHED, "unparsable"),
    ("print('{not json')\nsys.exit(3)\n", Verdict.CRASHED, "exit code 3"),
    ("sys.stderr.write('CUDA error: an illegal memory access was encountered\\n'); sys.exit(1)\n", Verdict.CRASHED,
     "illegal memory access"),
    ("print(json.dumps({'launch_status': 'launch-error', 'launch_reason': 'initialize: kErrorInternal — "
     "cudaFuncSetAttribute(MaxDynamicSharedMemorySize=280576): invalid argument; opt-in limit 232448'}))\n",
     Verdict.LAUNCH_ERROR, "280576"),
    ("print(json.dumps({'launch_status': 'not-runnable-here', 'launch_reason': 'built for sm_120a, device is sm_90'}))\n",
     Verdict.NOT_RUNNABLE_HERE, "sm_120a"),
    ("print(json.dumps({'launch_status': 'launch-error', 'launch_reason': 'cudaMalloc(A): out of memory'}))\n",
     Verdict.LAUNCH_ERROR, "out of memory"),
])
def test_statuses(tmp_path, body, verdict, needle):
    r = runner.run_isolated([str(fake(tmp_path, body))], 30)
    assert r.verdict is verdict and needle in r.reason


def test_correctness_check(tmp_path, rng):
    tol = FAMILIES["sm90-fp8"].rel_tol
    good = rng.uniform(1e-5, tol / 2)
    bad = rng.uniform(tol * 1.5, 1.0)
    r = runner.check_correct(runner.run_isolated([str(fake(tmp_path, f"print({ok_json(good)!r})\n"))], 30), tol)
    assert r.verdict is Verdict.OK and "verified" in r.reason
    r = runner.check_correct(runner.run_isolated([str(fake(tmp_path, f"print({ok_json(bad)!r})\n"))], 30), tol)
    assert r.verdict is Verdict.INCORRECT and f"{bad:.3g}" in r.reason
    r = runner.check_correct(runner.run_isolated([str(fake(tmp_path, f"print({ok_json(good, 7)!r})\n"))], 30), tol)
    assert r.verdict is Verdict.INCORRECT and "7 non-finite" in r.reason


class Opts:
    def __init__(self, seed):
        self.workload = {"presets": ["qwen3-30b-a3b"], "batches": [1, 8], "routing": "uniform", "tp": 1, "ep": 1,
                         "seed": seed}
        self.jobs = 2
        self.compile_timeout_s = 60
        self.run_timeout_s = 3


def _setup(tmp_path, monkeypatch, behaviours):
    """Configs whose 'builds' are fake harnesses with the given behaviours; a fake H200 device."""
    fam = FAMILIES["sm90-fp8"]
    configs = expand_configs(fam, "sm_90a", ["128x128x128", "128x256x128", "256x128x128"], ["cooperative"])
    outcomes = [StaticOutcome(c, Verdict.FITS, "static", StaticInfo(stages=4, smem_bytes=1000, threads_per_cta=384))
                for c in configs]
    bins = [fake(tmp_path, b, f"h{i}") for i, b in enumerate(behaviours)]

    def fake_build_many(requests, *a, **k):
        return [BuildResult(r, True, bins[i], "", 0.1, True, []) for i, r in enumerate(requests)]

    monkeypatch.setattr(runner, "build_many", fake_build_many)
    monkeypatch.setattr(runner, "measure_copy_gbps", lambda i: 4000.0)
    dev = profile("h200").__class__(**{**profile("h200").__dict__, "name": "gpu0", "gpu_index": 0})
    return outcomes, dev


class Tc:
    def columns(self):
        return {"cutlass_version": "x", "cutlass_source": "test", "cutlass_hash": "h", "nvcc_version": "13.0"}

    cutlass = nvcc = cache = None


def test_every_status_in_one_sweep_and_resume_after_interrupt(tmp_path, monkeypatch):
    from rich.console import Console

    seed = random.randrange(10**6)
    behaviours = [f"print({ok_json(0.001, us=[5.0, 5.5, 6.0])!r})\n", "os.kill(os.getpid(), signal.SIGSEGV)\n",
                  "time.sleep(60)\n"]
    outcomes, dev = _setup(tmp_path, monkeypatch, behaviours)
    target = profile("h200")
    out = tmp_path / "out"
    writer = ResultsWriter(out)
    real_write = writer.write
    calls = {"n": 0}

    def interrupting_write(row):
        real_write(row)
        calls["n"] += 1
        if calls["n"] == 4:
            _thread.interrupt_main()  # Ctrl-C in the middle of the sweep, delivered to the main thread

    monkeypatch.setattr(writer, "write", interrupting_write)
    with pytest.raises(KeyboardInterrupt):
        runner.runtime_rows(Opts(seed), Tc(), target, [dev], outcomes, writer, Console(quiet=True))
    writer.close()
    done = len(load_rows(out))
    assert 4 <= done < 3 * len(runner.points_for(["qwen3-30b-a3b"], None, [1, 8], "uniform", 1, 1, seed))

    writer = ResultsWriter(out, resume=True)
    runner.runtime_rows(Opts(seed), Tc(), target, [dev], outcomes, writer, Console(quiet=True))
    writer.close()
    rows = load_rows(out)
    points = len(runner.points_for(["qwen3-30b-a3b"], None, [1, 8], "uniform", 1, 1, seed))
    assert len(rows) == 3 * points
    assert len({(r["config"], r["gemm"], r["batch"]) for r in rows}) == len(rows)  # no duplicates
    by_cfg = {}
    for r in rows:
        by_cfg.setdefault(r["tile"], set()).add(r["verdict"])
    assert by_cfg == {"128x128x128": {"ok"}, "128x256x128": {"crashed"}, "256x128x128": {"timeout"}}
    ok = next(r for r in rows if r["verdict"] == "ok")
    assert ok["us_median"] == 5.5 and ok["gbps"] > 0 and ok["pct_copy_bw"] > 0 and ok["gpu_index"] == 0


def test_one_process_answers_many_points_and_a_crash_costs_only_its_point(tmp_path, monkeypatch):
    """Answers the first point of its file, then segfaults on the second: the runner restarts for the rest."""
    from rich.console import Console

    body = f"""
    path = sys.argv[sys.argv.index("--problems") + 1]
    points = sum(1 for l in open(path) if l.startswith("point"))
    print({ok_json(0.001)!r}, flush=True)
    if points > 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    """
    outcomes, dev = _setup(tmp_path, monkeypatch, [body, body, body])
    outcomes = outcomes[:1]
    seed = random.randrange(10**6)
    with ResultsWriter(tmp_path / "out") as w:
        rows = runner.runtime_rows(Opts(seed), Tc(), profile("h200"), [dev], outcomes, w, Console(quiet=True))
    n = len(runner.points_for(["qwen3-30b-a3b"], None, [1, 8], "uniform", 1, 1, seed))
    assert n == 4
    assert [r["verdict"] for r in rows] == ["ok", "crashed", "ok", "crashed"]
    assert "SIGSEGV" in rows[1]["launch_reason"]
