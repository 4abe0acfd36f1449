"""The engine's own tensor-parallel rules for a model's shapes, checked before any kernel is looked at.

Each rule is a line of the engine's own source, found in the wheel by its text (so the line number is the release's
own), and the condition that line enforces, evaluated with the model's values. A model the engine would refuse at
start-up is one line naming that engine line, exit 2 (tileprobe.errors.UsageError), like vLLM's own ValueError.

- vLLM: vllm/config/model.py `verify_with_parallel_config` ("Total number of attention heads (H) must be divisible
  by tensor parallel size (TP)"); vllm/model_executor/layers/linear.py QKVParallelLinear (`divide(tp_size,
  total_num_kv_heads)` when tp >= kv heads, else `divide(total_num_kv_heads, tp_size)`).
- SGLang: sglang/srt/layers/linear.py QKVParallelLinear (`divide(self.total_num_heads, tp_size)` and the same kv
  rule); sglang/srt/layers/moe/fused_moe_triton/layer.py (`assert intermediate_size % self.moe_tp_size == 0`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tileprobe.errors import UsageError


@dataclass(frozen=True)
class Rule:
    engine: str
    file: str
    anchor: str  # the text of the engine's line that enforces it
    holds: Callable[[dict], bool]
    says: Callable[[dict], str]


def _kv(v: dict) -> bool:
    kv, tp = v["kv_heads"], v["tp"]
    return tp % kv == 0 if tp >= kv else kv % tp == 0


RULES = (
    Rule("vllm", "vllm/config/model.py", "must be divisible by tensor parallel size",
         lambda v: v["heads"] % v["tp"] == 0,
         lambda v: f"Total number of attention heads ({v['heads']}) must be divisible by tensor parallel size "
                   f"({v['tp']})"),
    Rule("vllm", "vllm/model_executor/layers/linear.py",
         "self.num_kv_head_replicas = divide(tp_size, self.total_num_kv_heads)", _kv,
         lambda v: f"{v['kv_heads']} KV heads do not split over (or replicate evenly across) {v['tp']} ranks"),
    Rule("sglang", "sglang/srt/layers/linear.py", "self.num_heads = divide(self.total_num_heads, tp_size)",
         lambda v: v["heads"] % v["tp"] == 0,
         lambda v: f"{v['heads']} attention heads are not divisible by tp {v['tp']}"),
    Rule("sglang", "sglang/srt/layers/linear.py",
         "self.num_kv_head_replicas = divide(kv_tp_size, self.total_num_kv_heads)", _kv,
         lambda v: f"{v['kv_heads']} KV heads do not split over (or replicate evenly across) {v['tp']} ranks"),
    Rule("sglang", "sglang/srt/layers/moe/fused_moe_triton/layer.py",
         "assert intermediate_size % self.moe_tp_size == 0",
         lambda v: v.get("inter") is None or v["inter"] % v["tp"] == 0,
         lambda v: f"expert intermediate size {v['inter']} is not divisible by tp {v['tp']}"),
)


def line_of(source, rel: str, anchor: str) -> str | None:
    """file:line of the first line of `rel` in the engine's files that contains `anchor`; None when it has none."""
    try:
        text = source.read_text(rel)
    except UsageError:
        return None
    for n, line in enumerate(text.splitlines(), 1):
        if anchor in line:
            return f"{rel}:{n}"
    return None


def check(source, heads: int, kv_heads: int, tp: int, inter: int | None) -> list[str]:
    """The engine lines checked (file:line each). UsageError at the first rule the model breaks; a rule whose line
    this release does not have is not claimed (it is left out of the lines returned)."""
    values = {"heads": heads, "kv_heads": kv_heads, "tp": tp, "inter": inter}
    checked = []
    for r in RULES:
        if r.engine != source.engine or (heads == 0 and "heads" in r.anchor):
            continue
        where = line_of(source, r.file, r.anchor)
        if where is None:
            continue
        if not r.holds(values):
            raise UsageError(f"--tp {tp}: {source.label()} refuses this model at start-up: {r.says(values)} "
                             f"({where})")
        checked.append(where)
    return checked
