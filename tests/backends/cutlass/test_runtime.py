"""The runtime probe without a GPU: fake harnesses (tests/_fakes.py) behind a fake H200."""

import _thread
import signal
import time
from dataclasses import replace

import pytest
from _fakes import fake_harness
from rich.console import Console

from tileprobe.backends.cutlass import runtime
from tileprobe.backends.cutlass.build import BuildResult
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results.writer import ResultsWriter, load_rows, settled
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.targets import profile
from tileprobe.verdict import Verdict
from tileprobe.workloads import points_for


class Tc:
    cutlass = nvcc = cache = None

    def columns(self):
        return {"cutlass_version": "x", "cutlass_source": "test", "cutlass_hash": "h", "nvcc_version": "13.0"}


def setup(tmp_path, monkeypatch, harnesses, seed, batches=(1, 8)):
    configs = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["128x128x128", "128x256x128", "256x128x128"],
                             ["cooperative"])[: len(harnesses)]
    outcomes = [Outcome(c, Verdict.FITS, "sized", StaticInfo(stages=4, smem_bytes=1000, threads_per_cta=384))
                for c in configs]

    log = ("ptxas info    : Function properties for _ZN7cutlass13device_kernelI\n    0 bytes stack frame, 40 bytes "
           "spill stores, 24 bytes spill loads\nptxas info    : Used 168 registers\n")

    def fake_build_many(requests, *a, **k):
        return [BuildResult(r, True, harnesses[i], log, 0.1, True, []) for i, r in enumerate(requests)]

    monkeypatch.setattr(runtime, "build_many", fake_build_many)
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {"copy_gbps": 4000.0})
    dev = replace(profile("h200"), gpu_index=0)
    points = points_for(["qwen3-30b-a3b"], None, list(batches), "uniform", 1, 1, seed)
    return runtime.RuntimeJob(points, seed, [dev], outcomes, Tc(), 2, 60, 3)


