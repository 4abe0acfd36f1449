"""vLLM's gated-delta-net (GDN) layers (Qwen3-Next / Qwen3.5: vllm/model_executor/layers/mamba/gdn/
qwen_gdn_linear_attn.py, QwenGatedDeltaNetAttention) as the audit needs them beside the driven step
(tileprobe.audit.vllm_gdn_step, whose entry `vllm-gdn` is tileprobe.audit.entries.vllm_gdn_mixer): the stand-ins the
vendored flash-linear-attention ops (vllm/third_party/flash_linear_attention/ops/) import under the session, the
per-rank dims (H = linear_num_key_heads / tp, HV = linear_num_value_heads / tp, K, V), and the engine's own choice of
the prefill kernel (entry `vllm-gdn-chunk-prefill`: it launches nothing; its row is the `not-selected` answer where
the engine runs FlashInfer's chunked prefill instead of the Triton chunk chain, which the step launches otherwise).
The launchers' arguments are the engine's: the step runs the layer's `_forward_core` on the builder's metadata.

The recurrent state's dtype is the model's: Qwen3-Next's mamba_ssm_cache_dtype is "auto" (vllm/config/cache.py),
which MambaStateDtypeCalculator._mamba_state_dtype resolves to the conv state's dtype, the model's. (Qwen3.5's
config update sets it from the HF config's `mamba_ssm_dtype`, a field tileprobe's config reader does not read.)

Selection (`chooses`): the prefill entry runs vLLM's own `_resolve_gdn_prefill_backend(vllm_config)`
(qwen_gdn_linear_attn.py) under the session's stand-in platform, with additional_config {} (no --gdn-prefill-backend:
"auto") and the model's linear_key_head_dim / linear_value_head_dim. The module itself cannot be imported under the
session: it imports transformers (not installed, and outside the engine package the session's finder serves), einops,
vllm._custom_ops (a compiled extension), vllm.config, vllm.distributed and some thirty other modules of vLLM's config
tree. So the function (and the two module-level helpers it calls, xpu_gdn_kernel_available and
_aiter_flydsl_unsupported_reasons) is cut from the wheel's file text with its line numbers kept and executed
unchanged (tileprobe.audit.engine_code.run_function); the names it reads are the session's current_platform, torch, a
logger and typing.Literal (rocm_aiter_ops is reached only on ROCm and is not given). Its `get_cuda_runtime_major()`
(CudaPlatformBase in vllm/platforms/cuda.py: torch.version.cuda's major) answers with the CUDA runtime the wheel's
extensions link (`libcudart.so.N` in the smallest vllm/*.abi3.so of the wheel that names one: 13 for the PyPI wheels
of the releases with a manifest). The Elsewhere names the last device test of the selector whose body ran.

Stand-ins (beside tileprobe.audit.vllm_stand_ins'): `vllm.triton_utils` adds `tldevice` (op.py) and a `triton` whose
`runtime.driver.active` answers as the target (utils.py reads the Triton backend to tell NVIDIA from AMD, and
`check_shared_mem` reads `max_shared_mem`, cudaDevAttrMaxSharedMemoryPerBlockOptin: the target's opt-in limit);
`vllm.utils.torch_utils`: async_tensor_h2d as a copy to the given device and dtype (index.py).
"""

from __future__ import annotations

import ast
import functools
import re
import types
import typing
import zipfile
from pathlib import Path

from tileprobe.audit.entries import LISTED
from tileprobe.audit import conv_rule, engine_code, vllm_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, torch
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

_triton = LazyModule("triton")
_compiler = LazyModule("triton.backends.compiler")
_libdevice = LazyModule("triton.language.extra.libdevice")

LAYER = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py"
SELECTOR = "_resolve_gdn_prefill_backend"
SELECTOR_HELPERS = ("xpu_gdn_kernel_available", "_aiter_flydsl_unsupported_reasons")
FLA = "vllm.third_party.flash_linear_attention.ops"
CONV = "vllm.model_executor.layers.mamba.ops.causal_conv1d"


# --- stand-ins ------------------------------------------------------------------------------------------------------
def _driver(target: Target):
    """triton.runtime.driver as the target answers it (the fields Triton's CUDA driver reports)."""
    gpu = _compiler.GPUTarget("cuda", target.cc_int, 32)
    props = {"max_shared_mem": target.smem_optin, "multiprocessor_count": target.sms, "warpSize": 32}
    active = types.SimpleNamespace(get_current_target=lambda: gpu,
                                   utils=types.SimpleNamespace(get_device_properties=lambda device=0: dict(props)))
    return types.SimpleNamespace(active=active)


