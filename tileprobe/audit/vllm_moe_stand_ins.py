"""The modules vLLM's fused_moe.py imports that tileprobe audit stands in for, so the engine's own
`fused_experts_impl` (config lookup, expert assignment, the two fused_moe_kernel launches) runs from the wheel.

What is the engine's own code and what is not, exactly:
- read from the wheel's text (the engine's own definitions, exec'd without their modules' heavy imports):
  `get_config` (fused_moe/__init__.py, the override config: None unless a test context sets one),
  `_get_config_dtype_str` (fused_moe/config.py), `enable_swap_ab`, `resolve_moe_use_td`,
  `warn_if_moe_use_td_ineffective` (fused_moe/utils.py), `FusedMoEExpertsModular.adjust_N_for_activation`
  (fused_moe/modular_kernel.py), the whole of fused_moe/activation.py (MoEActivation), and
  `get_device_name_as_file_name` (vllm/utils/platform_utils.py; stdlib `re` for the third-party `regex`, same
  pattern);
- stood in (CUDA ops, which fill buffers the engine allocated itself; nothing of them sizes a Triton launch):
  `vllm._custom_ops.moe_align_block_size` (torch.ops._moe_C: fills sorted_token_ids / expert_ids /
  num_tokens_post_pad, whose shapes the engine's own moe_align_block_size.py allocates), `vllm._custom_ops.moe_sum`,
  `apply_moe_activation` (torch.ops._C.silu_and_mul / swigluoai_and_mul ...: writes the activation output),
  `moe_kernel_quantize_input` (ops.scaled_fp8_quant / per_token_group_quant_fp8: returns the quantized activation in
  the shapes those ops return: fp8 of the input's shape; per-tensor scale (1,) fp32, per-token (M, 1), 128-block
  (M, cdiv(K, 128)) fp32), `direct_register_custom_op` (registers torch.ops.vllm.fused_experts: nothing here calls
  it), `set_triton_allocator` (only on the tensor-descriptor path, off on CUDA unless VLLM_TRITON_USE_TD=1);
- the platform: tileprobe.audit.vllm_stand_ins' (vLLM's own Platform class answering as the target) with the CUDA
  platform's `supports_fp8` from vllm/platforms/cuda.py's text;
- the expert weights' device (`expert_weight`): w1 / w2 are meta tensors (shapes, strides, dtype; no memory) whose
  `device` answers the GPU's (`cuda:0`), as the engine's weights do, so a launcher test on the weights' device
  decides as on the GPU: vLLM 0.34.0's `use_tma_b` (invoke_fused_moe_triton_kernel: fp8 [128, 128] blocks on
  capability family 9.0 or 10.0, `B.device.type == "cuda"`, B contiguous and divisible by the tile) takes the TMA
  launch (`b_desc`, and `a_desc` where the engine sorts A) exactly where the engine does; the pin table's READ_FROM
  release reads no weight's device. Everything else about them is meta: nothing is allocated or launched on a GPU.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re

from tileprobe.audit import vllm_stand_ins
from tileprobe.audit.engine_code import top_level
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

torch = LazyModule("torch")

FUSED_MOE = "vllm/model_executor/layers/fused_moe"


@functools.cache
def _on_gpu():
    """The meta tensor class whose `device` is the GPU's (torch is imported on first use, hence not module level)."""
    class OnGpu(torch.Tensor):
        @property
        def device(self):
            return torch.device("cuda", 0)
    return OnGpu


def expert_weight(shape, dtype):
    """An expert weight (w1 / w2) as the launcher sees it: a meta tensor of `shape` and `dtype` whose `device` answers
    `cuda:0` (the module docstring); views and slices of it answer the same."""
    return torch.empty(shape, dtype=dtype, device="meta").as_subclass(_on_gpu())


def package(target: Target, source: EngineSource) -> dict:
    """vllm.model_executor.layers.fused_moe: get_config (the override config), from its __init__.py."""
    return top_level(source, f"{FUSED_MOE}/__init__.py", ("_config", "get_config"), {"Any": object})


def custom_ops(target: Target, source: EngineSource) -> dict:
    def moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                             expert_map=None, scatter_idx=None) -> None:
        """Stand-in for torch.ops._moe_C.moe_align_block_size: fills the engine's buffers; nothing to fill here."""

    def moe_sum(input, output, topk_ids=None, expert_map=None) -> None:
        """Stand-in for torch.ops._moe_C.moe_sum."""

    return {"moe_align_block_size": moe_align_block_size, "moe_sum": moe_sum}


def activation(target: Target, source: EngineSource) -> dict:
    """fused_moe/activation.py from the wheel, with apply_moe_activation (torch.ops._C kernels) stood in."""
    scope = {"__name__": "vllm.model_executor.layers.fused_moe.activation"}
    text = source.read_text(f"{FUSED_MOE}/activation.py")
    exec(compile(text, f"{FUSED_MOE}/activation.py", "exec"), scope)  # noqa: S102

    def apply_moe_activation(activation, output, input, *args, **kwargs):
        """Stand-in for the CUDA activation ops (they write `output`)."""
        return output

    scope["apply_moe_activation"] = apply_moe_activation
    return scope


