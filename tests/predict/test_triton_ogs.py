"""The triton-ogs rules (vLLM's gpt-oss MXFP4 MoE routing kernels and matmul_ogs' _reduce_grouped) equal Triton's own
shared-memory allocation where they answer.

The launches are the ones `tileprobe audit` captures for gpt-oss-120b on h200 (vLLM's own launcher under the
stand-in: routing, _matmul_ogs and _reduce_grouped; the routing launches are the same on rtx-pro-6000), drawn at
random each run, and random variations of them within the rules' scope (top-k, expert count, dtypes, warps, blocks,
stages, the runtime integers' specialisations; sm_90 or sm_120 for the routing / reduce rules, sm_90 for the
matmul's); each is
sized by Triton 3.8.0's own passes up to AllocateSharedMemory, and one captured launch is compiled in full. Skipped
without Triton or the vLLM wheel.
"""

from __future__ import annotations

import dataclasses

import pytest
from _triton_rules import assert_tritons_bytes, capture, draw
from _triton_rules import vary as vary_named

from tileprobe.audit import ogs_rule
from tileprobe.audit.capture import Launch
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_ogs

RULED = tuple(triton_ogs.RULES)
MATMULS = tuple(k for k in RULED if k.endswith("._matmul_ogs"))
# one draw per group each run (the suite's time): each routing memset / compute and matmul variant in turn at random
GROUPS = (("_topk_forward",), ("_sum_bitmatrix_rows",), ("_combined_routing_memset", "_combined_routing_compute_pow2"),
          ("matmul_ogs_dflt_dflt._reduce_grouped",), MATMULS)
INTS = (1, 4, 16, 17, 64, 130)  # runtime integers: specialised to 1, 16-divisible, or neither


@pytest.fixture(scope="module")
def captured():
    """Every launch the decode entry captures for gpt-oss-120b (batch 1) on h200: (launch, job)."""
    return capture("h200", [("vllm", "gpt-oss-120b", ("vllm-moe-mxfp4-decode",))])


def vary(launch: Launch, job: KernelJob, changes: dict) -> tuple[Launch, KernelJob]:
    """The launch with some arguments / options changed (a dtype as 'ptr': 'fp32'; names the launch does not take
    are dropped), and its job with the same."""
    names = {k for k, _ in launch.args} | {"num_warps", "num_stages"}
    return vary_named(launch, job, {k: dataclasses.replace(launch.arg(k), dtype=v) if isinstance(v, str) else v
                                    for k, v in changes.items() if k in names})


