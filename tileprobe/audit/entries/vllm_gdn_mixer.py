"""vLLM's gated-delta-net mixer as one audit entry, `vllm-gdn`: the engine's own step (tileprobe.audit.vllm_gdn_step:
the GDN metadata builder, then the layer's `_forward_core`) for a prefill, a decode and a mixed batch. It launches
causal conv1d (fn / update), the post-conv prep, the packed or sigmoid-gating decode, and the chunk chain where the
engine's prefill backend is Triton; conv_rule.predict answers the kernels it states rules for by kernel name, the
chunk chain's kernels are sized. The engine's selections (the prefill backend) and the stand-ins of the GDN ops stay
in tileprobe.audit.entries.vllm_gdn.
"""

from __future__ import annotations

from tileprobe.audit import conv_rule, vllm_gdn_step, vllm_gdn_step_stand_ins
from tileprobe.audit.entries import LISTED, vllm_gdn
from tileprobe.audit.entry import AuditKernel

ENTRIES = (
    AuditKernel("vllm-gdn", "vllm", LISTED, "vllm.v1.attention.backends.gdn_attn", "GDNAttentionMetadataBuilder",
                vllm_gdn_step.ALLOW, vllm_gdn_step_stand_ins.STAND_INS, None, vllm_gdn.serves,
                "the model's dtype (states too); A_log, g / beta fp32", windowed=False, compile_from="module",
                predict=conv_rule.predict, drive=vllm_gdn_step.gdn_step, phases=("prefill", "decode", "mixed"),
                reads=vllm_gdn_step.READS),
)
