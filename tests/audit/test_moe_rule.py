"""tileprobe.audit.moe_rule: the triton-moe predictor, asked with what vLLM's own fused_experts_impl launched, gives
Triton's own bytes for those launches (a random MoE shape, scheme, target and token count each run, compiled with
the real Triton); a launch whose flags are not the ones the rule was checked on is CannotPredict naming the flag."""

from __future__ import annotations

from dataclasses import replace

import pytest
from _engine_own import captured

from tileprobe.audit import jobs, kernels, moe_rule
from tileprobe.backends.triton.compile import TritonBuild, compile_job
from tileprobe.backends.triton.toolchain import installed
from tileprobe.models import AttentionConfig, Quantization
from tileprobe.predict import CannotPredict
from tileprobe.targets import profile
from tileprobe.workloads import MoEModel

pytestmark = pytest.mark.triton

QUANT = {"bf16": None, "fp8": Quantization("fp8", None), "fp8-block": Quantization("fp8", (128, 128))}


def _draw(rng):
    hidden, inter = 128 * rng.randint(8, 56), 128 * rng.randint(2, 24)
    experts = rng.choice([8, 16, 32, 64, 128, 256])
    moe = MoEModel("random", hidden, inter, experts, rng.randint(1, min(8, experts)), 0)
    scheme = rng.choice(list(QUANT))
    target = profile(rng.choice(["rtx-pro-6000", "h200", "b200"]))
    return target, AttentionConfig("m", 8, 8, 128, moe=moe, quant=QUANT[scheme]), \
        kernels.Point(rng.choice([rng.randint(1, 32), rng.randint(33, 4096)]), 1, 1)


def _predict(la, job):
    try:
        return moe_rule.predict(la, job, installed().version)
    except CannotPredict as exc:
        return exc


def test_the_rule_gives_tritons_bytes_for_the_engines_own_launches(vllm, rng):
    checked = 0
    for _ in range(6):  # until two launches the rule answers have been compiled
        target, model, pt = _draw(rng)
        for la in captured(vllm, target, kernels.KERNELS["vllm-fused-moe-decode"], model, pt):
            job = jobs.job_of(vllm, la, target.cc_int)
            said = _predict(la, job)
            if isinstance(said, CannotPredict):
                continue
            build = compile_job(job)
            assert isinstance(build, TritonBuild) and build.shared == said, (target.name, model, pt, la.args, build)
            checked += 1
        if checked >= 2:
            break
    assert checked >= 1, "no launch the rule answers in six random draws"


def test_flags_the_rule_was_not_checked_on_are_named(vllm, rng):
    target, model, pt = _draw(rng)
    la = captured(vllm, target, kernels.KERNELS["vllm-fused-moe-decode"], model, pt)[0]
    flag = rng.choice(["HAS_BIAS", "use_int8_w8a16", "USE_TD"])
    odd = replace(la, args=tuple((k, True if k == flag else v) for k, v in la.args))
    said = _predict(odd, jobs.job_of(vllm, la, target.cc_int))
    assert isinstance(said, CannotPredict) and flag in str(said), said
    split = replace(la, args=tuple((k, 4 if k == "SPLIT_K" else v) for k, v in la.args))
    assert "SPLIT_K" in str(_predict(split, jobs.job_of(vllm, la, target.cc_int)))
    other = replace(la, kernel="_fwd_kernel")
    assert "fused_moe_kernel" in str(_predict(other, jobs.job_of(vllm, la, target.cc_int)))
