"""vLLM's own attention backend selection, run from its wheel's text (tileprobe.audit.engine_text): vllm/platforms/
cuda.py `get_attn_backend_cls` / `get_valid_backends` on the AttentionSelectorConfig vLLM's selector builds for the
model's layers (tileprobe.audit.backends says which fields and what is stood in)."""

from __future__ import annotations

import ast
import contextlib
import logging
import types

from tileprobe.audit import vllm_stand_ins
from tileprobe.audit.engine_text import TextModules
from tileprobe.audit.selection import (DTYPES, Selection, device, function_node, is_triton, naming_line,
                                       tracing)
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

torch = LazyModule("torch")

# ---------------------------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------------------------

_ENGINE_LOG = logging.getLogger("tileprobe.engine")  # the engine's log lines during a selection: not shown
_ENGINE_LOG.addHandler(logging.NullHandler())
_ENGINE_LOG.propagate = False


def _logger_stand_in(mods: TextModules) -> dict:
    return {"init_logger": vllm_stand_ins.init_logger("tileprobe.engine")}


def _class_defaults(mods: TextModules, module: str, cls: str) -> types.SimpleNamespace:
    """A class's annotated fields with their literal defaults, read from the engine's text."""
    node = next(n for n in mods.module(module)._tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {}
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            with contextlib.suppress(ValueError):
                out[stmt.target.id] = ast.literal_eval(stmt.value)
    return types.SimpleNamespace(**out)


def vllm_modules(source: EngineSource, target: Target) -> TextModules:
    holder = {}

    def platforms(mods: TextModules) -> dict:
        cuda = mods.module("vllm.platforms.cuda")
        interface = mods.module("vllm.platforms.interface")
        platform = vllm_stand_ins.target_platform(cuda.CudaPlatformBase, interface, target)
        holder["platform"] = platform
        return {"current_platform": platform(), "CpuArchEnum": interface.CpuArchEnum}

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


def _reasons(message: str) -> str:
    """The reasons of get_attn_backend_cls's "... is not valid ... Reason: [...]" ValueError, joined."""
    tail = message.split("Reason: ", 1)[-1]
    try:
        return "; ".join(map(str, ast.literal_eval(tail)))
    except (ValueError, SyntaxError):
        return tail


def _no_backend_reasons(message: str) -> str:
    """The per-backend reasons of get_attn_backend_cls's "No valid attention backend found ... Reasons: {...}."."""
    head, sep, tail = message.partition("Reasons: ")
    return tail.rstrip(".").strip("{}") if sep else head


def select(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None) -> Selection:
    mods = vllm_modules(source, target)
    ran: dict = {}
    with device(target, mods):
        platform = mods.platform()
        selector = mods.module("vllm.v1.attention.selector")
        enum = mods.module("vllm.v1.attention.backends.registry").AttentionBackendEnum
        head = model.kv_lora_rank + model.qk_rope_head_dim if model.mla else model.head_dim
        picks = {}
        for window in model.windows():
            config = selector.AttentionSelectorConfig(
                head_size=head, dtype=getattr(torch, DTYPES[model.dtype]), kv_cache_dtype="auto", block_size=None,
                use_mla=model.mla, has_sink=model.sinks, has_sliding_window=window is not None,
                use_sparse=model.mla and model.index_topk is not None)  # deepseek_v2.py: is_v32 = index_topk
            if forced is not None:
                try:
                    chosen = enum[forced]
                except ValueError:
                    chosen = None
            with tracing({"vllm/platforms/cuda.py"}, ran):
                valid, invalid = platform.get_valid_backends(platform.get_device_capability(), config, model.heads)
                names = tuple(c.backend.name for c in sorted(valid, key=lambda c: c.priority))
                rank = {c.backend.name: c.priority for c in valid}
                if forced is not None:
                    if chosen is None:
                        raise UsageError(f"--attention-backend {forced}: vLLM {source.version} has no such backend; "
                                         f"valid for {model.name} on {target.name}: {', '.join(names)}")
                    try:
                        path = platform.get_attn_backend_cls(chosen, config, model.heads)
                    except ValueError as exc:
                        why = _reasons(str(exc))
                        raise UsageError(f"--attention-backend {forced}: vLLM {source.version} refuses it for "
                                         f"{model.name} on {target.name} ({why}); valid: {', '.join(names)}") from None
                else:
                    try:
                        path = platform.get_attn_backend_cls(None, config, model.heads)
                    except ValueError as exc:  # "No valid attention backend found ... Reasons: {...}."
                        raise UsageError(f"vLLM {source.version} finds no attention backend for {model.name} on "
                                         f"{target.name} (sm_{target.cc_int}), so it does not start there: "
                                         f"{_no_backend_reasons(str(exc))}") from None
            name = next(m.name for m in enum if m.value == path)
            refused = {b.name: tuple(r) for b, (p, r) in invalid.items() if p < rank.get(name, -1)}
            picks[window] = (name, names, refused)
    name, names, refused = picks[model.windows()[0]]
    if any(p[0] != name for p in picks.values()):
        kinds = ", ".join(f"{p[0]} ({'window ' + str(w) if w else 'full'})" for w, p in picks.items())
        raise UsageError(f"vLLM {source.version} picks {kinds} for {model.name}'s layers on {target.name}: "
                         "tileprobe reports one attention backend per model")
    if forced is not None:  # the `return` of get_attn_backend_cls's selected-backend branch, which ran
        fn = function_node(mods, "vllm.platforms.cuda", "get_attn_backend_cls")
        done = ran.get("get_attn_backend_cls", set())
        first = min(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Return) and n.lineno in done)
        line = f"vllm/platforms/cuda.py:{first}"
    else:
        line = naming_line(mods, "vllm.platforms.cuda", "_get_backend_priorities",
                            ran.get("_get_backend_priorities", set()), name)
    return Selection("vllm", name, is_triton("vllm", name), line,
                     forced is not None, names, refused, mods.notes())


def vit_select(source: EngineSource, target: Target, head_size: int, dtype: str,
               forced: str | None = None) -> tuple[str, str]:
    """vLLM's own ViT attention backend pick (vllm/platforms/cuda.py `get_vit_attn_backend`, run from the wheel's
    text on the target): (backend name, the engine line that returned it). `forced`: --mm-encoder-attn-backend as
    the user passes it (the method's `backend` argument, checked against its supported list)."""
    mods = vllm_modules(source, target)
    ran: dict = {}
    with device(target, mods):
        platform = mods.platform()
        enum = mods.module("vllm.v1.attention.backends.registry").AttentionBackendEnum
        chosen = None
        if forced is not None:
            try:
                chosen = enum[forced]
            except KeyError:
                raise UsageError(f"--mm-encoder-attn-backend {forced}: vLLM {source.version} has no such backend "
                                 f"(its ViT backends on {target.name}: "
                                 f"{', '.join(b.name for b in platform.get_supported_vit_attn_backends())})") from None
        with tracing({"vllm/platforms/cuda.py"}, ran):
            try:
                picked = platform.get_vit_attn_backend(head_size, getattr(torch, DTYPES[dtype]), chosen)
            except AssertionError as exc:
                raise UsageError(f"--mm-encoder-attn-backend {forced}: vLLM {source.version} refuses it on "
                                 f"{target.name}: {' '.join(str(exc).split())}") from None
    fn = function_node(mods, "vllm.platforms.cuda", "get_vit_attn_backend")
    done = ran.get("get_vit_attn_backend", set())
    returns = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Return) and n.lineno in done]
    return picked.name, f"vllm/platforms/cuda.py:{min(returns) if returns else fn.lineno}"
