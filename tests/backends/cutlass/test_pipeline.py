"""The main job with a GPU (tileprobe.backends.cutlass.pipeline): one harness build per config serves its static row
and its launches, and builds overlap launches. The first test uses the real nvcc (the harness describes the kernel it
launches exactly as the static probe's own build sizes it); the others use fake harnesses (tests/_fakes.py) behind a
fake H200, because their subject is the scheduling and the fallbacks, not the compiler."""

import threading
import time
from dataclasses import replace

import pytest
from _fakes import fake_harness
from rich.console import Console

from tileprobe.backends.cutlass import pipeline, runtime
from tileprobe.backends.cutlass.build import BuildRequest, BuildResult, build
from tileprobe.backends.cutlass.static_probe import probe_static, static_from_run
from tileprobe.families import FAMILIES, Config, expand_configs, parse_tile
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.results.writer import ResultsWriter, load_rows
from tileprobe.targets import profile
from tileprobe.verdict import Verdict
from tileprobe.workloads import points_for


@pytest.mark.nvcc
def test_the_harness_describes_the_kernel_it_launches_as_the_static_probe_sizes_it(toolchain):
    """The runtime harness of the GPU tests' fp8 config (test_gpu.py builds the same one: one compile per session)
    answers --describe with the very numbers the sizes-only describe build gives, and its static row claims
    `compiled` (ptxas ran: registers known) where the sizes-only row claims `sized`. The sizes-only numbers come from
    the default sm90-fp8 set's one unit, the config among them: the unit the h200 known-good check builds too, so the
    session compiles it once."""
    cfg = Config("sm90-fp8", parse_tile("128x128x128", 8), "cooperative", 0, "no-c", False, "sm_90a")
    target = profile("h200")
    tc = toolchain
    harness = build(BuildRequest("run", (cfg,)), tc.cutlass, tc.nvcc, tc.cache, 1800)
    assert harness.ok, harness.log[-2000:]
    merged = static_from_run(cfg, harness, target)
    defaults = [c for c in expand_configs(FAMILIES["sm90-fp8"], "sm_90a") if not c.unsupported_reason]
    keys = [c.key for c in defaults]
    assert cfg.key in keys
    alone = probe_static(defaults, target, tc.cutlass, tc.nvcc, tc.cache, 1, 1800)[keys.index(cfg.key)]
    assert alone.config.key == cfg.key
    assert merged is not None and merged.verdict is alone.verdict is Verdict.FITS
    for field in ("stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes", "cutlass_cap_bytes",
                  "threads_per_cta", "min_blocks"):
        assert getattr(merged.info, field) == getattr(alone.info, field), field
    assert merged.info.smem_bytes > 0 and merged.info.regs_per_thread and merged.info.regs_per_thread > 0
    row_m = make_row(cfg, target, {}, merged)
    row_a = make_row(cfg, target, {}, alone)
    assert (row_m["evidence"], row_a["evidence"]) == ("compiled", "sized")


class Tc:
    cutlass = nvcc = cache = None

    def columns(self):
        return {"cutlass_version": "x", "cutlass_source": "test", "cutlass_hash": "h", "nvcc_version": "13.0"}


def _desc(smem):
    return {"index": 0, "stages": 4, "smem_bytes": smem, "smem_mainloop_bytes": smem - 2048,
            "smem_epilogue_bytes": 1024, "cutlass_cap_bytes": 232448, "max_threads": 384, "min_blocks": 1,
            "kernel_type": "fake"}


def _job(rng, configs_n, monkeypatch, per_harness=1):
    """`per_harness`: TILEPROBE_HARNESS_CONFIGS (1: one config per harness build, the subject of most tests here;
    the batches' own test sets its own)."""
    configs = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["128x128x128", "128x256x128", "256x128x128"],
                             ["cooperative"])[:configs_n]
    monkeypatch.setenv("TILEPROBE_HARNESS_CONFIGS", str(per_harness))
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {"copy_gbps": 4000.0})
    dev = replace(profile("h200"), gpu_index=0)
    seed = rng.randrange(10**6)
    points = points_for(["qwen3-30b-a3b"], None, [1, 8], "uniform", 1, 1, seed)
    return configs, runtime.RuntimeJob(points, seed, [dev], [], Tc(), 4, 60, 5), dev


