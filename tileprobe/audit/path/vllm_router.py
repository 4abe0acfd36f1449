"""Which top-k op vLLM's MoE router runs for the model on the target: vLLM's own `create_fused_moe_router`
(vllm/model_executor/layers/fused_moe/router/router_factory.py), served from the wheel under the target's stand-in
device, called with the model's routing as vLLM's model code passes it to FusedMoE (tileprobe.models.Routing), every
router class it imports stood in by a recorder of its name and arguments (the classes' own modules import the
kernels). Its RoutingMethodType / get_routing_method_type are the wheel's (fused_moe/config.py, read from its text).

The picked router then names the op, as its file calls it (re-typed from the router modules, whose files the release
hashes; `OPS` says which line):
- FusedTopKRouter / FusedTopKBiasRouter: `ops.topk_softmax` for softmax scoring, `ops.topk_sigmoid` for sigmoid;
- GroupedTopKRouter: `ops.grouped_topk` when grouped_topk_router.py's `grouped_topk` takes its fused branch
  (VLLM_USE_FUSED_MOE_GROUPED_TOPK, read from the wheel's envs.py, and num_expert_group <= 32, topk <= 32, a bias);
  with the experts not divisible into the groups, the router's own fallback to fused_topk(_bias); else its
  torch.compile'd Python (Inductor-generated kernels);
- any other router (custom routing, zero experts, the routing simulator): named, not mapped (unanswered).
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from tileprobe.audit import capture, capture_cache, vllm_stand_ins
from tileprobe.audit.vllm_backend_stand_ins import aiter_ops, from_text
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

FACTORY = "vllm.model_executor.layers.fused_moe.router.router_factory"
ROUTER_PKG = "vllm.model_executor.layers.fused_moe.router."
CONFIG = "vllm/model_executor/layers/fused_moe/config.py"
OPS = {"softmax": "topk_softmax", "sigmoid": "topk_sigmoid"}
LINES = ("fused_topk_router.py / fused_topk_bias_router.py: ops.topk_softmax for softmax, ops.topk_sigmoid for "
         "sigmoid; grouped_topk_router.py grouped_topk: `if envs.VLLM_USE_FUSED_MOE_GROUPED_TOPK and "
         "current_platform.is_cuda() and num_expert_group <= 32 and topk <= 32 and e_score_correction_bias is not "
         "None: return fused_grouped_topk(...)` -> ops.grouped_topk")


@dataclass(frozen=True)
class RouterChoice:
    router: str  # the class create_fused_moe_router returned
    op: str | None  # the vLLM custom op it runs (None: no custom op tileprobe maps: torch / Inductor, or unknown)
    why: str  # the factory's arguments and the rule that mapped the router to the op


def _recorder(name: str) -> type:
    def init(self, *args, **kwargs):
        self.kind, self.kwargs = name, kwargs

    return type(name, (), {"__init__": init})


def _router_modules(source: EngineSource) -> dict:
    """module -> stand-in maker: each router module the factory imports, its imported names recorders."""
    tree = ast.parse(source.read_text(FACTORY.replace(".", "/") + ".py"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ROUTER_PKG):
            names = [a.asname or a.name for a in node.names]
            out[node.module] = lambda target, source, names=names: {n: _recorder(n) for n in names}
    return out


def _config_module(target: Target, source: EngineSource) -> dict:
    import enum
    return from_text(source, CONFIG, ("RoutingMethodType", "get_routing_method_type"), {"IntEnum": enum.IntEnum})


def choose(source: EngineSource, target: Target, model: AttentionConfig, cache_dir=None) -> RouterChoice | None:
    """The router vLLM builds for the model's MoE layers and the op it runs; None: the model's routing was not read.
    Kept across audits by tileprobe.audit.capture_cache (the engine's files, tileprobe, the target and the model in
    its key): the factory's session imports torch, seconds a warm audit need not spend again."""
    if model.routing is None or model.moe is None:
        return None
    got = capture_cache.memo("vllm-router", source, {"target": dataclasses.asdict(target),
                                                      "model": dataclasses.asdict(model)}, cache_dir,
                             lambda: dataclasses.asdict(_choose(source, target, model, cache_dir)))
    return RouterChoice(**got)


def _choose(source: EngineSource, target: Target, model: AttentionConfig, cache_dir=None) -> RouterChoice:
    r, m = model.routing, model.moe
    if r is None or m is None:
        return None
    stand_ins = {"vllm.platforms": vllm_stand_ins.platforms, "vllm.logger": vllm_stand_ins.logger,
                 "vllm._aiter_ops": aiter_ops, "vllm.distributed.eplb.eplb_state": lambda t, s: {"EplbLayerState": object},
                 "vllm.model_executor.layers.fused_moe.config": _config_module,
                 "vllm.utils.import_utils": vllm_stand_ins.import_utils, **_router_modules(source)}
    torch = capture.torch
    with capture.engine_session(source, target, (FACTORY, "vllm.envs", "vllm.platforms.interface",
                                                 "vllm.v1.attention.backends.registry"), stand_ins,
                                cache_dir) as session:
        factory = session.module(FACTORY)
        bias = torch.empty((m.experts,), dtype=torch.float32, device="meta") if r.bias else None
        args = dict(top_k=m.top_k, global_num_experts=m.experts, renormalize=r.renormalize,
                    use_grouped_topk=r.grouped, num_expert_group=r.groups, topk_group=r.topk_group,
                    scoring_func=r.scoring, routed_scaling_factor=r.scaling, e_score_correction_bias=bias)
        router = factory.create_fused_moe_router(**args)
        fused_grouped = bool(session.module("vllm.envs").VLLM_USE_FUSED_MOE_GROUPED_TOPK)
    said = ", ".join(f"{k}={'a bias' if k == 'e_score_correction_bias' and v is not None else v}"
                     for k, v in args.items())
    why = f"vLLM's create_fused_moe_router({said}) -> {router.kind}"
    kind = router.kind
    if kind == "GroupedTopKRouter":
        groups = r.groups or 0
        if not (m.experts > groups and m.experts % groups == 0):
            kind = "FusedTopKBiasRouter" if r.bias else "FusedTopKRouter"  # its _compute_routing's fallback
            why += f" (experts {m.experts} do not split into {groups} groups: its fused_topk fallback)"
        elif fused_grouped and groups <= 32 and m.top_k <= 32 and r.bias:
            return RouterChoice(kind, "grouped_topk", f"{why}; {LINES}")
        else:
            return RouterChoice(kind, None, f"{why}; grouped_topk's torch.compile'd Python, not a custom op "
                                            f"({LINES})")
    if kind in ("FusedTopKRouter", "FusedTopKBiasRouter") and r.scoring in OPS:
        return RouterChoice(kind, OPS[r.scoring], f"{why}; {LINES}")
    return RouterChoice(kind, None, f"{why}: a router tileprobe does not map to an op")
