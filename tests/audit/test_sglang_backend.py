"""SGLang's attention step driven through its own TritonAttnBackend (tileprobe.audit.sglang_backend): the engine,
not tileprobe, forms the decode path. Its split count `max_kv_splits` is the server-args default read from the
wheel (a copy with that default planted to another value gives launches with the planted value), the per-sequence
split count is SGLang's own `get_num_kv_splits_triton` launch with the target's SM count, and a model with a
sliding window gets the window rail's second split-count launch on every layer. An MLA model's decode (use_mla) gets
its max_kv_splits from the engine's own `__init__`: `_mla_decode_kv_splits_cap` of that default, the target's SM count
and the runner's context length."""

from __future__ import annotations

import dataclasses
import re

import pytest

import triton

from tileprobe.audit import capture, kernels, sglang_backend
from tileprobe.audit.sglang_backend_stand_ins import FIELDS
from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.targets import profile

DECODE = kernels.KERNELS["sglang-decode-attention"]
EXTEND = kernels.KERNELS["sglang-extend-attention"]
MLA_DECODE = kernels.KERNELS["sglang-mla-decode"]
MLA_EXTENDS = (kernels.KERNELS["sglang-mla-extend-absorbed"], kernels.KERNELS["sglang-mla-extend-mha"])


@dataclasses.dataclass(frozen=True)
class Planted(EngineSource):
    """The wheel with one server-args default's value replaced in its field file."""

    field_name: str = ""
    value: int = 0

    def read_text(self, rel: str) -> str:
        text = EngineSource.read_text(self, rel)
        if rel.startswith(FIELDS):
            text = re.sub(rf"(\n    {self.field_name}: A\[.*?\n    \] = )\d+\n", rf"\g<1>{self.value}\n", text,
                          flags=re.S)
        return text


def test_the_decode_path_is_the_engines(sglang, rng):
    splits = rng.choice([2, 4, 16, 32])
    src = Planted(sglang.engine, sglang.version, sglang.origin, sglang.kind, "triton_attention_num_kv_splits", splits)
    target = profile(rng.choice(["rtx-pro-6000", "dgx-spark-gb10", "rtx-5090", "h200"]))
    model = ATTENTION_PRESETS[rng.choice(["qwen3-30b-a3b", "gpt-oss-120b"])]
    window = rng.choice(model.windows())
    pt = kernels.Point(rng.randint(1, 300), rng.randint(16, 8192), window=window, phase="decode")
    print(target.name, model.name, pt, "planted splits", splits)
    with capture.engine_session(src, target, DECODE.allow, DECODE.stand_ins) as s:
        DECODE.drive(s, model, pt)
    by = {}
    for la in s.launches:
        by.setdefault(la.kernel, []).append(la)
    counts = by.pop("get_num_kv_splits_triton")
    # the window rail's split count is computed for every layer of a model with a sliding window (the runner's)
    assert len(counts) == (2 if any(model.windows()) else 1)
    for la in counts:
        assert (la.arg("max_kv_splits"), la.arg("device_core_count"), la.arg("num_seq")) == \
            (splits, target.sms, pt.batch)
    stage1 = next(k for k in by if k.endswith("_stage1"))
    (mid,) = [a for n, a in by[stage1][0].args if n == "Att_Out"]
    assert mid.shape[:3] == (pt.batch, model.heads, splits)
    (stage2,) = by["_fwd_kernel_stage2"]
    assert stage2.arg("MAX_KV_SPLITS") == splits
    assert stage2.arg("HAS_SINK") is model.sinks


def test_a_step_the_driver_does_not_set_up_is_refused(sglang):
    with capture.engine_session(sglang, profile("rtx-pro-6000"), EXTEND.allow, EXTEND.stand_ins) as s:
        with pytest.raises(ValueError, match="prefill or decode"):
            EXTEND.drive(s, ATTENTION_PRESETS["qwen3-30b-a3b"], kernels.Point(2, 64, phase="mixed"))
        with pytest.raises(ValueError, match="prefill, extend or decode"):
            MLA_DECODE.drive(s, ATTENTION_PRESETS["kimi-k2"], kernels.Point(2, 64, phase="mixed"))


