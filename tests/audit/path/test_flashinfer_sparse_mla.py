"""flashinfer-sparse-mla-sm120 against the real wheels: the public failures are explained by the check that refuses
them (vllm#56837: num_heads=64, topk=1152; flashinfer#5323: page size 32), a config drawn from FlashInfer's own
supported set (its GPU-less config query, run from the wheel) is accepted with compiled bytes, FlashInfer's own
decode envelope refuses a head count outside it, and SM90 has no code (the JIT's arch list is major 12 only)."""

from __future__ import annotations

import pytest

from _path_ctx import flashinfer_ctx
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import _flashinfer
from tileprobe.audit.path.families import flashinfer_sparse_mla as sm
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

SM12X = ["rtx-pro-6000", "dgx-spark-gb10"]


_ctx = flashinfer_ctx


def _call(phase: str, heads: int, topk: int, **extra) -> KernelCall:
    params = dict(heads=heads, topk=topk, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                  v_head_dim=128, dtype="bf16", kv_cache_dtype="auto") | extra
    return KernelCall("attention (MLA, sparse)", phase, sm.NAME, "FLASHINFER_MLA_SPARSE_SM120", params, "test",
                      "vllm")


def _config(ctx: Context, family: str = "dsv3_2"):
    rel = _flashinfer.release(ctx)
    got = sm.configs(rel, ctx)
    if isinstance(got, str):
        pytest.skip(f"FlashInfer's config query could not run here: {got}")
    return sm.decode_config(rel, got[0][family])


def test_vllm_56837_num_heads_64_topk_1152_is_refused_by_the_backends_own_topk_rule(vllm, rng):
    ctx = _ctx(vllm, rng.choice(SM12X))
    a = sm.answer(_call(rng.choice(["prefill", "decode"]), 64, 1152), ctx)
    assert a.verdict(ctx.target) is Verdict.REFUSED, a.reason(ctx.target)
    assert a.gate.evidence == "quoted" and "index_topk=2048; got 1152" in a.gate.answer, a.gate.answer
    line = int(a.gate.answer.split("flashinfer_mla_sparse.py:")[1].split()[0])
    assert "index_topk" in vllm.read_text(sm.VLLM_BACKEND).splitlines()[line - 1]
    assert any("vllm#56837" in n and "0.6.18" in n for n in a.notes), a.notes
    # FlashInfer's own (run) envelope is not what refuses it in this release: topk is a runtime argument there
    cfg = _config(ctx)
    assert cfg.topk_is_runtime == cfg.supports_decode(64, 1152)


def test_flashinfer_5323_page_size_32_is_refused_by_the_block_size_rule(vllm, rng):
    ctx = _ctx(vllm, rng.choice(SM12X))
    a = sm.answer(_call("decode", rng.choice([8, 16, 32, 64, 128]), 2048, page_size=32), ctx)
    assert a.verdict(ctx.target) is Verdict.REFUSED, a.reason(ctx.target)
    assert "MultipleOf(64)" in a.gate.answer and "block size 32 is not a multiple of 64" in a.gate.answer
    assert any("flashinfer#5323" in n for n in a.notes)


def test_a_config_drawn_from_flashinfers_own_supported_set_is_accepted_with_compiled_bytes(vllm, rng):
    ctx = _ctx(vllm, rng.choice(SM12X))
    cfg = _config(ctx)
    heads = rng.choice(cfg.supported_num_heads())
    assert 2048 in cfg.supported_topk(heads)  # the one index_topk vLLM's backend takes
    a = sm.answer(_call("decode", heads, 2048, page_size=rng.choice([64, 128, 256])), ctx)
    assert a.verdict(ctx.target) is Verdict.FITS, a.reason(ctx.target)
    assert a.gate.evidence == "run" and f"supports_decode(num_heads={heads}, topk=2048, page_block_size=64) = True" \
        in a.gate.answer, a.gate.answer
    assert a.bytes.evidence == "compiled" and a.smem_bytes <= ctx.target.smem_optin
    assert a.arch.ok and ("sm_120" if ctx.target.cc == "12.0" else "sm_121a") in a.arch.answer
    # prefill: the head counts the C++ dispatcher instantiates (compiled) serve every tensor-parallel split of 128
    tp = rng.choice([1, 2, 4, 8])
    p = sm.answer(_call("prefill", 128 // tp, 2048), ctx)
    assert p.verdict(ctx.target) is Verdict.FITS and "has_prefill_heads, compiled" in p.gate.answer, p.gate.answer


def test_flashinfers_own_decode_envelope_refuses_more_heads_than_it_has(vllm, rng):
    ctx = _ctx(vllm, rng.choice(SM12X))
    cfg = _config(ctx)
    heads = rng.randint(cfg.max_num_heads + 1, 4 * cfg.max_num_heads)
    a = sm.answer(_call("decode", heads, 2048), ctx)
    assert a.verdict(ctx.target) is Verdict.REFUSED and a.gate.evidence == "run", a.gate.answer
    assert "no decode kernel for this shape" in a.gate.answer and f"num_heads={heads}" in a.gate.answer


def test_sm90_has_no_sparse_mla_code(vllm, rng):
    ctx = _ctx(vllm, "h100")
    a = sm.answer(_call(rng.choice(["prefill", "decode"]), 128 // rng.choice([1, 2, 4, 8]), 2048), ctx)
    assert a.verdict(ctx.target) is Verdict.NO_CODE and "supported_major_versions=[12]" in a.arch.answer
