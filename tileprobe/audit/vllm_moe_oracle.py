"""vLLM's MoE oracles (as the pin table's release writes them, tileprobe.engines.pins; the manifests guard the files)
(vllm/model_executor/layers/fused_moe/oracle/*.py), run from the wheel's text under an audit session's stand-in device:
which backend `select_*_moe_backend` returns for the default `moe_backend="auto"`.

Each oracle has the same shape: a priority function (`_get_priority_backends...`) builds the candidate backends in
order for the device, `backend_to_kernel_cls` names each backend's kernel classes, and the first backend one of
whose classes passes `is_supported_config(cls, moe_config, weight_key, activation_key, activation_format)` is the
one vLLM runs. `walk` runs the engine's own priority function and, per candidate, the `backend_to_kernel_cls` branch
whose test holds (the engine's test text evaluated) and each class's `_supports_current_device` and
`_supports_quant_scheme(weight_key, activation_key)` (on the class or a base class in the same file), exec'd from the
wheel's text with the module-level helpers they name.

The QuantKey constants are vLLM's own (QuantKey, ScaleDesc, GroupShape and the k* constants exec'd from
quantization/utils/quant_utils.py; the int4/int8 ones, which need vLLM's ScalarType, are sentinels). Stood in: the
package probes has_flashinfer* / has_triton_kernels / has_deep_gemm
(True: vLLM's CUDA wheel depends on flashinfer-python and vendors triton_kernels), `rocm_aiter_ops` (every
is_*_enabled() False: each tests is_rocm first), and the FusedMoEConfig the priority functions read (dp_size 1,
ep_size 1, no DeepEP, the layer's activation). Not run: the rest of is_supported_config (activation, parallel
config, batch invariance), environment overrides (VLLM_USE_DEEP_GEMM, VLLM_ROCM_USE_AITER, a --moe-backend), and the
fp8 oracle's model-type DeepGEMM opt-out. A check that needs a name none of these supply raises LookupError naming it.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tileprobe.audit import engine_code
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.lazy import LazyModule

torch = LazyModule("torch")

ORACLES = "vllm/model_executor/layers/fused_moe/oracle"
PRIORITY = "vllm/model_executor/layers/quantization/utils/humming/priority.py"


class Key:
    """A QuantKey constant as a sentinel: equal only to itself."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class _NotRocm:
    """vllm._aiter_ops.rocm_aiter_ops on a CUDA device."""

    def __getattr__(self, name):
        return lambda *a, **k: False


class Scope(dict):
    """Globals for the engine's text: k* QuantKey names resolve to one sentinel each, has_* probes answer True."""

    def __missing__(self, name):
        if name.startswith("k") and name[1:2].isupper():
            self[name] = Key(name)
            return self[name]
        if name.startswith("has_"):
            return lambda *a, **k: True
        if name == "rocm_aiter_ops":
            return _NotRocm()
        raise KeyError(name)


@dataclass(frozen=True)
class Choice:
    backend: str  # the oracle enum's member name
    classes: tuple[str, ...]  # the kernel classes backend_to_kernel_cls names for it
    order: tuple[str, ...]  # the candidates, in the engine's order on the target
    oracle: str  # the oracle file (inside the wheel)
    walk_line: int  # the line of the oracle's `for backend in AVAILABLE_BACKENDS:` walk
    supported_at: str = ""  # file:line of the chosen class's _supports_current_device (the device test it passed)


def scope(source: EngineSource) -> Scope:
    """The session's platform, the engine's MoEActivation, and Humming's priority helpers (from the wheel's text)."""
    platform = importlib.import_module("vllm.platforms").current_platform
    activation = importlib.import_module("vllm.model_executor.layers.fused_moe.activation")
    s = Scope({"Enum": enum.Enum, "current_platform": platform, "MoEActivation": activation.MoEActivation,
               "TypeVar": lambda *a, **k: None, "torch": torch.load(), "dataclass": dataclasses.dataclass,
               "replace": dataclasses.replace, "NamedTuple": typing.NamedTuple, "ClassVar": typing.ClassVar,
               "Literal": typing.Literal, "MappingProxyType": types.MappingProxyType, "Mapping": Mapping,
               "Callable": Callable, "TYPE_CHECKING": False, "__builtins__": __builtins__,
               "__name__": __name__})  # dataclass looks its module up in sys.modules
    quant_keys(source, s)
    engine_code.top_level(source, PRIORITY, ("_HUMMING_PREFERRED_CAPABILITIES", "prefers_humming",
                                             "prioritize_humming", "_KernelT"), s)
    return s


QUANT_UTILS = "vllm/model_executor/layers/quantization/utils/quant_utils.py"
_KEY_TYPES = ("_GroupShape", "GroupShape", "ScaleDesc", "QuantKey")


