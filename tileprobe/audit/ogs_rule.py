"""The stated rule an audit row of vLLM's gpt-oss MXFP4 MoE routing / reduction kernels is predicted by:
tileprobe.predict.triton_ogs (keyed by Triton release and the sha256 of the engine files the kernel is built from),
asked with what the captured launch passed: its constexprs, num_warps, the pointers' dtypes, and how Triton
specialised its runtime integers (the job's stand-in values: 1, 16-divisible or neither). Anything the rule was not
checked on is CannotPredict, and the launch is sized instead.

The files' sha256 is taken over the texts in the engine the launch was captured from: the audit's kernel module (the
stub tileprobe.audit.loader writes) names that engine's wheel or folder on its `# engine:` line; these vendored
triton_kernels files are not among the served modules whose sha256 the stub lists. A kernel module without that
line (a kernel cut out of its file) is keyed by its own sha256, which no rule was checked on.
"""

from __future__ import annotations

import functools
import re

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_ogs as rule

CONSTS = ("BLOCK_M", "BLOCK_N", "BLOCK_MM", "BLOCK", "BLOCK_A", "SIZES", "BLOCK_SIZE_PADDED", "N_EXPTS_ACT",
          "N_EXPTS_PAD", "K", "ACTIVATION_REDUCTION_N", "USE_PROVIDED_INDX", "HAS_IN_MX_SCALE", "HAS_OUT_MX_SCALE",
          "BLOCK_K", "SWIZZLE_MX_VALUE", "SWIZZLE_MX_SCALE", "W_TRANSPOSE", "SPLIT_K", "EPILOGUE_SUBTILE", "SWAP_XW",
          "IS_EPILOGUE_QUANT_MXFP8")
NONE_OK = ("X_TMA_MODE", "Y_TMA_MODE")  # constexprs whose None is a value
ALIGNED = ("stride_pn", "stride_xm", "N")  # -> <name>_aligned: specialised 16-divisible
# the job's stand-in value (1 where Triton specialised it to 1, 16 where 16-divisible)
EXACT = ("stride_pm", "stride_xn", "B", "stride_ym", "stride_pn")
FLEX = ("XScale", "OutExpectedScale", "OutActualScale", "OutChecksumScale", "XMxScale", "OutMxScale", "WScale",
        "YExpectedScale", "YActualScale", "YChecksumScale")
ENGINE_LINE = re.compile(r"^# engine: (\S+) (\S+) \((.+)\)$", re.M)


@functools.lru_cache(maxsize=64)
def _files_sha256(engine: str, version: str, origin: str, files: tuple[str, ...]) -> str | None:
    kind = "wheel" if origin.endswith(".whl") else "installed"
    try:
        return rule.files_sha256(EngineSource(engine, version, origin, kind).read_text(f) for f in files)
    except (UsageError, OSError):
        return None


def source_sha256(launch: Launch, job: KernelJob) -> str:
    """The sha256 of the engine files the launched kernel is built from (rule.FILES), read from the engine the job's
    kernel module names; the module's own sha256 where it names none or they are missing."""
    found = ENGINE_LINE.search(job.source.text)
    files = rule.FILES.get(launch.kernel)
    if found is None or files is None:
        return job.source.sha256
    return _files_sha256(*found.groups(), files) or job.source.sha256


def params(launch: Launch, job: KernelJob) -> dict:
    """The launch's values each triton-ogs rule reads."""
    stand_in = dict(job.kwargs)
    p = {k: launch.arg(k) for k in CONSTS if launch.arg(k) is not None}
    p |= {"num_warps": int(launch.arg("num_warps", 4)), "num_stages": int(launch.arg("num_stages", 3))}
    for k in ALIGNED:
        if k in stand_in:
            if k in launch.unspecialized:
                raise CannotPredict(f"{launch.kernel}'s {k} is not specialised: its alignment is unknown")
            v = stand_in[k]
            p[f"{k}_aligned"] = isinstance(v, int) and not isinstance(v, bool) and v % 16 == 0
    p |= {k: stand_in[k] for k in EXACT if k in stand_in}
    names = dict(launch.args)
    p |= {k: names[k] for k in NONE_OK if k in names}
    for ptr in ("X", "W", "WMxScale"):
        a = launch.arg(ptr)
        p[f"{ptr}_dtype"] = a.dtype if isinstance(a, TensorArg) else None
    p["flex"] = any(launch.arg(k) is not None for k in FLEX)
    return p


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured routing / reduction launch by the triton-ogs rule (raises CannotPredict)."""
    return rule.predict(launch.kernel, params(launch, job), job.cc, triton_version,
                        source_sha256=source_sha256(launch, job))
