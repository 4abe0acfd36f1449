"""The attention backend an engine picks for a model on a target, by the engine's own selection code (the audit
entries that backend runs: tileprobe.audit.kernels.entries_of).

`attention_backend(source, target, model, forced)` runs the engine's selection from its wheel's text
(tileprobe.audit.engine_text: one top-level name at a time, each from the wheel, since the selecting modules import
the engines' config trees, C extensions and FlashInfer), with torch.cuda answering as the target (capability,
properties, is_initialized True) and torch.version.cuda as a CUDA 13 build. The Selection names the backend as the
engine spells it, whether it is a Triton backend, and the engine line
(file:line inside the wheel) whose text names it and that ran.

- vLLM (tileprobe.audit.vllm_selection): vllm/platforms/cuda.py `get_attn_backend_cls` (forced: its
  selected-backend branch) and `get_valid_backends`, on the AttentionSelectorConfig that
  vllm/v1/attention/selector.py `get_attn_backend` builds for each kind of the model's layers: head size (MLA:
  kv_lora_rank + qk_rope_head_dim), dtype, kv_cache_dtype "auto" (no --kv-cache-dtype), block_size None (no
  --block-size), use_mla, has_sink, has_sliding_window; the rest its defaults. That runs `_get_backend_priorities`,
  each backend class's own `validate_configuration` / supports_* (vllm/v1/attention/backends/**), and what they
  call (fa_utils, the FlashAttention interface, vllm/utils/flashinfer.py; FlashInfer itself from the wheel of the
  release vLLM pins, 0.7.2.post1). The line: the element of the priority list `_get_backend_priorities` returned.
  Stood in: `current_platform` (a subclass of vLLM's own CudaPlatformBase answering the target's capability and
  name), `vllm.logger`, the current VllmConfig (an `attention_config` of AttentionConfig's defaults read from
  vllm/config/attention.py; no model/cache/parallel config), and the host: the wheel's compiled extensions import,
  the wheel's declared dependencies are what is installed (no flashinfer-cubin), the network is unreachable (so
  vllm/utils/flashinfer.py `has_nvidia_artifactory` is False: no TRT-LLM cubins, hence no FlashInfer sinks on
  SM90/SM120), nvcc and ninja are on its PATH whatever the audit's own machine has (engine_text.SERVING_TOOLS:
  `has_flashinfer()` holds through FlashInfer's JIT, as on a serving host with the CUDA toolkit); vllm.envs reads
  this process's environment. A model no backend is valid for (a sparse-MLA model on sm_89) is one line naming the
  engine's reasons: vLLM does not start it there.
- SGLang (tileprobe.audit.sglang_selection): the override provider sglang/srt/arg_groups registers for the model's
  architecture (model_overrides/*.py, overrides.py: e.g. gpt_oss.py `_gpt_oss_overrides`), then, when it set none,
  model_override_base.py `get_default_attn_backend`, as overrides.py `_attention_backend_default` calls it. The line:
  the `return "..."` / assignment naming the backend that ran. A forced name must be in choices.py
  ATTENTION_BACKEND_CHOICES and pass its creator's own checks in sglang/srt/layers/attention/attention_registry.py
  (the backend class the creator then builds is stood in, so a constructor's refusal is not seen). Stood in: the
  resolving view (ServerArgs fields' defaults read from sglang/srt/arg_groups/fields/*.py), `model_config_of`
  (architectures from the preset's model_type, attention_arch MLA when the model has MLA ranks,
  has_attention_sinks, quantization_config; not encoder-decoder), `get_spec` / `get_parallel` (no speculative
  decoding, no decode context parallelism), no out-of-tree platform plugin, msgspec.Struct (not installed here).

What tileprobe cannot serve (a dependency neither installed at the pinned release nor in the wheel cache, a field
that is not stood in) is one UsageError line, never a guessed answer.
"""

from __future__ import annotations

from tileprobe.audit import sglang_selection, vllm_selection
from tileprobe.audit.engine_text import EngineTextError
from tileprobe.audit.selection import Selection, is_triton
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

__all__ = ["Selection", "attention_backend", "is_triton"]


def attention_backend(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None = None
                      ) -> Selection:
    """The attention backend `source`'s engine selects (or, forced, accepts) for `model` on `target`."""
    try:
        if source.engine == "vllm":
            return vllm_selection.select(source, target, model, forced)
        if source.engine == "sglang":
            return sglang_selection.select(source, target, model, forced)
    except EngineTextError as exc:
        raise UsageError(f"{source.label()}: its attention backend selection for {model.name} on {target.name} "
                         f"needs what tileprobe does not serve: {' '.join(str(exc).split())}") from None
    raise UsageError(f"--engine {source.engine}: tileprobe reads the attention backend selection of vllm, sglang")
