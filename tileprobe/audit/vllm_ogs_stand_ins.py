"""The modules vLLM's gpt_oss_triton_kernels_moe.py (the TRITON mxfp4 MoE backend: triton_kernels'
matmul_ogs) and quantization/utils/mxfp4_utils.py (`_swizzle_mxfp4`, the weight layout it runs on) import, as
tileprobe audit serves them, so that the engine's own `triton_kernel_moe_forward` runs from the wheel.

What is the engine's own code and what is not, exactly:
- served from the wheel unchanged: the vendored OAI package vllm/third_party/triton_kernels/ as the top-level
  `triton_kernels` (capture.Alias: what vllm/utils/import_utils.py `import_triton_kernels` makes of it when no
  site-packages triton_kernels is installed, the case for the PyPI wheel), gpt_oss_triton_kernels_moe.py,
  vllm/utils/torch_version.py, vllm/utils/math_utils.py (mxfp4_utils.py itself registers torch custom ops at import:
  the entry cuts `_swizzle_mxfp4` from its text);
- read from the wheel's text (the engine's own definitions, exec'd without their modules' heavy imports):
  `_has_module`, `has_triton_kernels`, `import_triton_kernels`, `get_triton_kernels_version`
  (vllm/utils/import_utils.py: the package probe and the API generation, 3.5.1 for the vendored copy),
  `_resize_cache` (fused_moe/utils.py), `RoutingMethodType` (fused_moe/config.py), `FusedMoEActivationFormat`
  (fused_moe/modular_kernel.py), the QuantKey constants (tileprobe.audit.vllm_moe_oracle.quant_keys);
- stood in by names only (base classes and annotations the module's classes name; nothing of them runs on the
  `triton_kernel_moe_forward` path): the modular-kernel base classes FusedMoEExpertsModular /
  FusedMoEExpertsMonolithic / TopKWeightAndReduce / ExpertTokensMetadata, LoRAExpertsMixin,
  TopKWeightAndReduceNoOP, FusedMoEConfig, FusedMoEParallelConfig, FusedMoEQuantConfig, remap_topk_to_local (expert parallelism only), swiglu_limit_func,
  direct_register_custom_op;
- the platform, the logger, vllm.triton_utils, MoEActivation and FUSED_MOE_UNQUANTIZED_CONFIG:
  tileprobe.audit.vllm_moe_stand_ins'. Triton's active driver (triton_kernels' opt_flags reads its backend, and
  target_info's cuda_capability_geq its arch) is the session's (tileprobe.audit.capture).
"""

from __future__ import annotations

import functools
import importlib
import sys
from math import prod

from tileprobe.audit import engine_code, vllm_moe_oracle, vllm_moe_stand_ins, vllm_stand_ins
from tileprobe.audit.capture import Alias
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target

FUSED_MOE = vllm_moe_stand_ins.FUSED_MOE
VENDORED = "vllm.third_party.triton_kernels"
PROBES = ("_has_module", "has_triton_kernels", "import_triton_kernels", "get_triton_kernels_version")


def _named(name: str) -> type:
    return type(name, (), {"__doc__": f"vLLM's {name}, by name only (nothing of it runs on this path)."})


def import_utils(target: Target, source: EngineSource) -> dict:
    log = vllm_stand_ins.logger(target, source)["init_logger"]("vllm.utils.import_utils")
    scope = {"importlib": importlib, "sys": sys, "cache": functools.cache, "logger": log}
    engine_code.top_level(source, "vllm/utils/import_utils.py", PROBES, scope)
    return {**vllm_stand_ins.import_utils(target, source), **{n: scope[n] for n in PROBES}}


def modular_kernel(target: Target, source: EngineSource) -> dict:
    scope = engine_code.top_level(source, f"{FUSED_MOE}/modular_kernel.py", ("FusedMoEActivationFormat",),
                                         {"Enum": importlib.import_module("enum").Enum})
    return {"FusedMoEActivationFormat": scope["FusedMoEActivationFormat"],
            **{n: _named(n) for n in ("FusedMoEExperts", "FusedMoEExpertsModular", "FusedMoEExpertsMonolithic",
                                      "TopKWeightAndReduce", "ExpertTokensMetadata")}}


def config(target: Target, source: EngineSource) -> dict:
    scope = engine_code.top_level(source, f"{FUSED_MOE}/config.py", ("RoutingMethodType",),
                                         {"IntEnum": importlib.import_module("enum").IntEnum})
    return {**vllm_moe_stand_ins.config(target, source), "RoutingMethodType": scope["RoutingMethodType"],
            **{n: _named(n) for n in ("FusedMoEConfig", "FusedMoEParallelConfig")}}


def utils(target: Target, source: EngineSource) -> dict:
    scope = engine_code.top_level(source, f"{FUSED_MOE}/utils.py", ("_resize_cache",), {"prod": prod})

    def not_on_this_path(*args, **kwargs):
        raise NotImplementedError("tileprobe stands this vLLM helper in by name only (expert parallelism / "
                                  "the unfused path)")

    return {"_resize_cache": scope["_resize_cache"], "remap_topk_to_local": not_on_this_path,
            "swiglu_limit_func": not_on_this_path}


def quant_utils(target: Target, source: EngineSource) -> dict:
    s = vllm_moe_oracle.Scope({"torch": vllm_moe_stand_ins.torch.load(), "__builtins__": __builtins__,
                               "dataclass": importlib.import_module("dataclasses").dataclass,
                               "__name__": __name__, "current_platform":
                                   importlib.import_module("vllm.platforms").current_platform})
    vllm_moe_oracle.quant_keys(source, s)
    return {"QuantKey": s["QuantKey"], "kMxfp4Static": s["kMxfp4Static"]}


def torch_utils(target: Target, source: EngineSource) -> dict:
    version = importlib.import_module("vllm.utils.torch_version")
    return {"direct_register_custom_op": lambda *args, **kwargs: None,
            "is_torch_equal_or_newer": version.is_torch_equal_or_newer}


STAND_INS = {**vllm_moe_stand_ins.STAND_INS,
             "triton_kernels": Alias(VENDORED),
             "vllm.utils.import_utils": import_utils,
             f"{FUSED_MOE.replace('/', '.')}.modular_kernel": modular_kernel,
             f"{FUSED_MOE.replace('/', '.')}.config": config,
             f"{FUSED_MOE.replace('/', '.')}.utils": utils,
             f"{FUSED_MOE.replace('/', '.')}.experts.lora_experts_mixin":
                 lambda target, source: {"LoRAExpertsMixin": _named("LoRAExpertsMixin")},
             f"{FUSED_MOE.replace('/', '.')}.topk_weight_and_reduce":
                 lambda target, source: {"TopKWeightAndReduceNoOP": _named("TopKWeightAndReduceNoOP")},
             "vllm.model_executor.layers.quantization.utils.quant_utils": quant_utils,
             "vllm.utils.torch_utils": torch_utils}
MODULE = f"{FUSED_MOE.replace('/', '.')}.experts.gpt_oss_triton_kernels_moe"
ALLOW = (MODULE, "vllm.utils.torch_version", "vllm.utils.math_utils", "vllm.envs",
         "vllm.platforms.interface", "vllm.v1.attention.backends.registry")
