"""SGLang's own attention backend selection, run from its wheel's text (tileprobe.audit.engine_text): the model's
override provider, else `get_default_attn_backend`; a forced name: ATTENTION_BACKEND_CHOICES and its creator in
attention_registry.py (tileprobe.audit.backends says what is stood in)."""

from __future__ import annotations

import ast
import importlib.util
import types
import warnings

from tileprobe.audit.engine_text import EngineTextError, TextModules
from tileprobe.audit.selection import (ARCHITECTURES, DTYPES, Selection, device, is_triton, naming_line,
                                       quiet, tracing)
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

torch = LazyModule("torch")

# ---------------------------------------------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------------------------------------------

FIELDS_DIR = "sglang/srt/arg_groups/fields"
PROVIDER_FILES = ("sglang/srt/arg_groups/model_overrides", "sglang/srt/arg_groups/overrides.py")
BASE = "sglang.srt.arg_groups.model_override_base"
REGISTRY = "sglang.srt.layers.attention.attention_registry"
CONSTRUCTED = ("sglang.srt.layers.attention.", "sglang.srt.hardware_backend.")  # backend classes a creator builds


class _Built(Exception):
    """A creator in attention_registry.py reached the backend class it builds: its checks passed."""


class _NoField(EngineTextError, AttributeError):
    """A ServerArgs attribute the resolution reads that is neither a field nor stood in (getattr with a default
    still answers the default)."""


class _View:
    """ServerArgs as the resolution reads it: the values set here, else each field's default read from
    sglang/srt/arg_groups/fields/*.py (evaluated in that module, from the wheel)."""

    def __init__(self, mods: TextModules, **values) -> None:
        self.__dict__["_values"], self.__dict__["_mods"] = dict(values), mods
        defaults = {}
        for rel in mods.source.files_under(FIELDS_DIR):
            if rel.endswith(".py"):
                for cls in (n for n in mods.module(rel[:-3].replace("/", "."))._tree.body
                            if isinstance(n, ast.ClassDef)):
                    for st in cls.body:
                        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value:
                            defaults.setdefault(st.target.id, (rel, st.value))
        self.__dict__["_defaults"] = defaults

    def __getattr__(self, name):
        if name in self._values:
            return self._values[name]
        if name not in self._defaults:
            raise _NoField(f"ServerArgs has no field {name!r} in sglang/srt/arg_groups/fields, nor a stand-in")
        rel, expr = self._defaults[name]
        scope = self._mods.module(rel[:-3].replace("/", "."))._scope
        value = eval(compile(ast.Expression(expr), rel, "eval"), scope)  # noqa: S307  (the field's default)
        self._values[name] = value
        return value

    def __setattr__(self, name, value):
        self._values[name] = value


def _constructed(name: str) -> dict:
    class Module(types.ModuleType):
        def __getattr__(self, attr):
            def build(*a, **k):
                raise _Built(attr)
            return type(attr, (), {"__new__": build})
    return Module(name)


class _Struct:
    """msgspec.Struct as far as SGLang's platform capabilities use it: keyword fields with class defaults."""

    def __init_subclass__(cls, **options) -> None:
        super().__init_subclass__()

    def __init__(self, *args, **kwargs) -> None:
        names = [n for c in reversed(type(self).__mro__) for n in getattr(c, "__annotations__", {})]
        for n, v in zip(dict.fromkeys(names), args):
            kwargs.setdefault(n, v)
        for n, v in kwargs.items():
            object.__setattr__(self, n, v)


def _msgspec() -> types.ModuleType:
    mod = types.ModuleType("msgspec")
    mod.Struct, mod.field = _Struct, lambda default=None, default_factory=None, name=None: (
        default_factory() if default_factory else default)
    return mod


def _sglang_modules(source: EngineSource, model: AttentionConfig, arch: str | None):
    mods = TextModules(source, third_party={"msgspec": _msgspec()})
    view = _View(mods, _quantization_explicitly_unset=False)  # serving_hook.py's value without --quantization unquant
    attention_arch = lambda: mods.module("sglang.srt.configs.model_config").AttentionArch  # noqa: E731
    hf = types.SimpleNamespace(architectures=[arch] if arch else [], model_type=model.model_type,
                               index_topk=model.index_topk)
    if model.quant:
        hf.quantization_config = {"quant_method": model.quant.method, **(
            {"weight_block_size": list(model.quant.weight_block_size)} if model.quant.weight_block_size else {})}
    model_config = types.SimpleNamespace(hf_config=hf, has_attention_sinks=model.sinks, is_encoder_decoder=False,
                                         has_asymmetric_kv=False)
    mods.pins[BASE] = lambda m: {"resolving_view": lambda sa: sa, "resolved_view": lambda sa: sa,
                                 "model_config_of": lambda sa: model_config}
    mods.pins["sglang.srt.platforms"] = {"load_plugins_by_group": lambda group: {}}  # no OOT platform plugin
    mods.pins[REGISTRY] = {"get_spec": lambda: types.SimpleNamespace(speculative_algorithm=None),
                           "get_parallel": lambda: types.SimpleNamespace(dcp_enabled=False),
                           "resolved_view": lambda sa: sa}
    hook = mods.hook

    def serve(name, globals=None, locals=None, fromlist=(), level=0):
        full = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__") or "") \
            if level else name
        if full.startswith(CONSTRUCTED) and full != REGISTRY:
            return mods.modules.setdefault(full, _constructed(full))
        return hook(name, globals, locals, fromlist, level)
    mods.hook = mods.builtins["__import__"] = serve
    mods.view, mods.model_config, mods.attention_arch = view, model_config, attention_arch
    return mods


