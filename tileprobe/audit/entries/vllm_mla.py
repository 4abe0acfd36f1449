"""vLLM's Triton MLA decode (DeepSeek-V3 / Kimi-K2), as a tileprobe audit entry. vLLM's first MLA backend on
capability 12.x is TRITON_MLA (vllm/platforms/cuda.py, the MLA priority list for device_capability.major == 12).

- `vllm-mla-decode`: `decode_attention_fwd` (vllm/v1/attention/ops/triton_decode_attention.py), not called with
  re-typed arguments but through the engine's own `TritonMLAImpl.forward_mqa`
  (vllm/v1/attention/backends/mla/triton_mla.py), the impl constructed as the MLA layer constructs it
  (tileprobe.audit.vllm_mla_step, which says what it compiles from the wheel's text and what it sets), for a decode
  batch: the point's batch decodes one token each after seq_len tokens.
"""

from __future__ import annotations

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule, vllm_backend_stand_ins, vllm_mla_step
from tileprobe.audit.entries.sglang_mla import V4_MODEL_TYPE
from tileprobe.audit.entry import AuditKernel
from tileprobe.models import AttentionConfig

# served from the wheel: the launcher and what the impl's chain imports at run time (its base, the KV-cache helpers)
ALLOW = ("vllm.v1.attention.ops.triton_decode_attention", "vllm.envs", "vllm.platforms.interface",
         "vllm.v1.attention.backends.registry", "vllm.v1.attention.backend", "vllm.v1.kv_cache_interface",
         "vllm.v1.kv_cache_layout", "vllm.v1.kv_cache_spec_registry", "vllm.utils.math_utils")


def _mla(model: AttentionConfig) -> str | None:
    if not model.mla:
        return "not an MLA model (config.json has no kv_lora_rank)"
    if model.model_type == V4_MODEL_TYPE:
        return "DeepSeek-V4: its sparse attention is not vLLM's Triton MLA decode"
    return None


ENTRIES = (
    AuditKernel("vllm-mla-decode", "vllm", LISTED, "vllm.v1.attention.ops.triton_decode_attention",
                "decode_attention_fwd", ALLOW, vllm_backend_stand_ins.STAND_INS_SERVED, None, _mla,
                "the model's dtype (q and the latent KV cache); split-K partials in fp32", windowed=False,
                backend="TRITON_MLA", predict=attention_rule.predict, drive=vllm_mla_step.mla_decode,
                phases=("decode",), reads=vllm_mla_step.READS),
)
