"""vLLM 0.33.0's MXFP4 MoE (gpt-oss): which backend the engine's own oracle selects on the target, as the `chooses`
hook of an audit entry (tileprobe.audit.entry.Elsewhere), run inside the entry's session under the stand-in device.

vLLM selects with `select_mxfp4_moe_backend` (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py): for the default
`moe_backend="auto"` it walks `_get_priority_backends_for_gpt_oss()` (the checkpoint declares no activation key:
`_filter_by_activation` keeps the BF16-activation backends) and returns the first backend one of whose kernel
classes passes `is_supported_config`. On a capability-family-120 device the list moves TRITON (the OAI
triton_kernels matmul_ogs path) behind MARLIN and BATCHED_MARLIN (the engine's comment: "their 99KB shared memory
budget caps them at small tiles, so MARLIN prefills ~10% faster ... Keep TRITON as an opt-in"). The engine's text
that runs here (Mxfp4MoeBackend, _get_priority_backends_for_gpt_oss, _backend_activation_key, _filter_by_activation,
and the walk's support checks) and what is stood in: tileprobe.audit.vllm_moe_oracle.

The launcher the entry names (triton_kernel_moe_forward, the TRITON backend's matmul_ogs path, which the oracle picks
on sm_90) is not captured: vLLM imports the vendored package as the top-level `triton_kernels`
(vllm/utils/import_utils.py import_triton_kernels aliases vllm.third_party.triton_kernels), which
tileprobe.audit.capture does not serve (it serves the engine's own package names only); the vendored package itself
imports under Triton 3.8.0. The entry is not in tileprobe.audit.kernels' registry until the audit runs `chooses`
before the launcher and the launcher is captured.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tileprobe.audit import vllm_moe_oracle as oracle
from tileprobe.audit import vllm_moe_stand_ins
from tileprobe.audit.entry import AuditKernel, Elsewhere, Point
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import AttentionConfig

ORACLE = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"
ORACLE_NAMES = ("Mxfp4MoeBackend", "_get_priority_backends_for_gpt_oss", "_backend_activation_key",
                "_filter_by_activation")


@dataclass(frozen=True)
class Mxfp4Choice:
    choice: oracle.Choice
    reorder_line: int | None  # oracle/mxfp4.py line of the family-120 test, when it held (TRITON moved)
    reorder_test: str


def choose_backend(source: EngineSource) -> Mxfp4Choice:
    """The engine's MXFP4 backend for gpt-oss on the session's stand-in device (the module docstring)."""
    s = oracle.scope(source)
    tree = oracle.load(source, ORACLE, ORACLE_NAMES, s)
    backends = s["_filter_by_activation"](s["_get_priority_backends_for_gpt_oss"](), None)
    moved = next(n for n in ast.walk(oracle.function(tree, "_get_priority_backends_for_gpt_oss"))
                 if isinstance(n, ast.If) and "TRITON" in ast.unparse(n))
    took = eval(compile(ast.Expression(moved.test), ORACLE, "eval"), s)  # noqa: S307
    c = oracle.walk(source, ORACLE, tree, "select_mxfp4_moe_backend", backends, s, s["kMxfp4Static"],
                    s["_backend_activation_key"])
    return Mxfp4Choice(c, moved.lineno if took else None, ast.unparse(moved.test))


def chooses(session, model: AttentionConfig, point: Point) -> Elsewhere | None:
    """None when the engine picks TRITON (the launcher's path), else what it runs and the engine line that decided:
    the family-120 move when it held and put the chosen backend ahead of TRITON (it is listed after TRITON), else the
    oracle's walk over the candidates."""
    m = choose_backend(session.source)
    c = m.choice
    if c.backend == "TRITON":
        return None
    fn = oracle.function(ast.parse(session.source.read_text(ORACLE)), "_get_priority_backends_for_gpt_oss")
    listed = [ast.unparse(e).rsplit(".", 1)[-1] for n in ast.walk(fn)
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.List) for e in n.value.elts]
    if m.reorder_line is not None and c.backend in listed and listed.index(c.backend) > listed.index("TRITON"):
        return Elsewhere(f"{c.backend} ({', '.join(c.classes)})", f"{ORACLE}:{m.reorder_line}",
                         f"if {m.reorder_test}: TRITON moved after BATCHED_MARLIN")
    return Elsewhere(f"{c.backend} ({', '.join(c.classes)})", f"{ORACLE}:{c.walk_line}",
                     f"the first of {', '.join(c.order)} whose kernel class is supported")


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
