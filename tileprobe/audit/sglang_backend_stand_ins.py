"""SGLang's server-args tree, platform helpers and memory pools as its Triton attention backend sees them, for
tileprobe.audit.capture: so that `TritonAttnBackend(model_runner)`, `init_forward_metadata(forward_batch)` and
`AttentionBackend.forward` (sglang/srt/layers/attention/triton_backend.py and base_attn_backend.py, served from the
wheel with the launchers' modules and sglang/kernels/ops/attention/metadata.py) run as SGLang's model runner calls
them, one rank, no speculative decoding.

Read from the wheel's own text (`from_text`: the named top-level definitions of a file, run in a scope of what they
use): `ForwardMode` (forward_batch_info.py), `AttentionArch` and the `is_*` model tests (configs/model_config.py),
`AttentionType` and `RadixAttention` (layers/radix_attention.py: the layer object the model builds), `IdSpaceKind`
(mem_cache/kv_loc_plan.py), `Phase` / `Backend` (model_executor/cuda_graph_config.py), the env helpers of
srt/utils/common.py, and every server-args default the backend reads through `get_exec()` / `get_spec()` /
`get_schedule()` (`defaults`: the msgspec fields of sglang/srt/arg_groups/fields/*.py, as `ServerArgs` starts).

Stood in, each with why:
- `sglang.srt.runtime_context`: the four getters answer those defaults; `get_parallel()` one rank (attention TP 1:
  tileprobe passes the heads already split, DCP 1);
- `sglang.srt.utils` (and `.common`): CUDA, the target's SM count (`get_device_core_count`), not ROCm / NPU / XPU;
- `sgl_kernel.utils.is_arch_support_pdl`: its own test, major capability >= 9 (a launch option, not a size);
- `sglang.kernels.kernel_api_logging.debug_kernel_api`: as the engine runs it with logging off (the function
  itself);
- `sglang.srt.configs.hybrid_arch.mambaish_config`: None; for a hybrid model the engine then reads the value head
  size from the KV pool's layer-0 buffer instead of `get_v_head_dim()`, the same number in the pool given here;
- `sglang.srt.model_executor.cuda_graph_config`: `cuda_graph_fully_disabled()` False and
  `check_cuda_graph_backend` False (CUDA graphs on, SGLang's default; they decide only bidirectional extend);
- `sglang.srt.model_executor.runner_utils.capture_mode.get_is_capture_mode`: False (an eager step; the answer picks
  between two ROCm-only Lean gates);
- the memory pools' classes (`SWAKVPool`, `BaseSWAKVPool`: the pool tileprobe.audit.sglang_backend gives is
  neither, a full-attention pool) and `KVWriteLoc.for_batch` (the write location's record: the KV write is the
  pool's, not a Triton launch of this backend);
- the speculative-decoding, DCP, verify-mask and MLA-fp8-pack helpers: `_unused` (a call means the engine took a
  path tileprobe does not set up: the capture fails naming it).

The MLA step (tileprobe.audit.sglang_backend.mla_attention) needs no module beyond these: with `use_mla` the backend
reads `is_kimi_k3` (the model_config stand-in: False, and reached only on gfx95) and, on its gfx95-only FP8 paths,
the fp8 pack (`_unused`). The DeepSeek-V2 model's own dispatch, `handle_attention_triton`, is not served (its file
imports the model's runtime): the driver runs it from the wheel's text (`from_text`) in a scope whose names answer
as these stand-ins do: outside any CUDA graph (`is_in_tc_piecewise_cuda_graph`, `is_in_breakable_cuda_graph`
False), the runtime-context getters above, CUDA (`_is_hip`, `is_gfx95_supported`, `use_intel_amx_backend` False).
"""

from __future__ import annotations

import ast
import contextlib
import enum
import importlib
import os
from types import SimpleNamespace
from typing import Optional

from tileprobe.audit.vllm_backend_stand_ins import from_text
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.targets import Target

FIELDS = "sglang/srt/arg_groups/fields"


def _unused(name: str):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{name}: SGLang took a path tileprobe's stand-in step does not set up "
                                  "(speculative decoding, DCP, verify masks or fp8 MLA packing)")
    return call


FIELD_FILES = ("exec_", "spec", "schedule")  # the namespaces the backend reads: get_exec, get_spec, get_schedule


