"""Predict the shared bytes of the engines' Triton fused_moe_kernel (family triton-moe) without compiling, where the
rules below were checked exact against Triton's own metadata.shared; CannotPredict everywhere else.

Keyed by (Triton release, sha256 of the kernel source as tileprobe extracts it: backends/triton/source.py
KernelSource.sha256): CHECKED lists the pairs the rules were checked on. Another release or a changed kernel is
CannotPredict, saying so: the pipeliner, the MMA lowering and the allocator all change between releases.

Scope: Triton 3.8.0; the pin table's vLLM and SGLang kernels (by sha256); sm_89, sm_90, sm_100, sm_120, sm_121; bf16,
fp8 w8a8 per-tensor and fp8 block [128, 128]; N divisible by 16 (every launch of the shipped trees; unchecked
otherwise). Shared memory is the A tile (BM x BK) and the B tile (BK x BN), each element 2 B (bf16) or 1 B (fp8), times
their buffer counts, plus what the MMA path and the block scales add (metadata.shared is what TritonGPU's
AllocateSharedMemory pass lays out: the buffers are live together in the K loop). BK is BLOCK_SIZE_K, except that vLLM's
launcher clamps it to 128 for fp8 block (SGLang's does not).

1. MMA path (the `accelerate_matmul` pass). Effective M = BLOCK_SIZE_N under swap-AB (fp8 on capability 9.x with
   BM < 64 <= BN: both launchers transpose the dot), else BLOCK_SIZE_M. On sm_90 (wgmma) and sm_100 (tcgen05) with
   effective M >= 64 the MMA is asynchronous and reads its operands from shared memory while the next loads land:
   the pipeliner keeps num_stages buffers of each pipelined tile. Everywhere else (sm_89 / sm_120 / sm_121:
   mma.sync, and sm_90 / sm_100 with effective M < 64, which fall back to it) it keeps num_stages - 1.
2. Which tiles are pipelined (cp.async moves at least 4 B per thread): a tile of R rows x BK (K contiguous) is
   loaded with min(BK, R*BK / (32*num_warps), v) contiguous elements per thread, v = 16 B / element size when K is
   divisible by 16 (Triton's divisibility specialisation of the strides), else 1 element. A tile under 4 B per
   thread (every bf16 tile when K is not 16-divisible, SGLang's down GEMM at K = 232), and every bf16 tile at
   num_stages 1, is not pipelined and takes exactly one copy (the dot still reads it from shared).
3. sm_100 on the tcgen05 path: 16 B more, two 8-byte mbarriers.
4. fp8 block, the per-K-block scales: a_scale is a vector of BM; b_scale a vector of BN in vLLM always, in SGLang
   only when BN > 128 (group_n; else a scalar). On the tcgen05 path the b_scale vector takes a 4 B-per-element
   buffer and a_scale nothing. Elsewhere a vector longer than 16 * num_warps is converted through shared memory,
   4 B per element; only launches where at most one vector is that long were checked (two: CannotPredict).

CannotPredict, because random launches found the rules wrong there or nothing checked them: a tile under 4 B per
thread with K 16-divisible (fp8 16x32 with 8 warps: its one copy sometimes shares space with the other buffers);
num_stages 1 with fp8 operands or on sm_100 (the two unpipelined tiles are sometimes not live together, or overlap
the scale scratch); K not divisible by 16 with fp8 operands or on sm_100 (a tile skips shared memory, or keeps two
copies); an output tile BM*BN*2 larger than the loop's bytes (the epilogue's layout conversion can then be the
larger allocation: vLLM fp8 on sm_89 with 8 warps); fp8 block with both scale vectors over 16 * num_warps.

Checked (tools/triton_predictor_coverage.py -> results/triton-moe/predictor-coverage.json; tools/
triton_formula_check.py -> results/triton-moe/formula-check.json): every distinct launch of both engines' shipped
config trees on each file's own device (check-configs' plan) against Triton 3.8.0's own passes up to
AllocateSharedMemory, every committed compiled row (results/triton-moe/check-configs), and random launches compiled
by tests/predict/test_triton_predict.py. Outside that scope: CannotPredict(<why>): compile instead.
"""

