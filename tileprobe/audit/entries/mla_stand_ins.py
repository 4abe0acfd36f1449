"""Stand-ins the vLLM MLA entry needs: the engine's own small sizing function, read from the wheel's text (its module
imports the engine's whole runtime, so it is not served), and the target's SM count it is called with. (SGLang's MLA
entries need none: they run SGLang's TritonAttnBackend itself, whose __init__ calls its own `_mla_decode_kv_splits_cap`;
tileprobe.audit.sglang_backend.)

- vLLM `vllm.v1.attention.backends.mla.triton_mla`: `_compute_num_kv_splits` and its two constants
  (TritonMLAImpl.forward_mqa sizes num_kv_splits with them).

Each stand-in module is imported by the entry's arguments inside the capture session (importlib.import_module), so
it is built from the release being audited (the session's EngineSource).
"""

from __future__ import annotations

from tileprobe.audit import engine_code
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

torch = LazyModule("torch")
triton = LazyModule("triton")

VLLM_TRITON_MLA = "vllm.v1.attention.backends.mla.triton_mla"


def top_level(source: EngineSource, path: str, names: tuple[str, ...], scope: dict) -> dict:
    """The top-level functions and constants `names` of the engine file `path`, executed from its own text
    (tileprobe.audit.engine_code.top_level) with a copy of `scope` as their globals."""
    try:
        ns = engine_code.top_level(source, path, names, dict(scope))
    except LookupError as exc:
        raise UsageError(f"{exc} (tileprobe reads them)") from None
    return {n: ns[n] for n in names}


def vllm_triton_mla(target: Target, source: EngineSource) -> dict:
    return top_level(source, VLLM_TRITON_MLA.replace(".", "/") + ".py",
                     ("_MIN_WORK_PER_SPLIT", "_SPLIT_OCCUPANCY_MULTIPLIER", "_compute_num_kv_splits"),
                     {"triton": triton.load()})


def sm_count() -> int:
    """The device's SM count as vLLM reads it (num_compute_units: CUDA's multi_processor_count), which the capture
    session answers as the target's."""
    return int(torch.cuda.get_device_properties(0).multi_processor_count)
