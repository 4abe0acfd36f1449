"""vLLM's MXFP4 MoE (gpt-oss) through the TRITON backend: triton_kernels' matmul_ogs, as the engine runs it,
and which backend the engine's own oracle selects on the target (the entry's `chooses` hook).

Selection: vLLM selects with `select_mxfp4_moe_backend` (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py): for
the default `moe_backend="auto"` it walks `_get_priority_backends_for_gpt_oss()` (the checkpoint declares no
activation key: `_filter_by_activation` keeps the BF16-activation backends) and returns the first backend one of whose
kernel classes passes `is_supported_config`. On a capability-family-120 device the list moves TRITON behind MARLIN and
BATCHED_MARLIN (the engine's comment: "their 99KB shared memory budget caps them at small tiles, so MARLIN prefills
~10% faster ... Keep TRITON as an opt-in"). The opt-in is vLLM's `--moe-backend triton` (KernelConfig.moe_backend;
vLLM has no environment variable for it). tileprobe's CLI has no such flag; the entry reads the same value from
`tileprobe audit --moe-backend NAME` (vLLM's own --moe-backend, e.g. `triton`) and runs the engine's explicit branch: `_get_requested_backends` ->
`map_mxfp4_backend` (the engine's name -> backend table), then the same kernel-class support checks the walk runs
(`_return_or_raise`'s is_supported_config, device and quant scheme parts). What runs and what is stood in:
tileprobe.audit.vllm_moe_oracle.

Launcher: `triton_kernel_moe_forward` (vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py),
what the TRITON backend's class OAITritonMxfp4ExpertsMonolithic.apply calls: with the vendored triton_kernels (API
generation 3.5.1, the engine's get_triton_kernels_version) and no expert map it runs triton_kernels.routing.routing
(topk + sort_tokens: the routing launches) and triton_kernel_fused_experts, which pins block_m on SM12x
(`_constrain_sm12x_block_m`) and calls matmul_ogs twice (gate_up with the fused swiglu, then down with the scatter;
each a `_matmul_ogs` or persistent `_p_matmul_ogs` launch and a `_reduce_grouped`). Every launch parameter (block
sizes, num_warps, num_stages, split-K, persistence, epilogue subtile) is computed by triton_kernels' own opt_flags
from the stand-in device: torch.cuda.get_device_properties (multi_processor_count, shared_memory_per_block_optin),
torch.cuda.get_device_capability (matmul_ogs' TMA test), and Triton's active driver target (opt_flags' backend,
target_info.cuda_capability_geq, the weight layouts), all the target's (tileprobe.audit.capture). The module and the
vendored package are served from the wheel (tileprobe.audit.vllm_ogs_stand_ins says what is stood in).

Arguments, as vLLM builds them for gpt-oss (models/gpt_oss.py: renormalize=True, has_bias=True, swigluoai; the
router, GateLinear, returns the activations' dtype):
- sizes: the engine's `mxfp4_round_up_hidden_size_and_intermediate_size(TRITON, hidden, inter / tp)` (oracle text:
  the intermediate size per rank rounded up to 64 on CUDA; tp splits the intermediate size, experts are not split);
- weights as quantization/mxfp4.py `Mxfp4MoEMethod.create_weights` makes them (uint8 (E, 2n, hidden/2) and
  (E, hidden, n/2), uint8 block scales over 32, bf16 biases), then the TRITON branch of the oracle's
  `convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`: biases to fp32, `_swizzle_mxfp4` (quantization/utils/
  mxfp4_utils.py, cut from the wheel's text and run: the device's value / scale layouts and its opt_flags
  constraints: split_k 1 on sm_90, is_persistent and epilogue_subtile 1 on families 100 / 120) and
  PrecisionConfig(weight_scale, FlexCtx(rhs_data)) from triton_kernels.matmul_ogs;
- quant_config: the four fields triton_kernel_fused_experts reads (w1_bias, w2_bias, w1_precision, w2_precision),
  as config.py mxfp4_w4a16_moe_quant_config's FusedMoEQuantConfig returns them;
- hidden_states (M, hidden) bf16 and gating_output (M, E) bf16, M = batch (decode entry) or batch * seq_len (prefill
  entry); topk, global_num_experts E, no expert map.
Every tensor is a meta tensor: no value is read on this path (the routing kernels fill buffers that are only
sliced, indexed by Python ints and passed on).
"""


from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

import importlib
import types
import typing

from tileprobe.audit.entries import LISTED
from tileprobe.audit import capture
from tileprobe.audit import vllm_moe_oracle as oracle
from tileprobe.audit import engine_code, ogs_rule, vllm_stand_ins
from tileprobe.audit import vllm_ogs_stand_ins as stand_ins
from tileprobe.audit.entry import AuditKernel, Elsewhere, Point, empty, torch
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig, attention_model

