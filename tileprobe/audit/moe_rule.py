"""The stated rule an audit row of vLLM's `fused_moe_kernel` is predicted by: tileprobe.predict.triton_moe (the
triton-moe predictor, keyed by Triton release and the kernel's sha256), asked with what the captured launch passed.

The predictor was checked on the launches tileprobe.families.triton_moe builds; an engine launch is that launch
only when its flags are the family's: bf16 activations and output (compute_type tl.bfloat16), fp8 (per-tensor, or
[group_n, group_k] = [128, 128] blocks) or no quantization, no bias, SPLIT_K 1, no tensor-descriptor gather (USE_TD),
pointer loads (a newer release's USE_TMA_A / USE_TMA_B host TMA descriptors off) and output rows unsorted
(C_IS_SORTED off), and SWAP_AB as the family sets it for the quant, tile and capability. Anything else is
CannotPredict with the flag named, and the launch is sized or compiled instead.
"""

from __future__ import annotations

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.engines import pins
from tileprobe.families.triton_moe import swap_ab
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_moe as rule

KERNEL = "fused_moe_kernel"
ENGINE = pins.label("vllm")  # the release the rule was checked on (the rule checks the kernel's sha256 too)
ENTRY_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")


def quant_of(launch: Launch) -> str:
    """bf16 / fp8 / fp8-block as the triton-moe family names the launch's quantization (CannotPredict otherwise)."""
    a = launch.arg("a_ptr")
    dtype = a.dtype if isinstance(a, TensorArg) else None
    others = [f for f in ("use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "per_channel_quant", "HAS_BIAS",
                          "USE_TD", "USE_TMA_A", "USE_TMA_B", "C_IS_SORTED") if launch.arg(f)]
    if others:
        raise CannotPredict(f"{', '.join(others)}: not a launch the triton-moe rules were checked on")
    if launch.arg("compute_type") != "tl.bfloat16":
        raise CannotPredict(f"compute_type {launch.arg('compute_type')}: the rules were checked for bf16 output only")
    if not launch.arg("use_fp8_w8a8"):
        if dtype != "bf16":
            raise CannotPredict(f"{dtype} activations without fp8: not a launch the rules were checked on")
        return "bf16"
    blocks = (launch.arg("group_n", 0), launch.arg("group_k", 0))
    if blocks == (0, 0):
        return "fp8"
    if blocks == (rule.GROUP, rule.GROUP):
        return "fp8-block"
    raise CannotPredict(f"fp8 blocks {blocks[0]}x{blocks[1]}: the rules were checked on {rule.GROUP}x{rule.GROUP}")


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured fused_moe_kernel launch by the triton-moe rule (raises CannotPredict)."""
    if launch.kernel != KERNEL:
        raise CannotPredict(f"{launch.kernel}: the triton-moe rule is {KERNEL}'s")
    quant = quant_of(launch)
    entry = {k: int(launch.arg(k)) for k in ENTRY_KEYS}
    entry |= {"num_warps": int(launch.arg("num_warps", 4)), "num_stages": int(launch.arg("num_stages", 3))}
    odd = [f"{k}={entry[k]}" for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps")
           if entry[k] & (entry[k] - 1)]
    if odd:
        raise CannotPredict(f"{', '.join(odd)} not a power of two: only a compile says")
    if int(launch.arg("SPLIT_K", 1)) != 1:
        raise CannotPredict(f"SPLIT_K {launch.arg('SPLIT_K')}: the rules were checked with SPLIT_K 1")
    if bool(launch.arg("SWAP_AB")) != swap_ab(quant, entry, job.cc):
        raise CannotPredict(f"SWAP_AB {launch.arg('SWAP_AB')} where the checked launches have the other")
    return rule.predict(ENGINE, quant, entry, job.cc, triton_version, int(launch.arg("N")),
                        int(launch.arg("K")), kernel_sha256=job.source.sha256)
