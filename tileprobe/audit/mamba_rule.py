"""The stated rule an audit row of vLLM's Mamba-2 SSD kernels is predicted by: tileprobe.predict.triton_ssd (keyed by
Triton release and the sha256 of the engine file defining the kernel), asked with what the captured launch passed:
its BLOCK_SIZE_* constexprs, num_warps / num_stages, the pointers' dtypes and the flags (HAS_INITSTATES, HAS_Z,
IS_CAUSAL, dot_dtype, K). Anything the rule was not checked on is CannotPredict, and the launch is sized instead.

The file's sha256 is read from the launch's kernel module: the audit compiles these kernels through
tileprobe.audit.loader's stub, which lists the sha256 of every engine file the entry serves (the stub's own sha256
also names the wheel's path and the target, so it is not the key); a kernel cut out of its file (extract) is keyed
by that module's own sha256.
"""

from __future__ import annotations

import re

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_ssd as rule

SIZES = {"bf16": 2, "fp16": 2, "fp32": 4}
BLOCKS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "BLOCK_SIZE_DSTATE", "BLOCK_SIZE_H", "BLOCK_SIZE_CHUNK")
FLAGS = ("HAS_INITSTATES", "HAS_Z", "IS_CAUSAL", "K", "chunk_size", "nheads")
POINTERS = {"a_dtype": "a_ptr", "b_dtype": "b_ptr", "x_dtype": "x_ptr", "C_dtype": "C_ptr", "cb_dtype": "cb_ptr",
            "states_dtype": "states_ptr", "init_dtype": "initstates_ptr", "dt_dtype": "dt_ptr",
            "dt_out_dtype": "dt_out_ptr", "dA_dtype": "dA_cumsum_ptr"}
OUTPUT = {"_bmm_chunk_fwd_kernel": "out_ptr", "_chunk_state_fwd_kernel": "states_ptr",
          "_chunk_scan_fwd_kernel": "out_ptr"}


def dtype(launch: Launch, name: str) -> str | None:
    a = launch.arg(name)
    return a.dtype if isinstance(a, TensorArg) else None


def source_sha256(launch: Launch, job: KernelJob) -> str:
    """The sha256 of the engine file defining the launched kernel, as the job's kernel module records it."""
    module = launch.kernel_file.removesuffix(".py").replace("/", ".")
    found = re.search(rf"^# {re.escape(module)}: sha256 ([0-9a-f]{{64}})$", job.source.text, re.M)
    return found.group(1) if found else job.source.sha256


def params(launch: Launch) -> dict:
    """The launch's values each triton-ssd rule reads."""
    p = {k: int(launch.arg(k)) for k in BLOCKS if launch.arg(k) is not None}
    p |= {k: launch.arg(k) for k in FLAGS if launch.arg(k) is not None}
    p |= {"num_warps": int(launch.arg("num_warps", 4)), "num_stages": int(launch.arg("num_stages", 3))}
    p |= {k: dtype(launch, ptr) for k, ptr in POINTERS.items()}
    if launch.kernel in OUTPUT:
        out = dtype(launch, OUTPUT[launch.kernel])
        if out not in SIZES:
            raise CannotPredict(f"{launch.kernel}'s output dtype {out}: not one the rules were checked on")
        p["out_size"] = SIZES[out]
    dot = launch.arg("dot_dtype")
    if dot is not None:
        p["dot_dtype"] = {"tl.bfloat16": "bf16", "tl.float16": "fp16"}.get(str(dot), str(dot))
    return p


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured SSD-kernel launch by the triton-ssd rule (raises CannotPredict)."""
    return rule.predict(launch.kernel, params(launch), job.cc, triton_version,
                        source_sha256=source_sha256(launch, job))