def test_builds_overlap_launches_and_each_config_launches_as_soon_as_its_build_is_ready(tmp_path, monkeypatch, rng):
    """A quick build and a slow one: the quick config's points are launched (its harness started) while the slow
    build still runs; both configs get one static row (from their own build, evidence `compiled`) and every point."""
    configs, job, dev = _job(rng, 2, monkeypatch)
    slow_s = 2.0 + rng.random()
    log = tmp_path / "starts.log"
    finished: dict[str, float] = {}
    started: dict[str, float] = {}

    nices: dict[int, int] = {}

    def fake_build(req, *a, **k):
        (c,) = req.configs
        i = configs.index(c)
        nices[i] = a[5]  # build(req, cutlass, nvcc, cache, timeout_s, rebuild, nice)
        time.sleep(slow_s if i == 1 else 0.05)
        exe = fake_harness(tmp_path, {}, name=f"h{i}", describe=_desc(100_000 + 1024 * i), log=log)
        finished[c.key] = time.monotonic()
        return BuildResult(req, True, exe, "", 0.1, False, [])

    real_probe = runtime.probe_config

    def timed_probe(cfg, *a, **k):
        started.setdefault(cfg.key, time.monotonic())
        return real_probe(cfg, *a, **k)

    monkeypatch.setattr(pipeline, "build", fake_build)
    monkeypatch.setattr(runtime, "probe_config", timed_probe)
    statics: list[Outcome] = []
    with ResultsWriter(tmp_path / "out") as w:
        outs, rows = pipeline.probe_and_launch(configs, profile("h200"), job, w, Console(quiet=True), statics.append)
    quick, slow = configs
    assert started[quick.key] < finished[slow.key]  # the GPU did not wait for the last build
    assert nices == {0: 1, 1: 2}  # below the harness (nice 0); the later config's one CPU priority lower
    assert [o.config.key for o in outs] == [quick.key, slow.key] and len(statics) == 2
    assert all(o.verdict is Verdict.FITS and o.info.compiled for o in outs)
    assert [o.info.smem_bytes for o in outs] == [100_000, 101_024]  # each config's own build described it
    assert len(rows) == 2 * len(job.points) and {r["verdict"] for r in rows} == {"ok"}
    assert len(load_rows(tmp_path / "out")) == len(rows)
    assert job.phases["build_s"] >= slow_s and job.phases["gpu_busy_s"] > 0


def test_a_harness_that_fails_to_build_is_sized_the_static_probes_way_and_its_points_say_so(tmp_path, monkeypatch,
                                                                                          rng):
    """A failed harness build costs no evidence: the config is sized by the static probe's own (sizes-only) build,
    its static row is that probe's, and each of its points gets the harness's compile error; a config that builds
    is unaffected. Nothing is blamed on a launch that never happened."""
    configs, job, dev = _job(rng, 2, monkeypatch)
    bad = rng.choice(configs)
    sized_by_probe: list[str] = []

    def fake_build(req, *a, **k):
        (c,) = req.configs
        if c.key == bad.key:
            return BuildResult(req, False, None, "run.cu(12): error: harness-only failure", 1.0, False, [])
        exe = fake_harness(tmp_path, {}, name=f"h{configs.index(c)}", describe=_desc(90_000))
        return BuildResult(req, True, exe, "", 0.1, False, [])

    def fake_probe_static(cfgs, target, *a, **k):
        sized_by_probe.extend(c.key for c in cfgs)
        return [Outcome(c, Verdict.FITS, "sized (fake)", StaticInfo(stages=3, smem_bytes=95_000, threads_per_cta=384))
                for c in cfgs]

    monkeypatch.setattr(pipeline, "build", fake_build)
    monkeypatch.setattr(pipeline, "probe_static", fake_probe_static)
    statics: list[Outcome] = []
    with ResultsWriter(tmp_path / "out") as w:
        outs, rows = pipeline.probe_and_launch(configs, profile("h200"), job, w, Console(quiet=True), statics.append)
    assert sized_by_probe == [bad.key]
    by_key = {o.config.key: o for o in outs}
    assert by_key[bad.key].reason == "sized (fake)" and not by_key[bad.key].info.compiled
    good = next(c for c in configs if c.key != bad.key)
    assert by_key[good.key].info.compiled and by_key[good.key].info.smem_bytes == 90_000
    bad_rows = [r for r in rows if r["config"] == bad.key]
    assert len(bad_rows) == len(job.points)
    assert all(r["verdict"] == "compile-error" and "harness-only failure" in r["reason"] for r in bad_rows)
    assert {r["verdict"] for r in rows if r["config"] == good.key} == {"ok"}


