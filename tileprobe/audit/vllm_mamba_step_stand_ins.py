"""vLLM's config tree, parallel layers and helpers as the Mamba-2 step sees them, for tileprobe.audit.capture: so that
`Mamba2AttentionMetadataBuilder(...).build(...)` (vllm/v1/attention/backends/mamba2_attn.py, with mamba_attn.py,
vllm/v1/attention/backend.py and vllm/v1/kv_cache_interface.py), `MambaMixer2.__init__` and its op
`mamba_mixer2` -> `conv_ssm_forward` (vllm/model_executor/layers/mamba/mamba_mixer2.py, with mamba_utils.py, the
ops and ssu_dispatch.py) run from the wheel as the engine's model runner calls them (tileprobe.audit.vllm_mamba_step).
Shared with nothing else (the GDN mixer's entry, tileprobe.audit.entries.vllm_gdn, has its own).

Read from the wheel's own text (`from_text`: the named top-level definitions, executed in a scope of what they use):
vllm.v1.attention.backends.utils' NULL_BLOCK_ID / PAD_SLOT_ID / compute_causal_conv1d_metadata /
mamba_get_block_table_tensor / split_decodes_and_prefills (and the attention step's helpers,
tileprobe.audit.vllm_backend_stand_ins); vllm.config.mamba's MambaBackendEnum (with its metaclass) and MambaConfig
(its `@config` a plain dataclass, its pydantic field validator a no-op: the driver passes the enum, not a string);
vllm.distributed's divide / ensure_divisibility; vllm.model_executor.utils' set_weight_attrs; the mixer module's
own weight-loader helper is the wheel's (it is served). vllm.utils.torch_utils adds the wheel's
STR_DTYPE_TO_TORCH_DTYPE, get_kv_cache_torch_dtype and async_tensor_h2d (pinned memory off: no GPU here) to the
attention step's.

Stood in, each answering:
- `vllm.config.get_current_vllm_config`: the config the driver sets (tileprobe.audit.vllm_mamba_step says which
  fields); CacheConfig / ModelConfig / ParallelConfig: names for annotations only;
- `vllm.distributed`: tensor parallel world size the audit point's tp, rank 0 (the rank's shapes are every rank's);
  the all-gather / all-reduce are never called by conv_ssm_forward;
- `vllm.forward_context.get_forward_context`: the forward context the driver sets (attn_metadata {layer: the
  builder's metadata}, no_compile_layers {layer: the mixer}), as `set_forward_context` carries it;
- `vllm.model_executor.layers.linear` Column/MergedColumn/RowParallelLinear: one rank's weight (out/tp, in) and bias
  in the default dtype, each with a `weight_loader` attribute (the mixer deletes and replaces it); never called
  (in_proj / out_proj are cuBLAS GEMMs, not Triton: the driver starts after in_proj, at the op);
- `vllm.model_executor.custom_op` CustomOp / PluggableLayer: plain nn.Module bases (no out-of-tree replacement
  registered; Mixer2RMSNormGated's per-platform dispatch is not reached: the gated norm runs after the op);
- `vllm.model_executor.layers.mamba.abstract.MambaBase`: an nn.Module (its KV-cache spec and backend lookup are the
  driver's, from the wheel's MambaSpec and state calculators);
- weight loaders (`sharded_weight_loader`, `composed_weight_loader`), QuantizationConfig, BasevLLMParameter,
  LoaderFunction: no weights are loaded;
- `vllm.compilation.breakable_cudagraph.eager_break_during_capture`: the function itself (no graph capture);
- `vllm.model_executor.layers.attention.Attention`, the prefill-checkpoint builder / exporter (0.34.0's
  mamba/checkpoint.py) and the earlier release's `store_prefill_checkpoint` (ops/ssd_checkpoint.py): no prefix-cache
  checkpoints
  (mamba_cache_mode "none": the wheel's builder returns None then, and conv_ssm_forward calls neither).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import re
from types import SimpleNamespace

from tileprobe.audit import vllm_backend_stand_ins, vllm_stand_ins
from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target

# what the driver sets for the step it runs (vllm_mamba_step): the config, the tp, the forward context
CURRENT = SimpleNamespace(config=None, tp=1, forward=None)


def _torch():
    return importlib.import_module("torch")


def config(target: Target, source: EngineSource) -> dict:
    def get_current_vllm_config():
        if CURRENT.config is None:
            raise AssertionError("no vLLM config set (tileprobe.audit.vllm_mamba_step sets it)")
        return CURRENT.config

    names = {n: type(n, (), {}) for n in ("CacheConfig", "ModelConfig", "ParallelConfig")}
    return {**vllm_backend_stand_ins.config(target, source), **names,
            "get_current_vllm_config": get_current_vllm_config}


def config_mamba(target: Target, source: EngineSource) -> dict:
    import typing
    scope = {"Enum": enum.Enum, "EnumMeta": enum.EnumMeta, "Any": typing.Any, "Literal": typing.Literal,
             "get_args": typing.get_args, "config": dataclasses.dataclass,
             "field_validator": lambda *a, **k: (lambda f: f)}
    return from_text(source, "vllm/config/mamba.py",
                     ("_MambaBackendEnumMeta", "MambaBackendEnum", "MambaSSUAlgorithm", "MambaConfig"), scope)


def config_cache(target: Target, source: EngineSource) -> dict:
    return {**vllm_backend_stand_ins.config_cache(target, source), "MambaDType": str}


def config_model(target: Target, source: EngineSource) -> dict:
    return {"ModelDType": str}


def distributed(target: Target, source: EngineSource) -> dict:
    read = from_text(source, "vllm/distributed/utils.py", ("ensure_divisibility", "divide"), {})

    def never(*a, **k):
        raise AssertionError("a tensor-parallel collective: not on the conv/SSM path")

    return {**read, "get_tensor_model_parallel_world_size": lambda: CURRENT.tp,
            "get_tensor_model_parallel_rank": lambda: 0, "tensor_model_parallel_all_gather": never,
            "tensor_model_parallel_all_reduce": never}


def forward_context(target: Target, source: EngineSource) -> dict:
    def get_forward_context():
        assert CURRENT.forward is not None, "Forward context is not set."
        return CURRENT.forward

    return {"ForwardContext": SimpleNamespace, "get_forward_context": get_forward_context}


def _parameter(shape, loader=True):
    torch = _torch()
    p = torch.nn.Parameter(torch.empty(shape), requires_grad=False)
    if loader:
        p.weight_loader = lambda *a, **k: None
    return p


class _Linear:
    """One rank's parallel linear: weight (out, in), bias (out,), in the default dtype; never called."""

    def __init__(self, out: int, inp: int, bias: bool) -> None:
        torch = _torch()
        self.module = torch.nn.Module()
        self.weight = _parameter((out, inp))
        self.bias = _parameter((out,)) if bias else None

    def __call__(self, *a, **k):
        raise AssertionError("a cuBLAS GEMM (not Triton): the driver starts after it")


