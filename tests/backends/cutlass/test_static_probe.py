"""The static probe against the real nvcc and CUTLASS: sizes checked against first principles."""

import time
from dataclasses import replace

import pytest

from tileprobe.backends.cutlass import build
from tileprobe.families import FAMILIES, Config, parse_tile
from tileprobe.results.rows import StaticInfo, occupancy
from tileprobe.backends.cutlass.static_probe import judge, probe_static
from tileprobe.targets import profile
from tileprobe.verdict import Verdict

from _session_draw import carveout_k, nvfp4_stage_bytes, static_probe_unit
from _tiny_harness import tiny_smem_bytes, write_tiny_harness

pytestmark = pytest.mark.nvcc
FAM = FAMILIES["sm120-nvfp4"]
TARGET = profile("rtx-pro-6000")


per_stage_bytes = nvfp4_stage_bytes  # one pipeline stage of the SM120 NVFP4 mainloop, from first principles


def _up(x: int, a: int) -> int:
    return -(-x // a) * a


def tensor_bytes(m: int, n: int, k: int, stages: int) -> int:
    """The mainloop's shared tensors for `stages` stages, from first principles and the storage rules of the SM120
    block-scaled collective: A and B each start on a 1024-byte boundary, the A/B scale factors follow 16-byte
    aligned (one ue4m3 byte per 16 K elements, at least one 128-row atom each), and the struct, which holds
    1024-aligned members, is padded to a multiple of 1024 bytes."""
    a, b = stages * m * k // 2, stages * n * k // 2
    sfa, sfb = stages * max(m, 128) * k // 16, stages * max(n, 128) * k // 16
    end = _up(_up(a, 1024) + b, 16) + sfa
    end = _up(end, 16) + sfb
    return _up(end, 1024)


def cfg(tile: str, stages: int = 0, schedule: str = "cooperative", epilogue: str = "no-c") -> Config:
    return Config(FAM.name, parse_tile(tile, 4), schedule, stages, epilogue, False, "sm_120a")


@pytest.fixture(scope="module")
def probed(toolchain, request):
    """One sizes-only unit of random configs, the session's draw (tests/_session_draw.py: static_probe_unit): the
    tests' own seven, then the configs other tests size (test_modeled's two, the known-good checks' broken tile).
    The unit probed also holds test_described's config: tests/backends/cutlass/test_described.py builds the very
    same unit as its batch, so whichever runs first compiles it and the other is served it (or waits for it); the
    other tests' sweeps and checks are served their configs' sizes too."""
    unit = static_probe_unit()
    tiles, pick, over, configs = unit["tiles"], unit["pick"], unit["over"], unit["probe"]
    t = parse_tile(pick, 4)
    assert configs[:7] == [cfg(x) for x in tiles] + [cfg(pick, 2), cfg(pick, 3), cfg(pick, over),
                                                     cfg(pick, epilogue="with-c")]
    probed_unit = probe_static(unit["unit"], TARGET, toolchain.cutlass, toolchain.nvcc, toolchain.cache, jobs=1,
                               timeout_s=1800)
    by_key = {o.config.key: o for o in probed_unit}
    outcomes = [by_key[c.key] for c in configs]  # the tests' configs in their order (the unit holds one more)
    print("tiles", tiles, "pick", pick, "over", over)
    return {"tiles": tiles, "pick": t, "over": over, "out": outcomes}


def test_sizes_match_first_principles(probed):
    for o in probed["out"][:3]:
        t, info = o.config.tile, o.info
        assert o.verdict is Verdict.FITS, o.reason
        # tensors, then 16 B of pipeline barriers per stage, padded to the struct's 1024-byte alignment
        assert info.smem_mainloop_bytes == tensor_bytes(t.m, t.n, t.k, info.stages) + 1024, (t, info)
        assert info.smem_mainloop_bytes + info.smem_epilogue_bytes <= info.smem_bytes
        assert info.smem_bytes <= TARGET.smem_optin and info.cutlass_cap_bytes == 101376
        assert info.threads_per_cta == 384  # 1 producer + 2 consumer warp groups


def test_explicit_stages_add_exactly_one_stage(probed):
    t = probed["pick"]
    s2, s3 = probed["out"][3], probed["out"][4]
    assert (s2.info.stages, s3.info.stages) == (2, 3)
    assert s3.info.smem_bytes - s2.info.smem_bytes == \
        tensor_bytes(t.m, t.n, t.k, 3) - tensor_bytes(t.m, t.n, t.k, 2)


def test_overfull_stage_count_is_over_limit_with_bytes(probed):
    o = probed["out"][5]
    t = probed["pick"]
    s2 = probed["out"][3]
    expected = s2.info.smem_bytes + tensor_bytes(t.m, t.n, t.k, probed["over"]) - tensor_bytes(t.m, t.n, t.k, 2)
    assert o.verdict is Verdict.SMEM_OVER_LIMIT
    assert o.info.smem_bytes == expected > TARGET.smem_optin
    assert f"SharedStorage {expected} B > opt-in 101376 B by {expected - 101376} B" in o.reason
    assert occupancy(o.info, TARGET)["ctas_per_sm"] == 0


def test_c_source_epilogue_costs_shared_memory(probed):
    plain = next(o for o in probed["out"][:3] + probed["out"][3:5] if o.config.tile == probed["pick"])
    with_c = probed["out"][6]
    assert plain.config.stages == with_c.config.stages == 0
    # the bf16 C source is staged through shared memory: the epilogue grows, the carveout leaves less for stages
    assert with_c.info.smem_epilogue_bytes > plain.info.smem_epilogue_bytes
    assert with_c.info.stages <= plain.info.stages


def test_exactly_at_the_limit_fits(probed):
    o = probed["out"][0]
    exact = replace(TARGET, smem_optin=o.info.smem_bytes)
    assert judge(o.config, o.info, exact).verdict is Verdict.FITS
    one_less = replace(TARGET, smem_optin=o.info.smem_bytes - 1)
    j = judge(o.config, o.info, one_less)
    assert j.verdict is Verdict.SMEM_OVER_LIMIT and "by 1 B" in j.reason


def test_warm_probe_is_served_from_the_cache(probed, toolchain):
    configs = [o.config for o in probed["out"]]
    again = probe_static(configs, TARGET, toolchain.cutlass, toolchain.nvcc, toolchain.cache, jobs=1, timeout_s=60)
    assert [(o.verdict, o.info.smem_bytes) for o in again] == [(o.verdict, o.info.smem_bytes) for o in probed["out"]]


def test_a_failing_config_does_not_hide_the_others(toolchain, tmp_path, rng, monkeypatch):
    """A unit with a config that does not compile is built again config by config, so the failure is that config's
    row alone. The subject is that isolation, not CUTLASS's refusal (the regs test below holds CUTLASS's own error for
    this tile): the real nvcc builds the tiny describe harness (tests/_tiny_harness.py), which refuses M=96 with a
    static_assert, into a cache of this test's own."""
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny", refuse_m=96))
    goods = [cfg(t) for t in rng.sample(["128x128x128", "128x64x128", "128x256x128", "256x128x128"], 2)]
    bad = Config(FAM.name, parse_tile("96x128x128", 4), "cooperative", 0, "no-c", False, "sm_120a")  # not buildable
    configs = goods[:1] + [bad] + goods[1:]
    rng.shuffle(configs)
    out = probe_static(configs, TARGET, toolchain.cutlass, toolchain.nvcc, tmp_path / "cache", jobs=1,
                       timeout_s=600)
    for c, o in zip(configs, out):
        assert o.config == c
        if c is bad:
            assert o.verdict is Verdict.COMPILE_ERROR and o.reason and "error" in o.log and "this tile M does not build" in o.log, o.log
        else:
            assert o.verdict is Verdict.FITS and o.info.smem_bytes == tiny_smem_bytes(c.tile.m, c.tile.n, c.tile.k)
            assert o.info.compile_configs == 1  # its own unit, built again alone


# (registers per thread, warps per CTA, CTAs per SM by registers), each worked by hand from the CUDA Occupancy
# Calculator's rule for cc 9.0 and 12.0 (65536 registers per SM, allocated per warp in units of 256): e.g. 33 registers
# x 32 threads = 1056, rounded up to 1280 per warp, x 8 warps = 10240 per CTA, 65536 // 10240 = 6 (7 without the
# rounding); 49 x 32 = 1568 -> 1792, x 4 = 7168, 9 CTAs (10 without); 168 x 32 = 5376 (21 units), x 12 = 64512, 1.
REGISTER_CASES = [(33, 8, 6), (49, 4, 9), (168, 12, 1), (64, 4, 8), (255, 12, 0), (40, 12, 4), (128, 8, 2)]


@pytest.mark.parametrize("regs,warps,ctas", REGISTER_CASES)
def test_register_occupancy_is_the_calculators(regs, warps, ctas):
    info = StaticInfo(stages=2, smem_bytes=1024, threads_per_cta=warps * 32, regs_per_thread=regs)
    assert occupancy(info, profile("h200"))["ctas_per_sm_regs"] == ctas


def test_judge_and_occupancy_units():
    info = StaticInfo(stages=3, smem_bytes=94208, threads_per_cta=384, regs_per_thread=168)
    occ = occupancy(info, TARGET)
    assert occ["ctas_per_sm_smem"] == 102400 // (94208 + 1024) == 1
    assert occ["ctas_per_sm_regs"] == 65536 // (168 * 32 * 12) == 1
    assert occ["warps_per_sm"] == 12


def test_auto_carveout_with_no_room_for_two_stages_is_explained_in_bytes(toolchain):
    """K is the session's draw (tests/_session_draw.py): the probe's module unit sizes the same tile with 2 stages,
    so the bytes the probe puts on the failed automatic build come from there when that unit was built first."""
    k = carveout_k()
    c = cfg(f"256x256x{k}")
    (o,) = probe_static([c], TARGET, toolchain.cutlass, toolchain.nvcc, toolchain.cache, jobs=1, timeout_s=1800)
    assert o.verdict is Verdict.SMEM_OVER_LIMIT
    assert "Stages set to value 2 or more" in o.reason and o.info.stages == 2
    fixed = o.info.smem_bytes - 2 * per_stage_bytes(256, 256, k)
    assert 0 <= fixed <= 16384  # epilogue, pipelines, alignment
    assert f"by {o.info.smem_bytes - TARGET.smem_optin} B" in o.reason


def test_regs_build_reads_registers_and_spills_from_ptxas(toolchain):
    """`regs` (sweep --compile) builds each config as its runtime harness, the binary a GPU sweep launches: the fp8
    config of tests/backends/cutlass/test_pipeline.py and test_gpu.py, so the session compiles it once for all
    three."""
    good = Config("sm90-fp8", parse_tile("128x128x128", 8), "cooperative", 0, "no-c", False, "sm_90a")
    h200 = profile("h200")
    (o,) = probe_static([good], h200, toolchain.cutlass, toolchain.nvcc, toolchain.cache, jobs=1, timeout_s=1800,
                        regs=True)
    assert o.verdict is Verdict.FITS, o.reason
    # __launch_bounds__(384, 1): at most 65536 / 384 = 170 registers, allocated in steps of 8
    assert 32 <= o.info.regs_per_thread <= 168 and o.info.spill_bytes is not None and o.info.spill_bytes >= 0
    # __launch_bounds__(384, 1) promises one CTA of 384 threads per SM: ptxas keeps the registers to that
    assert occupancy(o.info, h200)["ctas_per_sm_regs"] >= 1


def test_with_regs_a_config_whose_harness_does_not_build_gets_the_describe_units_error(toolchain, tmp_path, rng,
                                                                                        monkeypatch):
    """With `regs`, a config whose runtime harness does not build is built again as a describe unit with device
    code, and that build's error is the row's (the error is the kernel's, not the harness's). The subject is that
    routing, not CUTLASS's error (test_auto_carveout_... keeps a real CUTLASS static_assert): the real nvcc builds
    the tiny harness (tests/_tiny_harness.py, with runtime halves), which refuses tile M=96 in every source."""
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny", refuse_m=96, runtime=True))
    bad = cfg("96x128x128", epilogue=rng.choice(["no-c", "with-c"]))
    (b,) = probe_static([bad], TARGET, toolchain.cutlass, toolchain.nvcc, tmp_path / "cache", jobs=1,
                        timeout_s=600, regs=True)
    assert b.verdict is Verdict.COMPILE_ERROR and "this tile M does not build" in b.reason + b.log, (b.reason, b.log)
    assert "describe.cu" in b.log and "run.cu" not in b.log and "kernel.cu" not in b.log  # the describe unit's log
    entries = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.is_dir())
    assert any(e.startswith(f"run-{bad.name}") for e in entries) and any(e.startswith(f"describe-{bad.name}")
                                                                          for e in entries), entries

