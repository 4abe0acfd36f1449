"""The triton-conv rules (vLLM's conv1d, selective-state-update and GatedDeltaNet decode / post-conv kernels) equal
Triton's own shared-memory allocation where they answer.

The launches are the ones `tileprobe audit` captures for Nemotron-H (conv1d, selective-state update) and Qwen3-Next
(conv1d, GDN post-conv prep and the two decode kernels): vLLM's own launchers under the rtx-pro-6000 stand-in, and
random variations of them (blocks, warps, widths, dtypes, flags) drawn each run; each is sized by Triton 3.8.0's own
passes up to AllocateSharedMemory, and one is compiled in full. Skipped without Triton or the vLLM wheel.
"""

from __future__ import annotations

import dataclasses

import pytest
from _triton_rules import assert_tritons_bytes, capture, draw, vary

from tileprobe.audit import conv_rule
from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_conv

MODELS = {"nemotron-h-8b": ("vllm-mamba2-causal-conv1d", "vllm-mamba2-causal-conv1d-update",
                            "vllm-mamba2-selective-state-update"),
          "qwen3-next-80b-a3b": ("vllm-gdn",)}  # the driven GDN step: conv1d fn / update, post-conv prep, both decodes
BATCHES = {"qwen3-next-80b-a3b": (1, 2)}  # a mixed batch of 2: one decode beside the chunk (the sigmoid-gating decode)
RULED = tuple(triton_conv.RULES)
DTYPES = ("bf16", "fp16", "fp32")


@pytest.fixture(scope="module")
def captured():
    """Every launch of the ruled kernels the audit captures (batch 1) on rtx-pro-6000: (launch, job)."""
    plans = [("vllm", model, entries, BATCHES.get(model, (1,))) for model, entries in MODELS.items()]
    return [(la, j) for la, j in capture("rtx-pro-6000", plans) if la.kernel in RULED]


def _retype(launch: Launch, names, dt: str) -> dict:
    return {n: dataclasses.replace(launch.arg(n), dtype=dt) for n in names if isinstance(launch.arg(n), TensorArg)}


def _random_changes(rng, launch: Launch) -> dict:
    """A random launch around the captured one, mostly within the rule's stated scope, sometimes outside it."""
    k = launch.kernel
    acts = [n for n, v in launch.args if isinstance(v, TensorArg) and v.dtype in ("bf16", "fp16")]
    if k.startswith("_causal_conv1d"):
        c = {"BLOCK_N": rng.choice([64, 128, 256, 512, 1024]), "num_warps": rng.choice([1, 2, 4, 8]),
             "KERNEL_WIDTH": rng.choice([2, 3, 4]), "NP2_STATELEN": rng.choice([2, 4, 8])}
        if "fwd" in k:
            c["BLOCK_M"] = rng.choice([4, 8, 16])
        return c | _retype(launch, acts, rng.choice(DTYPES))
    if k == "_selective_scan_update_kernel":
        ds = rng.choice([64, 128, 256])
        c = {"BLOCK_SIZE_M": rng.choice([1, 2, 4, 8, 16, 32, 64]), "BLOCK_SIZE_DSTATE": ds, "dstate": ds,
             "num_warps": rng.choice([4, 4, 4, 8]), "TIE_HDIM": rng.random() < 0.5, "HAS_D": rng.random() < 0.5,
             "DT_SOFTPLUS": rng.random() < 0.5}
        return c | _retype(launch, ["state_ptr"], rng.choice(DTYPES))
    if k == "_fused_post_conv_kernel":
        bk = rng.choice([64, 128, 256])
        c = {"BLOCK_T": rng.choice([8, 16, 32, 64]), "BK": bk, "K": bk, "BV": bk, "V": bk,
             "num_warps": rng.choice([1, 2, 4, 8]), "APPLY_L2NORM": rng.random() < 0.5}
        return c | _retype(launch, acts, rng.choice(DTYPES))
    bk, a = rng.choice([32, 64, 128, 256]), rng.choice(DTYPES)
    c = {"BK": bk, "K": bk, "USE_QK_L2NORM_IN_KERNEL": rng.random() < 0.5}
    if k.startswith("fused_sigmoid"):
        c |= {"BV": rng.choice([4, 8, 16, 32]), "IS_VARLEN": rng.random() < 0.5,
              "INPLACE_FINAL_STATE": rng.random() < 0.5}
    return c | _retype(launch, acts, a) | _retype(launch, ["h0", "ht"], rng.choice([a, "fp32"]))


def _draw(rng, captured, kernel: str, varied: bool):
    return draw(rng, captured, kernel, conv_rule.predict,
                (lambda r, la, j: vary(la, j, _random_changes(r, la))) if varied else None)


@pytest.mark.triton
@pytest.mark.parametrize("kernel", RULED)
def test_rule_equals_tritons_allocation(kernel, captured, rng, tmp_path):
    for varied in (False, True):
        assert_tritons_bytes(*_draw(rng, captured, kernel, varied), tmp_path)


@pytest.mark.triton
def test_rule_equals_a_full_compile(captured, rng, tmp_path):
    assert_tritons_bytes(*_draw(rng, captured, rng.choice(RULED), True), tmp_path, full=True)


@pytest.mark.triton
def test_out_of_scope_launches_cannot_predict(captured, rng):
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_causal_conv1d_fwd_kernel"])
    with pytest.raises(CannotPredict, match="feature strides"):
        conv_rule.predict(*vary(launch, job, {"stride_istate_dim": rng.choice([2, 3, 5])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_selective_scan_update_kernel"])
    with pytest.raises(CannotPredict, match="num_warps"):
        conv_rule.predict(*vary(launch, job, {"num_warps": rng.choice([1, 2, 8])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel.startswith("fused_sigmoid")])
    with pytest.raises(CannotPredict, match="USE_INITIAL_STATE"):
        conv_rule.predict(*vary(launch, job, {"USE_INITIAL_STATE": False}), "3.8.0")
    launch, job = rng.choice(captured)
    with pytest.raises(CannotPredict, match="sm_90"):
        conv_rule.predict(launch, dataclasses.replace(job, cc=90), "3.8.0")


def test_another_release_or_source_cannot_predict(rng):
    sha = rng.choice(list(triton_conv.CHECKED))[1]
    kernel = rng.choice(RULED)
    p = {"BLOCK_N": 256, "num_warps": 4, "BK": 128, "BV": 32}
    other = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        triton_conv.predict(kernel, p, 120, other, source_sha256=sha)
    changed = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        triton_conv.predict(kernel, p, 120, "3.8.0", source_sha256=changed)