def quant_keys(source: EngineSource, s: Scope) -> None:
    """vLLM's QuantKey / ScaleDesc / GroupShape classes and its k* constants, exec'd from quant_utils.py's text into
    `s` (FP8_DTYPE from the session's platform); a constant whose definition needs a name not here (the int4/int8
    ScalarTypes) stays a sentinel."""
    for node in ast.parse(source.read_text(QUANT_UTILS)).body:
        names = [node.name] if isinstance(node, ast.ClassDef) else \
            [t.id if isinstance(t, ast.Name) else getattr(t.value, "id", "") for t in node.targets
             if isinstance(t, (ast.Name, ast.Attribute))] if isinstance(node, ast.Assign) else []  # GroupShape.PER_*
        if not any(n in _KEY_TYPES or n[:1] == "k" and n[1:2].isupper() or n.endswith("_DTYPE") for n in names):
            continue
        try:
            exec(compile(ast.Module([node], []), QUANT_UTILS, "exec"), s)  # noqa: S102
        except (NameError, AttributeError, KeyError, TypeError):
            continue


def moe_config(activation) -> types.SimpleNamespace:
    """The FusedMoEConfig fields the priority functions read: one data-parallel rank, no expert parallelism."""
    parallel = types.SimpleNamespace(dp_size=1, ep_size=1, use_deepep_v2_kernels=False,
                                     use_batched_activation_format=False)
    return types.SimpleNamespace(moe_parallel_config=parallel, activation=activation, is_lora_enabled=False)


def function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def load(source: EngineSource, oracle: str, names: tuple[str, ...], s: Scope) -> ast.Module:
    """`names` of the oracle file, with the module-level backend groups backend_to_kernel_cls's tests name."""
    tree = ast.parse(source.read_text(oracle))
    named = {x.id for x in ast.walk(function(tree, "backend_to_kernel_cls")) if isinstance(x, ast.Name)}
    groups = tuple(t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                   if isinstance(t, ast.Name) and t.id in named)
    engine_code.top_level(source, oracle, names + groups, s)
    return tree


def _classes_for(tree: ast.Module, oracle: str, backend, s: Scope) -> list[tuple[str, str]]:
    """(module file, class name) of each class backend_to_kernel_cls returns for `backend`."""
    node = function(tree, "backend_to_kernel_cls").body[0]
    while isinstance(node, ast.If):
        if eval(compile(ast.Expression(node.test), oracle, "eval"), s, {"backend": backend}):  # noqa: S307
            imp = next(x for x in node.body if isinstance(x, ast.ImportFrom))
            ret = next(x for x in node.body if isinstance(x, ast.Return))
            return [(imp.module.replace(".", "/") + ".py", e.id) for e in ret.value.elts]
        node = node.orelse[0] if node.orelse and isinstance(node.orelse[0], ast.If) else None
    return []


def _static(source: EngineSource, rel: str, cls: str, method: str, s: Scope):
    """`cls.method` of the wheel's file `rel` (or of a base class there), exec'd into `s` as a function with the
    module-level helper functions it names; None when not found in that file."""
    tree = ast.parse(source.read_text(rel))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    todo = [cls]
    while todo:
        c = classes.get(todo.pop(0))
        if c is None:
            continue
        fn = next((m for m in c.body if isinstance(m, ast.FunctionDef) and m.name == method), None)
        if fn is not None:
            helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                       and n.name in {x.id for x in ast.walk(fn) if isinstance(x, ast.Name)}]
            line = fn.lineno
            fn = ast.FunctionDef(fn.name, fn.args, fn.body, [], fn.returns, type_params=[])
            exec(compile(ast.fix_missing_locations(ast.Module([*helpers, fn], [])), rel, "exec"), s)  # noqa: S102
            return s[method], line
        todo += [b.id for b in c.bases if isinstance(b, ast.Name)]
    return None, None


def supported(source: EngineSource, rel: str, cls: str, weight_key, activation_key, s: Scope) -> str | None:
    """file:line of the class's device test when the class supports the device and the quant scheme, else None."""
    device, line = _static(source, rel, cls, "_supports_current_device", s)
    quant, _ = _static(source, rel, cls, "_supports_quant_scheme", s)
    if device is None or quant is None:
        return None
    try:
        return f"{rel}:{line}" if device() and quant(weight_key, activation_key) else None
    except NameError as exc:
        raise LookupError(f"{rel}::{cls}: its support check needs {exc.name}, which tileprobe does not stand in") \
            from None


def walk(source: EngineSource, oracle: str, tree: ast.Module, select: str, backends: list, s: Scope,
         weight_key, activation_key) -> Choice:
    """The first of `backends` (the engine's order) one of whose classes is supported; `activation_key` is a key or
    a function of the backend (the mxfp4 oracle's _backend_activation_key)."""
    loop = next(n for n in ast.walk(function(tree, select)) if isinstance(n, ast.For)
                and ast.unparse(n.iter) == "AVAILABLE_BACKENDS")
    order = tuple(b.name for b in backends)
    for b in backends:
        act = activation_key(b) if callable(activation_key) else activation_key
        classes = _classes_for(tree, oracle, b, s)
        at = next((a for rel, cls in classes if (a := supported(source, rel, cls, weight_key, act, s))), None)
        if at:
            return Choice(b.name, tuple(c for _, c in classes), order, oracle, loop.lineno, at)
    return Choice("NONE", (), order, oracle, loop.lineno)