def test_a_batched_build_gives_each_config_its_share_of_the_time(toolchain, tmp_path, rng, monkeypatch):
    """Sizing builds batch configs into one translation unit: each row's compile_seconds is its share (the build's
    time / compile_configs), so the rows of a sweep add up to no more than the time it took, not n times it. The
    subject is how a build's seconds are shared, not CUTLASS's sizes: the real nvcc builds the tiny describe harness
    (tests/_tiny_harness.py) into a cache of this test's own, so the batch is compiled here, in about a second."""
    monkeypatch.setattr(build, "HARNESS_DIR", write_tiny_harness(tmp_path / "tiny"))
    tiles = rng.sample(["128x128x128", "128x64x128", "128x256x128", "256x128x128", "128x32x128"], 3)
    configs = [cfg(t, rng.choice([0, 2, 3])) for t in tiles]
    start = time.monotonic()
    outs = probe_static(configs, TARGET, toolchain.cutlass, toolchain.nvcc, tmp_path / "cache", 1, 1200)
    wall = time.monotonic() - start
    assert [o.info.smem_bytes for o in outs] == [tiny_smem_bytes(c.tile.m, c.tile.n, c.tile.k) for c in configs]
    assert all(o.info.compile_configs == len(configs) for o in outs), [o.info.compile_configs for o in outs]
    shares = [o.info.compile_seconds for o in outs]
    assert len(set(shares)) == 1 and 0 < sum(shares) <= wall + 0.05 * len(shares), (shares, wall)


