import random

import pytest

from tileprobe.errors import UsageError
from tileprobe.workloads import PRESETS, model_points, parse_shape, points_for, route


@pytest.mark.parametrize("routing", ["uniform", "balanced", "skewed"])
def test_routing_sends_top_k_distinct_experts_per_token(routing, rng):
    experts, top_k, tokens = rng.choice([8, 32, 128, 256]), rng.choice([1, 2, 4, 8]), rng.randint(1, 600)
    top_k = min(top_k, experts)
    counts = route(tokens, experts, top_k, routing, random.Random(rng.random()))
    assert sum(counts) == tokens * top_k and len(counts) == experts
    assert max(counts) <= tokens  # distinct experts per token: one expert sees a token at most once
    if routing == "balanced":
        assert max(counts) - min(counts) <= 1


def test_skewed_routing_concentrates_load(rng):
    seed = rng.random()
    uni = route(512, 256, 8, "uniform", random.Random(seed))
    skew = route(512, 256, 8, "skewed", random.Random(seed))
    assert max(skew) > 2 * max(uni)


def test_model_points_shapes_and_only_active_experts(rng):
    m = PRESETS["deepseek-v3"]
    seed = rng.randrange(10**9)
    pts = model_points(m, [1, 512], "uniform", 1, 1, seed)
    gate = [p for p in pts if p.gemm == "gate_up"]
    down = [p for p in pts if p.gemm == "down"]
    assert {p.problems[0][1:] for p in gate} == {(2 * 2048, 7168)}
    assert {p.problems[0][1:] for p in down} == {(7168, 2048)}
    b1 = next(p for p in gate if p.batch == 1)
    assert b1.experts_active == 8 and all(mm == 1 for mm, _, _ in b1.problems)
    b512 = next(p for p in gate if p.batch == 512)
    assert sum(mm for mm, _, _ in b512.problems) == 512 * 8 and all(mm > 0 for mm, _, _ in b512.problems)
    # same seed, same routing; another seed, other routing
    assert model_points(m, [512], "uniform", 1, 1, seed)[0] == b512
    assert model_points(m, [512], "uniform", 1, 1, seed + 1)[0] != b512


def test_tp_and_ep_sharding(rng):
    m = PRESETS["qwen3-235b-a22b"]
    seed = rng.randrange(10**9)
    full = model_points(m, [128], "uniform", 1, 1, seed)
    tp = model_points(m, [128], "uniform", 2, 1, seed)
    ep = model_points(m, [128], "uniform", 1, 4, seed)
    assert tp[0].problems[0][1] == full[0].problems[0][1] // 2  # gate_up N = 2*I/tp
    assert tp[1].problems[0][2] == full[1].problems[0][2] // 2  # down K = I/tp
    assert ep[0].experts_active <= m.experts // 4 < full[0].experts_active
    with pytest.raises(UsageError):
        model_points(m, [1], "uniform", 7, 1, seed)


def test_swap_ab_and_bytes(rng):
    p = parse_shape(f"{rng.randint(1, 16)}:{rng.randint(1, 64)}:4096:7168")
    assert p.kernel_problems(True)[0] == (4096, p.problems[0][0], 7168)
    e, mm = len(p.problems), p.problems[0][0]
    fp8 = p.bytes_moved(8, 8, 0, False)
    assert fp8 == e * (4096 * 7168 + mm * 7168 + mm * 4096 * 2)
    fp4 = p.bytes_moved(4, 4, 16, False)
    assert fp4 == e * ((4096 * 7168 + mm * 7168) * (0.5 + 1 / 16) + mm * 4096 * 2)
    assert p.flops() == 2 * e * mm * 4096 * 7168


def test_bad_workload_input():
    for bad in ("8:16:4096", "a:b:c:d", "0:1:1:1"):
        with pytest.raises(UsageError):
            parse_shape(bad)
    with pytest.raises(UsageError, match="unknown workload"):
        points_for(["gpt-7"], None, None, "uniform", 1, 1, 0)
    with pytest.raises(UsageError, match="unknown routing"):
        points_for(None, None, [1], "zipfian", 1, 1, 0)
