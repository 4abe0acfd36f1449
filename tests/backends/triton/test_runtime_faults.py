"""triton-moe's runtime check on the CPU, without a GPU or a compiled kernel:

- the inputs (tileprobe.backends.triton.runtime.make_tensors) give each expert's fp8 weights, and each fp8 block, a
  magnitude of its own, so a kernel that applies another expert's or another block's scale is caught by the check's
  bound (tolerance.py): the planted fault is dequantizing with the wrong scale in the same fp64 reference, judged by
  the bound triton-moe derives for the launch;
- TILEPROBE_FAULT=corrupt:POINT:GROUP on the Triton path: its grammar, and the corruption itself through
  isolated.run_configs and its child's main (run in this process, the kernel a stand-in that writes the reference),
  which must turn a verified launch into an `incorrect` row naming the group; the sweep passes the fault to the
  named point only, and its rows carry point_id."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tileprobe.backends.cutlass.runner import Answer  # noqa: E402
from tileprobe.backends.triton import isolated  # noqa: E402
from tileprobe.backends.triton import runtime as rt  # noqa: E402
from tileprobe.backends.triton.compile import KernelJob  # noqa: E402
from tileprobe.errors import UsageError  # noqa: E402
from tileprobe.families import FAMILIES  # noqa: E402
from tileprobe.families import triton_moe as tm  # noqa: E402
from tileprobe.results import tolerance  # noqa: E402
from tileprobe.verdict import Verdict  # noqa: E402


def _bound(quant: str, k: int) -> tolerance.Bound:
    """The bound the sweep derives for a triton-moe launch on an H100/H200 (tolerance.for_config's parts)."""
    fam = FAMILIES["triton-moe"]
    return tolerance.derive(fam.atol, fam.rtol, k, tm.accumulation(quant, 90, 128))


def _wrong_scales(t: rt.Tensors, how: str):
    s = t.b_scale
    if how == "expert 0's scale for every expert":
        return s[:1].expand_as(s).clone()
    if how == "the next expert's scale":
        return s.roll(1, dims=0)
    if how == "the next K block's scale":  # fp8-block: a BLOCK_SIZE_K that reads its neighbour's scale
        return s.roll(1, dims=2)
    raise AssertionError(how)


def _check(p, out, ref, t, bound):
    """runtime.check's call: one row per (token, slot), grouped by expert."""
    return tolerance.check(out.reshape(-1, p.n), ref.reshape(-1, p.n), t.topk_ids, bound)


@pytest.mark.parametrize("quant, how", [("fp8", "expert 0's scale for every expert"),
                                        ("fp8", "the next expert's scale"),
                                        ("fp8-block", "expert 0's scale for every expert"),
                                        ("fp8-block", "the next K block's scale")])
def test_a_wrong_weight_scale_is_outside_the_bound(quant, how, rng):
    """The review's case: 16 tokens, top-2 of 8 experts, N 256 (8192 output elements); with every expert's fp8
    scale the amax of uniform [-1, 1) / 448 the scales were equal to ~2e-5 and expert 0's scale for all passed the
    check on every seed. Each of 5 seeds here must fail it."""
    p = rt.Problem("vllm", quant, rng.choice(["gate_up", "down"]), 8, 256, 512, 16, 2)
    bound = _bound(quant, p.k)
    for seed in [rng.randrange(2**31) for _ in range(5)]:
        t = rt.make_tensors(p, seed, "cpu", torch.float32)
        ref = rt.reference(p, t)
        faulty = rt.reference(p, replace(t, b_scale=_wrong_scales(t, how)))  # the same dequantization, wrong scale
        clean = _check(p, ref.to(torch.bfloat16), ref, t, bound)
        got = _check(p, faulty.to(torch.bfloat16), ref, t, bound)
        assert clean["bad_elements"] == 0, clean
        assert got["checked_elements"] == 8192
        assert got["bad_elements"] > 0 and got["bad_groups"] >= 1, (seed, how, got["worst_ratio"])


def test_expert_scales_differ(rng):
    """Per-tensor fp8: the experts' scales spread over [0.1, 1) x the uniform amax, not one value."""
    p = rt.Problem("sglang", "fp8", "gate_up", 16, 128, 256, 4, 2)
    s = rt.make_tensors(p, rng.randrange(2**31), "cpu", torch.float32).b_scale
    assert float(s.max() / s.min()) > 1.5, s


# ---------------------------------------------------------------------------------------------------------------
# TILEPROBE_FAULT on the Triton path
# ---------------------------------------------------------------------------------------------------------------


def test_fault_grammar():
    assert rt.parse_fault(None) is None and rt.parse_fault("") is None
    f = rt.parse_fault("corrupt:3:2")
    assert (f.point, f.group) == (3, 2) and f.group_at(3) == 2 and f.group_at(2) is None
    for bad in ("corrupt:3", "corrupt:-1:2", "corrupt:a:2", "corrupt:3:2:1", "corrupt: 3:2", "junk", "corrupt:３:2"):
        with pytest.raises(UsageError) as exc:
            rt.parse_fault(bad)
        assert "\n" not in str(exc.value) and "corrupt:POINT:GROUP" in str(exc.value)
    for other in ("sticky:1", "hang:0"):  # the CUTLASS harness's faults: said, not ignored
        with pytest.raises(UsageError, match="CUTLASS"):
            rt.parse_fault(other)


ENGINE = "vllm"


def _job(bm: int = 16) -> KernelJob:
    """vLLM's fused_moe_kernel argument layout: pointer stand-ins where runtime.POINTERS has them, EM at 12."""
    args = [None] * 20
    for name, i in rt.POINTERS[ENGINE].items():
        args[i] = f"*{name}"
    args[12] = 4096
    return KernelJob(None, tuple(args), (("BLOCK_SIZE_M", bm), ("BLOCK_SIZE_N", 32)), 90)


@pytest.fixture
def in_process_child(monkeypatch):
    """isolated.run_configs with its child (isolated.main) run in this process; the kernel a stand-in that writes
    the inputs' fp64 reference into C, as a correct kernel would."""
    made = []
    real_prepare = rt.prepare

    def prepare(*a, **k):
        made.append(real_prepare(*a, **k))
        return made[-1]

    class Exact:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                c = args[rt.POINTERS[ENGINE]["c"]]
                c.copy_(made[-1].ref.to(c.dtype))
            return launch

    def run_points(cmd, timeout_s, env=None, stop=None):
        out = io.StringIO()
        with redirect_stdout(out):
            isolated.main([cmd[-1]])
        for line in out.getvalue().splitlines():
            d = json.loads(line)
            if d.get("event") != "start":
                yield Answer(d["point"], d)

    monkeypatch.setattr(rt, "prepare", prepare)
    monkeypatch.setattr(isolated, "load", lambda source, cache: Exact())
    monkeypatch.setattr(isolated, "run_points", run_points)


def test_corrupt_fault_makes_the_launch_incorrect_in_the_named_group(in_process_child, tmp_path, rng):
    p = rt.Problem(ENGINE, "fp8", rng.choice(["gate_up", "down"]), 8, 256, 256, rng.choice([4, 8, 16]), 2)
    seed = rng.randrange(2**31)
    bound = _bound("fp8", p.k)
    run = lambda group: isolated.run_configs(None, tmp_path, p, seed, [_job(), _job(32)], [bound] * 2, device="cpu",  # noqa: E731
                                             dtype=torch.float32, timed=False, corrupt_group=group)
    assert [r.verdict for r in run(None)] == [Verdict.OK, Verdict.OK]  # the stand-in kernel is exact
    experts = sorted(set(rt.make_tensors(p, seed, "cpu", torch.float32).topk_ids.reshape(-1).tolist()))
    group = rng.randrange(len(experts))
    for r in run(group):
        assert r.verdict is Verdict.INCORRECT, r.reason
        assert r.data["bad_groups"] == 1 and r.data["worst_group"] == experts[group], r.data
        assert r.data["bad_elements"] > 0 and r.data["checked_elements"] == p.m * p.top_k * p.n
    r = run(len(experts))[0]  # no such group at this point: the row says so
    assert r.verdict is Verdict.LAUNCH_ERROR and "TILEPROBE_FAULT corrupt: group" in r.reason, r.reason


def test_corrupt_changes_the_harness_block_only(rng):
    """The block the harness corrupts (faults.cuh): up to 64 of the group's rows, columns 0..127, v -> -(v + 8
    sign(v)); nothing else moves."""
    p = rt.Problem(ENGINE, "bf16", "gate_up", 2, 160, 64, 80, 2)  # each expert: 80 slots
    t = rt.make_tensors(p, rng.randrange(2**31), "cpu", torch.float32)
    t.c.copy_(torch.randn(t.c.shape, dtype=torch.float32) + 0.5)
    before = t.c.clone().view(-1, p.n)
    expert = rt.corrupt(p, t, 0)
    after = t.c.view(-1, p.n)
    slots = (t.topk_ids.reshape(-1) == expert).nonzero().flatten()
    hit = slots[:64]
    assert expert == min(t.topk_ids.reshape(-1).tolist()) and len(slots) > 64
    assert torch.equal(after[hit, :128], -(before[hit, :128] + 8 * before[hit, :128].sign()))
    mask = torch.ones_like(after, dtype=torch.bool)
    mask[hit[:, None], torch.arange(128)] = False
    assert torch.equal(after[mask], before[mask])


def test_the_sweep_corrupts_only_the_named_point_and_rows_carry_point_ids(monkeypatch, tmp_path, rng):
    """tileprobe.triton.sweep.runtime_rows reads TILEPROBE_FAULT and hands the group to the (gemm, M) point whose
    index it names (the order of its points, the same for every shard); every row says its point_id."""
    from tileprobe.results.classify import ProbeResult
    from tileprobe.targets import profile
    from tileprobe.triton import sweep as ts
    from tileprobe.workloads import PRESETS

    model = PRESETS["qwen3-30b-a3b"]
    entry = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 3}
    shape = ts.Shape(model, 1, 1)
    every = []
    for gemm in tm.GEMMS:
        n, k = tm.gemm_shape(gemm, model.hidden, shape.inter)
        cfg = tm.make_config("vllm", "bf16", gemm, model.experts, n, k, model.top_k, entry, "sm_90a", "default", 1)
        every += [ts.Planned(cfg, "job", {"batch": m}, None) for m in (1, 8)]
    calls = []

    def run_configs(source, cache, prob, seed, jobs, bounds, l2_bytes=0, corrupt_group=None, **kw):
        calls.append(corrupt_group)
        return [ProbeResult(Verdict.OK, "fine", {"launch_status": "ok"}) for _ in jobs]

    monkeypatch.setattr(isolated, "run_configs", run_configs)
    monkeypatch.setattr(tm, "job_of", lambda cfg, source, m: "job")
    gpu = replace(profile("h200"), gpu_index=0)
    s = ts.Prepared(SimpleNamespace(cache_dir=str(tmp_path), shard=None), shape, gpu, [gpu], (), None, None, None,
                    every, [], None)
    point, group = rng.randrange(4), rng.randrange(8)
    monkeypatch.setenv("TILEPROBE_FAULT", f"corrupt:{point}:{group}")
    rows = list(ts.runtime_rows(s, 7, SimpleNamespace(print=lambda *a, **k: None)))
    assert calls == [group if i == point else None for i in range(4)]
    assert sorted({r["point_id"] for r in rows}) == [0, 1, 2, 3]
    monkeypatch.setenv("TILEPROBE_FAULT", "corrupt:1")
    with pytest.raises(UsageError):
        list(ts.runtime_rows(s, 7, SimpleNamespace(print=lambda *a, **k: None)))
