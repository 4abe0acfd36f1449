"""The stated rule an audit row of the engines' Triton attention kernels is predicted by:
tileprobe.predict.triton_attention (keyed by Triton release and the sha256 of the engine file defining the kernel),
asked with what the captured launch passed: its constexprs (block sizes, head sizes, flags), num_warps / num_stages
(Triton's defaults, 4 and 3, where the launcher passes none) and the q / K / V pointers' dtypes. Anything the rule
was not checked on is CannotPredict, and the launch is sized instead.

The file's sha256 is read from the launch's kernel module as tileprobe.audit.mamba_rule does (the audit's stub lists
the sha256 of every engine file the entry serves).
"""

from __future__ import annotations

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.audit.mamba_rule import source_sha256
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.predict import triton_attention as rule

TRITON_DEFAULT_WARPS = 4
TRITON_DEFAULT_STAGES = 3
# the q / K / V pointer names per kernel (SGLang's and vLLM's decode kernels, vLLM's unified kernel)
POINTERS = {
    "_fwd_grouped_kernel_stage1": ("Q", "K_Buffer", "V_Buffer"),
    "kernel_unified_attention": ("query_ptr", "key_cache_ptr", "value_cache_ptr"),
}


def _dtype(launch: Launch, name: str) -> str | None:
    a = launch.arg(name)
    return a.dtype if isinstance(a, TensorArg) else None


def params(launch: Launch) -> dict:
    """The launch's values the triton-attention rules read: every non-tensor argument, the options, the dtypes."""
    p = {k: v for k, v in launch.args if not isinstance(v, TensorArg)}
    p |= {"num_warps": int(launch.arg("num_warps", TRITON_DEFAULT_WARPS)),
          "num_stages": int(launch.arg("num_stages", TRITON_DEFAULT_STAGES))}
    names = POINTERS.get(launch.kernel)
    if names:
        p |= {k: _dtype(launch, n) for k, n in zip(("q_dtype", "k_dtype", "v_dtype"), names)}
    return p


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured attention-kernel launch by the triton-attention rule (raises CannotPredict)."""
    return rule.predict(launch.kernel, params(launch), job.cc, triton_version,
                        source_sha256=source_sha256(launch, job))
