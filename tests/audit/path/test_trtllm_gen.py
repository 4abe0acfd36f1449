"""trtllm-gen: the arch answer is the runner's own SM check, read from the pinned FlashInfer wheel (the line quoted is
the check), so SM120 / SM121 / SM90 are no-code and B200 passes the arch part (its cubin, and so its bytes, is
chosen at run time from a downloaded manifest: unanswered, never a pass)."""

from __future__ import annotations

import re

import pytest

from _path_ctx import flashinfer_ctx
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import _flashinfer, trtllm_gen
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

LAYERS = {"attention (MLA)": "fmhaRunner.cuh", "attention (full)": "fmhaRunner.cuh",
          "moe experts": "trtllm_batched_gemm_runner.cu"}


_ctx = flashinfer_ctx


def _call(layer: str, engine_src) -> KernelCall:
    return KernelCall(layer, "decode", trtllm_gen.NAME, "trtllm-gen", {"kv_lora_rank": 512} if "MLA" in layer else {},
                      "test", engine_src.label())


def _quoted_line(ctx: Context, answer: str) -> str:
    """The source line the arch answer quotes (flashinfer/<path>:<first>[-<last>]), read back from the release."""
    m = re.search(r"flashinfer/(data/\S+?):(\d+)(?:-(\d+))?\s", answer)
    assert m, answer
    rel = _flashinfer.release(ctx)
    lines = rel.text(m.group(1)).splitlines()
    return "\n".join(lines[int(m.group(2)) - 1:int(m.group(3) or m.group(2))])


@pytest.mark.parametrize("target", ["rtx-pro-6000", "dgx-spark-gb10", "h100"])
def test_sm120_sm121_and_sm90_have_no_trtllm_gen_code(request, rng, target):
    engine = request.getfixturevalue(rng.choice(["vllm", "sglang"]))
    ctx = _ctx(engine, target)
    layer = rng.choice(sorted(LAYERS))
    a = trtllm_gen.answer(_call(layer, engine), ctx)
    assert a.verdict(ctx.target) is Verdict.NO_CODE, a.reason(ctx.target)
    assert a.arch.ok is False and a.arch.evidence == "read"
    assert LAYERS[layer] in a.arch.answer and f"SM version {ctx.target.cc_int}" in a.arch.answer
    quoted = _quoted_line(ctx, a.arch.answer)
    if "fmha" in LAYERS[layer]:  # the quoted lines are the constructor's check itself
        assert "Unsupported architecture" in quoted and "mSM ==" in quoted, quoted
    else:
        assert "isArchCompatible" in quoted, quoted
    assert str(ctx.target.cc_int) not in re.search(r"not among (\[[^\]]*\])", a.arch.answer).group(1)


def test_b200_runs_the_arch_check_and_leaves_the_cubin_unanswered(request, rng):
    assert "b200" in PROFILES and PROFILES["b200"].cc == "10.0"
    engine = request.getfixturevalue(rng.choice(["vllm", "sglang"]))
    ctx = _ctx(engine, "b200")
    layer = rng.choice(sorted(LAYERS))
    a = trtllm_gen.answer(_call(layer, engine), ctx)
    assert a.arch.ok is True and a.arch.evidence == "read", a.arch.answer
    assert "SM version 100 is accepted" in a.arch.answer
    assert a.gate.ok is None and a.bytes.ok is None and "manifest" in a.gate.answer
    assert a.verdict(ctx.target) is Verdict.UNANSWERED
