"""tileprobe.audit.path.families.fa2 on the real vLLM wheel: the FA2 .so ships sm_80 cubins and compute_80 PTX only
(so SM120 JIT-compiles), FA3 sm_90a only (no code on SM120, SASS on H100); the paged split-KV kernel the dispatch
names is found in the binary by its demangled name and its dynamic bytes are kernel_traits.h's kSmemSize, computed
here from first principles; FA2's own checks and vLLM's (run from the wheel) refuse what they refuse. Head sizes
are drawn at random per run where the claim is general."""

from __future__ import annotations

import math

import pytest

from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import fa2
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.targets import profile
from tileprobe.verdict import Verdict

SM120 = ("rtx-pro-6000", "dgx-spark-gb10")


@pytest.fixture(scope="module")
def memo():
    return {}  # one audit's memo: each .so is extracted and read once for the whole module


@pytest.fixture(scope="module")
def ask(vllm, memo):
    def ask(target: str, phase: str = "prefill", **params) -> KernelCall:
        p = dict(heads=32, kv_heads=8, head_dim=128, head_dim_v=params.get("head_dim", 128), dtype="bf16",
                 kv_cache_dtype="auto", page_size=16, window=None, softcap=0.0, sinks=False, causal=True,
                 paged=True, fa_version=2)
        p.update(params)
        call = KernelCall("attention (full)", phase, "fa2", "flash_attn_varlen_func", p, "test", vllm.label())
        return fa2.answer(call, Context(profile(target), vllm, cache_root(), memo=memo))
    return ask


def _k_head_dim(d: int) -> int:
    return next(h for h in (32, 64, 96, 128, 192, 256) if d <= h)


def _split_smem(d: int, block_n: int) -> int:
    """Flash_fwd_kernel_traits<kd, 64, block_n, 4, false, false, 16-bit>: Q tile plus K and V tiles, 2 B each."""
    kd = _k_head_dim(d)
    return 64 * kd * 2 + 2 * block_n * kd * 2


def _main_block_n(d: int) -> int:
    kd = _k_head_dim(d)
    return 256 if kd <= 64 else 128 if kd <= 128 else 64


def test_head128_bf16_paged_prefill_on_rtx_pro_6000_is_ptx_jit_with_traits_128_64_128(ask):
    a = ask("rtx-pro-6000")
    assert a.kernel == ("flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, bf16>, "
                        "Is_causal, Is_even_K>")
    assert a.arch.ok is True and a.arch.evidence == "read"
    assert "no SASS for sm_120" in a.arch.answer and "compute_80 PTX: the driver JIT-compiles it" in a.arch.answer
    assert a.smem_bytes == 64 * 128 * 2 + 2 * 128 * 128 * 2 == 81920
    assert a.static_smem == 0 and a.registers is None  # the sm_80 cubin's registers are not what runs on sm_120
    assert a.bytes.ok is True and a.bytes.evidence == "quoted" and "81920 B" in a.bytes.answer
    assert a.gate.ok is True and a.gate.evidence == "quoted"
    assert "7 of 7 of these checks' messages are in the shipped .so" in a.gate.answer
    assert "validate_configuration on cc 12.0 [run]: accepts" in a.gate.answer
    assert any("picks FA2 on cc 12.0 [run]" in n for n in a.notes)
    assert a.verdict(profile("rtx-pro-6000")) is Verdict.FITS


@pytest.mark.parametrize("target", SM120)
@pytest.mark.parametrize("d, block_n, smem", [(64, 256, 73728), (128, 128, 81920), (256, 64, 98304)])
def test_paged_prefill_bytes_by_head_dim(ask, target, d, block_n, smem):
    a = ask(target, head_dim=d, dtype="fp16")
    assert f"Flash_fwd_kernel_traits<{d}, 64, {block_n}, 4, false, false, fp16>" in a.kernel
    assert a.smem_bytes == smem == _split_smem(d, block_n)
    assert a.arch.ok is True and "compute_80 PTX" in a.arch.answer
    assert a.verdict(profile(target)) is Verdict.FITS


def test_random_head_dims_fit_with_the_quoted_formula(ask, rng):
    """Any head size FA2 takes (a multiple of 8 up to 256) rounds up to HEADDIM_SWITCH's kHeadDim and fits SM120."""
    for d in rng.sample(range(8, 257, 8), 3):
        target = rng.choice(SM120)
        a = ask(target, head_dim=d)
        kd, bn = _k_head_dim(d), _main_block_n(d)
        flags = "Is_causal, Is_even_K>" if d == kd else "Is_causal>"
        assert a.kernel == f"flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<{kd}, 64, {bn}, 4, false, false, " \
                           f"bf16>, {flags}", d
        assert a.smem_bytes == _split_smem(d, bn) <= 101376, d
        assert a.arch.ok is True and a.gate.ok is True, (d, a.gate.answer)