def defaults(source: EngineSource, names: tuple[str, ...]) -> dict:
    """The server-args defaults `names`, read from the msgspec fields of the wheel's arg_groups files FIELD_FILES
    (a field `name: A[...] = default`); a name those files do not define is a LookupError."""
    found = {}
    for stem in FIELD_FILES:
        for node in ast.walk(ast.parse(source.read_text(f"{FIELDS}/{stem}.py"))):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None
                    and node.target.id in names and node.target.id not in found):
                found[node.target.id] = ast.literal_eval(node.value)
    missing = set(names) - set(found)
    if missing:
        raise LookupError(f"{FIELDS} in {source.engine} {source.version} defines no {', '.join(sorted(missing))}")
    return found


EXEC = ("enable_lean_attention", "triton_attention_num_kv_splits", "triton_attention_split_tile_size",
        "dllm_algorithm", "enable_deterministic_inference")
SPEC = ("speculative_num_draft_tokens", "speculative_num_steps", "speculative_eagle_topk")
SCHEDULE = ("chunked_prefill_size",)


def runtime_context(target: Target, source: EngineSource) -> dict:
    d = defaults(source, EXEC + SPEC + SCHEDULE)
    execution = SimpleNamespace(kernel=SimpleNamespace(**{k: d[k] for k in EXEC[:3]}),
                                dllm=SimpleNamespace(dllm_algorithm=d["dllm_algorithm"]),
                                deterministic=SimpleNamespace(
                                    enable_deterministic_inference=d["enable_deterministic_inference"]))
    spec = SimpleNamespace(**{k: d[k] for k in SPEC})
    schedule = SimpleNamespace(chunked_prefill_size=d["chunked_prefill_size"])
    parallel = SimpleNamespace(attn_tp_size=1, attn_dcp_size=1, attn_dcp_rank=0, dcp_group=None)
    return {"get_exec": lambda: execution, "get_spec": lambda: spec, "get_schedule": lambda: schedule,
            "get_parallel": lambda: parallel}


def platform_utils(target: Target, source: EngineSource) -> dict:
    """sglang.srt.utils' platform helpers, answering as a CUDA target (what the launchers' modules import)."""
    no = lambda *a, **k: False  # noqa: E731
    return {"is_cuda": lambda: True, "is_hip": no, "is_npu": no, "is_xpu": no, "is_cpu": no, "is_musa": no,
            "is_gfx95_supported": no, "is_gfx1250_supported": no,
            "get_device_core_count": lambda device_id=0: target.sms,
            "get_device_sm": lambda: int(target.cc.replace(".", ""))}


def utils(target: Target, source: EngineSource) -> dict:
    """platform_utils, and the env helpers the backend reads, from srt/utils/common.py."""
    torch = importlib.import_module("torch")
    triton = importlib.import_module("triton")
    read = from_text(source, "sglang/srt/utils/common.py", ("get_bool_env_var", "get_int_env_var",
                                                              "next_power_of_2"),
                     {"os": os, "torch": torch, "triton": triton, "logger": SimpleNamespace(warning=print)})
    no = lambda *a, **k: False  # noqa: E731
    return {**platform_utils(target, source), **read, "is_gfx942_supported": no}


def sgl_kernel_utils(target: Target, source: EngineSource) -> dict:
    major = int(target.cc.split(".")[0])
    return {"is_arch_support_pdl": lambda: major >= 9}


def kernel_api_logging(target: Target, source: EngineSource) -> dict:
    def debug_kernel_api(func=None, *, op_name=None):
        return (lambda f: f) if func is None else func
    return {"debug_kernel_api": debug_kernel_api}


def forward_batch_info(target: Target, source: EngineSource) -> dict:
    read = from_text(source, "sglang/srt/model_executor/forward_batch_info.py", ("ForwardMode",),
                     {"IntEnum": enum.IntEnum, "auto": enum.auto})
    return {**read, "ForwardBatch": type("ForwardBatch", (), {})}


def model_config(target: Target, source: EngineSource) -> dict:
    read = from_text(source, "sglang/srt/configs/model_config.py", ("AttentionArch",),
                     {"IntEnum": enum.IntEnum, "auto": enum.auto})
    no = lambda *a, **k: False  # noqa: E731  (Kimi-K3 / DSpark / Qwen3.5 verify kernels: gfx95 only)
    return {**read, "is_dspark_draft": no, "is_kimi_k3": no, "is_qwen3_5": no}


ATTN_BACKEND: list = []  # the backend the layer's forward reaches (forward_context.get_attn_backend): the driver's


