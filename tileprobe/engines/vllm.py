"""vLLM as a Triton fused-MoE engine: its kernel file, its shipped config tree, and which config it loads.

The lookup below is tileprobe's own statement of the rule of vLLM's pin-table release (tileprobe.engines.pins)
(`vllm/model_executor/layers/fused_moe/fused_moe.py`: get_config_file_name, get_moe_configs, get_default_config,
try_get_optimal_moe_config, on CUDA, with VLLM_BATCH_INVARIANT unset); tests/engines/test_triton_engine_lookup.py runs
vLLM's own functions, cut from its source, on a grid of inputs and compares. Nothing here imports vLLM.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tileprobe.engines import triton_configs as tc
from tileprobe.engines.triton_configs import Loaded, Scheme

ENGINE = "vllm"
KERNEL_FILE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
KERNEL = "fused_moe_kernel"
CONFIGS_DIR = "vllm/model_executor/layers/fused_moe/configs"
LOOKUP_FILES = (KERNEL_FILE,)  # what the lookup below was read from (the kernel's file holds it)
USER_ENV = "VLLM_TUNED_CONFIG_FOLDER"
# Where the device name comes from: NvmlCudaPlatform.get_device_name (pynvml.nvmlDeviceGetName), or
# torch.cuda.get_device_name without NVML (vllm/platforms/cuda.py); both report the driver's product string.
NAME_SOURCE = "NVML name"
# vLLM's default CUDA graph capture sizes (vllm/config/vllm.py: [1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16),
# max 512 by default): the decode batch sizes M that run as captured graphs.
CAPTURE_SIZES = tuple([1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16)))


def device_file_name(device_name: str) -> str:
    """get_device_name_as_file_name (vllm/utils/platform_utils.py) then get_config_file_name's H200 rule: every
    device whose name has an 'H200' word (H200 NVL, ...) reads NVIDIA_H200's files."""
    name = re.sub(r"[\s/]+", "_", device_name)
    if "H200" in name.split("_"):
        name = "NVIDIA_H200"
    return name


def config_file_name(E: int, N: int, scheme: Scheme, device_name: str) -> str:
    """get_config_file_name: `E=..,N=..,device_name=..[,dtype=..][,block_shape=[n,k]]` (no space in the list)."""
    dtype = f",dtype={scheme.dtype}" if scheme.dtype else ""
    block = f",block_shape=[{scheme.block_shape[0]},{scheme.block_shape[1]}]" if scheme.block_shape and all(
        scheme.block_shape) else ""
    return f"E={E},N={N},device_name={device_file_name(device_name)}{dtype}{block}.json"


def load(src: tc.EngineSource, E: int, N: int, scheme: Scheme, device_name: str,
         user_dir: str | Path | None = None, gemm: str = "gate_up") -> Loaded:
    """get_moe_configs: the user's folder ($VLLM_TUNED_CONFIG_FOLDER) first, then the shipped file for the exact
    device file name, else None (the default heuristic). One file serves both GEMMs."""
    fname = config_file_name(E, N, scheme, device_name)
    tried = []
    if user_dir is not None:
        path = Path(user_dir) / fname
        tried.append(str(path))
        if path.is_file():
            return Loaded("user", str(path), tc.read_file(path, ENGINE), tuple(tried))
    rel = f"{CONFIGS_DIR}/{fname}"
    tried.append(f"<{src.label()}>/{rel}")
    if rel in set(src.files_under(CONFIGS_DIR)):
        shipped = tc.read_source_tree_file(src, CONFIGS_DIR, rel)
        return Loaded("shipped", shipped.path, shipped, tuple(tried))
    return Loaded("default", None, None, tuple(tried))


def user_dir_from_env(environ: dict | None = None) -> str | None:
    return (os.environ if environ is None else environ).get(USER_ENV)


def default_config(M: int, E: int, N: int, K: int, topk: int, scheme: Scheme, smem_optin: int) -> dict:
    """get_default_config on CUDA (not ROCm, VLLM_BATCH_INVARIANT unset). Not shared-memory aware: smem_optin is
    taken for a uniform signature with SGLang's and not read."""
    del smem_optin, N, K, topk
    if scheme.dtype == "fp8_w8a8" and scheme.block_shape is not None:
        bn0, bk0 = scheme.block_shape
        if M <= 8 and bn0 % 64 == 0:
            block_n = 64
            num_stages = 4 if M <= 4 else 3
        else:
            block_n = bn0
            num_stages = 3
        return {"BLOCK_SIZE_M": 16 if M <= 64 else 64, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": bk0,
                "GROUP_SIZE_M": 1 if M <= 16 else 32, "SPLIT_K": 1, "num_warps": 4, "num_stages": num_stages}
    if M <= 32:
        block_m = 16
    elif M <= 96:
        block_m = 32
    elif M <= 512:
        block_m = 64
    else:
        block_m = 128
    return {
        "BLOCK_SIZE_M": block_m,
        "BLOCK_SIZE_N": 64 if M <= 64 else 128,
        "BLOCK_SIZE_K": 128 if scheme.dtype == "fp8_w8a8" or M <= 64 else 64,
        "GROUP_SIZE_M": 16 if M // max(E, 1) > 128 else 1,
        "SPLIT_K": 1,
        "num_warps": 4 if M <= 128 else 8,
        "num_stages": 4 if M <= 32 else 3,
    }