def test_decode_gqa_names_both_split_choices_and_the_combine_kernel(ask, rng):
    d = rng.choice([64, 96, 128, 192, 256])
    kv = rng.choice([1, 2, 4, 8])
    a = ask("rtx-pro-6000", "decode", head_dim=d, kv_heads=kv, heads=kv * rng.choice([2, 4, 8]))
    kd = _k_head_dim(d)
    align_n = 128 if kd <= 64 else 64
    assert f"<{kd}, 64, {_main_block_n(d)}, 4, false, false, bf16>, Is_even_K, Split>" in a.kernel
    assert f"<{kd}, 64, {align_n}, 4, false, false, bf16>, Is_even_K>" in a.kernel
    assert "flash_fwd_splitkv_combine_kernel" in a.kernel and "flash_fwd_splitkv_combine_kernel" in a.bytes.answer
    assert a.smem_bytes == max(_split_smem(d, _main_block_n(d)), _split_smem(d, align_n))
    least = math.ceil(0.8 * 2 * 188 / kv)  # one m-block: at most 8 query heads per kv head here
    assert any(f"(batch >= {least})" in n for n in a.notes), a.notes


def test_unpaged_call_takes_the_a100_side_of_is_sm8x_on_sm120(ask):
    """run_mha_fwd_hdim128: is_sm8x (cc 8.x, minor > 0) is false on 12.0, true on Ada (8.9)."""
    assert "Flash_fwd_kernel_traits<128, 128, 64, 4" in ask("rtx-pro-6000", paged=False).kernel
    ada = ask("rtx-4090", paged=False)
    assert ada.kernel.startswith("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4")
    assert ada.smem_bytes == 64 * 128 * 2 + 2 * 64 * 128 * 2
    # hdim 256: 101376 B opt-in < 2*256*(128+2*64): the 64 x 64 traits
    assert "Flash_fwd_kernel_traits<256, 64, 64, 4" in ask("rtx-pro-6000", paged=False, head_dim=256).kernel


def test_head_sizes_fa2_refuses(ask, rng):
    big = ask("rtx-pro-6000", head_dim=rng.choice([320, 512]))
    assert big.gate.ok is False and ":658 head_size <= 256" in big.gate.answer
    assert "head_size not supported" in big.gate.answer  # vLLM's own supports_head_size, run
    assert big.verdict(profile("rtx-pro-6000")) is Verdict.REFUSED
    odd = 8 * rng.randint(1, 31) + rng.randint(1, 7)
    a = ask(rng.choice(SM120), head_dim=odd)
    assert a.gate.ok is False and f"{odd} % 8 = {odd % 8}: NO" in a.gate.answer
    page = ask("rtx-pro-6000", page_size=8)
    assert page.gate.ok is False and ":637 page_block_size % 16 == 0 (8 % 16 = 8: NO)" in page.gate.answer


def test_sinks_are_refused_on_sm120(ask):
    """The wheel's FA2 branch raises for s_aux, and vLLM's validate_configuration (run) has no sinks before FA3."""
    a = ask("rtx-pro-6000", sinks=True)
    assert a.gate.ok is False and a.gate.evidence == "quoted"
    assert "flash_attn_interface.py:" in a.gate.answer and "FA2 raises for s_aux" in a.gate.answer
    assert "[run]: attention sinks not supported" in a.gate.answer


def test_fa3_is_no_code_on_sm120_and_sass_on_h100(ask):
    sm120 = ask("rtx-pro-6000", fa_version=3)
    assert sm120.arch.ok is False and sm120.arch.evidence == "read"
    assert "no code for sm_120" in sm120.arch.answer and "sm_90a" in sm120.arch.answer
    assert sm120.verdict(profile("rtx-pro-6000")) is Verdict.NO_CODE
    h100 = ask("h100", fa_version=3)
    assert h100.arch.ok is True and "sm_90a SASS" in h100.arch.answer
    assert h100.bytes.ok is None  # FA3's shared storage size is not computed: said, not guessed
    assert any("picks FA3 on cc 9.0 [run]" in n for n in h100.notes)


def test_the_shipped_fa2_library_holds_sm80_and_compute80_only(ask, vllm, memo):
    ask("rtx-pro-6000")
    _, lib, index = memo[("fa2-library", vllm.origin, fa2.FA2_SO)]
    assert lib.archs() == ["sm_80", "compute_80"]
    kinds = {k[0] for k in index}
    assert {"flash_fwd_splitkv_kernel", "flash_fwd_kernel", "flash_fwd_splitkv_combine_kernel"} <= kinds


def test_a_call_it_cannot_answer_says_why(ask):
    a = ask("rtx-pro-6000", head_dim=None)
    assert a.arch.ok is None and "no head_dim" in a.arch.answer
    a = ask("rtx-pro-6000", fa_version=4)
    assert a.arch.ok is None and "FlashAttention 4" in a.arch.answer
