"""vLLM's Mamba-2 (SSD) Triton launchers, as tileprobe audit entries: the `M` layers of a Nemotron-H model,
which vLLM runs through MambaMixer2 (vllm/model_executor/layers/mamba/mamba_mixer2.py). What each entry's arguments
are, read from the engine's callers:

- Per rank (MambaMixer2.__init__): heads / tp heads; groups / tp groups, where tp must divide the heads and divide
  the groups unless there is one group, which is then replicated to tp groups
  (MambaStateShapeCalculator.extra_groups_for_head_shards); intermediate = heads * head_dim (nemotron_h.py);
  conv_dim = intermediate + 2 * groups * state_size. in_proj's output per rank is (tokens, P) with
  P = 2 * intermediate/tp + 2 * groups/tp * state_size + heads/tp (gate, x, B, C, dt), in the model's dtype (as
  are D, dt_bias, the conv weight and bias, created under vLLM's default dtype); A is fp32.
- conv_ssm_forward splits it: hidden_states_B_C (tokens, conv_dim/tp) and dt (tokens, heads/tp), both strided
  views of in_proj's output (stride P).
- State caches (MambaMixer2.get_state_dtype, MambaStateDtypeCalculator._mamba_state_dtype): the conv state in the
  model's dtype; the SSM state in fp32 for Nemotron-H (vllm/model_executor/models/config.py
  NemotronHForCausalLMConfig: mamba_ssm_cache_dtype "auto" becomes the config's own, else "float32"), else the
  model's dtype. Each block holds (conv_kernel-1, conv_dim/tp) conv state (the default "SD" layout, which the mixer
  transposes to (dim, state_len)) and (heads/tp, head_dim, state_size) SSM state; the two share one page per block
  (stride(0) = the page's bytes / the dtype's), block 0 is the null block, one block per sequence here.
- Prefill (`mamba_chunk_scan_combined_varlen`, vllm/model_executor/layers/mamba/ops/ssd_combined.py): x, B, C are
  views of causal_conv1d_fn's output; chunk metadata as Mamba2AttentionMetadataBuilder builds it
  (compute_varlen_chunk_metadata: ceil(seq_len / chunk_size) chunks per sequence); D, dt_bias, softplus, dt_limit
  (0, inf), state_dtype the SSM cache's, final states written into the SSM cache (no prefix-cache checkpoints).
  A fresh prefill has no initial states; a prefill continuing a sequence (chunked prefill, a prefix-cache hit) passes
  them (`prep_initial_states`: torch.where(..., ssm_state[indices], 0), fp32 (B, H, D, N)): HAS_INITSTATES is a
  constexpr of _state_passing_fwd_kernel and _chunk_scan_fwd_kernel (the mixer's _warmup_ssd_kernels says so), so
  that is a second entry. Five kernels, all @triton.autotune'd and launched through triton_helpers.launch_autotuned.
- `causal_conv1d_fn` (ops/causal_conv1d.py), prefill: x = hidden_states_B_C.transpose(0, 1), conv_weights
  (conv_dim/tp, conv_kernel), the conv bias (Nemotron-H: use_conv_bias true), "silu", the conv state, has_initial_state
  bool (B,), cache_indices int32 (B,), the metadata's nums_dict / batch_ptr as compute_causal_conv1d_metadata builds
  them (v1/attention/backends/utils.py, BLOCK_M 8), query_start_loc int32 (B+1).
- Decode (one token per sequence, no speculative decoding, no ReplaySSM): `causal_conv1d_update` on
  hidden_states_B_C (B, conv_dim/tp) with conv_state_indices (B, 1) and max_query_len 1; then
  `selective_state_update` as ssu_dispatch.TritonSSUBackend calls ops/mamba_ssm.py's (vLLM's default
  MambaConfig.backend is TRITON on CUDA; ssu_dispatch.initialize_mamba_ssu_backend overrides it only on a CPU
  platform, so no other kernel is chosen): A expanded (H, D, N) fp32, dt / dt_bias / D expanded over head_dim
  (stride 0), B/C (B, G, N), state_batch_indices (B, 1), is_blackwell the mixer's
  current_platform.is_device_capability_family(100), no stochastic rounding. Its BLOCK_SIZE_M / num_warps come from
  the wheel's configs/selective_state_update JSON for the device name, else vLLM's default heuristic.
"""

from __future__ import annotations

import ast
import functools
import importlib
import math
import re
import types