def _triton_for(target: Target) -> types.ModuleType:
    """The installed Triton, but for `runtime.driver` (the target's)."""
    real = _triton.load()
    runtime = types.ModuleType("triton.runtime")
    runtime.__dict__.update(real.runtime.__dict__)
    runtime.driver = _driver(target)
    proxy = types.ModuleType("triton")
    proxy.__dict__.update(real.__dict__)
    proxy.runtime = runtime
    return proxy


def triton_utils(target: Target, source: EngineSource) -> dict:
    return {**vllm_stand_ins.triton_utils(target, source), "triton": _triton_for(target),
            "tldevice": _libdevice.load()}


@functools.lru_cache(maxsize=8)
def cuda_runtime_major(origin: str) -> int:
    """The CUDA runtime major the engine release's extensions link: `libcudart.so.N` in the smallest vllm/*.abi3.so
    that names one; 0 when none does (vLLM's own answer when torch.version.cuda is undetermined)."""
    path = Path(origin)
    if path.is_file():
        with zipfile.ZipFile(path) as z:
            sos = sorted((i for i in z.infolist() if re.fullmatch(r"vllm/[^/]+\.abi3\.so", i.filename)),
                         key=lambda i: i.file_size)
            found = (re.search(rb"libcudart\.so\.(\d+)", z.read(i)) for i in sos)
            hit = next((f for f in found if f), None)
    else:
        sos = sorted(path.parent.glob("vllm/*.abi3.so"), key=lambda p: p.stat().st_size)
        hit = next((f for f in (re.search(rb"libcudart\.so\.(\d+)", p.read_bytes()) for p in sos) if f), None)
    return int(hit.group(1)) if hit else 0


def cuda_platform_method(source: EngineSource, name: str):
    """CudaPlatformBase.<name> (vllm/platforms/cuda.py) cut from the wheel's text and defined as it is (torch's
    answers are the session's: torch.cuda answers as the target)."""
    return engine_code.define(source, "vllm/platforms/cuda.py", (f"CudaPlatformBase.{name}",),
                              {"torch": torch.load()})[name]


def platforms(target: Target, source: EngineSource) -> dict:
    """vllm_stand_ins' current_platform (vLLM's base Platform), with two of CudaPlatformBase's answers:
    get_cuda_runtime_major (the wheel's CUDA runtime) and is_arch_support_pdl (CUDA's own method; the base class
    answers False)."""
    out = vllm_stand_ins.platforms(target, source)
    platform = out["current_platform"]
    major = cuda_runtime_major(source.origin)
    pdl = cuda_platform_method(source, "is_arch_support_pdl")
    platform.get_cuda_runtime_major = lambda: major
    platform.is_arch_support_pdl = lambda: pdl(type(platform))
    return out


def backend_utils(target: Target, source: EngineSource) -> dict:
    """PAD_SLOT_ID and NULL_BLOCK_ID (causal_conv1d.py's two names from vllm/v1/attention/backends/utils.py), read
    from the wheel's text (the module imports vLLM's config tree)."""
    text = source.read_text("vllm/v1/attention/backends/utils.py")
    return {t.id: ast.literal_eval(n.value) for n in ast.parse(text).body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and t.id in ("PAD_SLOT_ID", "NULL_BLOCK_ID")}


def torch_utils(target: Target, source: EngineSource) -> dict:
    def async_tensor_h2d(data, device=None, dtype=None, out=None):
        return (data if isinstance(data, torch.Tensor) else torch.tensor(data)).to(device=device, dtype=dtype)

    return {"async_tensor_h2d": async_tensor_h2d}


def platform_utils(target: Target, source: EngineSource) -> dict:
    """vllm.utils.platform_utils (imported by the FLA utils.py of releases that have it): the device properties the
    launchers read, as the target answers them (`cuda_get_device_properties` is asked on AMD only; the module
    itself starts a process pool to query CUDA)."""
    props = {"shared_memory_per_block": target.smem_optin, "shared_memory_per_block_optin": target.smem_optin,
             "multi_processor_count": target.sms}
    return {"cuda_get_device_properties": lambda device, names, init_cuda=False: tuple(props[n] for n in names),
            "num_compute_units": lambda device_id=0: target.sms}


GDN_STAND_INS = {**vllm_stand_ins.STAND_INS, "vllm.utils.platform_utils": platform_utils, "vllm.triton_utils": triton_utils, "vllm.platforms": platforms,
                 "vllm.utils.torch_utils": torch_utils, "vllm.v1.attention.backends.utils": backend_utils}