def test_sticky_error_at_point_k_costs_only_point_k(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    log = tmp_path / "starts.log"
    probe = setup(tmp_path, monkeypatch, [tmp_path / "x"], seed)
    k = rng.randrange(len(probe.points) - 1)
    probe.outcomes[0].config  # one config
    exe = fake_harness(tmp_path, {k: "sticky"}, log=log)
    monkeypatch.setattr(runtime, "build_many", lambda reqs, *a, **kw: [BuildResult(reqs[0], True, exe, "", 0.1, True, [])])
    with ResultsWriter(tmp_path / "out") as w:
        rows = runtime.runtime_rows(probe, w, Console(quiet=True))
    by_id = {r["point_id"]: r for r in rows}
    assert len(rows) == len(probe.points)  # no row lost, none doubled
    assert by_id[k]["verdict"] == "launch-error" and "IllegalAddress" in by_id[k]["reason"]
    assert all(r["verdict"] == "ok" for i, r in by_id.items() if i != k)
    starts = log.read_text().splitlines()
    assert len(starts) == 2 and starts[1].split() == [str(i) for i in range(k + 1, len(probe.points))]


def test_crash_and_hang_blame_only_their_points_and_not_run_blames_none(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    crash = fake_harness(tmp_path, {1: "segv"}, name="crash")
    hang = fake_harness(tmp_path, {2: "hang"}, name="hang")
    dead = fake_harness(tmp_path, {0: "die-before"}, name="dead")
    probe = setup(tmp_path, monkeypatch, [crash, hang, dead], seed)
    with ResultsWriter(tmp_path / "out") as w:
        rows = runtime.runtime_rows(probe, w, Console(quiet=True))
    got = {(r["tile"], r["point_id"]): r["verdict"] for r in rows}
    n = len(probe.points)
    assert len(rows) == 3 * n
    assert got[("128x128x128", 1)] == "crashed" and sum(v == "ok" for (t, _), v in got.items() if t == "128x128x128") == n - 1
    assert got[("128x256x128", 2)] == "timeout" and sum(v == "ok" for (t, _), v in got.items() if t == "128x256x128") == n - 1
    assert {v for (t, _), v in got.items() if t == "256x128x128"} == {"not-run"}


def test_resume_reruns_transient_points_and_a_settled_ok_wins(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    flaky = fake_harness(tmp_path, {0: "segv"}, name="flaky")
    probe = setup(tmp_path, monkeypatch, [flaky], seed)
    out = tmp_path / "out"
    with ResultsWriter(out) as w:
        runtime.runtime_rows(probe, w, Console(quiet=True))
    fine = fake_harness(tmp_path, {}, name="fine")
    monkeypatch.setattr(runtime, "build_many", lambda reqs, *a, **kw: [BuildResult(reqs[0], True, fine, "", 0.1, True, [])])
    with ResultsWriter(out, resume=True) as w:
        again = runtime.runtime_rows(probe, w, Console(quiet=True))
    assert [r["point_id"] for r in again] == [0]  # only the crashed point ran again
    everything = load_rows(out)
    assert len(everything) == len(probe.points) + 1  # the crash stays in the file
    assert {r["verdict"] for r in settled(everything)} == {"ok"}


def test_rows_carry_the_real_device_and_timing_columns(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    probe = setup(tmp_path, monkeypatch, [fake_harness(tmp_path, {})], seed)
    probe.devices = [replace(probe.devices[0], name="h200", device_name="NVIDIA H200")]
    with ResultsWriter(tmp_path / "out") as w:
        rows = runtime.runtime_rows(probe, w, Console(quiet=True))
    r = rows[0]
    assert r["target"] == "h200" and r["device_name"] == "NVIDIA H200" and r["seed"] == seed
    assert r["us_median"] == 5.5 and r["us_graph_median"] == 4.5 and r["launch_gap_us"] == 1.0
    assert r["l2_bytes"] == 52428800 and r["rotation_bytes"] == 209715200 and r["evidence"] == "verified"
    assert r["problems_hash"] and r["pct_copy_bw"] > 0
    assert r["regs_per_thread"] == 168 and r["spill_bytes"] == 64  # from the runtime build's ptxas report


def test_interrupt_keeps_rows_and_resume_completes(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    exes = [fake_harness(tmp_path, {}, default="slow", name=f"h{i}") for i in range(3)]
    probe = setup(tmp_path, monkeypatch, exes, seed)
    out = tmp_path / "out"
    writer = ResultsWriter(out)
    real_write, calls = writer.write, {"n": 0}

    def interrupting_write(row):
        real_write(row)
        calls["n"] += 1
        if calls["n"] == 3:
            _thread.interrupt_main()
            time.sleep(2.0)  # hold this worker so the main thread takes the Ctrl-C before more rows come

    signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever an earlier test left, Ctrl-C raises here
    monkeypatch.setattr(writer, "write", interrupting_write)
    with pytest.raises(KeyboardInterrupt):
        runtime.runtime_rows(probe, writer, Console(quiet=True))
    writer.close()
    assert 3 <= len(load_rows(out)) < 3 * len(probe.points)
    with ResultsWriter(out, resume=True) as w:
        runtime.runtime_rows(probe, w, Console(quiet=True))
    rows = load_rows(out)
    assert len(rows) == 3 * len(probe.points) and len({(r["config"], r["point_id"]) for r in rows}) == len(rows)


@pytest.mark.parametrize("arch,dtypes,verified", [("sm_120a", "nvfp4xnvfp4", True), ("sm_120a", "mxfp8xmxfp4", True),
                                                  ("sm_121a", "nvfp4xnvfp4", True), ("sm_120a", "nvfp4xnvfp4", False),
                                                  ("sm_121a", "mxfp8xmxfp4", False)])
def test_flashinfer_moe_sm120_launches_only_what_its_check_verified(tmp_path, monkeypatch, rng, arch, dtypes,
                                                                    verified):
    """On an SM120/121 GPU, flashinfer-moe variants whose reference was verified against an independent decode
    (NVFP4, MXFP8 x MXFP4; both epilogues and swaps) are built and launched; a variant outside the verified set (here
    the set emptied) is not built nor started: every point `unsupported` with the reason, never blamed."""
    from tileprobe.families import flashinfer_moe as fim
    from tileprobe.families.base import Config, Tile

    if not verified:
        monkeypatch.setattr(fim, "SM120_CHECK_VERIFIED", frozenset())

    seed = rng.randrange(10**6)
    epi = rng.choice(["default", "finalize"])
    cfg = Config("flashinfer-moe", Tile(128, 128, 128 if dtypes == "nvfp4xnvfp4" else 64), "auto", 0, epi,
                 rng.choice([False, True]), arch, (1, 1, 1), (("dtypes", dtypes), ("tactic", "CtaShape128x128x64B")))
    log = tmp_path / "starts.log"
    exe = fake_harness(tmp_path, {}, log=log, default="ok")
    built: list = []

    def fake_build_many(requests, *a, **k):
        built.extend(requests)
        return [BuildResult(r, True, exe, "", 0.1, True, []) for r in requests]

    monkeypatch.setattr(runtime, "build_many", fake_build_many)
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {"copy_gbps": 1500.0})
    prof = "dgx-spark-gb10" if arch == "sm_121a" else "rtx-pro-6000"
    dev = replace(profile(prof), gpu_index=0)
    assert dev.arch == arch
    points = points_for(None, ["4:8:4096:7168"], [1], "uniform", 1, 1, seed)
    job = runtime.RuntimeJob(points, seed, [dev], [Outcome(cfg, Verdict.FITS, "sized", StaticInfo(stages=2,
                             smem_bytes=90000, threads_per_cta=384))], Tc(), 1, 60, 3)
    monkeypatch.setattr(runtime, "expected_elements", lambda c, p, d: d.get("checked_elements"))
    with ResultsWriter(tmp_path / "out") as w:
        rows = runtime.runtime_rows(job, w, Console(quiet=True))
    assert rows
    if verified:
        assert len(built) == 1 and log.exists() and all(r["verdict"] == "ok" for r in rows)
    else:
        assert all(r["verdict"] == "unsupported" for r in rows)
        assert all("not verified" in r["reason"] and r["evidence"] == "none" for r in rows)
        assert built == [] and not log.exists()


def test_a_check_that_counted_fewer_elements_than_the_point_has_verifies_nothing(tmp_path, monkeypatch, rng):
    """checked_elements is what the harness's compare visited; one short of the point's sum of M x N: not `ok`."""
    seed = rng.randrange(10**6)
    probe = setup(tmp_path, monkeypatch, [tmp_path / "x"], seed)
    k = rng.randrange(len(probe.points))
    exe = fake_harness(tmp_path, {k: "short"})
    monkeypatch.setattr(runtime, "build_many", lambda reqs, *a, **kw: [BuildResult(reqs[0], True, exe, "", 0.1, True, [])])
    with ResultsWriter(tmp_path / "out") as w:
        rows = runtime.runtime_rows(probe, w, Console(quiet=True))
    by_id = {r["point_id"]: r for r in rows}
    want = sum(m * n for m, n, _ in probe.points[k].problems)
    assert by_id[k]["verdict"] == "unchecked" and f"counted {want - 1} elements but the point has {want}" in \
        by_id[k]["reason"]
    assert all(r["verdict"] == "ok" and r["checked_elements"] == sum(m * n for m, n, _ in probe.points[i].problems)
               for i, r in by_id.items() if i != k)
