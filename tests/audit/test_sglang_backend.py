"""SGLang's attention step driven through its own TritonAttnBackend (tileprobe.audit.sglang_backend): the engine,
not tileprobe, forms the decode path. Its split count `max_kv_splits` is the server-args default read from the
wheel (a copy with that default planted to another value gives launches with the planted value), the per-sequence
split count is SGLang's own `get_num_kv_splits_triton` launch with the target's SM count, and a model with a
sliding window gets the window rail's second split-count launch on every layer."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tileprobe.audit import capture, kernels
from tileprobe.audit.sglang_backend_stand_ins import FIELDS
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.targets import profile

DECODE = kernels.KERNELS["sglang-decode-attention"]
EXTEND = kernels.KERNELS["sglang-extend-attention"]


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
