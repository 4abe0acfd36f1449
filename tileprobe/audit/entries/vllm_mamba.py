"""vLLM's Mamba-2 (SSD) Triton launchers, as tileprobe audit entries: the `M` layers of a Nemotron-H model (and every
layer of a Mamba2ForCausalLM, a Falcon-H1), which vLLM runs through MambaMixer2
(vllm/model_executor/layers/mamba/mamba_mixer2.py).

Every entry drives the engine's own step (tileprobe.audit.vllm_mamba_step: the backend's
`Mamba2AttentionMetadataBuilder(...).build(...)`, then the mixer built by its own __init__ and its registered op
`mamba_mixer2` -> `conv_ssm_forward`, the state caches in the mixer's own get_state_shape / get_state_dtype) and keeps
the launches of its launcher's kernels (the step launches them all); nothing of a launcher's arguments is typed here:
- `vllm-mamba2-chunk-scan`: a prefill batch, the five SSD kernels of `mamba_chunk_scan_combined_varlen`
  (ops/ssd_combined.py, all @triton.autotune'd and launched through triton_helpers.launch_autotuned), a fresh
  prefill: the builder's `prep_initial_states` is False, so no initial states;
- `vllm-mamba2-chunk-scan-continued`: the mixed batch (decodes, then one prefill chunk over cached tokens), the same
  five kernels where the builder's `prep_initial_states` is True, so the mixer passes initial states
  (`torch.where(has_initial_states_p, ssm_state[state_indices_tensor_p], 0)`): HAS_INITSTATES is a constexpr of
  _state_passing_fwd_kernel and _chunk_scan_fwd_kernel, and the chunk metadata is the builder's for a chunk that
  starts mid-sequence;
- `vllm-mamba2-causal-conv1d`: a prefill batch, `causal_conv1d_fn` (ops/causal_conv1d.py) with the builder's
  nums_dict / batch_ptr;
- `vllm-mamba2-causal-conv1d-update`, `vllm-mamba2-selective-state-update`: a decode batch, `causal_conv1d_update`
  and the selective state update ssu_dispatch's backend runs (vLLM's default MambaConfig, TRITON on CUDA:
  ops/mamba_ssm.py's `selective_state_update`, whose BLOCK_SIZE_M / num_warps come from the wheel's
  configs/selective_state_update JSON for the device name, else vLLM's default heuristic).
"""

from __future__ import annotations

from tileprobe.audit import conv_rule, mamba_rule, vllm_mamba_step
from tileprobe.audit.entries import LISTED
from tileprobe.audit.entry import AuditKernel, Point
from tileprobe.audit.vllm_mamba_step_stand_ins import STAND_INS
from tileprobe.models import AttentionConfig

OPS = vllm_mamba_step.OPS
SSD = ("_chunk_cumsum_fwd_kernel", "_chunk_state_fwd_kernel", "_state_passing_fwd_kernel", "_bmm_chunk_fwd_kernel",
       "_chunk_scan_fwd_kernel")


def has_ssm(model: AttentionConfig) -> str | None:
    return None if model.ssm else "no Mamba-2 layers (config.json hybrid_override_pattern has no M)"


def _keeping(kernels: tuple[str, ...]):
    """The engine's step, keeping the launches of `kernels` (the entry's launcher's) of the ones it makes."""
    def drive(session, model: AttentionConfig, pt: Point) -> None:
        start = len(session.launches)
        vllm_mamba_step.mixer2(session, model, pt)
        session.launches[start:] = [la for la in session.launches[start:] if la.kernel in kernels]
    return drive


def _entry(name, module, launcher, kernels, phase, dtype_rule, predict):
    return AuditKernel(name, "vllm", LISTED, OPS + module, launcher, vllm_mamba_step.ALLOW, STAND_INS, None, has_ssm,
                       dtype_rule, windowed=False, compile_from="module", predict=predict,
                       drive=_keeping(kernels), phases=(phase,), reads=vllm_mamba_step.READS)


_SCAN_DTYPE = ("x/B/C/dt in the model's dtype; A, dA_cumsum, chunk states and CB in fp32; the states passed and "
               "written in the SSM cache's dtype (fp32 for Nemotron-H)")
ENTRIES = (
    _entry("vllm-mamba2-chunk-scan", "ssd_combined", "mamba_chunk_scan_combined_varlen", SSD, "prefill",
           _SCAN_DTYPE + "; a fresh prefill (no initial states)", mamba_rule.predict),
    _entry("vllm-mamba2-chunk-scan-continued", "ssd_combined", "mamba_chunk_scan_combined_varlen", SSD, "mixed",
           _SCAN_DTYPE + "; a continued prefill (initial states)", mamba_rule.predict),
    _entry("vllm-mamba2-causal-conv1d", "causal_conv1d", "causal_conv1d_fn", ("_causal_conv1d_fwd_kernel",),
           "prefill", "the model's dtype (x is cast to the conv state's, the model's dtype)", conv_rule.predict),
    _entry("vllm-mamba2-causal-conv1d-update", "causal_conv1d", "causal_conv1d_update",
           ("_causal_conv1d_update_kernel",), "decode", "the model's dtype (the conv state's)", conv_rule.predict),
    _entry("vllm-mamba2-selective-state-update", "mamba_ssm", "selective_state_update",
           ("_selective_scan_update_kernel",), "decode",
           "x/B/C/dt in the model's dtype, A fp32, the state in the SSM cache's dtype (fp32 for Nemotron-H)",
           conv_rule.predict),
)
