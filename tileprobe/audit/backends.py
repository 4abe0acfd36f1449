"""The attention backend an engine picks for a model on a target, by the engine's own selection code, and which
tileprobe audit entries that backend runs.

`attention_backend(source, target, model, forced)` runs, from the engine's wheel (tileprobe.audit.engine_text: the
engine's text, one top-level name at a time, with torch.cuda answering as the target and torch.version.cuda as a
CUDA 13 build):

- vLLM: `CudaPlatformBase.get_attn_backend_cls` and `get_valid_backends` (vllm/platforms/cuda.py) on the
  AttentionSelectorConfig vLLM's selector (vllm/v1/attention/selector.py `get_attn_backend`) builds for the model's
  attention layers: head size (MLA: kv_lora_rank + qk_rope_head_dim), dtype, kv_cache_dtype "auto" (the
  default --kv-cache-dtype), block_size None (no --block-size), use_mla, has_sink, has_sliding_window; everything
  else its default. That runs `_get_backend_priorities` and each backend class's own `validate_configuration` and
  supports_* methods (vllm/v1/attention/backends/*.py) and what they call (fa_utils, vllm/utils/flashinfer.py, the
  FlashAttention interface). Stood in: `current_platform`, a subclass of vLLM's own CudaPlatformBase answering the
  target's capability and name; `vllm.logger`; the current VllmConfig (`get_current_vllm_config[_or_none]`): only
  an `attention_config` whose fields are AttentionConfig's defaults read from vllm/config/attention.py, the other
  parts None (no model/cache/parallel config published); the host: the wheel's compiled extensions import, only the
  wheel's declared dependencies are installed (so no flashinfer-cubin), and the network is unreachable (so
  FlashInfer's TRT-LLM cubins cannot be downloaded: vllm/utils/flashinfer.py has_nvidia_artifactory answers False).
- SGLang: the model's override provider registered for its architecture in sglang/srt/arg_groups/model_overrides
  (e.g. gpt_oss.py `_gpt_oss_overrides`, deepseek_v2.py `_deepseek_family_overrides`), then, when it set none,
  sglang/srt/arg_groups/model_override_base.py `get_default_attn_backend`, as overrides.py
  `_attention_backend_default` calls it; a forced name must be in choices.py ATTENTION_BACKEND_CHOICES and pass its
  creator in sglang/srt/layers/attention/attention_registry.py (the creator's own checks run; the backend class it
  would then build is stood in). Stood in: the resolving view (`resolving_view` / `resolved_view`): the ServerArgs
  fields' defaults read from sglang/srt/arg_groups/fields/*.py; `model_config_of`: architectures, attention_arch (MLA
  when the model has MLA ranks), has_attention_sinks, is_encoder_decoder False, from tileprobe's AttentionConfig;
  `get_spec` / `get_parallel`: no speculative decoding, no decode context parallelism.

The line a Selection names is the engine line whose text names the chosen backend and that ran: in vLLM the
element of the priority list `_get_backend_priorities` returned; in SGLang the `return "..."` or
`overrides["attention_backend"] = "..."` that ran.
"""

from __future__ import annotations

from tileprobe.audit import sglang_selection, vllm_selection
from tileprobe.audit.selection import Selection, entries_of, is_triton
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig
from tileprobe.targets import Target

__all__ = ["Selection", "attention_backend", "entries_of", "is_triton"]


def attention_backend(source: EngineSource, target: Target, model: AttentionConfig, forced: str | None = None
                      ) -> Selection:
    """The attention backend `source`'s engine selects (or, forced, accepts) for `model` on `target`."""
    if source.engine == "vllm":
        return vllm_selection.select(source, target, model, forced)
    if source.engine == "sglang":
        return sglang_selection.select(source, target, model, forced)
    raise UsageError(f"--engine {source.engine}: tileprobe reads the attention backend selection of vllm, sglang")
