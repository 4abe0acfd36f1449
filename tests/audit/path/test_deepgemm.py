"""deepgemm: DeepGEMM's SM120 heuristic (sm120.hpp, as quoted in the module) sized for random FP8 GEMMs: every layout
it keeps has >= 2 stages and asks extra + stages * per_stage <= 101376 B, the stage count being the largest that
fits (checked here by search, not by the module's division); the arch and recipe answers are read from the vendored
host library of a cached vLLM wheel (picked at random), and a library without the SM100/SM120 recipe branch is
refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import deepgemm
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.engines import locate
from tileprobe.engines.triton_configs import find_engine
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

SM12X = ["rtx-pro-6000", "dgx-spark-gb10", "rtx-5090"]


@pytest.fixture(scope="module")
def vllm_any():
    wheels = sorted(p for d in locate.wheel_dirs() if d.is_dir() for p in Path(d).glob("vllm-*.whl"))
    if not wheels:
        pytest.skip("no cached vLLM wheel (tileprobe engines fetch vllm)")
    return [find_engine("vllm", w) for w in wheels]


def _call(m: int, n: int, k: int, kind: str) -> KernelCall:
    return KernelCall("linear", "prefill", deepgemm.NAME, "fp8_gemm_nt", {"m": m, "n": n, "k": k, "kind": kind,
                                                                          "quant": "fp8-block"}, "test", "vllm")


def _largest_fitting(extra: int, per_stage: int) -> int:
    s = 0
    while s < deepgemm.MAX_STAGES and extra + (s + 1) * per_stage <= deepgemm.CAPACITY:
        s += 1
    return s


def test_every_kept_layout_fits_with_the_most_stages(rng):
    for _ in range(40):
        kind = rng.choice(["dense", "grouped-moe"])
        m, n, k = rng.randint(1, 20000), 128 * rng.randint(1, 128), 128 * rng.randint(1, 64)
        kept, dropped, swap = deepgemm.candidates(m, n, kind)
        assert kept, (m, n, k, kind)
        assert swap == (kind == "dense" and m <= 16)
        for lay in kept:
            assert lay.stages >= 2 and lay.smem <= deepgemm.CAPACITY, lay
            assert lay.stages == _largest_fitting(lay.extra, lay.per_stage), lay
            # per stage: A and B tiles in FP8 plus one 128-B aligned int32 scale row per M and N row
            assert lay.per_stage == (lay.block_m + lay.block_n) * lay.block_k + -(-lay.block_m * 4 // 128) * 128 \
                + -(-lay.block_n * 4 // 128) * 128
        assert all(lay.stages < 2 for lay in dropped)


def test_sm12x_answer_is_the_largest_layout_and_fits(vllm_any, rng):
    src = rng.choice(vllm_any)
    ctx = Context(PROFILES[rng.choice(SM12X)], src, cache_root())
    m, n, k = rng.randint(1, 9000), 128 * rng.randint(2, 64), 128 * rng.randint(2, 64)
    kind = rng.choice(["dense", "grouped-moe"])
    a = deepgemm.answer(_call(m, n, k, kind), ctx)
    kept, _, _ = deepgemm.candidates(m, n, kind)
    assert a.smem_bytes == max(lay.smem for lay in kept), a.reason(ctx.target)
    assert a.verdict(ctx.target) is Verdict.FITS, a.reason(ctx.target)
    assert a.arch.ok and "SM120ArchSpec" in a.arch.answer and a.arch.evidence == "read"
    assert a.gate.ok and "sfb_dtype" in a.gate.answer


def test_arch_gate_and_bytes_elsewhere(vllm_any, rng):
    src = rng.choice(vllm_any)
    ada = Context(PROFILES["rtx-4090"], src, cache_root())  # cc 8.9: no arch spec, vLLM's support_deep_gemm false
    a = deepgemm.answer(_call(256, 4096, 4096, "dense"), ada)
    assert a.arch.ok is False and a.verdict(ada.target) is Verdict.NO_CODE, a.arch.answer
    h100 = Context(PROFILES["h100"], src, cache_root())
    a = deepgemm.answer(_call(256, 4096, 4096, "dense"), h100)
    assert a.arch.ok and "SM90ArchSpec" in a.arch.answer and a.bytes.ok is None
    assert a.verdict(h100.target) is Verdict.UNANSWERED


def test_a_library_without_the_sm120_recipe_branch_is_refused(vllm_any, rng):
    ctx = Context(PROFILES[rng.choice(SM12X)], rng.choice(vllm_any), cache_root())
    blob = deepgemm._binary(ctx)
    assert blob is not None and deepgemm.RECIPE_BRANCH in blob
    cut = blob.replace(deepgemm.RECIPE_BRANCH, b"x" * len(deepgemm.RECIPE_BRANCH))
    part = deepgemm._gate(ctx, cut, "fp8-block")
    assert part.ok is False and "Unknown recipe" in part.answer
    assert deepgemm._gate(ctx, blob, rng.choice(["nvfp4", "int4"])).ok is False
