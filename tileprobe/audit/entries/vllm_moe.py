"""vLLM's Triton fused MoE (`fused_moe_kernel`), as tileprobe audit entries: the engine's own config lookup
(try_get_optimal_moe_config -> get_moe_configs: $VLLM_TUNED_CONFIG_FOLDER, then the shipped
fused_moe/configs/E=..,N=..,device_name=<the stand-in device's name>[,dtype=..][,block_shape=..].json, else
get_default_config) and its own launches, run from the wheel under the target's stand-in device.

The launcher is `fused_experts_impl` (vllm/model_executor/layers/fused_moe/fused_moe.py): the narrowest engine
function that both picks the config (`get_config_func(M)`, once, for both GEMMs) and launches
(dispatch_fused_moe_kernel -> invoke_fused_moe_triton_kernel, gate_up then down). The modular path vLLM selects
through its MoE oracle, TritonExperts.apply (fused_moe/experts/triton_moe.py), calls the same
try_get_optimal_moe_config with the same shapes and dtype name and the same invoke_fused_moe_triton_kernel twice
(without LoRA or expert parallelism: same arguments); its class needs vLLM's config tree, so it is not imported here.
What runs as the engine's code and what is stood in: tileprobe.audit.vllm_moe_stand_ins.

The arguments, as vLLM's FusedMoE layer builds them (fused_moe/layer.py; weights from
quantization/fp8.py Fp8MoEMethod.create_weights for fp8):
- hidden_states (M, hidden) in the model's dtype; M = batch (decode entry) or batch * seq_len (prefill entry);
- w1 (E, 2 * inter / tp, hidden), w2 (E, hidden, inter / tp): the model's dtype, or float8_e4m3fn for fp8;
  tp splits the intermediate size (column-parallel w13, row-parallel w2), experts are not split (no EP);
- topk_weights fp32 and topk_ids int32 (M, top_k) (the router's fused_topk outputs);
- fp8 per-tensor: w1_scale / w2_scale (E,) fp32 (process_fp8_weight_tensor_strategy_moe keeps the max of the two
  w13 shard scales), dynamic activation scales (a1_scale None); fp8 [128, 128] blocks: w1_scale
  (E, cdiv(2 * inter / tp, 128), cdiv(hidden, 128)), w2_scale (E, cdiv(hidden, 128), cdiv(inter / tp, 128)) fp32,
  block_shape [128, 128];
- activation "silu", no router weight on the input, global_num_experts E, no expert map.
Every tensor is a meta tensor (shapes, strides, dtypes; no memory); the expert weights w1 / w2 answer
`device.type == "cuda"` as they do in the engine (vllm_moe_stand_ins.expert_weight), so vLLM 0.34.0's launcher test
`use_tma_b` (fp8 [128, 128] blocks on capability family 9.0 or 10.0, B contiguous and divisible by the tile) takes
its TMA launch (`b_desc` / `a_desc` host TMA descriptors, recorded as Triton's `tensordesc<...>` arguments and compiled
with them) where the engine takes it: h100 / h200 (the fp8 oracle picks TRITON first there); b200's fp8-block experts
go to FLASHINFER_TRTLLM (`chooses`), its per-tensor fp8 ones have no block shape; sm_120 (no 9.0/10.0 family) and
a release without the TMA branch (the pin table's READ_FROM vLLM) launch with pointers.
Other quantization methods are served elsewhere (gpt-oss mxfp4: tileprobe.audit.entries.vllm_moe_mxfp4 says which
backend); the entry's `serves` gives the reason.

`chooses`: whether vLLM runs these experts through Triton at all on the target: the engine's own oracle
(select_unquantized_moe_backend in fused_moe/oracle/unquantized.py for bf16, select_fp8_moe_backend in
fused_moe/oracle/fp8.py for fp8, with Fp8MoEMethod's weight / activation keys and allow_vllm_cutlass=False), walked by
tileprobe.audit.vllm_moe_oracle under the stand-in device; an Elsewhere names the backend and the device test of its
kernel class that passed.
"""

from __future__ import annotations

import ast

from tileprobe.audit.entries import LISTED
from tileprobe.audit import vllm_moe_oracle as oracle
from tileprobe.audit import moe_rule
from tileprobe.audit import vllm_moe_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, torch
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig

FP8_BLOCK = (128, 128)


def scheme(model: AttentionConfig) -> str | None:
    """bf16 / fp8 / fp8-block, or None for a quantization this entry does not size."""
    q = model.quant
    if q is None:
        return "bf16"
    if q.method == "fp8":
        return "fp8" if q.weight_block_size is None else "fp8-block" if q.weight_block_size == FP8_BLOCK else None
    return None


def serves(model: AttentionConfig) -> str | None:
    if model.moe is None:
        return "no routed experts (config.json has no experts field)"
    if scheme(model) is None:
        q = model.quant
        block = f" weight_block_size {list(q.weight_block_size)}" if q.weight_block_size else ""
        return (f"quantization_config {q.method}{block}: vLLM runs these experts through another MoE method than "
                "the Triton fused_moe_kernel sized here")
    return None


def inter_per_rank(model: AttentionConfig, tp: int) -> int:
    if model.moe.inter % tp:
        raise UsageError(f"--tp {tp}: {model.name}'s expert intermediate size {model.moe.inter} does not split over "
                         f"{tp} ranks")
    return model.moe.inter // tp