from tileprobe.audit.entries import LISTED
from tileprobe.audit import conv_rule, mamba_rule, vllm_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Point, empty, indptr, torch
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.models import AttentionConfig, SSMDims
from tileprobe.targets import Target

OPS = "vllm.model_executor.layers.mamba.ops."


# --- stand-ins (the engine's own code, read from the wheel's text, where the module itself cannot be served) ----

def _wheel_function(source: EngineSource, rel: str, name: str, scope: dict, owner: str | None = None):
    """The function `name` (a method of class `owner`) of the wheel's `rel`, executed in `scope`, undecorated."""
    body = ast.parse(source.read_text(rel)).body
    if owner is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module([node], []), rel, "exec"), scope)  # noqa: S102
    return scope[name]


def _platforms(target: Target, source: EngineSource) -> dict:
    """vllm_stand_ins' platform, with CudaPlatformBase.is_arch_support_pdl (vllm/platforms/cuda.py, read from the wheel:
    causal_conv1d's launch_pdl; the base Platform answers False)."""
    base = type(vllm_stand_ins.platforms(target, source)["current_platform"])
    pdl = _wheel_function(source, "vllm/platforms/cuda.py", "is_arch_support_pdl", {"torch": torch.load()},
                          owner="CudaPlatformBase")
    return {"current_platform": type("TargetCudaPlatform", (base,), {"is_arch_support_pdl": classmethod(pdl)})()}


def _backend_utils(target: Target, source: EngineSource) -> dict:
    """PAD_SLOT_ID and NULL_BLOCK_ID, read from vllm/v1/attention/backends/utils.py's text."""
    text = source.read_text("vllm/v1/attention/backends/utils.py")
    out = {}
    for n in ast.parse(text).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id in ("PAD_SLOT_ID", "NULL_BLOCK_ID"):
            out[n.targets[0].id] = ast.literal_eval(n.value)
    return out


def _platform_utils(target: Target, source: EngineSource) -> dict:
    """get_device_name_as_file_name from vllm/utils/platform_utils.py's text (the module imports the third-party
    `regex`; its one pattern, [\\s/]+, means the same to the standard `re`)."""
    fn = _wheel_function(source, "vllm/utils/platform_utils.py", "get_device_name_as_file_name", {"re": re})
    return {"get_device_name_as_file_name": functools.cache(fn)}


def _custom_ops(target: Target, source: EngineSource) -> dict:
    return {}  # mamba_ssm.py imports vllm._custom_ops for selective_scan_fn only (the CUDA op, not audited)


STAND_INS = {**vllm_stand_ins.STAND_INS, "vllm.platforms": _platforms, "vllm.v1.attention.backends.utils":
             _backend_utils, "vllm.utils.platform_utils": _platform_utils, "vllm._custom_ops": _custom_ops}
BASE_ALLOW = ("vllm.envs", "vllm.platforms.interface", "vllm.v1.attention.backends.registry")
SCAN_ALLOW = tuple(OPS + m for m in ("ssd_combined", "ssd_bmm", "ssd_chunk_scan", "ssd_chunk_state",
                                     "ssd_state_passing", "triton_helpers", "mamba_ssm")) + BASE_ALLOW
CONV_ALLOW = (OPS + "causal_conv1d",) + BASE_ALLOW
SSU_ALLOW = (OPS + "mamba_ssm", OPS + "triton_helpers") + BASE_ALLOW


# --- the mixer's tensors ---------------------------------------------------------------------------------------

def ssm_state_dtype(model: AttentionConfig):
    """The SSM cache's dtype: fp32 for Nemotron-H (NemotronHForCausalLMConfig's default), else the model's."""
    return torch.float32 if model.model_type == "nemotron_h" else getattr(torch, TORCH[model.dtype])


def per_rank(ssm: SSMDims, tp: int, name: str) -> tuple[int, int]:
    """(heads, groups) on one rank, as MambaMixer2 splits them."""
    if ssm.heads % tp:
        raise UsageError(f"--tp {tp}: {name}'s {ssm.heads} Mamba heads do not split over {tp} ranks")
    if ssm.groups % tp and ssm.groups != 1:
        raise UsageError(f"--tp {tp}: {name}'s {ssm.groups} Mamba groups do not split over {tp} ranks "
                         "(vLLM replicates only a single group)")
    groups = ssm.groups + (tp - ssm.groups if ssm.groups % tp else 0)
    return ssm.heads // tp, groups // tp


