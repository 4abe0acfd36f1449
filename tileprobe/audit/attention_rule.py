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
# the q / K / V pointers (and the KV pool's) each kernel reads: the decode kernels, vLLM's unified kernel, SGLang's
# extend _fwd_kernel (Q_Extend...) and prefill _fwd_kernel (Q, K, V), vLLM's lightning kernels (Q, K, V, the KV
# state); those a launch passes are read
POINTERS = ("Q", "K_Buffer", "V_Buffer", "query_ptr", "key_cache_ptr", "value_cache_ptr", "Q_Extend", "K_Extend",
            "V_Extend", "K", "V", "KV", "KV_HISTORY")


def _dtype(launch: Launch, name: str) -> str | None:
    a = launch.arg(name)
    return a.dtype if isinstance(a, TensorArg) else None


def params(launch: Launch) -> dict:
    """The launch's values the triton-attention rules read: every non-tensor argument, the options, the dtypes."""
    p = {k: v for k, v in launch.args if not isinstance(v, TensorArg)}
    p |= {"num_warps": int(launch.arg("num_warps", TRITON_DEFAULT_WARPS)),
          "num_stages": int(launch.arg("num_stages", TRITON_DEFAULT_STAGES))}
    p["qkv_dtypes"] = tuple(_dtype(launch, n) for n in POINTERS if _dtype(launch, n) is not None)
    return p


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured attention-kernel launch by the triton-attention rule (raises CannotPredict)."""
    return rule.predict(launch.kernel, params(launch), job.cc, triton_version,
                        source_sha256=source_sha256(launch, job))