def test_no_two_stage_retry_for_a_family_that_builds_the_engines_stage_rule_only(monkeypatch, rng):
    """flashinfer-moe renders no stage count (the engine's StageCountAutoCarveout): after the 'Stages set to value 2
    or more' assert, a "2-stage" rebuild would be the same kernel. Only families with explicit stages retry."""
    from tileprobe.backends.cutlass import static_probe
    from tileprobe.backends.cutlass.build import BuildResult
    from tileprobe.families.base import Tile

    cfgs = {"flashinfer-moe": Config("flashinfer-moe", Tile(256, 128, 256), "auto", 0, "finalize", rng.choice([False, True]),
                                     "sm_120a", (1, 1, 1), (("dtypes", "nvfp4xnvfp4"), ("tactic", "CtaShape256x128x128B"))),
            "sm120-nvfp4": Config("sm120-nvfp4", Tile(256, 256, 256), "cooperative", 0, "no-c", False, "sm_120a")}
    log = "x.cu(1): error: static assertion failed with \"Stages set to value 2 or more.\"\n"
    for name, cfg in cfgs.items():
        requests: list = []

        def fake_build_many(reqs, *a, **k):
            requests.extend(reqs)
            return [BuildResult(r, False, None, log, 0.1, True, []) for r in reqs]

        monkeypatch.setattr(static_probe, "build_many", fake_build_many)
        monkeypatch.setattr(static_probe.described, "load", lambda *a: None)  # no toolchain here: nothing kept
        (out,) = probe_static([cfg], profile("rtx-pro-6000"), None, None, None, 1, 60)
        stages = [c.stages for r in requests for c in r.configs]
        assert out.verdict is Verdict.COMPILE_ERROR
        if name == "flashinfer-moe":
            assert stages == [0, 0] and "with 2 stages" not in out.reason  # batch, then its single: no 2-stage build
        else:
            assert 2 in stages and "with 2 stages" in out.reason
