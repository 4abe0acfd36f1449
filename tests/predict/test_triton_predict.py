"""The triton-moe predictor equals Triton's compiled bytes where it answers, and says CannotPredict elsewhere.

Random configs in the predictor's scope (vLLM 0.33.0's and SGLang 0.5.23's fused_moe_kernel, sm_120, bf16 / fp8
per-tensor) are compiled
with the real Triton (the launch the engine makes, both GEMMs) and compared; skipped without Triton or the engine.
"""

from __future__ import annotations

import pytest

from _engine_exec import engine_source_or_skip
from tileprobe.backends.triton.compile import TritonBuild, compile_many
from tileprobe.backends.triton.toolchain import installed
from tileprobe.families import triton_moe as tm
from tileprobe.predict._common import CannotPredict
from tileprobe.predict.triton_moe import predict


def _random_entry(rng):
    return {"BLOCK_SIZE_M": rng.choice([16, 32, 64, 128]), "BLOCK_SIZE_N": rng.choice([32, 64, 128, 256]),
            "BLOCK_SIZE_K": rng.choice([64, 128, 256]), "GROUP_SIZE_M": rng.choice([1, 8, 16, 32]),
            "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4, 5])}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_predictor_is_exact_against_the_compiler(engine, rng):
    src, ks = engine_source_or_skip(engine)
    cases = [(rng.choice(["bf16", "fp8"]), rng.choice(tm.GEMMS), _random_entry(rng), rng.choice([1, 8, 64, 512]))
             for _ in range(3)]
    jobs = [tm.launch_job(engine, ks, q, g, 128, *tm.gemm_shape(g, 4096, 768), m, 8, e, 120) for q, g, e, m in cases]
    builds = compile_many(jobs, 2)
    for (q, g, e, m), b in zip(cases, builds):
        assert isinstance(b, TritonBuild), b
        n, k = tm.gemm_shape(g, 4096, 768)
        assert predict(src.label(), q, e, 120, installed().version, n, k) == b.shared, (q, g, e, m, b.shared)


def test_outside_the_checked_scope_it_cannot_predict(rng):
    e = _random_entry(rng)
    for args in (("vllm 0.33.0", "fp8-block", e, 120, "3.8.0"), ("vllm 0.33.0", "bf16", e, 90, "3.8.0"),
                 ("sglang 0.5.22", "bf16", e, 120, "3.8.0"), ("vllm 0.33.0", "bf16", e, 120, "3.7.1"),
                 ("vllm 0.33.0", "fp8", e | {"BLOCK_SIZE_K": 32}, 120, "3.8.0"),
                 ("vllm 0.33.0", "bf16", e | {"num_stages": 1}, 120, "3.8.0")):
        with pytest.raises(CannotPredict):
            predict(*args, 1536, 4096)
    with pytest.raises(CannotPredict):
        predict("sglang 0.5.23", "bf16", e, 120, "3.8.0", 4096, 232)  # K = 232: not 16-divisible
