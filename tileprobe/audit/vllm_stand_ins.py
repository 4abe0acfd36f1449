"""vLLM's platform helpers as the target answers them, for tileprobe.audit.capture (each a function of the target and
the engine release that returns the stand-in module's attributes).

- `vllm.platforms`: `current_platform` is a subclass of vLLM's own `Platform` (vllm/platforms/interface.py, served
  from the wheel), so is_device_capability / has_device_capability / is_device_capability_family / fp8_dtype keep
  vLLM's semantics; only `get_device_capability` (the target's), `get_device_name` and the CUDA enum are set here
  (`target_platform`, which tileprobe.audit.vllm_selection uses on CudaPlatformBase too).
- `vllm.triton_utils`: the installed Triton (HAS_TRITON), as vllm/triton_utils/__init__.py exports it.
- `vllm.utils.import_utils`: resolve_obj_by_qualname only (the module imports the third-party `regex`).
- `vllm.v1.attention.backends.utils`: PAD_SLOT_ID, read from the wheel's text.
- `vllm.logger`: `init_logger` gives a logging.Logger with vLLM's *_once methods (`init_logger(prefix)`: the same
  under another logger prefix, for tileprobe.audit.vllm_selection).
- `vllm.v1.kv_cache_interface`: `KVQuantMode`, the enum class read from the wheel's own text (the module's other
  imports pull in vLLM's config tree).
"""

from __future__ import annotations

import ast
import enum
import importlib
import logging
import sys

from tileprobe.engines.triton_configs import EngineSource
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

_triton = LazyModule("triton")
_tl = LazyModule("triton.language")


_SEEN: set = set()  # the *_once messages already logged in this process (vLLM's own once-per-process semantics)


class _Logger(logging.LoggerAdapter):
    def _once(self, level: int, msg, args) -> None:
        key = (level, str(msg), tuple(map(str, args)))
        if key not in _SEEN:
            _SEEN.add(key)
            self.log(level, msg, *args)

    def debug_once(self, msg, *args, **kwargs):
        self._once(logging.DEBUG, msg, args)

    def info_once(self, msg, *args, **kwargs):
        self._once(logging.INFO, msg, args)

    def warning_once(self, msg, *args, **kwargs):
        self._once(logging.WARNING, msg, args)


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever sys.stderr is when a line is logged (not the stream of its creation)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _engine_log(prefix: str) -> None:
    """The engine's own log lines, said as the engine's (once each, on stderr): not tileprobe's errors."""
    log = logging.getLogger(prefix)
    if not log.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("engine log (the engine's own %(levelname)s, not tileprobe's): "
                                               "%(message)s"))
        log.addHandler(handler)
        log.propagate = False


def init_logger(prefix: str):
    """vllm.logger.init_logger, its loggers under `prefix`."""
    _engine_log(prefix)
    return lambda name: _Logger(logging.getLogger(f"{prefix}.{name}"), {})


def logger(target: Target, source: EngineSource) -> dict:
    return {"init_logger": init_logger("tileprobe.audit")}


def triton_utils(target: Target, source: EngineSource) -> dict:
    tl = _tl.load()
    return {"triton": _triton.load(), "tl": tl, "HAS_TRITON": True, "LOG2E": 1.4426950408889634,
            "LOGE2": 0.6931471805599453}


def target_platform(base: type, interface, target: Target, **attrs) -> type:
    """A subclass of vLLM's platform class `base` that answers as the target: get_device_capability (the target's
    capability, as `interface`'s DeviceCapability) and get_device_name (its SKU name); `attrs`: class attributes."""
    major, minor = (int(x) for x in target.cc.split("."))

    def get_device_capability(cls, device_id: int = 0):
        return interface.DeviceCapability(major, minor)

    def get_device_name(cls, device_id: int = 0) -> str:
        return target.device_name

    return type("TargetPlatform", (base,), {**attrs, "get_device_capability": classmethod(get_device_capability),
                                            "get_device_name": classmethod(get_device_name)})


def _num_compute_units(cls, device_id: int = 0) -> int:
    """CudaPlatform.num_compute_units (vllm/platforms/cuda.py), whose torch.cuda answers as the target."""
    return importlib.import_module("torch").cuda.get_device_properties(device_id).multi_processor_count


def platforms(target: Target, source: EngineSource) -> dict:
    interface = importlib.import_module("vllm.platforms.interface")
    platform = target_platform(interface.Platform, interface, target, _enum=interface.PlatformEnum.CUDA,
                               device_name="cuda", device_type="cuda", dispatch_key="CUDA",
                               num_compute_units=classmethod(_num_compute_units))
    return {"current_platform": platform()}


def kv_cache_interface(target: Target, source: EngineSource) -> dict:
    text = source.read_text("vllm/v1/kv_cache_interface.py")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "KVQuantMode")
    scope = {"IntEnum": enum.IntEnum}
    exec(compile(ast.Module([node], []), "vllm/v1/kv_cache_interface.py", "exec"), scope)  # noqa: S102
    return {"KVQuantMode": scope["KVQuantMode"]}


def import_utils(target: Target, source: EngineSource) -> dict:
    """resolve_obj_by_qualname (the one name vllm/v1/attention/backends/registry.py takes; the module itself needs
    the third-party `regex`)."""
    def resolve_obj_by_qualname(qualname: str):
        module, _, name = qualname.rpartition(".")
        return getattr(importlib.import_module(module), name)

    return {"resolve_obj_by_qualname": resolve_obj_by_qualname}


def backend_utils(target: Target, source: EngineSource) -> dict:
    """PAD_SLOT_ID, the one name lightning_attn.py takes from vllm/v1/attention/backends/utils.py (read from its
    text; the module imports vLLM's config tree)."""
    text = source.read_text("vllm/v1/attention/backends/utils.py")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "PAD_SLOT_ID" for t in n.targets))
    return {"PAD_SLOT_ID": ast.literal_eval(node.value)}


STAND_INS = {"vllm.v1.attention.backends.utils": backend_utils, "vllm.utils.import_utils": import_utils, "vllm.platforms": platforms, "vllm.triton_utils": triton_utils, "vllm.logger": logger,
             "vllm.v1.kv_cache_interface": kv_cache_interface}
