"""The stated rule an audit row of vLLM's conv1d, selective-state-update and GatedDeltaNet decode / post-conv kernels is
predicted by: tileprobe.predict.triton_conv (keyed by Triton release and the sha256 of the module defining the kernel),
asked with what the captured launch passed: its constexprs and flags, num_warps, the feature strides and the
pointers' dtypes. Anything the rule was not checked on is CannotPredict, and the launch is sized instead.

The module's sha256 is read as tileprobe.audit.mamba_rule reads it: from the loader stub's list of engine files for a
kernel compiled from its module, else the cut-out module's own sha256.
"""

from __future__ import annotations

from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.audit.mamba_rule import source_sha256
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.predict import triton_conv as rule

# per kernel: rule parameter -> the pointer argument whose dtype it is
POINTERS = {
    "_causal_conv1d_fwd_kernel": {"x_dtype": "x_ptr", "w_dtype": "w_ptr", "state_dtype": "initial_states_ptr",
                                  "o_dtype": "o_ptr"},
    "_causal_conv1d_update_kernel": {"x_dtype": "x_ptr", "w_dtype": "w_ptr", "state_dtype": "conv_state_ptr",
                                     "o_dtype": "o_ptr"},
    "_selective_scan_update_kernel": {"state_dtype": "state_ptr", "x_dtype": "x_ptr", "B_dtype": "B_ptr",
                                      "C_dtype": "C_ptr"},
    "fused_recurrent_gated_delta_rule_packed_decode_kernel": {"qkv_dtype": "mixed_qkv", "o_dtype": "o",
                                                              "h0_dtype": "h0", "ht_dtype": "ht"},
    "fused_sigmoid_gating_delta_rule_update_kernel": {"q_dtype": "q", "k_dtype": "k", "v_dtype": "v", "o_dtype": "o",
                                                      "h0_dtype": "h0", "ht_dtype": "ht"},
    "_fused_post_conv_kernel": {"qkv_dtype": "mixed_qkv_ptr", "q_dtype": "q_ptr", "k_dtype": "k_ptr",
                                "v_dtype": "v_ptr"},
}


def dtype(launch: Launch, name: str) -> str | None:
    a = launch.arg(name)
    return a.dtype if isinstance(a, TensorArg) else None


def params(launch: Launch) -> dict:
    """The launch's values the triton-conv rules read: every scalar argument and option (constexprs, flags, strides),
    num_warps (Triton's default 4 where the launcher passes none), and the dtypes of the pointers each rule names."""
    p = {k: v for k, v in (*launch.args, *launch.options) if isinstance(v, int)}
    p["num_warps"] = int(launch.arg("num_warps", 4))
    p |= {k: dtype(launch, ptr) for k, ptr in POINTERS.get(launch.kernel, {}).items()}
    return p


def predict(launch: Launch, job: KernelJob, triton_version: str) -> int:
    """metadata.shared of a captured launch by the triton-conv rule (raises CannotPredict)."""
    return rule.predict(launch.kernel, params(launch), job.cc, triton_version,
                        source_sha256=source_sha256(launch, job))
