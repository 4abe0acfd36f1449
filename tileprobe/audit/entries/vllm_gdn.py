"""vLLM's gated-delta-net (GDN) launchers that Qwen3-Next / Qwen3.5 layers run, as tileprobe audit entries:
the vendored flash-linear-attention ops under vllm/third_party/flash_linear_attention/ops/, sized as
vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py (QwenGatedDeltaNetAttention) calls them on CUDA
(forward_cuda -> qwen_gdn_attention_core -> `_forward_core`). Per rank: H = linear_num_key_heads / tp,
HV = linear_num_value_heads / tp, K = linear_key_head_dim, V = linear_value_head_dim.

- `fused_post_conv_prep` (fused_gdn_prefill_post_conv.py), `_forward_core`'s prefill step 1.2: conv_output (T,
  2*H*K + HV*V) in the model's dtype, contiguous (causal_conv1d_fn's output, transposed back), a / b (T, HV) in the
  model's dtype (forward_cuda passes `b.contiguous(), a.contiguous()`), A_log (HV,) fp32 (created fp32), dt_bias
  (HV,) in the model's dtype (created under the model's default dtype), num_k_heads H, apply_l2norm True,
  output_g_exp False. It runs whatever the prefill backend (FlashInfer's prefill takes its q/k/v/g/beta too).
- `chunk_gated_delta_rule` (chunk.py; launches chunk_local_cumsum, chunk_scaled_dot_kkt, solve_tril,
  recompute_w_u, chunk_gated_delta_rule_fwd_h, chunk_fwd_o, each autotuned), as `_forward_core` calls
  `self.chunk_gated_delta_rule` (ChunkGatedDeltaRule.forward_native): the prep's outputs unsqueezed to a batch of 1,
  q/k (1, T, H, K) and v (1, T, HV, V) in the model's dtype, g / beta (1, T, HV) fp32, initial_state
  `ssm_state[prefill_state_indices]` (N, HV, V, K) in the recurrent state's dtype, output_final_state True,
  cu_seqlens int32 (N+1), use_qk_l2norm_in_kernel False. chunk_indices / chunk_offsets are left None: the layer
  passes the metadata builder's (vllm/v1/attention/backends/gdn_attn.py `_build_chunk_metadata`), which are
  `prepare_chunk_indices` / `prepare_chunk_offsets` of the CPU start locations; with None the launchers call the
  same two functions on cu_seqlens (a CPU tensor here), so the launches see the same shapes.
- `fused_recurrent_gated_delta_rule_packed_decode` (fused_recurrent.py), `_forward_core_decode_non_spec` (a decode-only
  batch without speculative decoding, VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE on): mixed_qkv (B, 2*H*K + HV*V)
  (causal_conv1d_update works in place), a / b (B, HV), A_log fp32, dt_bias, scale K**-0.5, initial_state the
  ssm_state (slots, HV, V, K), out (B, 1, HV, V), ssm_state_indices int32 (B,) (the CUDA-graph decode buffer,
  contiguous), use_qk_l2norm_in_kernel True.
- `fused_sigmoid_gating_delta_rule_update` (fused_sigmoid_gating.py), `_forward_core` step 2.2, the decode part of a
  batch that mixes prefills and decodes: q/k (1, B, H, K), v (1, B, HV, V) (rearrange_mixed_qkv: contiguous views),
  a / b (B, HV), initial_state the ssm_state, inplace_final_state True, cu_seqlens int32 (B+1), ssm_state_indices
  int32 (B,), use_qk_l2norm_in_kernel True.
- `causal_conv1d_fn` (vllm/model_executor/layers/mamba/ops/causal_conv1d.py), `_forward_core` step 1.2 for a
  prefill: x the mixed_qkv (T, dim) transposed to (dim, T), conv1d.weight viewed (dim, width), no bias (the layer's
  conv1d has none), conv_states (slots, dim, width-1) (the "SD" layout's (slots, width-1, dim) transposed),
  has_initial_state bool (N,), cache_indices int32 (N,), query_start_loc int32 (N+1), activation "silu"
  (Qwen3-Next's hidden_act). The layer passes its attention metadata, whose nums_dict holds the BLOCK_M programs
  the launcher otherwise computes from query_start_loc (metadata None here: the same grid and arguments).
- `causal_conv1d_update`, decode (`_forward_core_decode_non_spec`): x (B, dim), the conv state, the weight, no bias,
  "silu", conv_state_indices int32 (B,), validate_data False.

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
of the releases with a manifest). The Elsewhere names the last device test of the selector whose body ran. The packed-decode entry reads
envs.VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE from the engine's own vllm.envs (the flag `_forward_core` tests).

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
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, indptr, torch
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


# --- arguments ------------------------------------------------------------------------------------------------------
def _dims(model: AttentionConfig, tp: int) -> tuple[int, int, int, int]:
    g = model.gdn
    for what, n in (("linear_num_key_heads", g.key_heads), ("linear_num_value_heads", g.value_heads)):
        if n % tp:
            raise UsageError(f"--tp {tp}: {model.name}'s {n} {what} do not split over {tp} ranks")
    return g.key_heads // tp, g.value_heads // tp, g.key_head_dim, g.value_head_dim


def _dtypes(model: AttentionConfig):
    dt = getattr(torch, TORCH[model.dtype])
    return dt, dt  # the activations' dtype, the recurrent state's (mamba_ssm_cache_dtype "auto": the model's)


def _post_conv(model: AttentionConfig, pt: Point):
    h, hv, k, v = _dims(model, pt.tp)
    dt, _ = _dtypes(model)
    t = pt.batch * pt.seq_len
    return (), dict(conv_output=empty((t, 2 * h * k + hv * v), dt), a=empty((t, hv), dt), b=empty((t, hv), dt),
                    A_log=empty((hv,), torch.float32), dt_bias=empty((hv,), dt), num_k_heads=h, head_k_dim=k,
                    head_v_dim=v, apply_l2norm=True, output_g_exp=False)


def _chunk(model: AttentionConfig, pt: Point):
    h, hv, k, v = _dims(model, pt.tp)
    dt, state = _dtypes(model)
    t, f32 = pt.batch * pt.seq_len, torch.float32
    return (), dict(q=empty((1, t, h, k), dt), k=empty((1, t, h, k), dt), v=empty((1, t, hv, v), dt),
                    g=empty((1, t, hv), f32), beta=empty((1, t, hv), f32),
                    initial_state=empty((pt.batch, hv, v, k), state), output_final_state=True,
                    cu_seqlens=indptr(pt.batch, pt.seq_len), chunk_indices=None, chunk_offsets=None,
                    use_qk_l2norm_in_kernel=False)


def _packed_decode(model: AttentionConfig, pt: Point):
    h, hv, k, v = _dims(model, pt.tp)
    dt, state = _dtypes(model)
    b = pt.batch
    return (), dict(mixed_qkv=empty((b, 2 * h * k + hv * v), dt), a=empty((b, hv), dt), b=empty((b, hv), dt),
                    A_log=empty((hv,), torch.float32), dt_bias=empty((hv,), dt), scale=k ** -0.5,
                    initial_state=empty((b, hv, v, k), state), out=empty((b, 1, hv, v), dt),
                    ssm_state_indices=empty((b,), torch.int32), use_qk_l2norm_in_kernel=True)


def _sigmoid_decode(model: AttentionConfig, pt: Point):
    h, hv, k, v = _dims(model, pt.tp)
    dt, state = _dtypes(model)
    b = pt.batch
    return (), dict(A_log=empty((hv,), torch.float32), a=empty((b, hv), dt), b=empty((b, hv), dt),
                    dt_bias=empty((hv,), dt), q=empty((1, b, h, k), dt), k=empty((1, b, h, k), dt),
                    v=empty((1, b, hv, v), dt), initial_state=empty((b, hv, v, k), state), inplace_final_state=True,
                    cu_seqlens=indptr(b, 1), ssm_state_indices=empty((b,), torch.int32),
                    use_qk_l2norm_in_kernel=True)


def _conv(model: AttentionConfig, tp: int):
    """conv1d.weight viewed (dim, width) in the model's dtype, and the conv state: vLLM's default "SD" layout
    (mamba_utils.get_conv_state_layout) stores (slots, width-1, dim), which `_forward_core` transposes to
    (slots, dim, width-1)."""
    h, hv, k, v = _dims(model, tp)
    dim, width, dt = 2 * h * k + hv * v, model.gdn.conv_kernel, _dtypes(model)[0]
    return dim, empty((dim, width), dt), lambda slots: empty((slots, width - 1, dim), dt).transpose(-1, -2)


def _conv_fn(model: AttentionConfig, pt: Point):
    dim, weight, state = _conv(model, pt.tp)
    t, dt = pt.batch * pt.seq_len, _dtypes(model)[0]
    return (empty((t, dim), dt).transpose(0, 1), weight), dict(
        bias=None, conv_states=state(pt.batch), query_start_loc=indptr(pt.batch, pt.seq_len),
        cache_indices=empty((pt.batch,), torch.int32), has_initial_state=empty((pt.batch,), torch.bool),
        activation="silu", metadata=None)


def _conv_update(model: AttentionConfig, pt: Point):
    dim, weight, state = _conv(model, pt.tp)
    return (empty((pt.batch, dim), _dtypes(model)[0]), state(pt.batch), weight, None, "silu"), dict(
        conv_state_indices=empty((pt.batch,), torch.int32), validate_data=False)


def serves(model: AttentionConfig) -> str | None:
    return None if model.gdn else "no gated-delta-net layers (config.json layer_types has no linear_attention)"


# --- the engine's own selection -------------------------------------------------------------------------------------
def _functions(text: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def _vllm_config(model: AttentionConfig):
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
    ran = engine_code.run_function(session.source, LAYER, SELECTOR, scope, _vllm_config(model),
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


def packed_decode_chooses(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """`_forward_core` takes the packed decode when `self.enable_packed_recurrent_decode` (the engine's
    VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE) holds; else the decode-only batch goes through
    fused_sigmoid_gating_delta_rule_update (its own entry)."""
    if session.module("vllm.envs").VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE:
        return None
    text = session.source.read_text(LAYER)
    core = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == "_forward_core")
    test = next(n for n in ast.walk(core) if isinstance(n, ast.If)
                and "enable_packed_recurrent_decode" in ast.unparse(n.test))
    return Elsewhere("fused_sigmoid_gating_delta_rule_update", f"{LAYER}:{test.lineno}", test_text(text, test))


def _step(session, model: AttentionConfig, pt: Point) -> None:
    from tileprobe.audit.vllm_gdn_step import gdn_step
    gdn_step(session, model, pt)


def _selection_only(session, model: AttentionConfig, pt: Point) -> None:
    """Nothing launched: where the engine's prefill backend is Triton, the chunk chain's launches are vllm-gdn's
    (the driven step); this entry's row is the engine's choice of another prefill kernel (`chooses`)."""


def _step_allow() -> tuple[str, ...]:
    from tileprobe.audit.vllm_gdn_step import ALLOW
    return ALLOW


def _step_stand_ins() -> dict:
    from tileprobe.audit.vllm_gdn_step_stand_ins import STAND_INS
    return STAND_INS


ENTRIES = (
    # the whole GDN step (tileprobe.audit.vllm_gdn_step): conv1d fn / update, post-conv prep, packed or
    # sigmoid-gating decode, and the chunk chain where the engine's prefill backend is Triton; conv_rule.predict
    # answers the kernels it states rules for by kernel name, the chunk chain's kernels are sized
    AuditKernel("vllm-gdn", "vllm", LISTED, "vllm.v1.attention.backends.gdn_attn", "GDNAttentionMetadataBuilder",
                _step_allow(), _step_stand_ins(), None, serves,
                "the model's dtype (states too); A_log, g / beta fp32", windowed=False, compile_from="module",
                predict=conv_rule.predict, drive=_step, phases=("prefill", "decode", "mixed")),
    AuditKernel("vllm-gdn-chunk-prefill", "vllm", LISTED, f"{FLA}.chunk", "chunk_gated_delta_rule", CHUNK_ALLOW,
                GDN_STAND_INS, None, serves, "q/k/v in the model's dtype, g/beta fp32, the state the model's",
                windowed=False, chooses=prefill_chooses, compile_from="module", drive=_selection_only,
                phases=("prefill", "mixed")),
)
