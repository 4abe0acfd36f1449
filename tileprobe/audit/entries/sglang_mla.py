"""SGLang's Triton MLA attention (DeepSeek-V3 / Kimi-K2) and its SM120 sparse MLA decode (DeepSeek-V4), as
tileprobe audit entries. SGLang's default attention backend for an MLA model on sm_120 is "triton"
(sglang/srt/arg_groups/model_override_base.py get_default_attn_backend: MLA, neither Hopper nor sm_100 nor ROCm).

The three dense entries are driven through SGLang's own attention step, `TritonAttnBackend` with `use_mla`
(model_config.attention_arch == AttentionArch.MLA), as the DeepSeek-V2 model calls it
(tileprobe.audit.sglang_backend.mla_attention, which says what the model runner, the latent KV pool and the batch
are): `init_forward_metadata`, the engine's own `handle_attention_triton` (deepseek_common/attention_backend_handler.py,
read from the wheel) picking the layer, then that `RadixAttention` layer's forward into `forward_extend` /
`forward_decode`. So the engine forms every argument: `max_kv_splits` (TritonAttnBackend.__init__: the
`--triton-attention-num-kv-splits` default raised by the engine's `_mla_decode_kv_splits_cap` with the target's SM
count and the runner's context length), the per-sequence split launch (`get_num_kv_splits_triton`), the split-K
scratch, has_mla, use_pdl (`is_arch_support_pdl`: on from sm_90), the pool views, the indptrs and the extend
kernel's arguments.

- `sglang-mla-decode`: `decode_attention_fwd` (sglang/kernels/ops/attention/decode_attention.py) at the `decode`
  phase, for the absorbed `attn_mqa` layer (deepseek_v2.py: head dim kv_lora_rank + qk_rope_head_dim, one KV head,
  v_head_dim kv_lora_rank; forward_mla.py forward_absorb_core, triton not being a FORWARD_ABSORB_CORE_ATTENTION_BACKENDS
  backend) over the MLATokenToKVPool buffer and its [..., :rank] value view.
- `sglang-mla-extend-absorbed`: `extend_attention_fwd` (sglang/kernels/ops/attention/extend_attention.py) at the
  `extend` phase (seq_len new tokens after a cached prefix of seq_len), where handle_attention_triton picks MLA (an
  extend with prefix lengths): `attn_mqa` as above.
- `sglang-mla-extend-mha`: the same launcher at the `prefill` phase (no prefix), where handle_attention_triton picks
  MHA: `attn_mha` (deepseek_v2.py: head dim qk_nope+rope, H KV heads, v_head_dim; forward_mha.py forward_normal_core,
  save_kv_cache False), still over the MLA pool's buffers.
- `sglang-mla-sparse-decode`: `_run_triton_sparse_decode` (sglang/kernels/ops/attention/flash_mla_sm120_triton.py,
  @triton.autotune `_tiled_sparse_decode_kernel`) as flash_mla_sparse_decode_triton calls it for the sliding-window
  cache, reached from sglang/srt/layers/attention/deepseek_v4_backend.py `_forward_attention` (DeepSeek-V4:
  config.json model_type deepseek_v4, attention backend forced to dsv4 by arg_groups/model_overrides/deepseek_v4.py)
  through flash_mla_sm120.flash_mla_with_kvcache_sm120 on sm_12x only, and only with
  SGLANG_SM120_FLASHMLA_BACKEND=triton (environ.py: default "flashinfer"); the entry's `chooses` runs the engine's own
  `_sm120_default_backend`: q (B, 1, H', 512) bf16 (H' = the heads, padded to 64 under attention TP:
  deepseek_v4.py _kernel_num_heads), the SWA cache: the pool's uint8 (pages, ceil(256 * 584 / 576) * 576) buffer
  (deepseek_v4_memory_pool.py create_buffer, V4 layout, 256-token pages: kv_cache_configurator.py asserts it) viewed
  as (pages, 256, 1, 584); indices int32 (B, 1, window padded to 64), topk_length int32 (B,), softmax_scale
  head_dim^-0.5 (deepseek_v4_backend.py).
"""

from __future__ import annotations

from tileprobe.audit.entries import LISTED
from tileprobe.audit import attention_rule, sglang_backend
from tileprobe.audit.entries.sglang_attention import DRIVEN_ALLOW, DRIVEN_STAND_INS, SGLANG_STAND_INS
from tileprobe.audit.entry import AuditKernel, Elsewhere, Point, empty, torch
from tileprobe.models import AttentionConfig

STAND_INS = SGLANG_STAND_INS  # the sparse decode's
V4_MODEL_TYPE = "deepseek_v4"  # sglang/srt/configs/deepseek_v4.py model_type


def _mla(model: AttentionConfig) -> str | None:
    if not model.mla:
        return "not an MLA model (config.json has no kv_lora_rank)"
    if model.model_type == V4_MODEL_TYPE:
        return "DeepSeek-V4: SGLang runs it on its dsv4 attention backend, not the Triton MLA one"
    return None


def _v4(model: AttentionConfig) -> str | None:
    return None if model.model_type == V4_MODEL_TYPE else \
        f"not DeepSeek-V4 (config.json model_type {V4_MODEL_TYPE}): SGLang reaches its SM120 sparse MLA decode " \
        "only from the DeepSeek-V4 attention backend"


