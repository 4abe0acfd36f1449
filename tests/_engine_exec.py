"""Run an engine's own config-lookup functions from its source, without importing the engine.

The functions are cut out of the engine's module source with `ast` (from the installed package or the wheel, through
tileprobe.engines.triton_configs.EngineSource), imports of the engine's own modules inside them are dropped, and they
are exec'd in a namespace whose torch / device / environment stand-ins answer as the target GPU would. The engine's
shipped config folder is unpacked to disk so its own os.path / open / os.listdir calls see it.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import os
import re
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import sglang, vllm
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError
from tileprobe.triton.sweep import engine_kernel_source


class _DropEngineImports(ast.NodeTransformer):
    """`from vllm.x import y` / `import sglang...` inside a function: removed (the namespace provides y)."""

    def __init__(self, engine: str):
        self.engine = engine

    def visit_ImportFrom(self, node):
        return None if (node.module or "").split(".")[0] == self.engine else node

    def visit_Import(self, node):
        return None if any(a.name.split(".")[0] == self.engine for a in node.names) else node


def functions(text: str, names: list[str], engine: str, assigns: tuple[str, ...] = ()) -> ast.Module:
    """The top-level functions `names` (and module-level assignments `assigns`) of a module source, as a module."""
    tree = ast.parse(text)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            found[node.name] = node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in assigns for t in node.targets):
            found[node.targets[0].id] = node
    missing = [n for n in list(names) + list(assigns) if n not in found]
    assert not missing, f"{engine} source has no {missing}"
    mod = ast.Module(body=[found[n] for n in list(assigns) + list(names)], type_ignores=[])
    mod = _DropEngineImports(engine).visit(mod)
    return ast.fix_missing_locations(mod)


def unpack_configs(src: tc.EngineSource, configs_rel: str, dest: Path) -> Path:
    """The engine's shipped config folder on disk, at the same relative path (so __file__-relative lookups work)."""
    for rel in src.files_under(configs_rel):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(src.read_text(rel))
    return dest


class _Logger:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _Props:
    def __init__(self, smem_optin: int, sms: int):
        self.shared_memory_per_block_optin = smem_optin
        self.multi_processor_count = sms


def _torch_stand_in(device_name: str, smem_optin: int, sms: int, cc: tuple[int, int]):
    """torch as the target GPU answers: cuda available, this name, this opt-in limit; not HIP, no MPS."""
    cuda = types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda i=0: device_name, current_device=lambda: 0,
        get_device_properties=lambda i=0: _Props(smem_optin, sms), get_device_capability=lambda i=0: cc)
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(hip=None), float=object(),
                                 Tensor=object)


def vllm_namespace(src: tc.EngineSource, root: Path, device_name: str, user_dir: str | None) -> dict:
    """vLLM 0.33.0's get_config_file_name / get_moe_configs / get_default_config / try_get_optimal_moe_config and
    get_device_name_as_file_name, exec'd with: envs (VLLM_TUNED_CONFIG_FOLDER, VLLM_BATCH_INVARIANT unset), a CUDA
    current_platform whose get_device_name is the NVML name, no override config, __file__ in the unpacked tree."""
    platform = types.SimpleNamespace(is_rocm=lambda: False, is_cuda=lambda: True,
                                     get_device_name=lambda device_id=0: device_name)
    ns: dict[str, Any] = {
        "__name__": "vllm_fused_moe_from_source", "os": os, "json": json, "re": re, "functools": functools,
        "Any": Any, "logger": _Logger(), "current_platform": platform, "cache": functools.cache,
        "envs": types.SimpleNamespace(VLLM_BATCH_INVARIANT=False, VLLM_TUNED_CONFIG_FOLDER=user_dir),
        "get_config": lambda: None, "next_power_of_2": lambda n: 1 << (n - 1).bit_length(),
        "__file__": str(root / vllm.KERNEL_FILE),
    }
    util = functions(src.read_text("vllm/utils/platform_utils.py"), ["get_device_name_as_file_name"], "vllm")
    exec(compile(util, "vllm/utils/platform_utils.py", "exec"), ns)
    mod = functions(src.read_text(vllm.KERNEL_FILE),
                    ["get_config_file_name", "get_moe_configs", "should_moe_wna16_use_cuda", "get_default_config",
                     "try_get_optimal_moe_config"], "vllm")
    exec(compile(mod, vllm.KERNEL_FILE, "exec"), ns)
    return ns


SGLANG_CONFIG_FILE = f"{sglang.PACKAGE_DIR}/fused_moe_triton_config.py"


def sglang_namespace(src: tc.EngineSource, root: Path, device_name: str, smem_optin: int, sms: int,
                     cc: tuple[int, int], triton_version: str = sglang.TRITON_VERSION) -> dict:
    """SGLang 0.5.23's fused_moe_triton_config functions and sglang.srt.utils.get_device_name, exec'd with a torch
    that answers as the target (name, shared_memory_per_block_optin), triton.__version__, deterministic inference
    off, not HIP, no override config, __file__ in the unpacked tree. SGLANG_MOE_CONFIG_DIR is read from os.environ
    by the engine's own code: set it around the call."""
    torch = _torch_stand_in(device_name, smem_optin, sms, cc)
    ns: dict[str, Any] = {
        "__name__": "sglang_fused_moe_config_from_source", "os": os, "json": json, "functools": functools,
        "logging": logging, "logger": _Logger(), "torch": torch, "Any": Any, "Dict": Dict, "List": List,
        "Optional": Optional, "Tuple": Tuple, "lru_cache": functools.lru_cache,
        "triton": types.SimpleNamespace(__version__=triton_version), "_is_hip": False,
        "is_musa": lambda: False, "get_config": lambda: None,
        "get_exec": lambda: types.SimpleNamespace(deterministic=types.SimpleNamespace(
            enable_deterministic_inference=False)),
        "__file__": str(root / SGLANG_CONFIG_FILE),
    }
    util = functions(src.read_text("sglang/srt/utils/common.py"), ["get_device_name"], "sglang")
    exec(compile(util, "sglang/srt/utils/common.py", "exec"), ns)
    mod = functions(src.read_text(SGLANG_CONFIG_FILE),
                    ["_get_cuda_shared_memory_per_block_optin", "_use_low_smem_fp8_default", "get_config_file_name",
                     "get_moe_configs", "get_default_config", "try_get_optimal_moe_config"], "sglang",
                    assigns=("_LOW_SMEM_FP8_DEFAULT_CUTOFF_BYTES",))
    exec(compile(mod, SGLANG_CONFIG_FILE, "exec"), ns)
    return ns


def engine_source_or_skip(engine: str):
    """(EngineSource, KernelSource) of the engine's fused_moe_kernel for a test that compiles it with the real Triton:
    skipped (naming why) without Triton or without the engine (installed, or its wheel in tileprobe's wheel cache)."""
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        return engine_kernel_source(engine, None)
    except UsageError as exc:
        pytest.skip(str(exc))