def test_the_mla_decode_split_count_is_the_engines_cap(sglang, rng):
    """max_kv_splits of the MLA decode is TritonAttnBackend.__init__'s: the engine's `_mla_decode_kv_splits_cap`
    (read here from the wheel's text) of the planted default, the target's SM count and the runner's context length;
    it reaches the split-count launch, the split-K scratch and stage 2."""
    splits = rng.choice([2, 4, 16, 512])  # 512: above every target's SM cap, so the default itself is the answer
    src = Planted(sglang.engine, sglang.version, sglang.origin, sglang.kind, "triton_attention_num_kv_splits", splits)
    target = profile(rng.choice(["rtx-pro-6000", "dgx-spark-gb10", "h200"]))
    model = ATTENTION_PRESETS[rng.choice(["kimi-k2", "deepseek-v3"])]
    tp = rng.choice([1, 2, 4, 8])
    pt = kernels.Point(rng.randint(1, 64), rng.randint(16, 8192), tp, phase="decode")
    cap = from_text(sglang, "sglang/srt/layers/attention/triton_backend.py",
                    ("_MLA_DECODE_MIN_BLOCK_KV", "_mla_decode_kv_splits_cap"),
                    {"triton": triton, "next_power_of_2": triton.next_power_of_2})["_mla_decode_kv_splits_cap"]
    want = cap(splits, target.sms, max(sglang_backend.MLA_CONTEXT_LEN, pt.seq_len + 1))
    print(target.name, target.sms, model.name, pt, "planted", splits, "->", want)
    with capture.engine_session(src, target, MLA_DECODE.allow, MLA_DECODE.stand_ins) as s:
        MLA_DECODE.drive(s, model, pt)
    counts, stage1, stage2 = s.launches
    assert (counts.kernel, counts.arg("max_kv_splits"), counts.arg("device_core_count"), counts.arg("num_seq")) == \
        ("get_num_kv_splits_triton", want, target.sms, pt.batch)
    h, rank = model.heads // tp, model.kv_lora_rank
    (mid,) = [a for n, a in stage1.args if n == "Att_Out"]
    assert mid.shape == (pt.batch, h, want, rank)  # attn_logits: v_head_dim of the latent pool's value view
    assert stage2.arg("MAX_KV_SPLITS") == want and stage1.arg("HAS_MLA") is True


def test_the_mla_layer_is_the_engines_dispatch(sglang, rng):
    """handle_attention_triton (read from the wheel) picks attn_mha for a prefill without prefix and the absorbed
    attn_mqa for an extend over a cached prefix: each extend entry's launch has its layer's head dims."""
    model = ATTENTION_PRESETS[rng.choice(["kimi-k2", "deepseek-v3"])]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    entry = rng.choice(MLA_EXTENDS)
    (phase,) = entry.phases
    pt = kernels.Point(rng.randint(1, 8), rng.randint(16, 2048), phase=phase)
    with capture.engine_session(sglang, target, entry.allow, entry.stand_ins) as s:
        entry.drive(s, model, pt)
    (launch,) = s.launches
    args = dict(launch.args)
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    if phase == "extend":
        assert (args["Q_Extend"].shape[2], args["K_Extend"].shape[1], args["V_Extend"].shape[2]) == \
            (latent, 1, model.kv_lora_rank)
        assert args["kv_indices"].shape == (pt.batch * pt.seq_len,)  # the cached prefix, read from the pool
    else:
        assert (args["Q_Extend"].shape[2], args["K_Extend"].shape[1], args["V_Extend"].shape[2]) == \
            (model.qk_nope_head_dim + model.qk_rope_head_dim, model.heads, model.v_head_dim)
        assert args["kv_indices"].shape == (0,)
    assert args["K_Buffer"].shape[1:] == (1, latent)
