"""Predict the shared bytes of the engines' Triton fused_moe_kernel (family triton-moe) without compiling, where a
rule was checked exact against Triton's own metadata.shared; CannotPredict everywhere else.

The rule (Triton 3.8.0, sm_120 / sm_121, vLLM 0.33.0's and SGLang 0.5.23's kernels, bf16 and fp8 w8a8 per-tensor,
a K tile row of at least 64 B, the launch's N and K divisible by 16): the software pipeliner
keeps num_stages - 1 buffered copies of the A tile (BLOCK_SIZE_M x BLOCK_SIZE_K) and of the B tile (BLOCK_SIZE_K x
BLOCK_SIZE_N), each element 2 B (bf16) or 1 B (fp8), and nothing else outlives them:

    shared = (num_stages - 1) * (BM*BK + BK*BN) * bytes

This is also the estimate SGLang PR #28038 clamps its defaults with. Checked exact on every compiled row of that
scope in the committed results (tools/triton_formula_check.py writes results/triton-moe/formula-check.json). Outside
it the same formula is wrong or unchecked: fp8 block [128, 128] adds the block-scale buffers (0, 512 or 1024 B more in
the rows, and the launcher clamps BLOCK_SIZE_K to 128), a K not divisible by 16 (SGLang's down GEMM with K = 232:
Triton does not pipeline those loads; 14 rows at half the formula or less), a K row under 64 B (fp8 BLOCK_SIZE_K 32) came out 1024 B
under the formula in 2 of 12 rows, sm_90 pipelines differently (Hopper's wgmma path), and num_stages 1 has no pipeline
buffers to count; so there it is CannotPredict: compile instead.
"""

from __future__ import annotations

from tileprobe.predict._common import CannotPredict

FAMILY = "triton-moe"
TRITON_VERSIONS = ("3.8.0",)
CCS = (120, 121)
ENGINES = ("vllm 0.33.0", "sglang 0.5.23")
QUANTS = ("bf16", "fp8")


def estimate_pr28038(entry: dict, quant: str) -> int:
    """SGLang PR #28038's estimate: (num_stages - 1) * (BM*BK + BK*BN) * bytes (bf16 2 B, fp8 1 B)."""
    b = 2 if quant == "bf16" else 1
    return (entry["num_stages"] - 1) * (entry["BLOCK_SIZE_M"] * entry["BLOCK_SIZE_K"]
                                        + entry["BLOCK_SIZE_K"] * entry["BLOCK_SIZE_N"]) * b


def predict(engine: str, quant: str, entry: dict, cc: int, triton_version: str, n: int, k: int) -> int:
    """metadata.shared for one launch of the engine's fused_moe_kernel (n, k: the GEMM's N and K as the kernel sees
    them); CannotPredict outside the checked scope."""
    if triton_version not in TRITON_VERSIONS:
        raise CannotPredict(f"triton-moe rules were checked on Triton {', '.join(TRITON_VERSIONS)} only, not "
                            f"{triton_version}: the same config needs other bytes under other releases; compile it")
    if engine not in ENGINES:
        raise CannotPredict(f"triton-moe rules were checked on {', '.join(ENGINES)}'s kernel only, not {engine}")
    if cc not in CCS:
        raise CannotPredict(f"triton-moe rules were checked for sm_120/sm_121 only, not sm_{cc}: compile it")
    if quant not in QUANTS:
        raise CannotPredict(f"triton-moe {quant}: not exact (fp8 block adds block-scale buffers the rule does not "
                            "model); compile it")
    if n % 16 or k % 16:
        raise CannotPredict(f"N={n}, K={k}: not both divisible by 16 (Triton's specialisation changes the pipeline)")
    if entry["BLOCK_SIZE_K"] * (2 if quant == "bf16" else 1) < 64:
        raise CannotPredict("a K tile row under 64 B: its shared layout is not the formula's in every case")
    if entry["num_stages"] < 2:
        raise CannotPredict("num_stages 1: no pipeline buffers; the rule does not cover it")
    return estimate_pr28038(entry, quant)
