"""vLLM 0.33.0's MXFP4 MoE (gpt-oss): which backend the engine's own oracle selects on the target, as the `chooses`
hook of an audit entry (tileprobe.audit.entry.Elsewhere), run inside the entry's session under the stand-in device.

vLLM selects with `select_mxfp4_moe_backend` (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py): for the default
`moe_backend="auto"` it walks `_get_priority_backends_for_gpt_oss()` (the checkpoint declares no activation key:
`_filter_by_activation` keeps the BF16-activation backends) and returns the first backend one of whose kernel
classes (`backend_to_kernel_cls`) passes `is_supported_config`. On a capability-family-120 device the list moves
TRITON (the OAI triton_kernels matmul_ogs path) behind MARLIN and BATCHED_MARLIN (the engine's comment: "their 99KB
shared memory budget caps them at small tiles, so MARLIN prefills ~10% faster ... Keep TRITON as an opt-in").

What runs here is the engine's own text, exec'd without its modules' imports: Mxfp4MoeBackend,
_get_priority_backends_for_gpt_oss, _backend_activation_key, _filter_by_activation (oracle/mxfp4.py),
prioritize_humming / prefers_humming (quantization/utils/humming/priority.py), and, per candidate backend, the
branch of backend_to_kernel_cls that names its classes and each class's `_supports_current_device` and
`_supports_quant_scheme` (found on the class or a base class in the same file). Stood in: the QuantKey constants
(kMxfp4Static, kMxfp8Dynamic, ...: distinct sentinels, compared by identity as the engine compares them), and the
package probes has_flashinfer* / has_triton_kernels (True: vLLM's CUDA wheel depends on flashinfer-python and vendors
triton_kernels), and rocm_aiter_ops (every is_*_enabled() False on CUDA). Not run: the rest of is_supported_config (activation SWIGLUOAI, parallel config, batch invariance)
and the ROCm / XPU / CPU branches.

The launcher the entry names (triton_kernel_moe_forward, the TRITON backend's matmul_ogs path) is not captured:
vLLM imports the vendored package as the top-level `triton_kernels` (vllm/utils/import_utils.py
import_triton_kernels aliases vllm.third_party.triton_kernels), which tileprobe.audit.capture does not serve (it
serves the engine's own package names only). The entry is therefore not in tileprobe.audit.kernels' registry until
the audit runs `chooses` before the launcher; `choose_backend` is what that hook calls.
"""

from __future__ import annotations

import ast
import enum
import importlib
from dataclasses import dataclass

from tileprobe.audit import vllm_moe_stand_ins
from tileprobe.audit.entry import AuditKernel, Elsewhere, Point
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import AttentionConfig

ORACLE = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"
PRIORITY = "vllm/model_executor/layers/quantization/utils/humming/priority.py"
ORACLE_NAMES = ("Mxfp4MoeBackend", "_get_priority_backends_for_gpt_oss", "_backend_activation_key",
                "_filter_by_activation")
PROBES = ("has_flashinfer", "has_flashinfer_cutlass_fused_moe", "has_flashinfer_trtllm_fused_moe", "has_triton_kernels",
          "has_flashinfer_moe", "has_deep_gemm")


