"""flashinfer-cutlass-moe: FlashInfer's cutlass_fused_moe as vLLM's FLASHINFER_CUTLASS backend runs it, read from the
FlashInfer release a cached vLLM wheel pins (one wheel a run, at random). On SM120/SM121, bf16 x bf16 runs the
Ampere-style Sm80 grouped GEMM: its tactics' SharedStorage and fused gated-activation kSmemSize, compiled once here
with nvcc from the release's own headers, must equal the MmaMultistage / Fused_Moe_Kernel_sm80 formulas the module
quotes; the default tactic of random bf16 shapes fits, fused exactly when inter and hidden are multiples of 64; NVFP4
and MXFP8 x MXFP4 take the TMA-WS tactics (the default sized by tileprobe.predict); FP8 block scaling, W4A16 MXFP4 and
NVFP4 on H100 are refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _session_draw import session_rng
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import flashinfer_cutlass_moe as fcm
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.engines import flashinfer as fi
from tileprobe.engines import locate
from tileprobe.engines.triton_configs import find_engine
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

SM12X = ["rtx-pro-6000", "dgx-spark-gb10", "rtx-5090"]


@pytest.fixture(scope="module")
def engine(vllm_wheel):
    return vllm_wheel


@pytest.fixture(scope="module")
def tree(engine):
    t, note = fcm.flashinfer_tree(Context(PROFILES["rtx-pro-6000"], engine, cache_root()))
    if t is None:
        pytest.skip(note)
    print(f"flashinfer {t.version} {note}")
    return t


def _call(**params) -> KernelCall:
    return KernelCall("moe experts", "prefill", fcm.NAME, "cutlass_fused_moe", params, "test", "vllm")


@pytest.mark.nvcc
def test_compiled_sizes_equal_the_quoted_formulas(tree):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    tactics = fcm.ampere_tactics(tree, 120, fp8=False)
    assert [t.stages for t in tactics[:3]] == [2, 3, 4] and len(tactics) == 9
    sizes = fcm.compiled_sizes(tree, tactics, cache_root())
    assert sizes is not None, "the sizeof probe did not build"
    for t in tactics:
        grouped, mainloop, epilogue, fused = sizes[(t.m, t.n, t.k, t.stages)]
        assert mainloop == fcm.mainloop_bytes(t, 2), t
        assert grouped == max(mainloop, epilogue) and epilogue < mainloop, t
        assert fused == fcm.fused_gate_bytes(t), t


def test_bf16_default_tactic_fits_and_fuses_when_aligned(engine, tree, rng):
    memo = {}
    for _ in range(3):
        target = PROFILES[rng.choice(SM12X)]
        ctx = Context(target, engine, cache_root(), memo=memo)
        hidden, inter = 32 * rng.randint(32, 256), 32 * rng.randint(4, 96)
        a = fcm.answer(_call(experts=rng.choice([64, 128, 256]), top_k=rng.randint(1, 8), hidden=hidden,
                             inter=inter, dtype="bf16", quant=None, tokens=rng.randint(1, 8192)), ctx)
        assert a.verdict(target) is Verdict.FITS, a.reason(target)
        assert "Sm80" in a.gate.answer and "isValidSM120MOESpecialisation" in a.gate.answer
        assert f"sm_{target.cc_int}" in a.arch.answer.replace("sm_120f", f"sm_{target.cc_int}")
        first = fcm.ampere_tactics(tree, target.cc_int, fp8=False)[0]
        assert first.label() in a.bytes.answer
        fused = inter % 64 == 0 and hidden % 64 == 0
        assert ("fused gated-activation" in a.bytes.answer) == fused, a.bytes.answer
        expect = max(fcm.fused_gate_bytes(first) if fused else fcm.mainloop_bytes(first, 2),
                     fcm.mainloop_bytes(first, 2))
        assert a.smem_bytes == expect, a.reason(target)


def test_fp4_pairs_take_the_tma_ws_tactics(engine, tree, rng):
    from tileprobe.dtypes import ACT_BITS
    from tileprobe.predict import flashinfer_moe as pred

    target = PROFILES[rng.choice(SM12X)]
    ctx = Context(target, engine, cache_root())
    pair, dtype, quant = rng.choice([("nvfp4xnvfp4", "bf16", "nvfp4"), ("mxfp8xmxfp4", "mxfp8", "mxfp4")])
    a = fcm.answer(_call(experts=128, top_k=8, hidden=4096, inter=1536, dtype=dtype, quant=quant, tokens=64), ctx)
    assert a.gate.ok and "isValidSM120MOESpecialisation admits" in a.gate.answer, a.gate.answer
    first = fi.sm120_tactics(fcm.TMA_IDS[pair], tree)[0]
    p = pred.predict(first.tile_m, first.tile_n, first.k_elements(ACT_BITS[pair]), "auto", 0, "default", False,
                     "sm_121a" if target.cc_int == 121 else "sm_120a", "4.5", dtypes=pair)
    assert first.name in a.bytes.answer and a.smem_bytes == p.smem_bytes <= target.smem_optin
    assert a.verdict(target) is Verdict.FITS


def test_refusals(engine, rng):
    ctx = Context(PROFILES[rng.choice(SM12X)], engine, cache_root())
    dtype, quant = rng.choice([("bf16", "fp8-block"), ("bf16", "mxfp4")])
    a = fcm.answer(_call(experts=128, top_k=4, hidden=2880, inter=2880, dtype=dtype, quant=quant, tokens=8), ctx)
    assert a.verdict(ctx.target) is Verdict.REFUSED and "is_device_capability(90)" in a.gate.answer, a.gate.answer
    h100 = Context(PROFILES["h100"], engine, cache_root())
    a = fcm.answer(_call(experts=128, top_k=8, hidden=4096, inter=1536, dtype="bf16", quant="nvfp4", tokens=8), h100)
    assert a.verdict(h100.target) is Verdict.REFUSED and "has_device_capability(100)" in a.gate.answer
    assert a.arch.ok and "sm_90a" in a.arch.answer
