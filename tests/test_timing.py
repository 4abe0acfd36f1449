"""Timing policy: rotation sized from the device's L2 with no cap; bandwidth columns against the references."""

from dataclasses import replace

from tileprobe.families import FAMILIES, expand_configs
from tileprobe.targets import profile
from tileprobe.timing import L2_SPAN, rotation_sets, set_bytes
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