ORACLE = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"
FORCED_NAMES = ("map_mxfp4_backend", "_get_requested_backends")
FLAG = "moe_backend"  # session.flags key: vLLM's --moe-backend (KernelConfig.moe_backend), as `tileprobe audit` takes it
ROUNDING_GROUPS = ("FLASHINFER_MOE_EP_MXFP4_BACKENDS", "B12X_BACKENDS", "TRTLLM_BACKENDS")
MXFP4_UTILS = "vllm/model_executor/layers/quantization/utils/mxfp4_utils.py"
SWIZZLE_NAMES = ("_swizzle_mxfp4", "should_use_gfx1250_mx_scale_swizzle", "should_use_cdna4_mx_scale_swizzle")
MXFP4_BLOCK = 32  # create_weights' mxfp4_block: one uint8 scale per 32 values
ORACLE_NAMES = ("Mxfp4MoeBackend", "_get_priority_backends_for_gpt_oss", "_backend_activation_key",
                "_filter_by_activation")


@dataclass(frozen=True)
class Mxfp4Choice:
    choice: oracle.Choice
    reorder_line: int | None  # oracle/mxfp4.py line of the family-120 test, when it held (TRITON moved)
    reorder_test: str
    forced: str | None = None  # the --moe-backend value it was forced with


def forced_backend(session) -> str | None:
    """vLLM's --moe-backend value for this audit (`tileprobe audit --moe-backend`; None or "auto": the default)."""
    value = (session.flags.get(FLAG) or "").strip()
    return value if value and value != "auto" else None


def choose_backend(source: EngineSource, moe_backend: str | None = None) -> Mxfp4Choice:
    """The engine's MXFP4 backend for gpt-oss on the session's stand-in device (the module docstring); `moe_backend`:
    vLLM's --moe-backend value (select_mxfp4_moe_backend's `runner_backend != "auto"` branch)."""
    s = oracle.scope(source)
    s["MoEBackend"] = str  # the Literal of backend names (vllm/config/kernel.py), an annotation here
    tree = oracle.load(source, ORACLE, ORACLE_NAMES + FORCED_NAMES, s)
    moved = next(n for n in ast.walk(oracle.function(tree, "_get_priority_backends_for_gpt_oss"))
                 if isinstance(n, ast.If) and "TRITON" in ast.unparse(n))
    if moe_backend is not None:
        try:
            backends = s["_get_requested_backends"](moe_backend, None)
        except ValueError as exc:
            raise UsageError(f"--moe-backend {moe_backend}: {source.label()} refuses it: {exc}") from None
        branch = next(n for n in ast.walk(oracle.function(tree, "select_mxfp4_moe_backend"))
                      if isinstance(n, ast.If) and ast.unparse(n.test) == "runner_backend != 'auto'")
        c = oracle.walk(source, ORACLE, tree, "select_mxfp4_moe_backend", backends, s, s["kMxfp4Static"],
                        s["_backend_activation_key"])
        if c.backend == "NONE":
            raise UsageError(f"--moe-backend {moe_backend}: none of {', '.join(c.order)} is supported on the target "
                             f"({ORACLE}:{branch.lineno} raises)")
        return Mxfp4Choice(dataclasses.replace(c, walk_line=branch.lineno), None, ast.unparse(moved.test),
                           moe_backend)
    backends = s["_filter_by_activation"](s["_get_priority_backends_for_gpt_oss"](), None)
    took = eval(compile(ast.Expression(moved.test), ORACLE, "eval"), s)  # noqa: S307
    c = oracle.walk(source, ORACLE, tree, "select_mxfp4_moe_backend", backends, s, s["kMxfp4Static"],
                    s["_backend_activation_key"])
    return Mxfp4Choice(c, moved.lineno if took else None, ast.unparse(moved.test))


def chooses(session, model: AttentionConfig, point: Point) -> Elsewhere | None:
    """None when the engine picks TRITON (the launcher's path), else what it runs and the engine line that decided:
    the family-120 move when it held and put the chosen backend ahead of TRITON (it is listed after TRITON), else the
    oracle's walk over the candidates; with --moe-backend given, the engine's explicit branch."""
    m = choose_backend(session.source, forced_backend(session))
    c = m.choice
    if c.backend == "TRITON":
        return None
    if m.forced:
        return Elsewhere(f"{c.backend} ({', '.join(c.classes)})", f"{ORACLE}:{c.walk_line}",
                         f"moe_backend={m.forced!r} (--moe-backend): the first of {', '.join(c.order)} supported")
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