def test_the_gpu_is_never_idle_while_a_build_is_ready(tmp_path, monkeypatch, rng):
    """Builds finishing one after another while the GPU is busy: every config waits in the queue only while the
    worker is running another one, so queue waits add up to less than the GPU's busy time."""
    configs, job, dev = _job(rng, 3, monkeypatch)
    lock = threading.Lock()
    order = []

    def fake_build(req, *a, **k):
        (c,) = req.configs
        time.sleep(0.05 * configs.index(c))
        with lock:
            order.append(c.key)
        exe = fake_harness(tmp_path, {}, name=f"s{configs.index(c)}", default="slow", describe=_desc(80_000))
        return BuildResult(req, True, exe, "", 0.1, False, [])

    monkeypatch.setattr(pipeline, "build", fake_build)
    with ResultsWriter(tmp_path / "out") as w:
        outs, rows = pipeline.probe_and_launch(configs, profile("h200"), job, w, Console(quiet=True), lambda o: None)
    assert len(rows) == 3 * len(job.points)
    first_rows = [next(i for i, r in enumerate(rows) if r["config"] == k) for k in order]
    assert first_rows == sorted(first_rows)  # launched in the order their builds became ready
    assert job.phases["queue_wait_s"] < job.phases["gpu_busy_s"]


@pytest.mark.parametrize("batch_builds", [True, False])
def test_one_host_half_serves_a_batch_and_a_batch_that_fails_is_built_config_by_config(tmp_path, monkeypatch, rng,
                                                                                      batch_builds):
    """Three configs, up to three per harness: the first config is built alone and the next two share one host half
    (build.harness_batches). Each config of the batch gets its own description (--config-index) and its points run
    with its own index (the fake answers with the index's bytes: any other would put a 'differs' note on the row).
    A batch that does not build says nothing about which config broke it: each is built alone, so the config that
    fails alone gets its own compile error and the other is launched."""
    configs, job, dev = _job(rng, 3, monkeypatch, per_harness=3)
    requests: list[tuple] = []
    bad = rng.choice(configs[1:])
    smem = {c.key: 90_000 + 1024 * i for i, c in enumerate(configs)}

    def fake_build(req, *a, **k):
        requests.append(tuple(c.key for c in req.configs))
        if len(req.configs) > 1 and not batch_builds or req.configs == (bad,) and not batch_builds:
            return BuildResult(req, False, None, "run.cu(12): error: harness-only failure", 1.0, False, [])
        descs = [dict(_desc(smem[c.key]), index=i) for i, c in enumerate(req.configs)]
        # named by what it holds: builds run on threads, so a name from len(requests) could be read after another
        # build's append and two harnesses would share one file
        exe = fake_harness(tmp_path, {}, name="h" + "_".join(str(configs.index(c)) for c in req.configs),
                           describe=descs)
        return BuildResult(req, True, exe, "", 0.1, False, [])

    monkeypatch.setattr(pipeline, "build", fake_build)
    monkeypatch.setattr(pipeline, "probe_static", lambda cfgs, *a, **k: [
        Outcome(c, Verdict.FITS, "sized (fake)", StaticInfo(stages=3, smem_bytes=95_000, threads_per_cta=384))
        for c in cfgs])
    with ResultsWriter(tmp_path / "out") as w:
        outs, rows = pipeline.probe_and_launch(configs, profile("h200"), job, w, Console(quiet=True), lambda o: None)
    keys = [c.key for c in configs]
    if batch_builds:
        assert sorted(requests) == sorted([(keys[0],), (keys[1], keys[2])])
    else:
        assert sorted(requests) == sorted([(keys[0],), (keys[1], keys[2]), (keys[1],), (keys[2],)])
    by_key = {o.config.key: o for o in outs}
    for c in configs:
        mine = [r for r in rows if r["config"] == c.key]
        assert len(mine) == len(job.points)
        if c is bad and not batch_builds:
            assert by_key[c.key].reason == "sized (fake)"
            assert all(r["verdict"] == "compile-error" and "harness-only failure" in r["reason"] for r in mine)
        else:
            assert by_key[c.key].info.compiled and by_key[c.key].info.smem_bytes == smem[c.key]
            assert all(r["verdict"] == "ok" and "differs" not in r["reason"] for r in mine), mine
