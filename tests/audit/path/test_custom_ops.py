"""vllm-custom-op: vLLM's own kernels read from a cached vLLM wheel's _C_stable_libtorch.abi3.so (one wheel a run,
picked at random). For a random op, dtype and target: the arch answer names a cubin that runs on the target, the
static bytes and registers reported are the largest among the op's kernels in that cubin's arch (checked against the
binary here), the elementwise ops, the MLA cache write and the router's top-k launch with 0 dynamic bytes and fit; the CUTLASS GEMMs leave their
SharedStorage unanswered and say why; an op tileprobe does not know, or a dtype the op has no kernel for, is
unanswered, not a pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _session_draw import session_rng
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import custom_ops
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.binary.inspect import runs_on
from tileprobe.engines import locate
from tileprobe.engines.triton_configs import find_engine
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

ELEMENTWISE = ["rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "reshape_and_cache_flash",
               "concat_and_cache_mla", "topk_softmax"]
TARGETS = ["rtx-pro-6000", "dgx-spark-gb10", "rtx-5090", "h100"]


@pytest.fixture(scope="module")
def engine(vllm_wheel):
    return vllm_wheel


def _call(kernel: str, **params) -> KernelCall:
    return KernelCall("layer", "prefill", custom_ops.NAME, kernel, {"kernel": kernel, **params}, "test", "vllm")


def test_elementwise_ops_read_from_the_cubin_that_runs(engine, rng):
    memo = {}
    for _ in range(6):
        target = PROFILES[rng.choice(TARGETS)]
        ctx = Context(target, engine, cache_root(), memo=memo)
        op = rng.choice(ELEMENTWISE)
        params = {"dtype": rng.choice(["bf16", "fp16"])}
        if op in ("reshape_and_cache_flash", "concat_and_cache_mla"):
            params["kv_cache_dtype"] = rng.choice(["auto", "fp8", "fp8_e5m2"])
        a = custom_ops.answer(_call(op, **params), ctx)
        assert a.verdict(target) is Verdict.FITS, a.reason(target)
        assert a.arch.evidence == "read" and "SASS" in a.arch.answer
        arch = re.match(r"(sm_\d+[af]?) SASS", a.arch.answer).group(1)
        _, lib = custom_ops.library(ctx, custom_ops.OPS[op].so)
        rx = re.compile(custom_ops.pattern_for(op, _call(op, **params), target.cc_int))
        mine = [k for im, k in lib.kernels if im.arch == arch and rx.search(k.demangled)]
        assert mine and runs_on("cubin", mine[0].sm, mine[0].suffix, target.cc_int)
        runs = custom_ops.running(lib, rx.pattern, target.cc_int)
        assert a.static_smem == max(k.static_smem for _, k in runs) and a.registers == max(k.registers
                                                                                           for _, k in runs)
        assert a.smem_bytes == a.static_smem and "dynamic 0 B" in a.bytes.answer and "0, stream>>>" in a.bytes.answer
        assert a.bytes.ok and a.gate.ok


def test_cutlass_gemms_leave_the_storage_unanswered(engine, rng):
    target = PROFILES[rng.choice(["rtx-pro-6000", "dgx-spark-gb10"])]
    ctx = Context(target, engine, cache_root())
    op = rng.choice(["cutlass_scaled_mm", "cutlass_scaled_mm_blockwise"])
    a = custom_ops.answer(_call(op, dtype="bf16"), ctx)
    assert a.arch.ok and re.match(r"sm_120[af]? SASS", a.arch.answer), a.arch.answer
    assert a.gate.ok and ("version_num >= 120" in a.gate.answer or "supports_block_fp8(" in a.gate.answer)
    assert a.bytes.ok is None and "SharedStorage" in a.bytes.answer and a.smem_bytes is None
    assert a.verdict(target) is Verdict.UNANSWERED
    assert re.search(r"stage count\(s\) \d+|tile\(s\) \d+x\d+x\d+", a.bytes.answer), a.bytes.answer


def test_unknown_op_or_dtype_is_unanswered(engine, rng):
    ctx = Context(PROFILES[rng.choice(TARGETS)], engine, cache_root())
    a = custom_ops.answer(_call(rng.choice(["rms_norm_quant", "gelu_fast_and_mul", "paged_attention_v3"])), ctx)
    assert a.verdict(ctx.target) is Verdict.UNANSWERED and "known:" in a.arch.answer
    a = custom_ops.answer(_call(rng.choice(ELEMENTWISE), dtype="int8"), ctx)
    assert a.verdict(ctx.target) is Verdict.UNANSWERED
