"""A captured launch as a tileprobe KernelJob: the kernel's standalone module cut from the engine file
(tileprobe.backends.triton.source.extract) and every argument as the compile's stand-in (a tensor by its dtype
'*bf16', numbers and constexprs as they were passed), with the launch's num_warps / num_stages, for the target's
capability. tileprobe.backends.triton.compile builds it with Triton's own binder, so the specialization (16-divisible
ints, ints equal to 1, None arguments) is the launch's."""

from __future__ import annotations

from tileprobe.audit.capture import COMPILE_OPTIONS, Launch, TensorArg
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.backends.triton.source import KernelSource, extract
from tileprobe.engines.triton_configs import EngineSource


def kernel_source(source: EngineSource, launch: Launch) -> KernelSource:
    """The launch's kernel as a standalone module, cut from its file in the engine release."""
    return extract(source.read_text(launch.kernel_file), launch.kernel,
                   f"{source.label()} {launch.kernel_file}::{launch.kernel}")


def stand_in_value(value):
    if isinstance(value, TensorArg):
        return f"*{value.dtype}"
    return value_of(value)


def int_class(value: int, specialized: bool = True) -> int:
    """A runtime int argument as Triton's binder sees it, by one representative: its type by magnitude (i32, i64,
    u64) and, where the parameter is specialised, whether it equals 1 and whether 16 divides it. Nothing else of
    the value reaches the compile, so launches that differ only there (strides, lengths, token counts) are one
    compile. A do_not_specialize parameter keeps only the type."""
    wide = 0 if -2**31 <= value < 2**31 else 2**32 if -2**63 <= value < 2**63 else 2**63
    if not specialized:
        return wide or 2
    if value == 1:
        return 1
    return wide + (16 if value % 16 == 0 else 17)


def job_of(source: EngineSource, launch: Launch, cc: int, kernel_source=kernel_source) -> KernelJob:
    """The compile of `launch` for capability `cc` (120, 90, ...); `kernel_source(source, launch)` gives the kernel's
    module (default: cut from its file; tileprobe.audit.loader's stub where the kernel cannot be cut out)."""
    kwargs = [(k, stand_in_value(int_class(v, k not in launch.unspecialized)
                                 if type(v) is int and k not in launch.constexprs else v)) for k, v in launch.args]
    kwargs += [(k, v) for k, v in launch.options if k in COMPILE_OPTIONS and v is not None]
    return KernelJob(kernel_source(source, launch), (), tuple(kwargs), cc)


def value_of(v):
    """An IntEnum constexpr (vLLM's KVQuantMode) as the int Triton compares it as."""
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and type(v) is not int else v