from __future__ import annotations

from tileprobe.engines import pins
from tileprobe.predict import recheck
from tileprobe.predict._common import CannotPredict

VLLM = pins.label("vllm")  # the engine releases whose kernels the tables below were checked on
SGLANG = pins.label("sglang")

FAMILY = "triton-moe"
# (Triton release, fused_moe_kernel source sha256) -> the engine release whose kernel that is: the pairs checked.
# Two extractions of the same kernel function per engine: source.extract's module (the kernel and what it calls;
# tests/predict/test_triton_predict.py compiles random launches of it every run), and the earlier, larger module of
# every @triton.jit function in the file, which the committed rows were compiled from (their run.json names it).
CHECKED = {
    ("3.8.0", "1d1bb61d32d868e46010e17764f84d630a48e23c2790abf2195285d5f635f84e"): VLLM,
    ("3.8.0", "d11960be50ffb2a71e5f7368165bb44a622c465de9ac8e6ed9b8aacd161b8dc0"): SGLANG,
    ("3.8.0", "617f495cd848d93a839266fa30ff09329eb3a7f4f509c6ecdc7a2c2c302b5fa2"): VLLM,
    ("3.8.0", "13d04c8d0cdd005be46f56590729089875c26cdc9028108d723ddca555d8988f"): SGLANG,
}
TRITON_VERSIONS = tuple(dict.fromkeys(v for v, _ in CHECKED))
ENGINES = tuple(dict.fromkeys(CHECKED.values()))
CCS = (89, 90, 100, 120, 121)
ASYNC_MMA_CCS = (90, 100)  # wgmma / tcgen05: operands read from shared memory while the next stage loads
QUANTS = ("bf16", "fp8", "fp8-block")
GROUP = 128  # fp8 block [128, 128]
BARRIER_BYTES = 16  # sm_100 tcgen05 path: two 8-byte mbarriers


def estimate_pr28038(entry: dict, quant: str) -> int:
    """SGLang PR #28038's estimate: (num_stages - 1) * (BM*BK + BK*BN) * bytes (bf16 2 B, fp8 1 B)."""
    b = 2 if quant == "bf16" else 1
    return (entry["num_stages"] - 1) * (entry["BLOCK_SIZE_M"] * entry["BLOCK_SIZE_K"]
                                        + entry["BLOCK_SIZE_K"] * entry["BLOCK_SIZE_N"]) * b


def _swap_ab(quant: str, entry: dict, cc: int) -> bool:
    return quant != "bf16" and cc // 10 == 9 and entry["BLOCK_SIZE_M"] < 64 <= entry["BLOCK_SIZE_N"]