def _providers(mods: TextModules, arch: str) -> list[tuple[str, str]]:
    """(module, function) of each model-override provider SGLang registers for `arch`, in file order: decorated
    with _register_for / register_model_override naming it, or register_model_override_predicate whose predicate
    (evaluated from the wheel) accepts it."""
    files = [f for f in mods.source.files_under(PROVIDER_FILES[0]) if f.endswith(".py")] + [PROVIDER_FILES[1]]
    out = []
    for rel in files:
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        mod = mods.module(module)
        for fn in (n for n in mod._tree.body if isinstance(n, ast.FunctionDef)):
            for dec in (d for d in fn.decorator_list if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)):
                if dec.func.id in ("_register_for", "register_model_override"):
                    hit = any(isinstance(a, ast.Constant) and a.value == arch for a in dec.args)
                elif dec.func.id == "register_model_override_predicate":
                    hit = bool(eval(compile(ast.Expression(dec.args[0]), rel, "eval"), mod._scope)(arch))  # noqa: S307
                else:
                    continue
                if hit:
                    out.append((module, fn.name))
    return out


def select(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None) -> Selection:
    arch = model.architecture or ARCHITECTURES.get(model.model_type or "")
    mods = _sglang_modules(source, model, arch)
    ran: dict = {}
    with device(target, mods), quiet("sglang"):
        mla = model.mla
        mods.model_config.attention_arch = mods.attention_arch().MLA if mla else mods.attention_arch().MHA
        choices = tuple(mods.module("sglang.srt.arg_groups.choices").ATTENTION_BACKEND_CHOICES)
        registry = mods.module(REGISTRY)
        registry.touch()
        creators = registry.ATTENTION_BACKENDS
        runner = types.SimpleNamespace(use_mla_backend=mla, model_config=mods.model_config, server_args=mods.view,
                                       kv_cache_dtype=getattr(torch, DTYPES[model.dtype]), init_new_workspace=False)

        def accepts(name: str) -> str | None:
            try:
                with warnings.catch_warnings():  # a deprecated alias (nsa, compressed) warns as it is accepted
                    warnings.simplefilter("ignore", DeprecationWarning)
                    creators[name](runner)
            except _Built:
                return None
            except (AssertionError, ValueError, NotImplementedError) as exc:
                return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return None
        valid = tuple(c for c in choices if c in creators and accepts(c) is None)
        if forced is not None:
            if forced not in choices:
                raise UsageError(f"--attention-backend {forced}: SGLang {source.version} has no such backend; "
                                 f"valid for {model.name} on {target.name}: {', '.join(valid)}")
            why = accepts(forced) if forced in creators else "no creator in attention_registry.py"
            if why is not None:
                raise UsageError(f"--attention-backend {forced}: SGLang {source.version} refuses it for "
                                 f"{model.name} on {target.name} ({why}); valid: {', '.join(valid)}")
            fn = next(n for n in ast.walk(registry._tree) if isinstance(n, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and d.args and getattr(d.args[0], "value", None) == forced
                for d in n.decorator_list))
            return Selection("sglang", forced, is_triton("sglang", forced),
                             f"{registry._rel}:{fn.lineno}", True, valid, notes=mods.notes())
        name = where = None
        files = {mods.module(m)._rel for m, _ in _providers(mods, arch)} if arch else set()
        with tracing(files | {mods.module(BASE)._rel}, ran):
            for module, fn in _providers(mods, arch) if arch else ():
                got = getattr(mods.module(module), fn)(mods.view, mods.model_config.hf_config)
                if got.get("attention_backend"):
                    name, where = got["attention_backend"], (module, fn)
            if name is None:
                base = mods.module(BASE)
                name = base.get_default_attn_backend(mods.view, base.use_mla_backend(mods.view), mods.model_config)
                where = (BASE, "get_default_attn_backend")
    line = naming_line(mods, where[0], where[1], ran.get(where[1], set()), name)
    return Selection("sglang", name, is_triton("sglang", name), line, False, valid, notes=mods.notes())