class _Key:
    """A QuantKey constant as a sentinel: equal only to itself."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class _Keys(dict):
    """Any k* QuantKey name resolves to one sentinel per name; has_* probes answer True."""

    def __missing__(self, name):
        if name.startswith("k") and name[1:2].isupper():
            self[name] = _Key(name)
            return self[name]
        if name in PROBES or name.startswith("has_flashinfer"):
            return lambda *a, **k: True
        if name == "rocm_aiter_ops":
            return _NotRocm()
        raise KeyError(name)


class _NotRocm:
    """vllm._aiter_ops.rocm_aiter_ops on a CUDA device: every is_*_enabled() is False (each tests is_rocm first)."""

    def __getattr__(self, name):
        return lambda *a, **k: False


@dataclass(frozen=True)
class Choice:
    backend: str  # Mxfp4MoeBackend member name
    classes: tuple[str, ...]  # the kernel classes backend_to_kernel_cls names for it
    order: tuple[str, ...]  # the candidate backends, in the engine's order on the target
    reorder_line: int | None  # oracle/mxfp4.py line of the family-120 test, when it moved TRITON
    reorder_test: str


def _scope(platform) -> _Keys:
    scope = _Keys({"Enum": enum.Enum, "current_platform": platform, "QuantKey": object, "TypeVar": lambda *a, **k: None,
                   "type": type, "list": list, "__builtins__": __builtins__})
    return scope


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _classes_for(tree: ast.Module, backend, scope: dict) -> list[tuple[str, str]]:
    """(module file, class name) of each class backend_to_kernel_cls returns for `backend`: the branch whose test
    holds for it (the engine's test text evaluated), its `from X import ...` and its `return [...]`."""
    node = _function(tree, "backend_to_kernel_cls").body[0]
    while isinstance(node, ast.If):
        if eval(compile(ast.Expression(node.test), ORACLE, "eval"), scope, {"backend": backend}):  # noqa: S307
            imp = next(s for s in node.body if isinstance(s, ast.ImportFrom))
            ret = next(s for s in node.body if isinstance(s, ast.Return))
            return [(imp.module.replace(".", "/") + ".py", e.id) for e in ret.value.elts]
        node = node.orelse[0] if node.orelse and isinstance(node.orelse[0], ast.If) else None
    return []


def _static(source: EngineSource, rel: str, cls: str, method: str, scope: dict):
    """`cls.method` of the wheel's file `rel` (looked up on its bases in the same file), exec'd as a function with
    the module-level helper functions it names; None when not found there."""
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
            fn = ast.FunctionDef(fn.name, fn.args, fn.body, [], fn.returns, type_params=[])
            # exec'd into the shared scope: one sentinel per QuantKey name across the oracle and every class
            exec(compile(ast.fix_missing_locations(ast.Module([*helpers, fn], [])), rel, "exec"), scope)  # noqa: S102
            return scope[method]
        todo += [b.id for b in c.bases if isinstance(b, ast.Name)]
    return None


def choose_backend(source: EngineSource) -> Choice:
    """The engine's MXFP4 backend for gpt-oss on the session's stand-in device (the module docstring)."""
    platform = importlib.import_module("vllm.platforms").current_platform
    scope = _scope(platform)
    vllm_moe_stand_ins.from_text(source, PRIORITY, ("_HUMMING_PREFERRED_CAPABILITIES", "prefers_humming",
                                                    "prioritize_humming", "_KernelT"), scope)
    tree = ast.parse(source.read_text(ORACLE))
    named = {x.id for x in ast.walk(_function(tree, "backend_to_kernel_cls")) if isinstance(x, ast.Name)}
    tuples = tuple(t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                   if isinstance(t, ast.Name) and t.id in named)  # the backend groups its tests name
    vllm_moe_stand_ins.from_text(source, ORACLE, ORACLE_NAMES + tuples, scope)
    backends = scope["_filter_by_activation"](scope["_get_priority_backends_for_gpt_oss"](), None)
    order = tuple(b.name for b in backends)
    fn = _function(tree, "_get_priority_backends_for_gpt_oss")
    moved = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and "TRITON" in ast.unparse(n))
    test = ast.unparse(moved.test)
    took = eval(compile(ast.Expression(moved.test), ORACLE, "eval"), scope)  # noqa: S307
    mxfp4 = scope["kMxfp4Static"]
    for b in backends:
        act = scope["_backend_activation_key"](b)
        classes = _classes_for(tree, b, scope)
        for rel, cls in classes:
            device = _static(source, rel, cls, "_supports_current_device", scope)
            quant = _static(source, rel, cls, "_supports_quant_scheme", scope)
            if device is not None and quant is not None and device() and quant(mxfp4, act):
                return Choice(b.name, tuple(c for _, c in classes), order, moved.lineno if took else None, test)
    return Choice("NONE", (), order, moved.lineno if took else None, test)


def chooses(session, model: AttentionConfig, point: Point) -> Elsewhere | None:
    """None when the engine picks TRITON (the launcher's path), else what it runs and the engine line that decided:
    the family-120 move when it ran and put the chosen backend ahead of TRITON (it was listed after TRITON), else the
    oracle's walk over the candidates."""
    c = choose_backend(session.source)
    if c.backend == "TRITON":
        return None
    tree = ast.parse(session.source.read_text(ORACLE))
    listed = [ast.unparse(e).rsplit(".", 1)[-1] for n in ast.walk(_function(tree, "_get_priority_backends_for_gpt_oss"))
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.List) for e in n.value.elts]
    if c.reorder_line is not None and c.backend in listed and listed.index(c.backend) > listed.index("TRITON"):
        line, why = f"{ORACLE}:{c.reorder_line}", f"if {c.reorder_test}: TRITON moved after BATCHED_MARLIN"
    else:
        walk = _function(tree, "select_mxfp4_moe_backend")
        loop = next(n for n in ast.walk(walk) if isinstance(n, ast.For) and ast.unparse(n.iter) == "AVAILABLE_BACKENDS")
        line, why = f"{ORACLE}:{loop.lineno}", f"the first of {', '.join(c.order)} whose kernel class is supported"
    return Elsewhere(f"{c.backend} ({', '.join(c.classes)})", line, why)


def serves(model: AttentionConfig) -> str | None:
    if model.moe is None:
        return "no routed experts (config.json has no experts field)"
    if model.quant is None or model.quant.method != "mxfp4":
        return "not an mxfp4 checkpoint (quantization_config.quant_method)"
    return None


def _not_captured(model: AttentionConfig, pt: Point):
    raise NotImplementedError("the matmul_ogs path (triton_kernels) is not captured (module docstring)")


ENTRY = AuditKernel("vllm-moe-mxfp4", "vllm", "0.33.0",
                    "vllm.model_executor.layers.fused_moe.experts.gpt_oss_triton_kernels_moe",
                    "triton_kernel_moe_forward", ("vllm.platforms.interface", "vllm.v1.attention.backends.registry"),
                    vllm_moe_stand_ins.STAND_INS, _not_captured, serves,
                    "bf16 activations, mxfp4 weights (W4A16)", windowed=False, chooses=chooses)
ENTRIES = (ENTRY,)
