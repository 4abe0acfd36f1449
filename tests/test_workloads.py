import random

import numpy as np
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


def _stored_bytes(problems, fmt: str, with_c: bool) -> int:
    """The bytes of the tensors a grouped GEMM reads and writes, counted from arrays laid out as the kernels store
    them (not from bytes_moved's formula): fp8 one byte per element; NVFP4 two elements per byte plus one 1-byte
    scale factor per 16 elements of K, for both operands; the bf16 output (2 bytes; read again when C is)."""
    total = 0
    for m, n, k in problems:
        if fmt == "fp8":
            ops = [np.empty((n, k), np.uint8), np.empty((m, k), np.uint8)]
        else:
            ops = [np.empty((n, k // 2), np.uint8), np.empty((m, k // 2), np.uint8),
                   np.empty((n, k // 16), np.uint8), np.empty((m, k // 16), np.uint8)]
        out = [np.empty((m, n), np.float16)] * (2 if with_c else 1)  # bf16 and fp16: two bytes an element
        total += sum(a.nbytes for a in ops + out)
    return total


def test_swap_ab_and_bytes(rng):
    """Bytes and flops of random grouped problems (uneven tokens per expert, from a routed model point), counted
    from stored arrays and from an explicit multiply-add count; was checked against bytes_moved's own formula."""
    p = parse_shape(f"{rng.randint(1, 16)}:{rng.randint(1, 64)}:4096:7168")
    assert p.kernel_problems(True)[0] == (4096, p.problems[0][0], 7168)
    model = rng.choice(list(PRESETS.values()))
    point = rng.choice(model_points(model, [rng.choice([1, 8, 64, 200])], "skewed", 1, 1, rng.randrange(10**6)))
    for pt in (p, point):
        with_c = rng.random() < 0.5
        assert pt.bytes_moved(8, 8, 0, with_c) == _stored_bytes(pt.problems, "fp8", with_c)
        assert pt.bytes_moved(4, 4, 16, with_c) == _stored_bytes(pt.problems, "nvfp4", with_c)
    m, n, k = rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 5)
    small = parse_shape(f"{rng.randint(1, 3)}:{m}:{n}:{k}")
    a, b = np.ones((m, k)), np.ones((k, n))
    macs = int(np.einsum("ik,kj->ij", a, b).sum())  # one multiply-add per (i, j, k): m*n*k, counted by the product
    assert small.flops() == 2 * macs * len(small.problems)


def test_bad_workload_input():
    for bad in ("8:16:4096", "a:b:c:d", "0:1:1:1"):
        with pytest.raises(UsageError):
            parse_shape(bad)
    with pytest.raises(UsageError, match="unknown workload"):
        points_for(["gpt-7"], None, None, "uniform", 1, 1, 0)
    with pytest.raises(UsageError, match="unknown routing"):
        points_for(None, None, [1], "zipfian", 1, 1, 0)
