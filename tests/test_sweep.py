"""The sweep's model-skip path with a GPU present (a fake H200: fake harnesses, no GPU) and the not-runnable-here
rows of configs the model skipped: nothing the model skipped is built or launched, and no row says it was."""

import json
from dataclasses import replace
from pathlib import Path

from _fakes import fake_harness
from rich.console import Console

from tileprobe import predict, sweep
from tileprobe.predict import modeled
from tileprobe.backends.cutlass import pipeline, runtime
from tileprobe.backends.cutlass.build import BuildResult
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results.writer import load_rows
from tileprobe.results.rows import Outcome, StaticInfo
from tileprobe.targets import profile
from tileprobe.backends.cutlass.toolchain import CutlassTree
from tileprobe.verdict import Verdict


def _h200(index=0):
    return replace(profile("h200"), gpu_index=index, device_name="NVIDIA H200", driver="580.0")


def test_model_skip_with_a_gpu_present_builds_and_launches_only_what_may_fit(tmp_path, monkeypatch, rng):
    seed = rng.randrange(10**6)
    dev = _h200()
    tiles = ["128x128x128", rng.choice(["256x256x128", "256x128x256"])]
    stages = sorted(rng.sample([4, 5, 6], 2))
    limit = dev.smem_optin
    want_fit = {(t, s) for t in tiles for s in stages
                if predict.smem_bytes("sm90-fp8", t, "cooperative", stages=s, cutlass_version="4.5.0") <= limit}
    assert 0 < len(want_fit) < len(tiles) * len(stages)  # some fit, some do not (the model's numbers)

    built: list[str] = []

    def fake_build(req, *a, **k):  # one harness build per config; it describes itself at the model's sizes
        (c,) = req.configs
        built.append(c.key)
        m = modeled.model(c, "4.5.0")
        desc = {"index": 0, "stages": m.stages, "smem_bytes": m.smem_bytes, "smem_mainloop_bytes": None,
                "smem_epilogue_bytes": None, "cutlass_cap_bytes": None, "max_threads": 384, "min_blocks": 1,
                "kernel_type": "fake"}
        exe = fake_harness(tmp_path, {}, name=f"h{len(built)}", describe=desc)
        return BuildResult(req, True, exe, "", 0.1, True, [])

    def no_static_probe(*a, **k):
        raise AssertionError("with a GPU, the sizes come from the harness build (run.cu --describe)")

    monkeypatch.setattr(sweep, "resolve_target", lambda name, gpus=None: (dev, [dev]))
    monkeypatch.setattr(sweep, "probe_static", no_static_probe)
    monkeypatch.setattr(pipeline, "probe_static", no_static_probe)
    monkeypatch.setattr(sweep, "find_cutlass", lambda d=None: _tree())
    monkeypatch.setattr(sweep.preflight, "check_cutlass", lambda *a: None)  # a stand-in tree: nothing to compile
    monkeypatch.setattr(pipeline, "build", fake_build)
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {"copy_gbps": 4000.0})
    opts = sweep.SweepOptions(family="sm90-fp8", tiles=tiles, schedules=["cooperative"], stages=stages,
                              epilogues=["no-c"], model_skip=True, out=tmp_path / "out", jobs=1,
                              workload={"presets": ["qwen3-30b-a3b"], "batches": [rng.choice([1, 8, 64])],
                                        "seed": seed})
    sweep.run(opts, Console(quiet=True))
    rows = load_rows(tmp_path / "out")
    fit_keys = {r["config"] for r in rows if (r["tile"], r["stages"]) in want_fit}
    assert set(built) == fit_keys and len(built) == len(fit_keys)  # one build each; the rest neither built nor launched
    static = [r for r in rows if not r.get("workload") and r["config"] in fit_keys]
    assert len(static) == len(fit_keys) and {r["evidence"] for r in static} == {"compiled"}
    launched = [r for r in rows if r.get("workload")]
    assert launched and {r["config"] for r in launched} == fit_keys
    skipped = [r for r in rows if r["config"] not in fit_keys]
    assert skipped and all(not r.get("workload") for r in skipped)
    for r in skipped:
        assert r["verdict"] == "smem-over-limit" and r["evidence"] == "predicted"
        assert r["prediction"].startswith("not measured") and r["predicted_smem_bytes"] == r["smem_bytes"] > limit
        assert "predicted, not compiled" in r["reason"]


def _tree():  # a stand-in CUTLASS tree: version 4.5.0, no headers read
    return CutlassTree((Path("/nonexistent/cutlass/include"),), "4.5.0", "test", "0" * 16)


def test_a_skipped_config_on_a_gpu_of_another_arch_says_nothing_was_built(tmp_path, rng):
    """An SM120 sweep on an H200 host with --model-skip: the configs the model skipped get not-runnable-here rows
    whose evidence is `predicted` and whose reason says nothing was built."""
    target = profile(rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"]))
    arch = "sm_121a" if target.cc == "12.1" else "sm_120a"
    configs = expand_configs(FAMILIES["sm120-nvfp4"], arch, ["256x256x256"], ["cooperative"], [rng.choice([3, 4])],
                             ["no-c"])
    outs = [modeled.outcome(c, target, "4.5.0") for c in configs]
    assert all(o.verdict is Verdict.SMEM_OVER_LIMIT and o.info.predicted for o in outs)
    dev = _h200(rng.randrange(4))
    plan = sweep.Plan(FAMILIES["sm120-nvfp4"], target, [], [dev], configs, [])

    class Tc:
        cutlass = _tree()

        def columns(self):
            return {"cutlass_version": "4.5.0", "cutlass_source": "test", "cutlass_hash": "0" * 16,
                    "nvcc_version": None}

    rows = sweep.foreign_rows(plan, Tc(), outs)
    assert len(rows) == len(configs)
    for r in rows:
        assert r["verdict"] == "not-runnable-here" and r["evidence"] == "predicted", r["evidence"]
        assert "nothing was built" in r["reason"] and "built for" not in r["reason"], r["reason"]
        assert r["prediction"].startswith("not measured")


def test_an_engine_family_names_the_engines_bundled_cutlass_not_a_flag(tmp_path, monkeypatch, rng):
    """flashinfer-moe compiles against its engine's own CUTLASS; with no --cutlass-dir given, rows and run.json
    say so (not 'flag'). Sizing is faked: the path under test is the toolchain record."""
    def fake_probe_static(configs, target, *a, **k):
        return [Outcome(c, Verdict.UNSUPPORTED, c.unsupported_reason) if c.unsupported_reason else
                Outcome(c, Verdict.FITS, "sized (fake)", StaticInfo(stages=2, smem_bytes=65536)) for c in configs]

    monkeypatch.setattr(sweep, "probe_static", fake_probe_static)
    tactic = rng.choice(["CtaShape128x128x128B", "CtaShape128x64x128B", "CtaShape128x32x128B"])
    out = tmp_path / "o"
    sweep.run(sweep.SweepOptions(family="flashinfer-moe", target="rtx-pro-6000", tiles=[tactic], static_only=True,
                                 out=out, jobs=1, workload={}), Console(quiet=True))
    rows = load_rows(out)
    engine = FAMILIES["flashinfer-moe"].engine()[0]
    assert rows and {r["cutlass_source"] for r in rows} == {f"{engine}'s bundled copy"}
    assert json.loads((out / "run.json").read_text())["toolchain"]["cutlass_source"] == f"{engine}'s bundled copy"
