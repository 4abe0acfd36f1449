"""The stand-ins vLLM's gated-delta-net step needs (tileprobe.audit.vllm_gdn_step): the metadata builder
(vllm/v1/attention/backends/gdn_attn.py, served from the wheel with vllm/v1/attention/backend.py,
vllm/v1/kv_cache_interface.py and vllm/model_executor/layers/mamba/checkpoint.py) and the FLA / conv1d launchers
(tileprobe.audit.entries.vllm_gdn's stand-ins: the target's Triton driver, CUDA's platform answers).

Beside tileprobe.audit.vllm_backend_stand_ins' (the config tree's CUDAGraphMode, one rank, no AITER, ...) and
tileprobe.audit.entries.vllm_gdn's (triton_utils, platforms):
- `vllm.v1.attention.backends.utils`: the builder's helpers `split_decodes_and_prefills`,
  `compute_causal_conv1d_metadata`, `mamba_get_block_table_tensor` (with the module's NULL_BLOCK_ID / PAD_SLOT_ID,
  and torch_utils' `np_to_pinned_tensor` with PIN_MEMORY False: host staging, the same values), read from the wheel's
  text (`from_text`); the module itself imports vLLM's KV-connector and multimodal trees;
- `vllm.utils.torch_utils`: `async_tensor_h2d` as a copy to the device and dtype asked (the pinned-memory staging
  moves no value), `get_dtype_size` read from the wheel, `direct_register_custom_op` registers nothing;
- `vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn`: only `_resolve_gdn_prefill_backend`, which the
  builder's __init__ imports from it: the engine's function (and its module-level helpers) cut from the wheel's
  text and run unchanged under the session's platform (tileprobe.audit.entries.vllm_gdn.run_selector); the module
  itself imports transformers, einops and vLLM's compiled extension.
"""

from __future__ import annotations

import ast
import importlib
import types

from tileprobe.audit import vllm_backend_stand_ins as backend_stand_ins
from tileprobe.audit.entries import vllm_gdn
from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target

UTILS = "vllm/v1/attention/backends/utils.py"
HELPERS = ("split_decodes_and_prefills", "compute_causal_conv1d_metadata", "mamba_get_block_table_tensor")


def backend_utils(target: Target, source: EngineSource) -> dict:
    torch = importlib.import_module("torch")
    consts = vllm_gdn.backend_utils(target, source)
    backend = importlib.import_module("vllm.v1.attention.backend")
    cdiv = lambda a, b: -(a // -b)  # noqa: E731  vllm.utils.math_utils.cdiv
    scope = {"torch": torch, "Any": object, "CommonAttentionMetadata": backend.CommonAttentionMetadata,
             "KVCacheSpec": object, "MambaSpec": importlib.import_module("vllm.v1.kv_cache_interface").MambaSpec,
             "cdiv": cdiv, "triton": importlib.import_module("vllm.triton_utils").triton,
             "tl": importlib.import_module("vllm.triton_utils").tl, **consts}
    scope["np"] = importlib.import_module("numpy")
    scope["PIN_MEMORY"] = False  # no pinned staging: the values are the same
    scope |= from_text(source, "vllm/utils/torch_utils.py", ("np_to_pinned_tensor",), scope)
    text = source.read_text(UTILS)
    have = {getattr(n, "name", None) for n in ast.parse(text).body}
    # a helper's own module-level kernels / helpers it calls, where the release defines them
    extra = tuple(n for n in ("_mamba_block_table_kernel", "_mamba_get_block_table_tensor_kernel") if n in have)
    read = from_text(source, UTILS, (*extra, *HELPERS), scope)
    return {**consts, **read}


def torch_utils(target: Target, source: EngineSource) -> dict:
    return {**backend_stand_ins.torch_utils(target, source), **vllm_gdn.torch_utils(target, source)}


def gdn_layer(target: Target, source: EngineSource) -> dict:
    def _resolve_gdn_prefill_backend(vllm_config):
        session = types.SimpleNamespace(target=target, source=source,
                                        module=lambda name: importlib.import_module(name))
        return vllm_gdn.run_selector(session, vllm_config.tileprobe_model)[0]

    return {"_resolve_gdn_prefill_backend": _resolve_gdn_prefill_backend}


STAND_INS = {**backend_stand_ins.STAND_INS_SERVED, **vllm_gdn.GDN_STAND_INS,
             "vllm.config": backend_stand_ins.config, "vllm.utils.torch_utils": torch_utils,
             "vllm.v1.attention.backends.utils": backend_utils,
             "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn": gdn_layer}
STAND_INS.pop("vllm.v1.kv_cache_interface", None)