def config(target: Target, source: EngineSource) -> dict:
    scope = top_level(source, f"{FUSED_MOE}/config.py", ("_get_config_dtype_str",), {"torch": torch.load()})
    return {"_get_config_dtype_str": scope["_get_config_dtype_str"], "FUSED_MOE_UNQUANTIZED_CONFIG": None,
            "FusedMoEQuantConfig": object}


def modular_kernel(target: Target, source: EngineSource) -> dict:
    """FusedMoEExpertsModular with its adjust_N_for_activation only (the one name fused_experts_impl takes)."""
    tree = ast.parse(source.read_text(f"{FUSED_MOE}/modular_kernel.py"))
    method = next(m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
                  if isinstance(m, ast.FunctionDef) and m.name == "adjust_N_for_activation")
    cls = ast.ClassDef("FusedMoEExpertsModular", [], [], [method], [], type_params=[])
    scope = {"MoEActivation": object}
    exec(compile(ast.fix_missing_locations(ast.Module([cls], [])), f"{FUSED_MOE}/modular_kernel.py", "exec"),
         scope)  # noqa: S102
    return {"FusedMoEExpertsModular": scope["FusedMoEExpertsModular"]}


def utils(target: Target, source: EngineSource) -> dict:
    envs = importlib.import_module("vllm.envs")
    platform = importlib.import_module("vllm.platforms").current_platform
    scope = top_level(source, f"{FUSED_MOE}/utils.py",
                      ("enable_swap_ab", "resolve_moe_use_td", "warn_if_moe_use_td_ineffective",
                       "_warned_moe_use_td_ineffective"),
                      {"envs": envs, "current_platform": platform,
                       "logger": vllm_stand_ins.logger(target, source)["init_logger"](f"{FUSED_MOE}/utils")})
    scope["moe_kernel_quantize_input"] = quantize_input
    return scope


def quantize_input(A, A_scale, quant_dtype, per_act_token_quant, block_shape=None, **kwargs):
    """Stand-in for moe_kernel_quantize_input on CUDA (ops.scaled_fp8_quant / per_token_group_quant_fp8): the
    shapes and dtypes those ops return; None (bf16/fp16) returns A as the engine does."""
    if quant_dtype is None:
        return A, A_scale
    out = torch.empty(A.shape, dtype=quant_dtype, device=A.device)
    if block_shape is not None:
        scale = torch.empty((A.shape[0], -(-A.shape[-1] // block_shape[1])), dtype=torch.float32, device=A.device)
    elif per_act_token_quant:
        scale = torch.empty((A.shape[0], 1), dtype=torch.float32, device=A.device)
    else:
        scale = torch.empty((1,), dtype=torch.float32, device=A.device) if A_scale is None else A_scale
    return out, scale


def platform_utils(target: Target, source: EngineSource) -> dict:
    return top_level(source, "vllm/utils/platform_utils.py", ("get_device_name_as_file_name",),
                     {"re": re, "cache": functools.cache})


def platforms(target: Target, source: EngineSource) -> dict:
    """tileprobe.audit.vllm_stand_ins' platform, with the CUDA platform's own `supports_fp8` (vllm/platforms/cuda.py,
    read from its text: has_device_capability(89); the base Platform's answers False), which the MoE oracles'
    support checks read."""
    base = type(vllm_stand_ins.platforms(target, source)["current_platform"])
    tree = ast.parse(source.read_text("vllm/platforms/cuda.py"))
    method = next(m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
                  if isinstance(m, ast.FunctionDef) and m.name == "supports_fp8")
    cls = ast.ClassDef("TargetCudaPlatform", [ast.Name("Base", ast.Load())], [], [method], [], type_params=[])
    scope = {"Base": base}
    exec(compile(ast.fix_missing_locations(ast.Module([cls], [])), "vllm/platforms/cuda.py", "exec"),  # noqa: S102
         scope)
    return {"current_platform": scope["TargetCudaPlatform"]()}


def torch_utils(target: Target, source: EngineSource) -> dict:
    return {"direct_register_custom_op": lambda *args, **kwargs: None}


def allocation(target: Target, source: EngineSource) -> dict:
    return {"set_triton_allocator": lambda device: None}


STAND_INS = {**vllm_stand_ins.STAND_INS,
             "vllm.platforms": platforms,
             "vllm.model_executor.layers.fused_moe": package,
             "vllm._custom_ops": custom_ops,
             "vllm.model_executor.layers.fused_moe.activation": activation,
             "vllm.model_executor.layers.fused_moe.config": config,
             "vllm.model_executor.layers.fused_moe.modular_kernel": modular_kernel,
             "vllm.model_executor.layers.fused_moe.utils": utils,
             "vllm.utils.platform_utils": platform_utils,
             "vllm.utils.torch_utils": torch_utils,
             "vllm.triton_utils.allocation": allocation}