def random_changes(rng, kernel: str) -> dict:
    """A variation of a captured `kernel` launch: mostly within the rule's scope, sometimes not (it then raises)."""
    ints = {k: rng.choice(INTS) for k in rng.sample(["stride_pn", "stride_xm", "shape_bm", "n_rows", "shape_pm",
                                                      "hist_size", "n_tokens", "stride_ym"], 3)}
    if kernel == "_topk_forward":
        dt = rng.choice(["bf16", "fp16", "fp32"])
        return {"N_EXPTS_ACT": rng.choice([1, 2, 4, 8, 16]), "N_EXPTS_PAD": 32 * rng.randint(1, 16), "X": dt,
                "Yv": dt, "APPLY_SOFTMAX": rng.random() < 0.5, "stride_xm": rng.choice(INTS),
                "stride_ym": rng.choice(INTS),
                "num_stages": rng.choice([1, 2, 3, 4])} | ints
    if kernel == "_sum_bitmatrix_rows":
        bm = rng.choice([8, 16, 32, 64])
        return {"BLOCK_M": bm, "BLOCK_MM": bm * max(1, 128 // bm), "num_warps": rng.choice([4, 8])} | ints
    if kernel == "_combined_routing_memset":
        return {"num_warps": rng.choice([1, 2, 4, 8]), "stride_pn": rng.choice(INTS)} | ints
    if kernel == "_combined_routing_compute_pow2":
        k, dt = rng.choice([1, 2, 3, 4, 6, 8, 16]), rng.choice(["bf16", "fp32"])
        return {"N_EXPTS_ACT": k, "BLOCK_SIZE_PADDED": 1 << (32 * k - 1).bit_length(), "num_warps": rng.choice([4, 8]),
                "ExptScal": dt, "GateScal": dt} | ints
    if kernel in MATMULS:
        w = rng.choice([4, 8])
        return {"BLOCK_M": rng.choice([16, 32, 64, 128]), "BLOCK_N": rng.choice([128, 256] if w == 4 else [256]),
                "BLOCK_K": rng.choice([64, 128, 256]), "num_stages": rng.choice([2, 3, 4, 5]), "num_warps": w,
                "EVEN_K": rng.random() < 0.5}
    dt = rng.choice(["bf16", "fp16", "fp32"])
    return {"K": rng.choice([1, 2, 4, 8]), "X": dt, "Out": dt, "num_warps": rng.choice([1, 2, 4]),
            "stride_xm": rng.choice([16, 2880, 5760]), "N": rng.choice([16, 2880, 4096])}


def draw_ruled(rng, captured, kernel: str, vary_it: bool):
    """A launch of `kernel` the rule answers (a captured one, or a random variation of one), its job (sm_90 or
    sm_120 for a variation) and the rule's bytes."""
    def changes(r, launch, job):
        launch, job = vary(launch, job, random_changes(r, kernel))
        return launch, dataclasses.replace(job, cc=90 if kernel in MATMULS else r.choice([90, 120]))
    return draw(rng, captured, kernel, ogs_rule.predict, changes if vary_it else None)


@pytest.mark.triton
@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g[0])
def test_rule_equals_tritons_allocation(group, captured, rng, tmp_path):
    assert_tritons_bytes(*draw_ruled(rng, captured, rng.choice(group), True), tmp_path)


@pytest.mark.triton
def test_rule_equals_a_full_compile(captured, rng, tmp_path):
    """A captured routing / reduce launch, as the audit compiles it (the random variations are sized above; the
    matmul's full compile is slower: `tileprobe audit --verify` compiles the captured ones)."""
    assert_tritons_bytes(*draw_ruled(rng, captured, rng.choice([k for k in RULED if k not in MATMULS]), False),
                         tmp_path, full=True)


@pytest.mark.triton
def test_out_of_scope_launches_cannot_predict(captured, rng):
    by_kernel = {la.kernel: (la, j) for la, j in captured}
    launch, job = by_kernel["_topk_forward"]
    with pytest.raises(CannotPredict, match="num_warps"):
        ogs_rule.predict(*vary(launch, job, {"num_warps": rng.choice([1, 2, 8])}), "3.8.0")
    with pytest.raises(CannotPredict, match="USE_PROVIDED_INDX"):
        ogs_rule.predict(*vary(launch, job, {"USE_PROVIDED_INDX": True}), "3.8.0")
    launch, job = by_kernel["matmul_ogs_dflt_dflt._reduce_grouped"]
    with pytest.raises(CannotPredict, match="pipelined"):
        ogs_rule.predict(*vary(launch, job, {rng.choice(["B", "N"]): rng.choice([2, 17, 33])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in RULED])
    with pytest.raises(CannotPredict, match="sm_100"):
        ogs_rule.predict(launch, dataclasses.replace(job, cc=100), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in MATMULS])
    with pytest.raises(CannotPredict, match="sm_120"):
        ogs_rule.predict(launch, dataclasses.replace(job, cc=120), "3.8.0")
    persistent = dataclasses.replace(launch, kernel=launch.kernel.replace("._matmul_ogs", "._p_matmul_ogs"))
    with pytest.raises(CannotPredict, match="no stated triton-ogs rule"):
        ogs_rule.predict(persistent, job, "3.8.0")


def test_another_release_or_source_cannot_predict(rng):
    _, kernel, sha = rng.choice(list(triton_ogs.CHECKED))
    p = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4}
    other = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        triton_ogs.predict(kernel, p, 120, other, source_sha256=sha)
    changed = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        triton_ogs.predict(kernel, p, 120, "3.8.0", source_sha256=changed)
