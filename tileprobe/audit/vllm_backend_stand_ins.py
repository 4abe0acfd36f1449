"""vLLM's config tree and torch helpers as an attention backend's own metadata builder and impl see them, for
tileprobe.audit.capture: so that `TritonAttentionMetadataBuilder.build` and `TritonAttentionImpl.forward`
(vllm/v1/attention/backends/triton_attn.py, served from the wheel with vllm/v1/attention/backend.py and
vllm/v1/kv_cache_interface.py) run as the engine's model runner calls them.

Every class, enum and function given here is read from the wheel's own text (`from_text`: the named top-level
definitions of a file, executed in a scope of what they use), except:
- `vllm._aiter_ops.rocm_aiter_ops`: ROCm's AITER switch, answering False for every `is_*` question (the target is
  CUDA);
- quant_utils' QuantKey constants: opaque markers, compared only by identity by the attention code (FP8_DTYPE and
  get_fp8_min_max are the wheel's, on the target's platform);
- `vllm.distributed.parallel_state`: one rank, no context parallelism (the defaults);
- `vllm.config.get_current_vllm_config_or_none`: None (no config set in the process);
- `vllm.config.VllmConfig` / `CacheDType`: names for annotations only (tileprobe.audit.vllm_backend builds the
  config the builder reads, and says which fields it sets);
- `vllm.utils.torch_utils.direct_register_custom_op`: nothing registered (the op's Python is called directly, as
  its registered implementation runs it); `vllm.utils.gpu_sync_debug.gpu_sync_allowed`: a null context;
- `vllm.v1.attention.backends.utils.get_num_attention_heads_from_layers`: None (no layer registry: the builder then
  takes the model's head count, the same number for a model whose layers share one head count).
"""

from __future__ import annotations

import ast
import importlib

from tileprobe.audit import vllm_stand_ins
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target


def from_text(source: EngineSource, rel: str, names: tuple[str, ...], scope: dict) -> dict:
    """The top-level definitions `names` of the wheel file `rel` (classes, functions, assignments), executed in order
    of the file in `scope`; a name the file does not define is a LookupError naming the file."""
    text = source.read_text(rel)
    nodes, found = [], set()
    for n in ast.parse(text).body:
        name = getattr(n, "name", None)
        if name is None and isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            name = next((t.id for t in targets if isinstance(t, ast.Name)), None)
        if name in names:
            nodes.append(n)
            found.add(name)
    missing = set(names) - found
    if missing:
        raise LookupError(f"{rel} in {source.engine} {source.version} defines no {', '.join(sorted(missing))}")
    scope = dict(scope)
    scope.setdefault("__name__", rel[:-3].replace("/", "."))
    exec(compile(ast.Module(nodes, []), rel, "exec"), scope)  # noqa: S102
    return {name: scope[name] for name in names}


class _NoAiter:
    """vllm._aiter_ops.rocm_aiter_ops on a CUDA target: every `is_*` switch off."""

    def __getattr__(self, name: str):
        if name.startswith("is_"):
            return lambda *a, **k: False
        raise AttributeError(f"rocm_aiter_ops.{name}: a ROCm AITER helper, not called on a CUDA target")


def aiter_ops(target: Target, source: EngineSource) -> dict:
    return {"rocm_aiter_ops": _NoAiter()}


def config(target: Target, source: EngineSource) -> dict:
    import enum
    mode = from_text(source, "vllm/config/compilation.py", ("CUDAGraphMode",), {"enum": enum})
    return {**mode, "VllmConfig": type("VllmConfig", (), {}), "get_current_vllm_config_or_none": lambda: None}


def parallel_state(target: Target, source: EngineSource) -> dict:
    """One rank, no context parallelism (vLLM's defaults: decode_context_parallel_size 1, no PCP group, whose
    getter's assertion AttentionImplBase.__new__ catches)."""
    def get_pcp_group():
        raise AssertionError("no prefill context parallel group (one rank)")

    return {"get_dcp_world_size_and_rank": lambda *a, **k: (1, 0), "get_pcp_group": get_pcp_group}


def config_cache(target: Target, source: EngineSource) -> dict:
    read = from_text(source, "vllm/config/cache.py", ("_KV_CACHE_DTYPE_HANDLERS", "get_kv_cache_dtype_handler"),
                     {"KVCacheDTypeHandler": object})
    return {"CacheDType": str, **read}


class QuantKey:
    """An opaque quant key (compared by identity)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def quant_utils(target: Target, source: EngineSource) -> dict:
    keys = ("kFp8StaticTensorSym", "kFp8Dynamic64Sym", "kFp8Dynamic128Sym", "kNvfp4Dynamic", "kFp8DynamicTokenSym",
            "kFp8StaticTokenSym", "kNvfp4Static", "kMxfp4Dynamic")
    torch = importlib.import_module("torch")
    platform = importlib.import_module("vllm.platforms").current_platform
    scope = {"torch": torch, "current_platform": platform}
    read = from_text(source, "vllm/model_executor/layers/quantization/utils/quant_utils.py",
                     ("FP8_DTYPE", "get_fp8_min_max"), scope)
    return {"QuantKey": QuantKey, **{k: QuantKey(k) for k in keys}, **read}


def torch_utils(target: Target, source: EngineSource) -> dict:
    torch = importlib.import_module("torch")
    read = from_text(source, "vllm/utils/torch_utils.py", ("get_dtype_size",), {"torch": torch})
    return {**read, "direct_register_custom_op": lambda *a, **k: None}


def backend_utils(target: Target, source: EngineSource) -> dict:
    torch = importlib.import_module("torch")
    read = from_text(source, "vllm/v1/attention/backends/utils.py",
                     ("compute_mm_prefix_range_tensor", "set_triton_ptr_range"), {"torch": torch})
    return {**vllm_stand_ins.backend_utils(target, source), **read,
            "get_num_attention_heads_from_layers": lambda vllm_config, layer_names: None}


def mem_utils(target: Target, source: EngineSource) -> dict:
    """get_max_shared_memory_bytes: the target's opt-in limit per block, the device attribute the engine's op reads
    (vllm._custom_ops.get_max_shared_memory_per_block_device_attribute: cudaDevAttrMaxSharedMemoryPerBlockOptin)."""
    return {"get_max_shared_memory_bytes": lambda gpu=0: target.smem_optin}


def gpu_sync_debug(target: Target, source: EngineSource) -> dict:
    import contextlib
    return {"gpu_sync_allowed": contextlib.nullcontext}


STAND_INS = {**vllm_stand_ins.STAND_INS, "vllm.utils.mem_utils": mem_utils, "vllm.utils.gpu_sync_debug": gpu_sync_debug,
             "vllm.distributed.parallel_state": parallel_state, "vllm._aiter_ops": aiter_ops, "vllm.config": config,
             "vllm.config.cache": config_cache,
             "vllm.model_executor.layers.quantization.utils.quant_utils": quant_utils,
             "vllm.utils.torch_utils": torch_utils, "vllm.v1.attention.backends.utils": backend_utils}

# the stand-ins with vllm/v1/kv_cache_interface.py served from the wheel instead (the builder's FullAttentionSpec)
STAND_INS_SERVED = {k: v for k, v in STAND_INS.items() if k != "vllm.v1.kv_cache_interface"}
