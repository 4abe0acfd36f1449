"""cuBLAS / cuBLASLt GEMMs (torch.nn.functional.linear, torch.mm and torch._scaled_mm on unquantized or per-tensor
weights): the dense linears the engines leave to torch.

The arch is answered by torch's own wheel (the engines' torch is built for sm_120 with CUDA 12.8+/13: its cuBLAS
ships SASS for Blackwell), but which kernel cuBLASLt runs, and with how much shared memory, is chosen inside the
library at run time by its heuristics for the device and shape. No file tileprobe can read says it, so gate and bytes
are `unanswered`, and the row says why. (A cuBLAS heuristic never picks a kernel that cannot launch on the device
it queried: this is a gap in evidence, not a known risk.)
"""

from __future__ import annotations

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered

NAME = "cublas"
LIBRARY = "cuBLAS (through torch)"

WHY = ("cuBLASLt picks its kernel inside the library at run time (its heuristics for the device and shape); "
       "nothing shipped says which kernel or how many bytes")


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    return CompiledAnswer(
        f"cuBLASLt GEMM m={call.param('m')} n={call.param('n')} k={call.param('k')} {call.param('dtype', 'bf16')}",
        arch=unanswered("cuBLAS ships inside the CUDA toolkit torch links, not in the engine's wheel; not read"),
        gate=unanswered(WHY), bytes=unanswered(WHY))


__all__ = ["NAME", "LIBRARY", "answer", "Part"]