_BASE = ("vllm.platforms.interface", "vllm.v1.attention.backends.registry", "vllm.envs")
_UTILS = (f"{FLA}.utils", f"{FLA}.op", f"{FLA}.index", "vllm.utils.gpu_sync_debug")
CHUNK_ALLOW = (*_BASE, *_UTILS, *(f"{FLA}.{m}" for m in ("chunk", "chunk_delta_h", "chunk_o", "chunk_scaled_dot_kkt",
                                                        "cumsum", "l2norm", "solve_tril", "wy_fast")))


def dims(model: AttentionConfig, tp: int) -> tuple[int, int, int, int]:
    g = model.gdn
    for what, n in (("linear_num_key_heads", g.key_heads), ("linear_num_value_heads", g.value_heads)):
        if n % tp:
            raise UsageError(f"--tp {tp}: {model.name}'s {n} {what} do not split over {tp} ranks")
    return g.key_heads // tp, g.value_heads // tp, g.key_head_dim, g.value_head_dim


def serves(model: AttentionConfig) -> str | None:
    return None if model.gdn else "no gated-delta-net layers (config.json layer_types has no linear_attention)"


# --- the engine's own selection -------------------------------------------------------------------------------------
def _functions(text: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def vllm_config(model: AttentionConfig):
    """The fields of VllmConfig the selector reads: additional_config (VllmConfig's default, {}: no
    --gdn-prefill-backend) and model_config's hf_text_config head dims and dtype."""
    text = types.SimpleNamespace(linear_key_head_dim=model.gdn.key_head_dim,
                                 linear_value_head_dim=model.gdn.value_head_dim)
    return types.SimpleNamespace(additional_config={}, model_config=types.SimpleNamespace(
        hf_text_config=text, dtype=getattr(torch, TORCH[model.dtype])))


def run_selector(session, model: AttentionConfig) -> tuple[tuple[str, str], set[int]]:
    """vLLM's `_resolve_gdn_prefill_backend` (with the module-level helpers it calls) cut from the wheel's file and
    run as it is (tileprobe.audit.engine_code), under the session's platform: its (requested, active) answer and the
    file lines it ran."""
    logger = vllm_stand_ins.logger(session.target, session.source)["init_logger"](LAYER)
    scope = {"__name__": "tileprobe.audit.vllm_gdn_selector", "torch": torch.load(), "Literal": typing.Literal,
             "VllmConfig": object, "logger": logger,
             "current_platform": session.module("vllm.platforms").current_platform}
    ran = engine_code.run_function(session.source, LAYER, SELECTOR, scope, vllm_config(model),
                                   helpers=SELECTOR_HELPERS)
    return ran.value, set(ran.lines)


def _names(text: str) -> dict[str, str]:
    """The backends' names as `_log_gdn_backend_decision` logs them ("Using %s GDN prefill kernel")."""
    fn = _functions(text)["_log_gdn_backend_decision"]
    node = next(n.value.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "chosen")
    return ast.literal_eval(node)


def test_text(text: str, node: ast.If) -> str:
    """An if/elif's test as the engine wrote it, on one line."""
    return " ".join(ast.get_source_segment(text, node.test).split())


def prefill_chooses(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    (requested, active), ran = run_selector(session, model)
    if active == "triton":
        return None
    text = session.source.read_text(LAYER)
    fn = _functions(text)[SELECTOR]
    taken = [n for n in ast.walk(fn) if isinstance(n, ast.If) and "current_platform" in ast.unparse(n.test)
             and ran & set(range(n.body[0].lineno, n.body[-1].end_lineno + 1))]
    test = max(taken, key=lambda n: n.lineno)
    return Elsewhere(f"{_names(text)[active]} GDN prefill kernel ({SELECTOR} -> {active!r}, requested "
                     f"{requested!r})", f"{LAYER}:{test.lineno}", test_text(text, test))


def _selection_only(session, model: AttentionConfig, pt: Point) -> None:
    """Nothing launched: where the engine's prefill backend is Triton, the chunk chain's launches are vllm-gdn's
    (the driven step); this entry's row is the engine's choice of another prefill kernel (`chooses`)."""


ENTRIES = (
    AuditKernel("vllm-gdn-chunk-prefill", "vllm", LISTED, f"{FLA}.chunk", "chunk_gated_delta_rule", CHUNK_ALLOW,
                GDN_STAND_INS, None, serves, "q/k/v in the model's dtype, g/beta fp32, the state the model's",
                windowed=False, chooses=prefill_chooses, compile_from="module", drive=_selection_only,
                phases=("prefill", "mixed")),
)