def radix_attention(target: Target, source: EngineSource) -> dict:
    """AttentionType and RadixAttention from the wheel; the graph helpers its forward reads answer an eager step
    outside any CUDA graph (no breakable or full prefill graph, no MLP-sync padding), and its backend is the one the
    driver built (ATTN_BACKEND)."""
    torch = importlib.import_module("torch")
    no = lambda *a, **k: False  # noqa: E731
    scope = {"Enum": enum.Enum, "torch": torch, "nn": torch.nn, "Optional": Optional, "QuantizationConfig": object,
             "eager_on_graph": lambda f: f, "is_in_breakable_cuda_graph": no, "is_in_full_prefill_graph": no,
             "is_in_prefill_graph_scope": no, "padded_extend_real_tokens": lambda q, forward_batch: None,
             "get_attn_backend": lambda: ATTN_BACKEND[-1]}
    return from_text(source, "sglang/srt/layers/radix_attention.py", ("AttentionType", "RadixAttention"), scope)


def kv_loc_plan(target: Target, source: EngineSource) -> dict:
    return from_text(source, "sglang/srt/mem_cache/kv_loc_plan.py", ("IdSpaceKind",), {"enum": enum})


def cuda_graph_config(target: Target, source: EngineSource) -> dict:
    read = from_text(source, "sglang/srt/model_executor/cuda_graph_config.py", ("Phase", "Backend"), {})
    no = lambda *a, **k: False  # noqa: E731
    return {**read, "check_cuda_graph_backend": no, "cuda_graph_fully_disabled": no}


class KVWriteLoc:
    """The KV write location's record (mem_cache/memory_pool.py): the pool given here writes nothing."""

    def __init__(self, loc, physical=False, swa_loc=None) -> None:
        self.loc, self.physical, self.swa_loc = loc, physical, swa_loc

    @classmethod
    def for_batch(cls, forward_batch, swa_loc=None):
        return cls(forward_batch.out_cache_loc, swa_loc=swa_loc)


STAND_INS = {
    "sglang.srt.runtime_context": runtime_context,
    "sglang.srt.utils": utils,
    "sglang.srt.utils.common": utils,
    "sgl_kernel.utils": sgl_kernel_utils,
    "sglang.kernels.kernel_api_logging": kernel_api_logging,
    "sglang.srt.model_executor.forward_batch_info": forward_batch_info,
    "sglang.srt.configs.model_config": model_config,
    "sglang.srt.configs.hybrid_arch": lambda t, s: {"mambaish_config": lambda config: None},
    "sglang.srt.layers.radix_attention": radix_attention,
    "sglang.srt.mem_cache.kv_loc_plan": kv_loc_plan,
    "sglang.srt.model_executor.cuda_graph_config": cuda_graph_config,
    "sglang.srt.model_executor.runner_utils.capture_mode": lambda t, s: {"get_is_capture_mode": lambda: False},
    "sglang.srt.mem_cache.memory_pool": lambda t, s: {"KVWriteLoc": KVWriteLoc},
    "sglang.srt.mem_cache.swa_memory_pool": lambda t, s: {"SWAKVPool": type("SWAKVPool", (), {})},
    "sglang.srt.mem_cache.base_swa_memory_pool": lambda t, s: {"BaseSWAKVPool": type("BaseSWAKVPool", (), {})},
    "sglang.srt.distributed.device_communicators.pynccl_allocator":
        lambda t, s: {"use_symmetric_memory": lambda group: contextlib.nullcontext()},
    "sglang.kernels.ops.attention.mla_kv_pack_quantize_fp8":
        lambda t, s: {"mla_kv_pack_quantize_fp8": _unused("mla_kv_pack_quantize_fp8")},
    "sglang.srt.layers.attention.verify_mask":
        lambda t, s: {"VerifyMask": object, "maybe_create_verify_mask": _unused("maybe_create_verify_mask")},
    "sglang.srt.layers.dcp": lambda t, s: {n: _unused(n) for n in ("cp_lse_ag_out_rs_mha", "get_dcp_lens",
                                                                    "create_triton_kv_indices_for_dcp_triton")},
    "sglang.srt.speculative.eagle_utils":
        lambda t, s: {"per_step_draft_out_cache_loc": _unused("per_step_draft_out_cache_loc")},
    "sglang.srt.speculative.spec_utils": lambda t, s: {n: _unused(n) for n in (
        "draft_kv_indices_buffer_width", "draft_kv_indices_used_len", "generate_draft_decode_kv_indices",
        "generate_draft_decode_window_kv_indices", "resolve_draft_decode_window")},
    "sglang.kernels.ops.attention.verify_mla": lambda t, s: {"verify_shared_kv_fwd": _unused("verify_shared_kv_fwd")},
    "sglang.kernels.ops.attention.verify_splitkv": lambda t, s: {"verify_splitkv_fwd": _unused("verify_splitkv_fwd")},
}