# DeepSeek-V4's SWA cache, as deepseek_v4_memory_pool.py lays it out (KVLayout.V4) and the backend views it
V4_PAGE = 256  # SWA page size: kv_cache_configurator.py asserts page_size == 256
V4_TOKEN_BYTES = 448 + 64 * 2 + 448 // 64 + 1  # fp8 nope + bf16 rope + UE8M0 scales + pad (create_buffer's assert)
V4_PAGE_ALIGN = 576  # page bytes padded to a multiple of 576 (create_buffer's assert)
V4_WINDOW = 128  # configs/deepseek_v4.py window_size, when config.json has no sliding_window


def _sparse_decode(model: AttentionConfig, pt: Point):
    h = model.heads // pt.tp
    kernel_heads = h if pt.tp == 1 else (64 if h <= 64 else model.heads)  # deepseek_v4.py _kernel_num_heads
    b, d = pt.batch, model.head_dim
    page_bytes = -(-V4_PAGE * V4_TOKEN_BYTES // V4_PAGE_ALIGN) * V4_PAGE_ALIGN
    pages = b * -(-pt.seq_len // V4_PAGE)
    cache = empty((pages, page_bytes), torch.uint8)[:, :V4_PAGE * V4_TOKEN_BYTES].view(pages, V4_PAGE, 1,
                                                                                        V4_TOKEN_BYTES)
    topk = -(-(model.sliding_window or V4_WINDOW) // 64) * 64
    q = empty((b, kernel_heads, d), torch.bfloat16).unsqueeze(1)
    return (q, cache, torch.zeros((b, 1, topk), dtype=torch.int32), torch.full((b,), topk, dtype=torch.int32),
            d ** -0.5), {}


FLASH_MLA_SM120 = "sglang.kernels.ops.attention.flash_mla_sm120"
V4_BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"


def _line_of(text: str, needle: str, anchor: str, before: bool = False) -> int:
    """The line of `needle`: its first occurrence after `anchor`, or its last before it."""
    at = text.index(anchor)
    return text.count("\n", 0, text.rindex(needle, 0, at) if before else text.index(needle, at)) + 1


def _sparse_chooses(session, model: AttentionConfig, pt: Point) -> Elsewhere | None:
    """The engine's own selection: deepseek_v4_backend.py takes flash_mla_with_kvcache_sm120 on sm_12x only
    (get_platform().is_sm120: capability major 12), which runs the Triton kernel only when flash_mla_sm120's
    `_sm120_default_backend` (SGLANG_SM120_FLASHMLA_BACKEND, read by the engine's envs under the session) is
    "triton"."""
    if session.target.cc_int // 10 != 12:
        text = session.source.read_text(V4_BACKEND)
        test = "if get_platform().is_sm120:"
        return Elsewhere("FlashMLA's CUDA sparse decode (flash_mla_with_kvcache)",
                         f"{V4_BACKEND}:{_line_of(text, test, 'flash_mla_with_kvcache_sm120', before=True)}", test)
    chosen = session.module(FLASH_MLA_SM120)._sm120_default_backend
    if chosen == "triton":
        return None
    path = FLASH_MLA_SM120.replace(".", "/") + ".py"
    text = session.source.read_text(path)
    test = 'if _sm120_default_backend == "flashinfer":' if chosen == "flashinfer" else \
        'if _sm120_default_backend == "triton":'
    runs = {"flashinfer": "FlashInfer's SM120 sparse MLA decode (_flash_mla_flashinfer)"}.get(
        chosen, "the PyTorch fallback (_sm120_sparse_decode_fwd)")
    return Elsewhere(f"{runs}: SGLANG_SM120_FLASHMLA_BACKEND={chosen}",
                     f"{path}:{_line_of(text, test, 'def flash_mla_with_kvcache_sm120')}", test)


READS = sglang_backend.READS + sglang_backend.MLA_READS

ENTRIES = (
    AuditKernel("sglang-mla-decode", "sglang", LISTED, "sglang.kernels.ops.attention.decode_attention",
                "decode_attention_fwd", DRIVEN_ALLOW, DRIVEN_STAND_INS, None, _mla,
                "the model's dtype (the latent KV pool); split-K partials in fp32", windowed=False, backend="triton",
                predict=attention_rule.predict, drive=sglang_backend.mla_attention, phases=("decode",), reads=READS),
    AuditKernel("sglang-mla-extend-absorbed", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", DRIVEN_ALLOW, DRIVEN_STAND_INS, None, _mla,
                "the model's dtype (q, the latent k/v and pool)", windowed=False, backend="triton",
                predict=attention_rule.predict, drive=sglang_backend.mla_attention, phases=("extend",), reads=READS),
    AuditKernel("sglang-mla-extend-mha", "sglang", LISTED, "sglang.kernels.ops.attention.extend_attention",
                "extend_attention_fwd", DRIVEN_ALLOW, DRIVEN_STAND_INS, None, _mla,
                "the model's dtype (the up-projected q/k/v)", windowed=False, backend="triton",
                predict=attention_rule.predict, drive=sglang_backend.mla_attention, phases=("prefill",), reads=READS),
    AuditKernel("sglang-mla-sparse-decode", "sglang", LISTED,
                "sglang.kernels.ops.attention.flash_mla_sm120_triton", "_run_triton_sparse_decode",
                ("sglang.kernels.ops.attention.flash_mla_sm120_triton", FLASH_MLA_SM120, "sglang.srt.environ"),
                STAND_INS, _sparse_decode, _v4, "bf16 q and output, the fp8/uint8/bf16 views of the V4 cache",
                windowed=False, chooses=_sparse_chooses),
)
