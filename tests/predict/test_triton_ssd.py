"""The triton-ssd rules (vLLM's Mamba-2 SSD kernels) equal Triton's own shared-memory allocation where they answer.

The launches are the ones `tileprobe audit` captures for a Nemotron-H model (vLLM's own launchers under the
rtx-pro-6000 stand-in), drawn at random each run, and random variations of them (blocks, warps, stages, activation
dtype, HAS_INITSTATES, head dim / state size / chunk size) within the rules' scope; each is sized by Triton 3.8.0's
own passes up to AllocateSharedMemory, and one is compiled in full. Skipped without Triton or the vLLM wheel.
"""

from __future__ import annotations

import dataclasses

import pytest
from _triton_rules import assert_tritons_bytes, capture, draw, vary

from tileprobe.audit import mamba_rule
from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_ssd

ENTRIES = ("vllm-mamba2-chunk-scan", "vllm-mamba2-chunk-scan-continued")
RULED = ("_state_passing_fwd_kernel", "_bmm_chunk_fwd_kernel", "_chunk_state_fwd_kernel", "_chunk_scan_fwd_kernel",
         "_chunk_cumsum_fwd_kernel")
DOT = RULED[1:4]


@pytest.fixture(scope="module")
def captured():
    """Every SSD launch the audit captures for nemotron-h-8b (batch 1) on rtx-pro-6000: (launch, job)."""
    return capture("rtx-pro-6000", [("vllm", "nemotron-h-8b", ENTRIES)])


def _random_changes(rng, launch: Launch) -> dict:
    changes = {b: rng.choice([32, 64, 128]) for b in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K")
               if launch.arg(b) is not None}
    changes |= {"num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([1, 2, 3, 4, 5])}
    dt = rng.choice(["bf16", "fp16"])
    for ptr in ("x_ptr", "b_ptr", "a_ptr", "C_ptr"):
        a = launch.arg(ptr)
        if isinstance(a, TensorArg) and a.dtype in ("bf16", "fp16"):
            changes[ptr] = dataclasses.replace(a, dtype=dt)
    if rng.random() < 0.5:  # another model's Mamba-2 dimensions (the constexprs the launcher passes)
        dstate, chunk = rng.choice([32, 64, 128]), rng.choice([64, 128, 256])
        dims = {"hdim": rng.choice([32, 64, 128]), "dstate": dstate, "K": dstate, "BLOCK_SIZE_DSTATE": dstate,
                "chunk_size": chunk, "BLOCK_SIZE_CHUNK": chunk}
        changes |= {k: v for k, v in dims.items() if launch.arg(k) is not None}
    if launch.kernel == "_chunk_cumsum_fwd_kernel":
        changes["BLOCK_SIZE_H"] = rng.choice([2, 4, 8, 16, 32, 64])
        changes["dt_ptr"] = dataclasses.replace(launch.arg("dt_ptr"), dtype=rng.choice(["bf16", "fp16", "fp32"]))
    if launch.arg("dot_dtype"):
        changes["dot_dtype"] = "tl.bfloat16" if dt == "bf16" else "tl.float16"
    if launch.kernel == "_chunk_scan_fwd_kernel":  # the chunk states' dtype (fp32: Nemotron-H; the model's: Falcon-H1)
        states = rng.choice(["fp32", "bf16", "fp16"])
        changes["states_ptr"] = dataclasses.replace(launch.arg("states_ptr"), dtype=states)
        init = rng.random() < 0.5
        changes["HAS_INITSTATES"] = init
        changes["initstates_ptr"] = TensorArg(states, (1, 1, 1, 1), (1, 1, 1, 1)) if init else None
    return changes


def _draw(rng, captured, kernel: str, varied: bool):
    return draw(rng, captured, kernel, mamba_rule.predict,
                (lambda r, la, j: vary(la, j, _random_changes(r, la))) if varied else None)


@pytest.mark.triton
@pytest.mark.parametrize("kernel", RULED)
def test_rule_equals_tritons_allocation(kernel, captured, rng, tmp_path):
    for varied in (False, True):
        assert_tritons_bytes(*_draw(rng, captured, kernel, varied), tmp_path)


@pytest.mark.triton
def test_rule_equals_a_full_compile(captured, rng, tmp_path):
    assert_tritons_bytes(*_draw(rng, captured, rng.choice(DOT), True), tmp_path, full=True)


@pytest.mark.triton
def test_out_of_scope_launches_cannot_predict(captured, rng):
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_chunk_cumsum_fwd_kernel"])
    with pytest.raises(CannotPredict, match="num_warps"):
        mamba_rule.predict(*vary(launch, job, {"num_warps": rng.choice([1, 2])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in RULED[1:]])
    with pytest.raises(CannotPredict, match="sm_90"):
        mamba_rule.predict(launch, dataclasses.replace(job, cc=90), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel in DOT[:2]])
    with pytest.raises(CannotPredict, match="num_stages 1"):
        mamba_rule.predict(*vary(launch, job, {"num_stages": 1}), "3.8.0")


def test_another_release_or_source_cannot_predict(rng):
    sha = rng.choice(list(triton_ssd.CHECKED))[1]
    kernel = rng.choice(RULED)
    p = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "num_warps": 4, "num_stages": 3}
    other = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        triton_ssd.predict(kernel, p, 120, other, source_sha256=sha)
    changed = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        triton_ssd.predict(kernel, p, 120, "3.8.0", source_sha256=changed)
