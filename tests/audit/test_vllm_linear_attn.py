"""tileprobe.audit.vllm_linear_attn_step: vLLM's linear-attention (lightning) step of MiniMax's layer (the
linear-attention metadata builder, then the layer's own `_forward` cut from the wheel), run from the wheel under the
stand-in device: the decode records `_linear_attn_decode_kernel` with Triton's own bytes, and the builder's split of a
batch (decodes first, then each prefill over its own slice and state slot) reaches the kernels. Inputs are random
per run."""

from __future__ import annotations

import pytest
from _engine_own import answered, captured, tritons_own

from tileprobe.audit import jobs, kernels, loader
from tileprobe.models import AttentionConfig
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

ENTRY = "vllm-lightning-attention"
PREFILL = ("_fwd_diag_kernel", "_fwd_kv_parallel", "_fwd_kv_reduce", "_fwd_none_diag_kernel")
DECODE = "_linear_attn_decode_kernel"


def _model(rng) -> AttentionConfig:
    h = rng.choice([8, 16, 32, 64])
    return AttentionConfig("m", h, max(1, h // 8), rng.choice([64, 128]), rng.choice(["bf16", "fp16"]),
                           model_type="minimax_m1", linear_attention=True)


def _tp(rng, model) -> int:
    return rng.choice([t for t in (1, 2, 4) if model.heads % t == 0])


def test_decode_records_the_decode_kernel_with_tritons_own_bytes(vllm, rng, tmp_path, monkeypatch):
    """A decode batch: the layer's `_decode_infer` launches `_linear_attn_decode_kernel` once, over the batch, the
    heads per rank and the head size's 32-wide blocks; tileprobe's answer for the captured launch (compiled from the
    engine's own module) is Triton's own metadata.shared for the engine's kernel object (one compile)."""
    entry = kernels.KERNELS[ENTRY]
    target = profile(rng.choice(("rtx-pro-6000", "h200")))
    model = _model(rng)
    pt = kernels.Point(rng.randint(1, 64), rng.randint(1, 4000), _tp(rng, model), None, "decode")
    launches = captured(vllm, target, entry, model, pt)
    assert [la.kernel for la in launches] == [DECODE], launches
    (la,) = launches
    h, d = model.heads // pt.tp, model.head_dim
    assert la.grid == (pt.batch, h, d // 32) and la.arg("BLOCK_SIZE") == 32, la
    assert la.arg("q_ptr").dtype == "fp32" and la.arg("q_ptr").shape == (pt.batch, h, 1, d), la
    # the state cache as the layer's own get_state_shape / get_state_dtype give it: slots, heads per rank, d x d
    cache = la.arg("kv_cache_ptr")
    assert cache.shape == (pt.batch + 1, h, d, d) and cache.dtype == model.dtype, cache
    own = tritons_own(vllm, target, entry, model, pt, tmp_path, monkeypatch)
    assert [k for k, _, _ in own] == [DECODE], own
    cut = lambda src, launch: loader.module_source(entry, src, target, launch.kernel)  # noqa: E731
    assert answered(jobs.job_of(vllm, la, target.cc_int, cut)) == own[0][2], (target.name, model, pt)


def test_the_builders_split_of_a_mixed_batch_reaches_the_kernels(vllm, rng):
    """A mixed batch (b - 1 decodes, then one prefill chunk of seq_len tokens over seq_len cached): the builder's
    split sends the chunk alone to lightning_attention (its four launches over seq_len tokens, from the chunk's state
    slot) and the b - 1 decodes to one decode launch over b - 1 rows and their b - 1 state slots; a prefill batch of b
    sequences makes b lightning_attention calls and no decode."""
    entry = kernels.KERNELS[ENTRY]
    target = profile("rtx-pro-6000")
    model = _model(rng)
    b, s, tp = rng.randint(2, 9), rng.randint(2, 3000), _tp(rng, model)
    h, d = model.heads // tp, model.head_dim
    mixed = captured(vllm, target, entry, model, kernels.Point(b, s, tp, None, "mixed"))
    assert [la.kernel for la in mixed] == [*PREFILL, DECODE], [la.kernel for la in mixed]
    diag = mixed[0]
    assert diag.arg("Q").shape == (1, h, s, d) and diag.arg("Q").dtype == "fp32", diag.arg("Q")
    decode = mixed[-1]
    assert decode.grid == (b - 1, h, d // 32), decode.grid
    assert decode.arg("slot_idx").shape == (b - 1,), decode.arg("slot_idx")
    prefill = captured(vllm, target, entry, model, kernels.Point(b, s, tp, None, "prefill"))
    assert [la.kernel for la in prefill] == list(PREFILL) * b, [la.kernel for la in prefill]
