"""flashinfer-attention against the real wheels: the JIT's arch for SM120 / SM121 is the release's own normalization
(run here, quoted), the prefill bytes on rtx-pro-6000 at head 128 bf16 equal an independent nvcc compile of
FlashInfer's SharedStoragePaged for the tile the module names, NUM_MMA_KV follows the target's limits (H100 gets a
bigger KV tile from the same compile), and head dims the engine or FlashInfer refuse are refused by that check."""

from __future__ import annotations

import re
import subprocess

import pytest

from _path_ctx import flashinfer_ctx
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import _flashinfer
from tileprobe.audit.path.families import flashinfer_attention as fa
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict


_ctx = flashinfer_ctx


def _call(phase: str, head_dim: int, heads: int = 32, kv_heads: int = 8, **extra) -> KernelCall:
    params = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, head_dim_v=head_dim, dtype="bf16",
                  kv_cache_dtype="auto", page_size=16, window=None, softcap=0.0, sinks=False, causal=True) | extra
    return KernelCall("attention (full)", phase, fa.NAME, "FLASHINFER", params, "test", "engine")


def _tile_bytes(answer: str) -> dict[int, tuple[int, int]]:
    """{CTA_TILE_Q: (NUM_MMA_KV, sizeof)} as the bytes answer states them."""
    rx = r"CTA_TILE_Q=(\d+) \([^;]*?\): NUM_MMA_KV=(\d+) .*?sizeof\(SharedStoragePaged\) = (\d+) B"
    return {int(t): (int(k), int(b)) for t, k, b in re.findall(rx, answer)}


@pytest.mark.parametrize("target,arch", [("rtx-pro-6000", "sm_120f"), ("dgx-spark-gb10", "sm_121a")])
def test_the_jit_arch_is_the_releases_own_normalization(request, rng, target, arch):
    engine = request.getfixturevalue(rng.choice(["vllm", "sglang"]))
    ctx = _ctx(engine, target)
    part = fa.arch_part(_call(rng.choice(["prefill", "decode"]), rng.choice([64, 128, 256])), ctx)
    assert part.ok is True and part.evidence == "read", part.answer
    assert f"CUDA 13.0: {arch}" in part.answer and f"code={arch}" in part.answer
    if target == "rtx-pro-6000":  # CUDA 12.8 has no family targets: the arch-specific one
        assert "CUDA 12.8: sm_120a" in part.answer
    else:  # SM121 needs CUDA 12.9
        assert "CUDA 12.8: none" in part.answer
    line = int(re.search(r"compilation_context\.py:(\d+)", part.answer).group(1))
    src = _flashinfer.release(ctx).text("compilation_context.py").splitlines()[line - 1]
    assert "def _normalize_cuda_arch" in src, src