def _pipelined(rows: int, bk: int, k: int, warps: int, stages: int, elem: int) -> bool:
    """Rule 2: cp.async takes the tile only with at least 4 contiguous bytes per thread."""
    if stages < 2:
        return False
    vec = 16 // elem if k % 16 == 0 else 1
    return min(bk, rows * bk // (32 * warps), vec) * elem >= 4


def _scale_bytes(vllm: bool, bm: int, bn: int, warps: int, tcgen05: bool) -> int:
    """Rule 4: the fp8-block scale bytes (a vector converted through shared memory, or tcgen05's b_scale buffer)."""
    b_vector = vllm or bn > GROUP
    if tcgen05:
        return 4 * bn if b_vector else 0
    long = [v for v in [bm] + ([bn] if b_vector else []) if v > 16 * warps]
    if len(long) > 1:
        raise CannotPredict(f"fp8 block with both scale vectors ({bm}, {bn}) longer than 16 * num_warps: not checked; "
                            "compile it")
    return 4 * long[0] if long else 0


def predict(engine: str, quant: str, entry: dict, cc: int, triton_version: str, n: int, k: int, *,
            kernel_sha256: str | None = None) -> int:
    """metadata.shared for one launch of the engine's fused_moe_kernel (n, k: the GEMM's N and K as the kernel sees
    them; kernel_sha256: KernelSource.sha256 of the kernel launched); CannotPredict outside the checked scope."""
    if not kernel_sha256:
        raise TypeError("triton_moe.predict needs kernel_sha256= (KernelSource.sha256 of the launched kernel): the "
                        "rules hold for the kernel sources they were checked on only")
    if triton_version not in TRITON_VERSIONS and recheck.load(triton_version) is None:
        checked = None
    else:  # the table, an engine release's re-checked key, or a Triton release's recheck file (tileprobe.predict.recheck)
        checked = recheck.lookup(FAMILY, CHECKED, TRITON_VERSIONS, triton_version, "fused_moe_kernel",
                                 (kernel_sha256,))
    if checked is None:
        if triton_version not in TRITON_VERSIONS:
            raise CannotPredict(f"triton-moe rules were checked on Triton {', '.join(TRITON_VERSIONS)} only, not "
                                f"{triton_version}: the same config needs other bytes under other releases; compile it")
        raise CannotPredict(f"fused_moe_kernel source {kernel_sha256[:16]} is not one the triton-moe rules were "
                            f"checked on ({', '.join(ENGINES)}): a changed kernel changes the layout; compile it")
    if engine != checked:
        raise CannotPredict(f"kernel {kernel_sha256[:16]} is {checked}'s, not {engine}'s: compile it")
    if cc not in CCS:
        raise CannotPredict(f"triton-moe rules were checked for sm_{', sm_'.join(map(str, CCS))} only, not sm_{cc}: "
                            "compile it")
    if quant not in QUANTS:
        raise CannotPredict(f"triton-moe {quant}: not a launch the rules were checked on; compile it")
    if n % 16:
        raise CannotPredict(f"N={n}: not divisible by 16, not checked; compile it")
    bm, bn, stages, warps = entry["BLOCK_SIZE_M"], entry["BLOCK_SIZE_N"], entry["num_stages"], entry["num_warps"]
    if stages < 2 and (quant != "bf16" or cc == 100):
        raise CannotPredict(f"num_stages {stages} with {quant} on sm_{cc}: whether the two unpipelined tiles (and the "
                            "scale or barrier bytes) are live together is not modelled there; compile it")
    if k % 16 and (quant != "bf16" or cc == 100):
        raise CannotPredict(f"K={k}: not divisible by 16 ({quant}, sm_{cc}): how many copies of an unpipelined tile "
                            "stay in shared memory is not modelled there; compile it")
    vllm = engine.startswith("vllm")
    bk = min(entry["BLOCK_SIZE_K"], GROUP) if quant == "fp8-block" and vllm else entry["BLOCK_SIZE_K"]
    elem = 2 if quant == "bf16" else 1
    if k % 16 == 0 and any(rows * bk // (32 * warps) * elem < 4 for rows in (bm, bn)):
        raise CannotPredict(f"a {quant} tile of {min(bm, bn)}x{bk} with {warps} warps: under 4 B per thread, not "
                            "pipelined, and whether its copy overlaps the other buffers is not modelled; compile it")
    eff_m = bn if _swap_ab(quant, entry, cc) else bm
    async_mma = cc in ASYNC_MMA_CCS and eff_m >= 64
    buffers = stages if async_mma else stages - 1
    shared = sum((buffers if _pipelined(rows, bk, k, warps, stages, elem) else 1) * rows * bk * elem
                 for rows in (bm, bn))
    if cc == 100 and async_mma:
        shared += BARRIER_BYTES
    if quant == "fp8-block":
        shared += _scale_bytes(vllm, bm, bn, warps, cc == 100 and async_mma)
    if bm * bn * 2 > shared:
        raise CannotPredict(f"the {bm}x{bn} bf16 output tile ({bm * bn * 2} B) outgrows the K loop's {shared} B: the "
                            "epilogue's layout conversion may then be the larger allocation (it is for vLLM fp8 on "
                            "sm_89 with 8 warps), not modelled; compile it")
    return shared
