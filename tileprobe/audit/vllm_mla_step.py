"""vLLM's Triton MLA decode as its impl runs it, for the `vllm-mla-decode` audit entry (AuditKernel.drive): the
engine's own `TritonMLAImpl` (vllm/v1/attention/backends/mla/triton_mla.py) is constructed as the MLA attention
layer constructs it and its `forward_mqa` is called, so the engine forms the call of `decode_attention_fwd`: q
concatenated from the layer's (ql_nope, q_pe), o / lse in q's dtype, num_kv_splits from its `_compute_num_kv_splits`
over the batch's longest sequence and the device's SM count (its `__init__` reads `num_compute_units()`), the split-K
scratch (B, H, splits, rank + 1) fp32, the paged latent cache with a head axis added and its rank view, PAGE_SIZE the
cache's block size, the layer's `_k_scale` for both scales, and whatever a later release adds (0.34.0's decode sliding
window).

The impl's module imports the engine's whole MLA layer (vllm/model_executor/layers/attention/mla_attention.py: the
linear and quantization layers, the forward context, the prefill backends), so it is not imported: the three classes
the impl is made of are compiled from the wheel's own text (tileprobe.audit.engine_code's way), each with the methods
the decode runs and nothing else:
- `MLACommonBaseImpl.__init__` and `MLACommonImpl.__init__` (mla_attention.py), `TritonMLAImpl`'s class attributes,
  `__init__` and `forward_mqa` (triton_mla.py), chained as in the engine on the served
  `vllm.v1.attention.backend.MLAAttentionImpl` (whose `__new__` sets the context-parallel sizes: one rank);
- annotations are dropped (they are evaluated at definition in these files and name the layers not imported), and each
  class's bases are the chain above (the engine's are the same classes, subscripted by their metadata type).

Stood in, each only read by what the decode does not launch:
- `has_flashinfer()` False: MLACommonImpl.__init__ uses it to pick FlashInfer's `concat_mla_k` for the prefill;
- `get_current_vllm_config()`: a config whose `parallel_config.decode_context_parallel_size` is 1 (vLLM's default,
  which MLACommonImpl.__init__ reads as the impl's dcp_world_size); TritonMLAImpl also keeps it for
  `reserve_workspace`, not called here;
- `is_workspace_manager_initialized()` False: forward_mqa then allocates the split-K scratch itself, the same shape
  and dtype as the workspace slice the model runner would hand it (a contiguous fp32 tensor).

What tileprobe sets (each guarded by the release's manifest, which hashes the files read here):
- the impl's arguments, as MLAAttention's `__init__` passes them (num_kv_heads 1, head_size kv_lora_rank +
  qk_rope_head_dim, no sliding window, kv_cache_dtype "auto", attn_type DECODER, the model's MLA dims, no kv_b_proj:
  the decode does not use it);
- the decode batch: `pt.batch` requests, one query token each after `pt.seq_len` tokens; the metadata's decode block
  table int32 (blocks of 16, vLLM's default block size, which TritonMLABackend's MultipleOf(16) takes) and seq_lens
  int32, its max_seq_len, causal (the MLA metadata builder is not driven);
- the layer: its `_k_scale`, an fp32 scalar tensor.
"""

from __future__ import annotations

import ast
import math
from types import SimpleNamespace

from tileprobe.audit import engine_code
from tileprobe.audit.entry import TORCH, Point, empty, heads, torch
from tileprobe.models import AttentionConfig

MLA_COMMON = "vllm/model_executor/layers/attention/mla_attention.py"
TRITON_MLA = "vllm/v1/attention/backends/mla/triton_mla.py"
CHAIN = ((MLA_COMMON, "MLACommonBaseImpl", ("__init__",), "MLAAttentionImpl"),
         (MLA_COMMON, "MLACommonImpl", ("__init__",), "MLACommonBaseImpl"),
         (TRITON_MLA, "TritonMLAImpl", ("__init__", "forward_mqa"), "MLACommonImpl"))
BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
CONFIG = SimpleNamespace(parallel_config=SimpleNamespace(decode_context_parallel_size=1))  # vllm/config/parallel.py
# the files whose text is compiled here (not served, not imported): hashed by the release's manifest
READS = ("vllm.model_executor.layers.attention.mla_attention", "vllm.v1.attention.backends.mla.triton_mla",
         "vllm.config.cache", "vllm.config.parallel")


class _Unannotated(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        node.returns = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign([node.target], node.value), node)


