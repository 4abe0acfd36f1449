"""tileprobe.audit.engine_code: an engine function run from its wheel's text names the line that decided, and the
SGLang vision encoder's backend choice (the only caller of context_attention_fwd) follows the target. Expected
values are read from the engine's text here: the assignment at the named line, its `if` test evaluated on the
target's capability."""

from __future__ import annotations

import ast
import json

import pytest

from tileprobe.audit import capture, engine_code
from tileprobe.audit.entries import sglang_attention
from tileprobe.audit.kernels import KERNELS, Point
from tileprobe.models import AttentionConfig, VisionDims, read_attention
from tileprobe.targets import PROFILES

pytestmark = pytest.mark.triton
CONTEXT = KERNELS["sglang-context-attention"]


def _choice(src, target):
    with capture.engine_session(src, target, CONTEXT.allow, CONTEXT.stand_ins) as s:
        model = AttentionConfig("m", 8, 8, 64, vision=VisionDims(16, 72))
        return CONTEXT.chooses(s, model, Point(1, 256))


@pytest.mark.parametrize("cc", ["8.", "9.", "10.", "12."])
def test_vision_backend_is_sglangs_own_choice_with_its_line(sglang, rng, cc):
    target = rng.choice([t for t in PROFILES.values() if t.cc.startswith(cc)])
    major, minor = (int(x) for x in target.cc.split("."))
    other = _choice(sglang, target)
    lines = sglang.read_text(sglang_attention.VISION_FILE).splitlines()
    if other is None:  # the launcher runs: the function's value is the Triton backend
        return
    file, line = other.line.rsplit(":", 1)
    assigned = ast.parse(lines[int(line) - 1].strip())
    name = ast.literal_eval(assigned.body[0].value)
    assert file == sglang_attention.VISION_FILE and repr(name) in other.runs and name != "triton_attn", other
    test = other.why.removeprefix("else (of ").removesuffix(")").removeprefix("if ").removesuffix(":")
    holds = eval(test, {"major": major, "minor": minor, "get_device_capability": lambda: (major, minor)})  # noqa: S307
    assert holds is (not other.why.startswith("else")), other


def test_decided_names_the_branch_of_a_function_from_the_wheel(sglang, rng):
    major = rng.choice([8, 9, 10, 12])
    scope = {"get_mm": sglang_attention._MM, "is_cuda": lambda: True,
             "get_device_capability": lambda device_id=0: (major, 0), "_is_npu": False, "_is_musa": False,
             "_is_hip": False, "_is_cpu": False, "_is_cpu_amx_available": False, "_is_xpu": False,
             "_use_aiter": False, "get_platform": lambda: type("P", (), {"is_blackwell": major >= 10})(),
             "get_context": None}
    ran = engine_code.run_function(sglang, sglang_attention.VISION_FILE,
                                   "VisionAttention._determine_attention_backend", scope, None, None)
    line, why = engine_code.decided(ran)
    text = sglang.read_text(sglang_attention.VISION_FILE).splitlines()[int(line.rsplit(":", 1)[1]) - 1]
    assert f'backend = "{ran.value}"' in text and why, (line, why, text)
    assert list(ran.lines) and all(ran.tree.lineno <= ln <= ran.tree.end_lineno for ln in ran.lines)


def test_a_text_only_model_does_not_reach_the_vision_kernel(tmp_path, rng):
    heads = rng.choice([8, 16, 32])
    doc = {"num_attention_heads": heads, "num_key_value_heads": heads // 2, "head_dim": rng.choice([64, 128]),
           "hidden_size": 4096}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    text_only = read_attention(tmp_path / "config.json")
    assert text_only.vision is None and "vision" in CONTEXT.serves(text_only)
    vh = rng.choice([12, 16])
    hd = rng.choice([64, 72, 80])
    doc["vision_config"] = {"num_heads": vh, "hidden_size": vh * hd}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    multimodal = read_attention(tmp_path / "config.json")
    assert multimodal.vision == VisionDims(vh, hd) and CONTEXT.serves(multimodal) is None