def arguments(model: AttentionConfig, tokens: int, tp: int):
    """fused_experts_impl's arguments for `tokens` tokens (the module docstring)."""
    moe, kind = model.moe, scheme(model)
    dt = getattr(torch, TORCH[model.dtype])
    n = inter_per_rank(model, tp)
    wdt = torch.float8_e4m3fn if kind != "bf16" else dt
    weight = vllm_moe_stand_ins.expert_weight  # meta, answering device cuda as the engine's weights do
    args = (empty((tokens, moe.hidden), dt), weight((moe.experts, 2 * n, moe.hidden), wdt),
            weight((moe.experts, moe.hidden, n), wdt), empty((tokens, moe.top_k), torch.float32),
            empty((tokens, moe.top_k), torch.int32))
    kwargs = dict(activation="silu", apply_router_weight_on_input=False, global_num_experts=moe.experts)
    if kind == "fp8":
        kwargs |= dict(use_fp8_w8a8=True, w1_scale=empty((moe.experts,), torch.float32),
                       w2_scale=empty((moe.experts,), torch.float32))
    elif kind == "fp8-block":
        bn, bk = FP8_BLOCK
        kwargs |= dict(use_fp8_w8a8=True, block_shape=list(FP8_BLOCK),
                       w1_scale=empty((moe.experts, -(-2 * n // bn), -(-moe.hidden // bk)), torch.float32),
                       w2_scale=empty((moe.experts, -(-moe.hidden // bn), -(-n // bk)), torch.float32))
    return args, kwargs


UNQUANTIZED = f"{oracle.ORACLES}/unquantized.py"
FP8 = f"{oracle.ORACLES}/fp8.py"


def choose_backend(source: EngineSource, model: AttentionConfig) -> oracle.Choice:
    """The backend vLLM's oracle selects for the model's experts on the session's stand-in device."""
    s = oracle.scope(source)
    config = oracle.moe_config(s["MoEActivation"].SILU)
    if scheme(model) == "bf16":
        tree = oracle.load(source, UNQUANTIZED, ("UnquantizedMoeBackend", "_get_priority_backends"), s)
        return oracle.walk(source, UNQUANTIZED, tree, "select_unquantized_moe_backend",
                           s["_get_priority_backends"](config), s, None, None)
    weight, act = (s["kFp8StaticTensorSym"], s["kFp8DynamicTensorSym"]) if scheme(model) == "fp8" else \
        (s["kFp8Static128BlockSym"], s["kFp8Dynamic128Sym"])  # Fp8MoEMethod (quantization/fp8.py), dynamic acts
    tree = oracle.load(source, FP8, ("Fp8MoeBackend", "_get_priority_backends"), s)
    backends = s["_get_priority_backends"](config, weight, act)
    # select_fp8_moe_backend's own `if not allow_vllm_cutlass:` block (Fp8MoEMethod passes False), run on the list
    drop = next(n for n in ast.walk(oracle.function(tree, "select_fp8_moe_backend")) if isinstance(n, ast.If)
                and ast.unparse(n.test) == "not allow_vllm_cutlass")
    exec(compile(ast.Module([drop], []), FP8, "exec"), s, {"AVAILABLE_BACKENDS": backends,  # noqa: S102
                                                           "allow_vllm_cutlass": False})
    return oracle.walk(source, FP8, tree, "select_fp8_moe_backend", backends, s, weight, act)


def chooses(session, model: AttentionConfig, point: Point) -> Elsewhere | None:
    c = choose_backend(session.source, model)
    if c.backend == "TRITON":
        return None
    return Elsewhere(f"{c.backend} ({', '.join(c.classes)})", c.supported_at or f"{c.oracle}:{c.walk_line}",
                     f"{c.oracle}:{c.walk_line} walks {', '.join(c.order)}; the first whose kernel class passes its "
                     "device and quant-scheme tests (FlashInfer / triton_kernels taken as installed)")


def _decode(model: AttentionConfig, pt: Point):
    return arguments(model, pt.batch, pt.tp)


def _prefill(model: AttentionConfig, pt: Point):
    return arguments(model, pt.batch * pt.seq_len, pt.tp)


MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"
ALLOW = (MODULE, "vllm.model_executor.layers.fused_moe.moe_align_block_size", "vllm.envs", "vllm.utils.math_utils",
         "vllm.platforms.interface", "vllm.v1.attention.backends.registry")
DTYPE_RULE = "the model's dtype (activations), its weights' (bf16 or float8_e4m3fn); fp32 router weights"

def tuned_folder(launch, target) -> str:
    """fused_moe_kernel's config is data the engine reads: a folder of files in which every entry fits, first in
    vLLM's lookup (VLLM_TUNED_CONFIG_FOLDER, get_moe_configs)."""
    return (f"a config folder in which every entry fits: tileprobe export triton-configs --engine vllm --model "
            f"<your config.json> --tp <N> --target {target.name} --out ./tuned; then export "
            "VLLM_TUNED_CONFIG_FOLDER=$PWD/tuned (vLLM reads it before its shipped files)")


ENTRIES = (
    AuditKernel("vllm-fused-moe-decode", "vllm", LISTED, MODULE, "fused_experts_impl", ALLOW,
                vllm_moe_stand_ins.STAND_INS, _decode, serves, DTYPE_RULE, windowed=False, chooses=chooses,
                remedy=tuned_folder, predict=moe_rule.predict),
    AuditKernel("vllm-fused-moe-prefill", "vllm", LISTED, MODULE, "fused_experts_impl", ALLOW,
                vllm_moe_stand_ins.STAND_INS, _prefill, serves, DTYPE_RULE, windowed=False, chooses=chooses,
                remedy=tuned_folder, predict=moe_rule.predict),
)
