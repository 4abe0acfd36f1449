"""The router's top-k op is the one vLLM's own create_fused_moe_router picks for the model's routing (run from the
wheel, tileprobe.audit.path.vllm_router), not a fixed guess: GLM-4.5-Air's single-group sigmoid routing with a bias
is a GroupedTopKRouter (its advertised routing method changes with the group count) and runs ops.grouped_topk; the
same routing without renormalization falls through to FusedTopKBiasRouter (topk_sigmoid); softmax routing runs
topk_softmax; VLLM_USE_FUSED_MOE_GROUPED_TOPK=0 leaves grouped routing to torch, not a custom op."""

from __future__ import annotations

from dataclasses import replace

from tileprobe.audit.path import vllm_router
from tileprobe.models import Routing, attention_model
from tileprobe.targets import profile

GLM = "results/audit/models/glm-4.5-air.json"


def test_the_factory_decides_the_op(vllm_wheel, rng, monkeypatch):
    target = profile(rng.choice(["rtx-pro-6000", "dgx-spark-gb10"]))
    glm = attention_model(GLM)
    got = vllm_router.choose(vllm_wheel, target, glm)
    assert (got.router, got.op) == ("GroupedTopKRouter", "grouped_topk"), got
    flat = replace(glm, routing=replace(glm.routing, renormalize=False))
    got = vllm_router.choose(vllm_wheel, target, flat)
    assert (got.router, got.op) == ("FusedTopKBiasRouter", "topk_sigmoid"), got
    soft = replace(glm, routing=Routing(False, None, None, "softmax", False, rng.choice([True, False]), 1.0))
    assert vllm_router.choose(vllm_wheel, target, soft).op == "topk_softmax"
    groups = rng.choice([2, 4, 8])
    grouped = replace(glm, routing=Routing(True, groups, groups // 2, "sigmoid", True, True, 2.5))
    assert vllm_router.choose(vllm_wheel, target, grouped).op == "grouped_topk"
    monkeypatch.setenv("VLLM_USE_FUSED_MOE_GROUPED_TOPK", "0")
    got = vllm_router.choose(vllm_wheel, target, grouped)
    assert got.router == "GroupedTopKRouter" and got.op is None and "torch.compile" in got.why, got