def _class(source, file: str, name: str, methods: tuple[str, ...], base: str) -> ast.ClassDef:
    """The engine's class `name` of `file` with only `methods` (and its class attributes that have values),
    annotations dropped, and `base` as its one base."""
    tree = ast.parse(source.read_text(file))
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:
        raise LookupError(f"{source.label()} {file} has no class {name}")
    body = []
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in methods:
            stmt.decorator_list = []
            body.append(_Unannotated().visit(stmt))
        elif isinstance(stmt, ast.Assign) or isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            body.append(ast.Assign([stmt.target], stmt.value, lineno=stmt.lineno) if isinstance(stmt, ast.AnnAssign)
                        else stmt)
    missing = set(methods) - {s.name for s in body if isinstance(s, ast.FunctionDef)}
    if missing:
        raise LookupError(f"{source.label()} {file} {name} has no {', '.join(sorted(missing))}")
    node.body, node.bases, node.keywords, node.decorator_list = body, [ast.Name(base, ast.Load())], [], []
    return node


def impl_class(session) -> type:
    """TritonMLAImpl of the session's release, compiled from the wheel's text on its served base (module docstring)."""
    backend = session.module("vllm.v1.attention.backend")
    scope = {
        "torch": torch, "math": math,
        "MLAAttentionImpl": backend.MLAAttentionImpl, "AttentionType": backend.AttentionType,
        "envs": session.module("vllm.envs"),
        "current_platform": session.module("vllm.platforms").current_platform,
        "rocm_aiter_ops": session.module("vllm._aiter_ops").rocm_aiter_ops,
        "is_quantized_kv_cache": session.module("vllm.v1.kv_cache_interface").is_quantized_kv_cache,
        "decode_attention_fwd": session.module("vllm.v1.attention.ops.triton_decode_attention").decode_attention_fwd,
        "has_flashinfer": lambda: False,
        "get_current_vllm_config": lambda: CONFIG,
        "is_workspace_manager_initialized": lambda: False,
    }
    kv = session.module("vllm.v1.kv_cache_interface")
    if hasattr(kv, "get_kv_cache_spec_sliding_window"):
        scope["get_kv_cache_spec_sliding_window"] = kv.get_kv_cache_spec_sliding_window
    scope |= engine_code.top_level(session.source, TRITON_MLA, ("_MIN_WORK_PER_SPLIT", "_SPLIT_OCCUPANCY_MULTIPLIER",
                                                                "_compute_num_kv_splits"),
                                   {"triton": session.module("vllm.triton_utils").triton})
    for file, name, methods, base in CHAIN:
        node = _class(session.source, file, name, methods, base)
        code = compile(ast.fix_missing_locations(ast.Module([node], [])), f"<{session.source.label()}>/{file}", "exec")
        exec(code, scope)  # noqa: S102 - the engine's own text, from its wheel
    return scope["TritonMLAImpl"]


def mla_decode(session, model: AttentionConfig, pt: Point) -> None:
    """One MLA layer's decode step: TritonMLAImpl constructed and its forward_mqa called (module docstring)."""
    cls = impl_class(session)
    decoder = session.module("vllm.v1.attention.backend").AttentionType.DECODER
    h, _ = heads(model, pt.tp)
    rank, rope, nope = model.kv_lora_rank, model.qk_rope_head_dim, model.qk_nope_head_dim
    impl = cls(num_heads=h, head_size=rank + rope, scale=1.0 / math.sqrt(nope + rope), num_kv_heads=1,
               alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None, attn_type=decoder,
               kv_sharing_target_layer_name=None, q_lora_rank=getattr(model, "q_lora_rank", None), kv_lora_rank=rank,
               qk_nope_head_dim=nope, qk_rope_head_dim=rope, qk_head_dim=nope + rope, v_head_dim=model.v_head_dim,
               kv_b_proj=None)
    dt, b = getattr(torch, TORCH[model.dtype]), pt.batch
    per_seq = -(-pt.seq_len // BLOCK_SIZE)
    decode = SimpleNamespace(block_table=torch.zeros((b, per_seq), dtype=torch.int32),
                             seq_lens=torch.full((b,), pt.seq_len, dtype=torch.int32))
    metadata = SimpleNamespace(decode=decode, max_seq_len=pt.seq_len, causal=True)
    cache = empty((b * per_seq, BLOCK_SIZE, rank + rope), dt)
    layer = SimpleNamespace(_k_scale=empty((), torch.float32))
    impl.forward_mqa((empty((b, h, rank), dt), empty((b, h, rope), dt)), cache, metadata, layer)