def _independent_compile(rel, nvcc_path: str) -> subprocess.Popen:
    """nvcc, started now (it runs beside the module's own build), on a TU of its own that prints
    sizeof(KernelTraits<...>::SharedStoragePaged) at CTA_TILE_Q=128 head 128 bf16 for NUM_MMA_KV 1, 2, 4, 8. FlashInfer's
    warp layout at CTA_TILE_Q=128 (prefill.cuh get_num_mma_q / get_num_warps_q / get_num_warps_kv) is 2, 4, 1."""
    data = rel.root / "data"
    tmp = cache_root() / "test-fi-attention"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "t.cu").write_text(_flashinfer.host_only("""
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>
using namespace flashinfer;
template <uint32_t NKV> void p() {
  using KT = KernelTraits<MaskMode::kCausal, 128, 2, NKV, 8, 8, 4, 1, PosEncodingMode::kNone, nv_bfloat16,
                          nv_bfloat16, nv_bfloat16, float, int32_t, DefaultAttention<false, false, false, false>,
                          kPrefillLauncherRepacksFp4>;
  printf("%u %zu\\n", NKV, sizeof(typename KT::SharedStoragePaged));
}
int main() { p<1>(); p<2>(); p<4>(); p<8>(); }"""))
    inc = [data / "include", data / "cccl" / "cub", data / "cccl" / "libcudacxx" / "include", data / "cccl" / "thrust"]
    return subprocess.Popen([nvcc_path, "-std=c++17", "-O0", "-w", "-gencode=arch=compute_120a,code=compute_120a",
                             "-DFLASHINFER_ENABLE_BF16", *[f"-I{d}" for d in inc], "-o", str(tmp / "t"),
                             str(tmp / "t.cu")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_prefill_head_128_bf16_bytes_on_rtx_pro_6000_equal_a_compile(request, rng, nvcc_path):
    engine = request.getfixturevalue(rng.choice(["vllm", "sglang"]))
    ctx = _ctx(engine, "rtx-pro-6000")
    build = _independent_compile(_flashinfer.release(ctx), nvcc_path)
    a = fa.answer(_call("prefill", 128), ctx)
    out, err = build.communicate(timeout=600)
    assert build.returncode == 0, err[-2000:]
    assert a.verdict(ctx.target) is Verdict.FITS and a.bytes.evidence == "compiled", a.reason(ctx.target)
    tiles = _tile_bytes(a.bytes.answer)
    assert 128 in tiles and a.smem_bytes == max(b for _, b in tiles.values()), a.bytes.answer
    nkv, size = tiles[128]
    exe = cache_root() / "test-fi-attention" / "t"
    compiled = dict(tuple(map(int, ln.split())) for ln in
                    subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines())
    assert size == compiled[nkv], (nkv, size, compiled)
    # the dispatcher's own budget on this part: two CTAs per SM, 102400 / 2 = 51200 B, Q tile 128x128 bf16 = 32 KiB,
    # 8 KiB of K+V per NUM_MMA_KV step -> 2
    assert nkv == 2 and "min(102400/2, 101376) = 51200" in a.bytes.answer


def test_num_mma_kv_follows_the_targets_limits(sglang, rng):
    """SGLang asks FA2 on every target: the same compiled struct, a bigger KV tile where shared memory is larger
    (head 128: at head 64 the tile-128 KV steps are capped by registers, 8 / NUM_MMA_Q, on both)."""
    kv = rng.choice([1, 2, 4, 8])
    sizes = {}
    for target in ("rtx-pro-6000", "h100"):
        ctx = _ctx(sglang, target)
        a = fa.answer(_call("prefill", 128, heads=kv * rng.choice([1, 2, 4, 8]), kv_heads=kv), ctx)
        assert a.verdict(ctx.target) is Verdict.FITS, a.reason(ctx.target)
        sizes[target] = _tile_bytes(a.bytes.answer)[128]
    assert sizes["h100"][0] > sizes["rtx-pro-6000"][0] and sizes["h100"][1] > sizes["rtx-pro-6000"][1], sizes
    assert sizes["rtx-pro-6000"][1] <= PROFILES["rtx-pro-6000"].smem_optin // 2  # two CTAs per SM on SM120


def test_head_dims_the_engine_or_flashinfer_refuse(request, rng):
    ctx = _ctx(request.getfixturevalue("vllm"), rng.choice(["rtx-pro-6000", "dgx-spark-gb10"]))
    hd = rng.choice([80, 96, 160, 192])  # FlashInfer could build these; vLLM's backend lists 64/128/256/512
    a = fa.answer(_call(rng.choice(["prefill", "decode"]), hd), ctx)
    assert a.verdict(ctx.target) is Verdict.REFUSED and "get_supported_head_sizes" in a.gate.answer, a.gate.answer
    ctx = _ctx(request.getfixturevalue("sglang"), ctx.target.name)
    small = rng.choice([16, 32, 48])  # NUM_MMA_D_VO < 4: KernelTraits::IsInvalid
    b = fa.answer(_call("prefill", small), ctx)
    assert b.verdict(ctx.target) is Verdict.REFUSED and "head_dim_v < 64" in b.gate.answer, b.gate.answer


def test_sglang_decode_without_tensor_cores_is_the_decode_kernels_closed_form(sglang, rng):
    ctx = _ctx(sglang, rng.choice(["rtx-pro-6000", "dgx-spark-gb10"]))
    hd, group = rng.choice([64, 128, 256]), rng.choice([1, 2, 3])
    a = fa.answer(_call("decode", hd, heads=8 * group, kv_heads=8), ctx)
    assert "should_use_tensor_core" in " ".join(a.notes) and "BatchDecodeWithPagedKVCacheKernel" in a.kernel
    assert a.verdict(ctx.target) is Verdict.FITS and a.bytes.evidence == "quoted", a.reason(ctx.target)
    line = int(re.search(r"decode\.cuh:(\d+)", a.bytes.answer).group(1))
    assert "smem_size" in _flashinfer.release(ctx).text(fa.DECODE).splitlines()[line - 1]
