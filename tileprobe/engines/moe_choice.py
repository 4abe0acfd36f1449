"""Which MoE kernel the engine runs for a model's experts on a target, by the engine's own code: the Triton fused
MoE (whose config files `export triton-configs` and `check-configs` write and read) or another backend.

- vLLM: its MoE oracle (select_unquantized_moe_backend / select_fp8_moe_backend), walked from the wheel under the
  target's stand-in device by the audit's own entry (tileprobe.audit.entries.vllm_moe `chooses`).
- SGLang (the pin table's release, tileprobe.engines.pins) runs its Triton fused MoE by default (no oracle to walk):
  None.

`elsewhere(...)` returns None when the Triton fused MoE runs, else the Elsewhere naming what runs and the line.
"""

from __future__ import annotations

from tileprobe.audit import capture
from tileprobe.audit.entry import Elsewhere, Point
from tileprobe.audit.kernels import KERNELS
from tileprobe.models import AttentionConfig, Quantization, read_config
from tileprobe.targets import Target
from tileprobe.workloads import PRESETS, MoEModel

ENV_VARS = {"vllm": "VLLM_TUNED_CONFIG_FOLDER", "sglang": "SGLANG_MOE_CONFIG_DIR"}  # the engines' folder variable
QUANTS = {"bf16": None, "fp8": Quantization("fp8", None), "fp8-block": Quantization("fp8", (128, 128))}


def elsewhere(src, target: Target, model: MoEModel, quant: str, cache_dir=None) -> Elsewhere | None:
    if src.engine != "vllm" or quant not in QUANTS:
        return None
    entry = KERNELS["vllm-fused-moe-decode"]
    as_model = AttentionConfig(model.name, 1, 1, 64, moe=model, quant=QUANTS[quant])
    with capture.engine_session(src, target, entry.allow, entry.stand_ins, cache_dir, {"moe_backend": None}) as s:
        return entry.chooses(s, as_model, Point(1, 1, 1, None))


def note(src, target: Target, model: MoEModel, quant: str, env_var: str, cache_dir=None) -> list[str]:
    """The lines `export triton-configs` / `check-configs` print when the engine does not run the Triton fused MoE
    for this model on the target: what runs instead, the line that chose it, and what makes the folder take effect."""
    e = elsewhere(src, target, model, quant, cache_dir)
    if e is None:
        return []
    return [f"NOT USED: {src.label()} runs {e.runs} for {model.name}'s experts on {target.name} ({e.line}), not the "
            f"Triton fused_moe_kernel: {env_var} takes effect only with vLLM's `--moe-backend triton`"]


UNKNOWN_MODEL = ("which MoE kernel the engine runs depends on the model and the GPU (vLLM's own oracle may run "
                 "FlashInfer's CUTLASS MoE or Marlin instead of the Triton fused MoE, and then these files are not "
                 "read): pass --model (a workload preset or config.json) with --target to have it checked")


def model_of(name: str) -> tuple[MoEModel, str]:
    """--model as check-configs takes it: a workload preset (bf16) or a config.json (its experts and its
    quantization_config's scheme)."""
    if name in PRESETS:
        return PRESETS[name], "bf16"
    cfg = read_config(name)
    return cfg.moe(), cfg.scheme()


def check_configs_note(src, target: Target | None, model: str | None, cache_dir=None) -> list[str]:
    """What `check-configs` says about the engine's choice: the NOT USED line for the model on the target, else
    that it was not checked (no model, or no single target to check it for)."""
    if model is None or target is None:
        return [UNKNOWN_MODEL] if src.engine == "vllm" else []
    moe, quant = model_of(model)
    return note(src, target, moe, quant, ENV_VARS[src.engine], cache_dir)
