import pytest

from tileprobe.errors import UsageError
from tileprobe.families import FAMILIES, expand_configs, family, family_for_cc, parse_cluster, parse_tile


def test_tile_in_elements_and_bytes_round_trip(rng):
    for _ in range(50):
        bits = rng.choice([4, 8])
        m, n = rng.choice([64, 128, 256]), rng.choice([8, 16, 32, 64, 128, 256])
        k = rng.choice([32, 64, 128, 256])
        t = parse_tile(f"{m}x{n}x{k}", bits)
        assert (t.m, t.n, t.k) == (m, n, k)
        spelled = t.bytes_k(bits)
        assert spelled == f"{m}x{n}x{k * bits // 8}B"
        assert parse_tile(spelled, bits) == t


def test_trtllm_byte_notation_is_converted_for_fp4():
    # TensorRT-LLM's CtaShape128x256x64B is K = 64 bytes = 128 FP4 elements
    assert str(parse_tile("128x256x64B", 4)) == "128x256x128"
    assert str(parse_tile("128x256x64B", 8)) == "128x256x64"


@pytest.mark.parametrize("bad", ["128x128", "128x128x", "axbxc", "128x128x128x1", "0x128x128", "", "128*128*128"])
def test_malformed_tiles_are_usage_errors(bad):
    with pytest.raises(UsageError, match="tile"):
        parse_tile(bad, 4)


def test_unknown_family_and_schedule():
    with pytest.raises(UsageError, match="unknown family"):
        family("sm100-mxfp8")
    with pytest.raises(UsageError, match="unknown schedule"):
        expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a", ["128x128x128"], ["warp-magic"])


def test_unbuildable_shapes_are_marked_with_a_reason(rng):
    fam = FAMILIES["sm120-nvfp4"]
    bad_k = rng.choice([32, 96, 160])
    (cfg,) = expand_configs(fam, "sm_120a", [f"128x128x{bad_k}"], ["cooperative"])
    assert "multiple of the MMA K (64" in cfg.unsupported_reason
    (cfg,) = expand_configs(fam, "sm_120a", ["128x128x128"], ["cooperative"], cluster=(2, 1, 1))
    assert "1x1x1" in cfg.unsupported_reason
    # CUTLASS 4.2/4.5's SM120 block-scaled builder: static_assert(N >= 32); a newer release is left to the compiler
    small_n = rng.choice([8, 16, 24])
    for sched in ("cooperative", "pingpong"):
        (cfg,) = expand_configs(fam, "sm_120a", [f"128x{small_n}x128"], [sched], cutlass_version="4.5.0")
        assert "N >= 32" in cfg.unsupported_reason and f"N={small_n}" in cfg.unsupported_reason
    (cfg,) = expand_configs(fam, "sm_120a", [f"128x{small_n}x128"], ["cooperative"], cutlass_version="4.9.0")
    assert cfg.unsupported_reason is None
    (cfg,) = expand_configs(fam, "sm_120a", ["128x32x128"], ["cooperative"], cutlass_version="4.5.0")
    assert cfg.unsupported_reason is None
    (cfg,) = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["64x128x128"], ["cooperative"])
    assert "M % 128" in cfg.unsupported_reason
    (ok,) = expand_configs(fam, "sm_120a", ["128x256x128"], ["pingpong"])
    assert ok.unsupported_reason is None


def test_default_sets_and_names():
    fam = FAMILIES["sm120-nvfp4"]
    configs = expand_configs(fam, "sm_120a")
    assert len(configs) == len(fam.default_tiles) * len(fam.default_schedules)
    assert len({c.key for c in configs}) == len(configs)
    assert configs[0].name == "sm120_nvfp4_128x128x128_coop_sauto_noc_noswap_sm_120a"
    assert family_for_cc("9.0").name == "sm90-fp8" and family_for_cc("12.1").name == "sm120-nvfp4"
    with pytest.raises(UsageError):
        expand_configs(fam, "sm_90a")
    assert parse_cluster("1x1x1") == (1, 1, 1)
    with pytest.raises(UsageError):
        parse_cluster("1x1")


def test_auto_resolves_to_cooperative_on_sm120_and_is_not_probed_twice():
    fam = FAMILIES["sm120-nvfp4"]
    both = expand_configs(fam, "sm_120a", ["128x128x128"], ["auto", "cooperative", "pingpong"])
    assert [c.schedule for c in both] == ["cooperative", "pingpong"]
    (alone,) = expand_configs(fam, "sm_120a", ["128x128x128"], ["auto"])
    assert fam.schedule_label(alone.schedule) == "auto->cooperative"
    assert FAMILIES["sm90-fp8"].schedule_label("pingpong") == "pingpong"
