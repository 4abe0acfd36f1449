"""Inductor-generated kernels: what vLLM's default compilation makes of its elementwise layers.

vLLM's default compilation (CompilationMode.VLLM_COMPILE with the Inductor backend) sets `custom_ops` to "none"
(vllm/config/vllm.py: `if backend == "inductor" and mode != NONE: custom_ops.append("none")`), so RMSNorm,
fused-add RMSNorm, SiluAndMul and (unless a rope-fusion pass re-enables it) the rotary embedding run as Triton
kernels that Inductor generates and autotunes at engine start for the shapes it traces. The code does not exist
before then and Inductor's autotuner, like Triton's, drops configs a device cannot launch: the arch (Triton's JIT)
and gate (none) are quoted, the bytes `unanswered` with that reason; `--enforce-eager` (or `-O0`) makes vLLM run its own CUDA custom
ops instead, which tileprobe answers (family vllm-custom-op).
"""

from __future__ import annotations

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered

NAME = "inductor"
LIBRARY = "torch Inductor (generated Triton)"
WHY = ("Inductor generates and autotunes this kernel at engine start (vLLM's default compilation runs its "
       "elementwise layers with custom_ops 'none'); no shipped code to read")


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    cc = ctx.target.cc_int
    arch = Part(f"Triton compiles Inductor's kernels for sm_{cc} at engine start (Triton targets sm_80 and newer)",
                cc >= 80, "quoted")
    gate = Part("no shape gate: Inductor generates the kernel for the shapes it traces", True, "quoted")
    return CompiledAnswer(f"Inductor-fused {call.param('kernel', call.op)}", arch, gate, unanswered(WHY))