class _Mixer:
    """One rank's MambaMixer2 tensors for `tokens` tokens of `seqs` sequences (meta tensors)."""

    def __init__(self, model: AttentionConfig, pt: Point, tokens: int, seqs: int):
        s = model.ssm
        self.h, self.g = per_rank(s, pt.tp, model.name)
        self.s, self.dt = s, getattr(torch, TORCH[model.dtype])
        self.inter = self.h * s.head_dim
        self.conv = self.inter + 2 * self.g * s.state_size
        width = 2 * self.inter + 2 * self.g * s.state_size + self.h
        projected = empty((tokens, width), self.dt)
        self.hBC, self.dt_in = projected[:, self.inter:].split([self.conv, self.h], dim=-1)
        self.A = empty((self.h,), torch.float32)
        self.D, self.dt_bias = empty((self.h,), self.dt), empty((self.h,), self.dt)
        self.weight, self.bias = empty((self.conv, s.conv_kernel), self.dt), empty((self.conv,), self.dt)
        self.out = empty((tokens, self.inter), self.dt)
        slots, state_dt = seqs + 1, ssm_state_dtype(model)
        conv_elems, ssm_elems = (s.conv_kernel - 1) * self.conv, self.h * s.head_dim * s.state_size
        page = conv_elems * self.dt.itemsize + ssm_elems * state_dt.itemsize
        self.conv_state = empty((slots * page // self.dt.itemsize,), self.dt).as_strided(
            (slots, s.conv_kernel - 1, self.conv), (page // self.dt.itemsize, self.conv, 1)).transpose(-1, -2)
        self.ssm_state = empty((slots * page // state_dt.itemsize,), state_dt).as_strided(
            (slots, self.h, s.head_dim, s.state_size),
            (page // state_dt.itemsize, s.head_dim * s.state_size, s.state_size, 1))
        self.indices = torch.arange(1, seqs + 1, dtype=torch.int32)

    def split(self, hbc):
        """split_hidden_states_B_C_fn: x, B, C of the conv output."""
        return hbc.split([self.inter, self.g * self.s.state_size, self.g * self.s.state_size], dim=-1)


def _conv_metadata(pt: Point):
    """The metadata causal_conv1d_fn reads (compute_causal_conv1d_metadata, BLOCK_M 8)."""
    nums = torch.full((pt.batch,), -(-pt.seq_len // 8), dtype=torch.int64)
    tot = int(nums.sum())
    programs = max(1024, tot) * 2
    ptr = empty((programs,), torch.int32)
    offsets = torch.cat([torch.arange(int(n), dtype=torch.int32) for n in nums])
    entry = {"nums": nums, "tot": tot, "mlist": torch.repeat_interleave(torch.arange(pt.batch), nums),
             "mlist_len": tot, "offsetlist": offsets, "batch_ptr": ptr, "token_chunk_offset_ptr": ptr}
    return types.SimpleNamespace(nums_dict={8: entry}, batch_ptr=ptr, token_chunk_offset_ptr=ptr)


def _conv_out(m: _Mixer, tokens: int):
    """causal_conv1d_fn's output as the mixer sees it: empty_like(x) of x = hidden_states_B_C.T, transposed back."""
    return torch.empty_like(m.hBC.transpose(0, 1)).transpose(0, 1)[:tokens]


def _vllm_conv1d(model: AttentionConfig, pt: Point):
    t = pt.batch * pt.seq_len
    m = _Mixer(model, pt, t, pt.batch)
    return (m.hBC.transpose(0, 1), m.weight, m.bias), dict(
        activation="silu", conv_states=m.conv_state, has_initial_state=torch.zeros(pt.batch, dtype=torch.bool),
        cache_indices=m.indices, metadata=_conv_metadata(pt), query_start_loc=indptr(pt.batch, pt.seq_len))


def _scan(model: AttentionConfig, pt: Point, continued: bool):
    t, chunk = pt.batch * pt.seq_len, model.ssm.chunk_size
    m = _Mixer(model, pt, t, pt.batch)
    x, B, C = m.split(_conv_out(m, t))
    nchunks = pt.batch * math.ceil(pt.seq_len / chunk)
    i32 = torch.int32
    init = empty((pt.batch, m.h, m.s.head_dim, m.s.state_size), m.ssm_state.dtype) if continued else None
    args = (x.view(t, m.h, m.s.head_dim), m.dt_in, m.A, B.view(t, m.g, -1), C.view(t, m.g, -1))
    return args, dict(
        chunk_size=chunk, D=m.D, z=None, dt_bias=m.dt_bias, seq_idx=empty((nchunks,), i32),
        cu_seqlens=indptr(pt.batch, pt.seq_len), cu_chunk_seqlens=empty((nchunks + 1,), i32),
        last_chunk_indices=empty((pt.batch,), i32), initial_states=init, return_intermediate_states=False,
        dt_softplus=True, dt_limit=(0.0, float("inf")), out=m.out.view(t, -1, m.s.head_dim),
        state_dtype=m.ssm_state.dtype, final_states_out=m.ssm_state, final_state_indices=m.indices)


def _vllm_conv1d_update(model: AttentionConfig, pt: Point):
    m = _Mixer(model, pt, pt.batch, pt.batch)
    idx = m.indices[:, None]
    return (m.hBC, m.conv_state, m.weight, m.bias, "silu"), dict(
        conv_state_indices=idx, num_accepted_tokens=None, query_start_loc=None, max_query_len=idx.size(-1))


def _vllm_ssu(model: AttentionConfig, pt: Point):
    m = _Mixer(model, pt, pt.batch, pt.batch)
    d, n = m.s.head_dim, m.s.state_size
    x, B, C = m.split(m.hBC)  # causal_conv1d_update writes its output into its input
    idx = m.indices[:, None]
    # the mixer's own test, asked of the session's platform (the arguments are built inside the entry's session)
    blackwell = importlib.import_module("vllm.platforms").current_platform.is_device_capability_family(100)
    args = (m.ssm_state, x.view(-1, m.h, d), m.dt_in[:, :, None].expand(-1, -1, d),
            m.A[:, None, None].expand(-1, d, n).to(torch.float32), B.view(-1, m.g, n), C.view(-1, m.g, n),
            m.D[:, None].expand(-1, d), m.dt_bias[:, None].expand(-1, d))
    return args, dict(dt_softplus=True, state_batch_indices=idx, dst_state_batch_indices=idx,
                      out=m.out.view(pt.batch, -1, d), num_accepted_tokens=None, cu_seqlens=None,
                      is_blackwell=blackwell, enable_stochastic_rounding=False, cache_philox_rounds=0)


def has_ssm(model: AttentionConfig) -> str | None:
    return None if model.ssm else "no Mamba-2 layers (config.json hybrid_override_pattern has no M)"


def _entry(name, module, launcher, allow, arguments, dtype_rule, predict=None):
    return AuditKernel(name, "vllm", LISTED, OPS + module, launcher, allow, STAND_INS, arguments, has_ssm,
                       dtype_rule, windowed=False, compile_from="module", predict=predict)


_SCAN_DTYPE = ("x/B/C/dt in the model's dtype; A, dA_cumsum, chunk states and CB in fp32; the states passed and "
               "written in the SSM cache's dtype (fp32 for Nemotron-H)")
ENTRIES = (
    _entry("vllm-mamba2-chunk-scan", "ssd_combined", "mamba_chunk_scan_combined_varlen", SCAN_ALLOW,
           lambda model, pt: _scan(model, pt, False), _SCAN_DTYPE + "; a fresh prefill (no initial states)",
           mamba_rule.predict),
    _entry("vllm-mamba2-chunk-scan-continued", "ssd_combined", "mamba_chunk_scan_combined_varlen", SCAN_ALLOW,
           lambda model, pt: _scan(model, pt, True), _SCAN_DTYPE + "; a continued prefill (initial states)",
           mamba_rule.predict),
    _entry("vllm-mamba2-causal-conv1d", "causal_conv1d", "causal_conv1d_fn", CONV_ALLOW, _vllm_conv1d,
           "the model's dtype (x is cast to the conv state's, the model's dtype)", conv_rule.predict),
    _entry("vllm-mamba2-causal-conv1d-update", "causal_conv1d", "causal_conv1d_update", CONV_ALLOW,
           _vllm_conv1d_update, "the model's dtype (the conv state's)", conv_rule.predict),
    _entry("vllm-mamba2-selective-state-update", "mamba_ssm", "selective_state_update", SSU_ALLOW, _vllm_ssu,
           "x/B/C/dt in the model's dtype, A fp32, the state in the SSM cache's dtype (fp32 for Nemotron-H)",
           conv_rule.predict),
)
