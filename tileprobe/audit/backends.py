"""The attention backend an engine picks for a model on a target, by the engine's own selection code, and which
tileprobe audit entries that backend runs.

`attention_backend(source, target, model, forced)` runs, from the engine's wheel (tileprobe.audit.engine_text: the
engine's text, one top-level name at a time, with torch.cuda answering as the target and torch.version.cuda as a
CUDA 13 build):

- vLLM: `CudaPlatformBase.get_attn_backend_cls` and `get_valid_backends` (vllm/platforms/cuda.py) on the
  AttentionSelectorConfig vLLM's selector (vllm/v1/attention/selector.py `get_attn_backend`) builds for the model's
  attention layers: head size (MLA: kv_lora_rank + qk_rope_head_dim), dtype, kv_cache_dtype "auto" (the
  default --kv-cache-dtype), block_size None (no --block-size), use_mla, has_sink, has_sliding_window; everything
  else its default. That runs `_get_backend_priorities` and each backend class's own `validate_configuration` and
  supports_* methods (vllm/v1/attention/backends/*.py) and what they call (fa_utils, vllm/utils/flashinfer.py, the
  FlashAttention interface). Stood in: `current_platform`, a subclass of vLLM's own CudaPlatformBase answering the
  target's capability and name; `vllm.logger`; the current VllmConfig (`get_current_vllm_config[_or_none]`): only
  an `attention_config` whose fields are AttentionConfig's defaults read from vllm/config/attention.py, the other
  parts None (no model/cache/parallel config published); the host: the wheel's compiled extensions import, only the
  wheel's declared dependencies are installed (so no flashinfer-cubin), and the network is unreachable (so
  FlashInfer's TRT-LLM cubins cannot be downloaded: vllm/utils/flashinfer.py has_nvidia_artifactory answers False).
- SGLang: the model's override provider registered for its architecture in sglang/srt/arg_groups/model_overrides
  (e.g. gpt_oss.py `_gpt_oss_overrides`, deepseek_v2.py `_deepseek_family_overrides`), then, when it set none,
  sglang/srt/arg_groups/model_override_base.py `get_default_attn_backend`, as overrides.py
  `_attention_backend_default` calls it; a forced name must be in choices.py ATTENTION_BACKEND_CHOICES and pass its
  creator in sglang/srt/layers/attention/attention_registry.py (the creator's own checks run; the backend class it
  would then build is stood in). Stood in: the resolving view (`resolving_view` / `resolved_view`): the ServerArgs
  fields' defaults read from sglang/srt/arg_groups/fields/*.py; `model_config_of`: architectures, attention_arch (MLA
  when the model has MLA ranks), has_attention_sinks, is_encoder_decoder False, from tileprobe's AttentionConfig;
  `get_spec` / `get_parallel`: no speculative decoding, no decode context parallelism.

The line a Selection names is the engine line whose text names the chosen backend and that ran: in vLLM the
element of the priority list `_get_backend_priorities` returned; in SGLang the `return "..."` or
`overrides["attention_backend"] = "..."` that ran.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import sys
import types
from dataclasses import dataclass, field

from tileprobe.audit import capture
from tileprobe.audit.engine_text import EngineTextError, TextModules
from tileprobe.audit.kernels import KERNELS
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

torch = LazyModule("torch")

# config.json `architectures` of the presets' public checkpoints, by model_type (tileprobe's AttentionConfig keeps
# model_type only); a config.json of another model_type has no SGLang override provider looked up
ARCHITECTURES = {"qwen3_moe": "Qwen3MoeForCausalLM", "gpt_oss": "GptOssForCausalLM",
                 "minimax_m1": "MiniMaxM1ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                 "kimi_k2": "DeepseekV3ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}
TORCH_CUDA = "13.0"  # torch.version.cuda of the engines' CUDA 13 builds (a CPU torch answers None)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Selection:
    engine: str
    backend: str  # as the engine spells it (vLLM: TRITON_ATTN, ...; SGLang: triton, ...)
    triton: bool  # a Triton backend: its kernels are what tileprobe audit compiles
    entries: tuple[str, ...]  # the audit entries (tileprobe.audit.kernels) that backend runs
    line: str  # file:line inside the wheel whose text names the backend and that ran
    forced: bool = False
    valid: tuple[str, ...] = ()  # every backend the engine would accept here, best first (vLLM: priority order)
    refused: dict = field(default_factory=dict)  # backend -> the engine's reasons, for those ranked above it


def entries_of(engine: str, backend: str, mla: bool) -> tuple[str, ...]:
    """The audit entries of a backend: SGLang `triton` runs sglang-extend/context/decode-attention (MHA) or the
    sglang-mla-* entries (MLA); vLLM TRITON_ATTN runs vllm-unified-attention, TRITON_MLA the vllm-triton-mla-*."""
    if engine == "sglang" and backend == "triton":
        names = [n for n in KERNELS if n.startswith("sglang-mla-")] if mla else \
            ["sglang-extend-attention", "sglang-context-attention", "sglang-decode-attention"]
    elif engine == "vllm" and backend == "TRITON_ATTN":
        names = ["vllm-unified-attention"]
    elif engine == "vllm" and backend == "TRITON_MLA":
        names = [n for n in KERNELS if n.startswith("vllm-triton-mla-")]
    else:
        names = []
    return tuple(n for n in names if n in KERNELS)


def is_triton(engine: str, backend: str) -> bool:
    return backend == "triton" if engine == "sglang" else backend.startswith("TRITON_")


@contextlib.contextmanager
def _device(target: Target, mods: TextModules):
    """torch.cuda answering as the target, torch.version.cuda as a CUDA build, the served modules in sys.modules;
    all put back after."""
    answers = capture.cuda_answers(target)
    before = {k: getattr(torch.cuda, k) for k in answers}
    cuda_before = torch.version.cuda
    try:
        for k, v in answers.items():
            setattr(torch.cuda, k, v)
        torch.version.cuda = cuda_before or TORCH_CUDA
        with mods.active():
            yield
    finally:
        for k, v in before.items():
            setattr(torch.cuda, k, v)
        torch.version.cuda = cuda_before


def _naming_line(mods: TextModules, module: str, function: str, ran: set, token: str) -> str:
    """file:line of the node naming `token` (a string constant or an attribute) inside `function` of `module`, in
    a statement that ran (the last such in the file)."""
    mod = mods.module(module)
    fn = next(n for n in ast.walk(mod._tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    best = None
    for stmt in ast.walk(fn):
        if not isinstance(stmt, ast.stmt) or stmt is fn or isinstance(stmt, (ast.If, ast.For, ast.While, ast.With,
                                                                              ast.Try)):
            continue
        if stmt.lineno not in ran:
            continue
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Constant) and node.value == token) or \
                    (isinstance(node, ast.Attribute) and node.attr == token):
                best = max(best or 0, node.lineno)
    if best is None:
        raise EngineTextError(f"no line of {mod._rel} {function} that ran names {token}")
    return f"{mod._rel}:{best}"


@contextlib.contextmanager
def _tracing(files: set[str], ran: dict):
    """Record (function name -> lines) run in the given wheel files."""
    before = sys.gettrace()

    def trace(frame, event, arg):
        if frame.f_code.co_filename not in files:
            return None
        lines = ran.setdefault(frame.f_code.co_name, set())

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local
        return local

    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(before)


# ---------------------------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------------------------

class _Logger(logging.LoggerAdapter):
    def debug_once(self, msg, *a, **k):
        self.debug(msg, *a)

    def info_once(self, msg, *a, **k):
        self.info(msg, *a)

    def warning_once(self, msg, *a, **k):
        self.warning(msg, *a)


_ENGINE_LOG = logging.getLogger("tileprobe.engine")  # the engine's log lines during a selection: not shown
_ENGINE_LOG.addHandler(logging.NullHandler())
_ENGINE_LOG.propagate = False


def _logger_stand_in(mods: TextModules) -> dict:
    return {"init_logger": lambda name: _Logger(logging.getLogger(f"tileprobe.engine.{name}"), {})}


def _class_defaults(mods: TextModules, module: str, cls: str) -> types.SimpleNamespace:
    """A class's annotated fields with their literal defaults, read from the engine's text."""
    node = next(n for n in mods.module(module)._tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {}
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            with contextlib.suppress(ValueError):
                out[stmt.target.id] = ast.literal_eval(stmt.value)
    return types.SimpleNamespace(**out)


def _vllm_modules(source: EngineSource, target: Target) -> TextModules:
    major, minor = (int(x) for x in target.cc.split("."))
    holder = {}

    def platforms(mods: TextModules) -> dict:
        cuda = mods.module("vllm.platforms.cuda")
        interface = mods.module("vllm.platforms.interface")

        class TargetPlatform(cuda.CudaPlatformBase):
            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                return interface.DeviceCapability(major, minor)

            @classmethod
            def get_device_name(cls, device_id: int = 0) -> str:
                return target.device_name

        holder["platform"] = TargetPlatform
        return {"current_platform": TargetPlatform(), "CpuArchEnum": interface.CpuArchEnum}

    def config(mods: TextModules) -> dict:
        cfg = types.SimpleNamespace(
            attention_config=_class_defaults(mods, "vllm.config.attention", "AttentionConfig"),
            model_config=None, cache_config=None, parallel_config=None, kv_transfer_config=None,
            speculative_config=None)
        return {"get_current_vllm_config": lambda: cfg, "get_current_vllm_config_or_none": lambda: cfg}

    mods = TextModules(source, stand_ins={"vllm.platforms": platforms, "vllm.logger": _logger_stand_in},
                       pins={"vllm.config": config})
    mods.platform = lambda: (mods.module("vllm.platforms"), holder["platform"])[1]
    return mods


def _vllm(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None) -> Selection:
    mods = _vllm_modules(source, target)
    ran: dict = {}
    with _device(target, mods):
        platform = mods.platform()
        selector = mods.module("vllm.v1.attention.selector")
        enum = mods.module("vllm.v1.attention.backends.registry").AttentionBackendEnum
        head = model.kv_lora_rank + model.qk_rope_head_dim if model.mla else model.head_dim
        picks = {}
        for window in model.windows():
            config = selector.AttentionSelectorConfig(
                head_size=head, dtype=getattr(torch, DTYPES[model.dtype]), kv_cache_dtype="auto", block_size=None,
                use_mla=model.mla, has_sink=model.sinks, has_sliding_window=window is not None)
            if forced is not None:
                try:
                    chosen = enum[forced]
                except ValueError:
                    chosen = None
            with _tracing({"vllm/platforms/cuda.py"}, ran):
                valid, invalid = platform.get_valid_backends(platform.get_device_capability(), config, model.heads)
                names = tuple(c.backend.name for c in sorted(valid, key=lambda c: c.priority))
                rank = {c.backend.name: c.priority for c in valid}
                if forced is not None:
                    if chosen is None:
                        raise UsageError(f"--attention-backend {forced}: vLLM {source.version} has no such backend; "
                                         f"valid for {model.name} on {target.name}: {', '.join(names)}")
                    try:
                        path = platform.get_attn_backend_cls(chosen, config, model.heads)
                    except ValueError:
                        why = "; ".join(invalid.get(chosen, (0, ["refused"]))[1])
                        raise UsageError(f"--attention-backend {forced}: vLLM {source.version} refuses it for "
                                         f"{model.name} on {target.name} ({why}); valid: {', '.join(names)}") from None
                else:
                    path = platform.get_attn_backend_cls(None, config, model.heads)
            name = next(m.name for m in enum if m.value == path or (m.value and path == m.value))
            refused = {b.name: tuple(r) for b, (p, r) in invalid.items() if p < rank.get(name, -1)}
            picks[window] = (name, names, refused)
    name, names, refused = picks[model.windows()[0]]
    if any(p[0] != name for p in picks.values()):
        raise EngineTextError(f"vLLM picks {', '.join(p[0] for p in picks.values())} for {model.name}'s layer kinds")
    if forced is not None:
        line = _naming_line(mods, "vllm.platforms.cuda", "get_attn_backend_cls", ran.get("get_attn_backend_cls",
                                                                                             set()), "info")
    else:
        line = _naming_line(mods, "vllm.platforms.cuda", "_get_backend_priorities",
                            ran.get("_get_backend_priorities", set()), name)
    return Selection("vllm", name, is_triton("vllm", name), entries_of("vllm", name, model.mla), line,
                     forced is not None, names, refused)


def attention_backend(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None = None
                      ) -> Selection:
    """The attention backend `source`'s engine selects (or, forced, accepts) for `model` on `target`."""
    if source.engine == "vllm":
        return _vllm(source, target, model, forced)
    raise UsageError(f"--engine {source.engine}: tileprobe reads the attention backend selection of vllm, sglang")