def linear(target: Target, source: EngineSource) -> dict:
    def column(input_size, output_size, bias=True, quant_config=None, prefix="", **k):
        return _Linear(output_size // CURRENT.tp, input_size, bias)

    def merged(input_size, output_sizes, bias=True, quant_config=None, prefix="", **k):
        return _Linear(sum(output_sizes) // CURRENT.tp, input_size, bias)

    def row(input_size, output_size, bias=True, input_is_parallel=True, quant_config=None, prefix="", **k):
        return _Linear(output_size, input_size // CURRENT.tp, bias)

    return {"ColumnParallelLinear": column, "MergedColumnParallelLinear": merged, "RowParallelLinear": row}


def custom_op(target: Target, source: EngineSource) -> dict:
    torch = _torch()

    class CustomOp(torch.nn.Module):
        def __init__(self, *a, **k):
            super().__init__()

        @classmethod
        def register(cls, name):
            return lambda c: c

    class PluggableLayer(torch.nn.Module):
        @classmethod
        def register(cls, name):
            return lambda c: c

    return {"CustomOp": CustomOp, "PluggableLayer": PluggableLayer}


def abstract(target: Target, source: EngineSource) -> dict:
    return {"MambaBase": type("MambaBase", (_torch().nn.Module,), {})}


def weight_utils(target: Target, source: EngineSource) -> dict:
    return {"LoaderFunction": object, "composed_weight_loader": lambda *a: (lambda *x, **k: None),
            "sharded_weight_loader": lambda *a: (lambda *x, **k: None)}


def quantization(target: Target, source: EngineSource) -> dict:
    return {"QuantizationConfig": type("QuantizationConfig", (), {})}


def parameter(target: Target, source: EngineSource) -> dict:
    return {"BasevLLMParameter": type("BasevLLMParameter", (_torch().nn.Parameter,), {})}


def model_executor_utils(target: Target, source: EngineSource) -> dict:
    platform = importlib.import_module("vllm.platforms").current_platform
    return from_text(source, "vllm/model_executor/utils.py", ("set_weight_attrs",),
                     {"torch": _torch(), "Any": object, "current_platform": platform})


def breakable_cudagraph(target: Target, source: EngineSource) -> dict:
    return {"eager_break_during_capture": lambda f: f}


def attention_layer(target: Target, source: EngineSource) -> dict:
    return {"Attention": type("Attention", (), {})}


def checkpoint(target: Target, source: EngineSource) -> dict:
    """vllm/model_executor/layers/mamba/checkpoint.py (0.34.0's prefill checkpoints): the builder's and exporter's
    classes, answering no checkpoint (mamba_cache_mode "none": the wheel's builder returns None first thing)."""
    class MambaPrefillCheckpointBuilder:
        def __init__(self, vllm_config, kv_cache_spec):
            assert vllm_config.cache_config.mamba_cache_mode == "none"

        def build(self, m, rows):
            return None

    return {"MambaPrefillCheckpointBuilder": MambaPrefillCheckpointBuilder,
            "MambaPrefillCheckpointMetadata": type("MambaPrefillCheckpointMetadata", (), {}),
            "MambaPrefillCheckpointExporter": lambda **k: None}


def ssd_checkpoint(target: Target, source: EngineSource) -> dict:
    """The earlier release's ops/ssd_checkpoint.py (prefill checkpoints, gone in 0.34.0): called only with
    checkpoints."""
    def store_prefill_checkpoint(*a, **k):
        raise AssertionError("a prefill checkpoint: mamba_cache_mode is 'none'")

    return {"store_prefill_checkpoint": store_prefill_checkpoint}


def torch_utils(target: Target, source: EngineSource) -> dict:
    import numpy as np
    torch = _torch()
    read = from_text(source, "vllm/utils/torch_utils.py", ("STR_DTYPE_TO_TORCH_DTYPE", "get_kv_cache_torch_dtype",
                                                           "async_tensor_h2d"),
                     {"torch": torch, "np": np, "PIN_MEMORY": False})
    return {**vllm_backend_stand_ins.torch_utils(target, source), **read, "LayerNameType": str,
            "_encode_layer_name": lambda name: name, "_resolve_layer_name": lambda name: name}


def backend_utils(target: Target, source: EngineSource) -> dict:
    import typing
    torch = _torch()
    backend = importlib.import_module("vllm.v1.attention.backend")
    import numpy as np
    pinned = from_text(source, "vllm/utils/torch_utils.py", ("np_to_pinned_tensor",),
                       {"torch": torch, "np": np, "PIN_MEMORY": False})
    scope = {"torch": torch, "np": np, "Any": typing.Any, "PIN_MEMORY": False, **pinned,
             "CommonAttentionMetadata": backend.CommonAttentionMetadata}
    read = from_text(source, "vllm/v1/attention/backends/utils.py",
                     ("PAD_SLOT_ID", "NULL_BLOCK_ID", "compute_causal_conv1d_metadata", "mamba_get_block_table_tensor",
                      "split_decodes_and_prefills"), scope)
    return {**vllm_backend_stand_ins.backend_utils(target, source), **read}


def wheel_function(source: EngineSource, rel: str, name: str, scope: dict, owner: str | None = None):
    """The function `name` (a method of class `owner`) of the wheel's `rel`, executed in `scope`, undecorated."""
    body = ast.parse(source.read_text(rel)).body
    if owner is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module([node], []), rel, "exec"), scope)  # noqa: S102
    return scope[name]


def platforms(target: Target, source: EngineSource) -> dict:
    """vllm_stand_ins' platform, with CudaPlatformBase.is_arch_support_pdl (vllm/platforms/cuda.py, read from the
    wheel: causal_conv1d's launch_pdl; the base Platform answers False)."""
    base = type(vllm_stand_ins.platforms(target, source)["current_platform"])
    pdl = wheel_function(source, "vllm/platforms/cuda.py", "is_arch_support_pdl", {"torch": _torch()},
                         owner="CudaPlatformBase")
    return {"current_platform": type("TargetCudaPlatform", (base,), {"is_arch_support_pdl": classmethod(pdl)})()}


def platform_utils(target: Target, source: EngineSource) -> dict:
    """get_device_name_as_file_name from vllm/utils/platform_utils.py's text (the module imports the third-party
    `regex`; its one pattern, [\\s/]+, means the same to the standard `re`)."""
    fn = wheel_function(source, "vllm/utils/platform_utils.py", "get_device_name_as_file_name", {"re": re})
    return {"get_device_name_as_file_name": functools.cache(fn)}


def custom_ops(target: Target, source: EngineSource) -> dict:
    return {}  # mamba_ssm.py imports vllm._custom_ops for selective_scan_fn only (the CUDA op, not audited)


STAND_INS = {**vllm_backend_stand_ins.STAND_INS_SERVED, "vllm.platforms": platforms,
             "vllm.utils.platform_utils": platform_utils, "vllm._custom_ops": custom_ops, "vllm.config": config,
             "vllm.config.mamba": config_mamba, "vllm.config.cache": config_cache, "vllm.config.model": config_model,
             "vllm.distributed": distributed, "vllm.forward_context": forward_context,
             "vllm.model_executor.layers.linear": linear, "vllm.model_executor.custom_op": custom_op,
             "vllm.model_executor.layers.mamba.abstract": abstract,
             "vllm.model_executor.model_loader.weight_utils": weight_utils,
             "vllm.model_executor.layers.quantization": quantization, "vllm.model_executor.parameter": parameter,
             "vllm.model_executor.utils": model_executor_utils,
             "vllm.compilation.breakable_cudagraph": breakable_cudagraph,
             "vllm.model_executor.layers.attention": attention_layer,
             "vllm.model_executor.layers.mamba.checkpoint": checkpoint,
             "vllm.model_executor.layers.mamba.ops.ssd_checkpoint": ssd_checkpoint,
             "vllm.utils.torch_utils": torch_utils, "vllm.v1.attention.backends.utils": backend_utils}
