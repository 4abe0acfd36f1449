"""Timing policy: rotation sized from the device's L2 with no cap; bandwidth columns against the references."""

from dataclasses import replace

from tileprobe.families import FAMILIES, expand_configs
from tileprobe.targets import profile
from tileprobe.backends.cutlass.timing import L2_SPAN, rotation_sets, set_bytes
from tileprobe.workloads import points_for


def test_small_models_rotate_enough_sets_to_leave_the_l2(rng):
    (cfg,) = expand_configs(FAMILIES["sm120-nvfp4"], "sm_120a", ["128x128x128"], ["cooperative"])
    dev = profile(rng.choice(["rtx-pro-6000", "rtx-5090"]))
    points = points_for(["qwen3-30b-a3b"], None, [1], "uniform", 1, 1, rng.randrange(10**6))
    for p in points:
        n = rotation_sets(p, cfg, dev)
        assert n > 16  # the old cap would have left these inputs in L2
        assert n * set_bytes(p, cfg) >= L2_SPAN * dev.l2_bytes > (n - 1) * set_bytes(p, cfg)


def test_large_sets_need_one(rng):
    (cfg,) = expand_configs(FAMILIES["sm90-fp8"], "sm_90a", ["128x128x128"], ["cooperative"])
    tiny_l2 = replace(profile("h200"), l2_bytes=1 << 20)
    p = points_for(["deepseek-v3"], None, [512], "uniform", 1, 1, rng.randrange(10**6))[0]
    assert rotation_sets(p, cfg, tiny_l2) == 1


def test_mxfp8_x_mxfp4_counts_weights_at_4_bits_and_activations_at_8(rng):
    """flashinfer-moe MXFP8 x MXFP4: the expert weights (N x K) are e2m1 (half a byte each), the activations (M x K)
    e4m3 (one byte), one ue8m0 scale byte per 32 of either; bf16 out. Counted here by hand for one shape."""
    from tileprobe.families.base import Config, Tile

    e, m = rng.randint(1, 64), rng.choice([1, 8, 24])
    (p,) = points_for(None, [f"{e}:{m}:4096:7168"], [1], "uniform", 1, 1, rng.randrange(10**6))
    cfg = Config("flashinfer-moe", Tile(128, 128, 64), "auto", 0, "default", rng.choice([False, True]), "sm_120a",
                 (1, 1, 1), (("dtypes", "mxfp8xmxfp4"), ("tactic", "CtaShape128x128x64B")))
    weights, acts = 4096 * 7168 // 2, m * 7168
    scales = (4096 * 7168 + m * 7168) // 32
    out = m * 4096 * 2
    assert set_bytes(p, cfg) == e * (weights + acts + scales + out)
    dev = profile("rtx-pro-6000")
    n = rotation_sets(p, cfg, dev)
    assert n * set_bytes(p, cfg) >= L2_SPAN * dev.l2_bytes > (n - 1) * set_bytes(p, cfg)
