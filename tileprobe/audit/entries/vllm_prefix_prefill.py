"""vLLM's prefix-prefill attention launcher, as a tileprobe audit entry.

`context_attention_fwd` (vllm/v1/attention/ops/prefix_prefill.py; its `_fwd_kernel` launch, the ALiBi kernel only
with alibi slopes) has one caller in the release: `chunked_prefill_paged_decode`
(vllm/v1/attention/ops/chunked_prefill_paged_decode.py, `if max_query_len > 1:`), which only
`RocmAttentionImpl.forward` calls (vllm/v1/attention/backends/rocm_attn.py, the ROCM_ATTN backend). ROCm's platform
lists ROCM_ATTN among its backends (vllm/platforms/rocm.py `backends.append(AttentionBackendEnum.ROCM_ATTN)`);
CUDA's never does: vllm/platforms/cuda.py `_get_backend_priorities` lists FLASH_ATTN, FLASHINFER, TRITON_ATTN,
FLEX_ATTENTION, TURBOQUANT (and TRITON_FLASHINFER / TRITON_FLASH_ATTN for multimodal prefixes) for MHA/GQA, none of
them ROCM_ATTN. (vLLM's CUDA Triton backend, TRITON_ATTN, calls another context_attention_fwd, of
triton_prefill_attention.py, and only for encoder attention.) So on the CUDA targets tileprobe audits, vLLM runs
this kernel only where a user forces `--attention-backend ROCM_ATTN`, which this entry does not model: `chooses`
reads CUDA's priority function from the wheel and answers Elsewhere (its line, and the backends it lists) while
ROCM_ATTN is not among them; the launch is still captured and compiled, so the row says what it would need.

The arguments are chunked_prefill_paged_decode's, as RocmAttentionImpl.forward passes them for a prefill batch
(`_arguments`): q / the new k, v / o (T, H or KV, D) in the model's dtype; kv_cache_dtype "auto"; the cache
(blocks, 2, block_size, KV*D), K/V-group-first, split by PagedAttention.split_kv_cache (vllm/v1/attention/ops/
paged_attn.py) into key_cache (blocks, KV, D/x, block_size, x), x = 16 // element size, and value_cache (blocks, KV,
D, block_size); block_table int32 (B, blocks per sequence); query_start_loc int32 (B+1); seq_lens int32 (B);
k/v scale the layer's 0-dim fp32 tensors; no ALiBi; sliding_window = 1 + the layer's left span (the window, 0
for full layers); skip_decode True; no fp8 output scale; no sinks (ROCM_ATTN: supports_sink False); interleaved V
off (RocmAttentionImpl's default); causal. Each sequence is a first chunk of seq_len tokens (no cached prefix:
the context loop's trip count is a runtime value, no constexpr of the launch depends on it). Compiled from the
engine's own module (the kernel calls the file's _paged_kv_cache_offsets and its defaults read float8_info).
"""

from __future__ import annotations

import ast
import math

from tileprobe.audit.entries import LISTED
from tileprobe.audit import vllm_stand_ins
from tileprobe.audit.entry import TORCH, AuditKernel, Elsewhere, Point, empty, heads, indptr, not_mla, torch
from tileprobe.models import AttentionConfig

BLOCK_SIZE = 16  # ROCM_ATTN's kernel block size: MultipleOf(16) (get_supported_kernel_block_sizes); the default 16
PRIORITIES = ("vllm/platforms/cuda.py", "_get_backend_priorities")


def _arguments(model: AttentionConfig, pt: Point):
    h, kv = heads(model, pt.tp)
    d, dt, b = model.head_dim, getattr(torch, TORCH[model.dtype]), pt.batch
    t, per_seq = b * pt.seq_len, -(-pt.seq_len // BLOCK_SIZE)
    cache = empty((2, b * per_seq, BLOCK_SIZE, kv * d), dt)  # the cache, transposed to K/V first (physical order)
    x = 16 // cache.element_size()
    key_cache = cache[0].view(b * per_seq, kv, d // x, -1, x)
    value_cache = cache[1].view(b * per_seq, kv, d, -1)
    scale = empty((), torch.float32)
    kwargs = dict(q=empty((t, h, d), dt), k=empty((t, kv, d), dt), v=empty((t, kv, d), dt), o=empty((t, h, d), dt),
                  kv_cache_dtype="auto", k_cache=key_cache, v_cache=value_cache,
                  b_loc=torch.empty((b, per_seq), dtype=torch.int32), b_start_loc=indptr(b, pt.seq_len),
                  b_seq_len=torch.full((b,), pt.seq_len, dtype=torch.int32), max_seq_len=pt.seq_len,
                  max_input_len=pt.seq_len, k_scale=scale, v_scale=scale, alibi_slopes=None,
                  sliding_window=pt.window or 0, sm_scale=1.0 / math.sqrt(d), skip_decode=True, fp8_out_scale=None,
                  sinks=None, interleaved_v_pack_factor=0, causal=True)
    return (), kwargs


def _serves(model: AttentionConfig) -> str | None:
    if model.sinks:
        return "attention sinks: vLLM's ROCM_ATTN backend, this kernel's only caller, has supports_sink False"
    return not_mla(model)


def _enum_names(node) -> list[str]:
    return [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "AttentionBackendEnum"]


def cuda_backends(text: str) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """The line of vLLM's CUDA backend-priority function in `text` (vllm/platforms/cuda.py), every backend it names
    (AttentionBackendEnum.X) and those of its MHA/GQA branch (the `else` of its `if use_mla:`), in order."""
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == PRIORITIES[1])
    mla = next((n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "use_mla"), None)
    mha = [x for stmt in (mla.orelse if mla else [fn]) for x in _enum_names(stmt)]
    return fn.lineno, tuple(dict.fromkeys(_enum_names(fn))), tuple(dict.fromkeys(mha))


def _chooses(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """Elsewhere on a CUDA target while vLLM's CUDA backend priorities never name ROCM_ATTN."""
    if session.module("vllm.platforms").current_platform.is_rocm():
        return None
    line, every, mha = cuda_backends(session.source.read_text(PRIORITIES[0]))
    if "ROCM_ATTN" in every:
        return None
    return Elsewhere(f"the attention backend vLLM's CUDA platform picks (MHA/GQA: {', '.join(mha)}); prefix_prefill's "
                     "context_attention_fwd runs only under ROCM_ATTN (rocm_attn.py, through "
                     "chunked_prefill_paged_decode)", f"{PRIORITIES[0]}:{line}",
                     f"def {PRIORITIES[1]}(...): no ROCM_ATTN among its backends")


ENTRIES = (
    AuditKernel("vllm-prefix-prefill", "vllm", LISTED, "vllm.v1.attention.ops.prefix_prefill",
                "context_attention_fwd", ("vllm.v1.attention.ops.prefix_prefill", "vllm.platforms.interface",
                                          "vllm.v1.attention.backends.registry"),
                vllm_stand_ins.STAND_INS, _arguments, _serves,
                "the model's dtype (the layer's query, new K/V and KV cache, kv_cache_dtype auto)",
                chooses=_chooses, compile_from="module", backend="ROCM_ATTN"),
)