def sizes(source: EngineSource, model: AttentionConfig, tp: int) -> tuple[int, int]:
    """(hidden, intermediate per rank) as the engine rounds them for the TRITON backend."""
    if model.moe.inter % tp:
        raise UsageError(f"--tp {tp}: {model.name}'s expert intermediate size {model.moe.inter} does not split over "
                         f"{tp} ranks")
    s = oracle.scope(source)
    s["round_up"] = importlib.import_module("vllm.utils.math_utils").round_up
    oracle.load(source, ORACLE, ("Mxfp4MoeBackend", "mxfp4_round_up_hidden_size_and_intermediate_size"), s)
    engine_code.top_level(source, ORACLE, ROUNDING_GROUPS, s)
    return s["mxfp4_round_up_hidden_size_and_intermediate_size"](s["Mxfp4MoeBackend"].TRITON, model.moe.hidden,
                                                                 model.moe.inter // tp)


def swizzle(source: EngineSource):
    """mxfp4_utils.py's `_swizzle_mxfp4`, cut from the wheel's text, with the names it reads (the session's)."""
    utils = importlib.import_module("vllm.utils.import_utils")
    s = {"torch": torch.load(), "current_platform": importlib.import_module("vllm.platforms").current_platform,
         "has_triton_kernels": utils.has_triton_kernels, "get_triton_kernels_version":
             utils.get_triton_kernels_version, "Any": typing.Any,
         "is_torch_equal_or_newer": importlib.import_module("vllm.utils.torch_utils").is_torch_equal_or_newer,
         "logger": vllm_stand_ins.logger(None, source)["init_logger"](MXFP4_UTILS)}
    return engine_code.top_level(source, MXFP4_UTILS, SWIZZLE_NAMES, s)["_swizzle_mxfp4"]


def arguments(source: EngineSource, model: AttentionConfig, tokens: int, tp: int):
    """triton_kernel_moe_forward's arguments for `tokens` tokens (the module docstring)."""
    hidden, n = sizes(source, model, tp)
    e, u8, bf16 = model.moe.experts, torch.uint8, torch.bfloat16
    ogs = importlib.import_module("triton_kernels.matmul_ogs")
    run = swizzle(source)
    precision, bias = [], []
    for rows, cols in ((2 * n, hidden), (hidden, n)):  # w13 (gate_up), w2 (down)
        w, flex, scale = run(empty((e, rows, cols // 2), u8), empty((e, rows, cols // MXFP4_BLOCK), u8))
        precision.append((w, ogs.PrecisionConfig(weight_scale=scale, flex_ctx=ogs.FlexCtx(rhs_data=flex))))
        bias.append(empty((e, rows), bf16).to(torch.float32))
    quant = types.SimpleNamespace(w1_bias=bias[0], w2_bias=bias[1], w1_precision=precision[0][1],
                                  w2_precision=precision[1][1])
    args = (empty((tokens, hidden), bf16), precision[0][0], precision[1][0], empty((tokens, e), bf16))
    return args, dict(topk=model.moe.top_k, renormalize=True, quant_config=quant, global_num_experts=e)


def _decode(model: AttentionConfig, pt: Point):
    return arguments(capture.current().source, model, pt.batch, pt.tp)


def _prefill(model: AttentionConfig, pt: Point):
    return arguments(capture.current().source, model, pt.batch * pt.seq_len, pt.tp)


def kernel_of(session, function: str):
    """The launched @triton.jit object named `function` (capture.kernel_name): the launcher run once under the
    session at one decode token of gpt-oss-120b. Every kernel here is defined by the engine as it runs: matmul_ogs'
    kernels by triton_kernels' `specialize` (get_kernels: keyed by the fused activation and epilogue names only), the
    pow2 routing kernels inside gpt_oss_triton_kernels_moe's `_patch_legacy_routing_for_nonpow2_topk`; their text
    does not depend on the model's sizes."""
    if function not in session.kernels:
        launcher = getattr(session.module(stand_ins.MODULE), "triton_kernel_moe_forward")
        args, kwargs = arguments(session.source, attention_model("gpt-oss-120b"), 1, 1)
        launcher(*args, **kwargs)
    return session.kernels.get(function)


DTYPE_RULE = "bf16 activations and router logits, mxfp4 weights (W4A16: uint8 pairs, uint8 block scales), fp32 biases"
ENTRIES = (
    AuditKernel("vllm-moe-mxfp4-decode", "vllm", LISTED, stand_ins.MODULE, "triton_kernel_moe_forward",
                stand_ins.ALLOW, stand_ins.STAND_INS, _decode, serves, DTYPE_RULE, windowed=False, chooses=chooses,
                compile_from="module", kernel_of=kernel_of, predict=ogs_rule.predict),
    AuditKernel("vllm-moe-mxfp4-prefill", "vllm", LISTED, stand_ins.MODULE, "triton_kernel_moe_forward",
                stand_ins.ALLOW, stand_ins.STAND_INS, _prefill, serves, DTYPE_RULE, windowed=False, chooses=chooses,
                compile_from="module", kernel_of=kernel_of, predict=ogs_rule.predict),
)
ENTRY = ENTRIES[0]  # the decode entry (the oracle's choice does not depend on the point)
