"""vLLM's ViT attention through its own Triton path (vit_attn_wrappers.triton_attn_wrapper -> context_attention_fwd),
where the engine's own ViT backend pick or --mm-encoder-attn-backend TRITON_ATTN puts it. vLLM 0.34.0 fits BLOCK to
the opt-in limit (`_fit_block_to_shared_memory`, halving until its estimate fits); 0.33.0 does not. On sm_120 a
bf16 vision head of 256 is the case that tells them apart: 0.33.0's BLOCK 128 launch asks more than 101376 B and
0.34.0's branch halves it to a launch that fits, each as Triton's own allocation sizes it."""

from __future__ import annotations

import random

import pytest

from tileprobe.audit.run import AuditOptions, run_audit
from tileprobe.engines import locate
from tileprobe.models import AttentionConfig, VisionDims


def _wheel(version: str) -> str:
    found = [p.wheel for p in locate.releases("vllm") if p.wheel is not None and p.version == version]
    if not found:
        pytest.skip(f"no cached vllm {version} wheel (tileprobe engines fetch vllm=={version})")
    return str(found[0])


def test_the_engines_own_pick_is_flash_attn_and_triton_runs_only_when_asked(tmp_path):
    cfg = tmp_path / "m.json"
    cfg.write_text('{"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128, '
                   '"hidden_size": 1024, "torch_dtype": "bfloat16", '
                   '"vision_config": {"num_attention_heads": 16, "hidden_size": 4096}}')
    res = run_audit(AuditOptions("vllm", str(cfg), "rtx-pro-6000", batches=(1,), out=tmp_path / "default",
                                 kernels=("vllm-vit-attention",), engine_wheel=_wheel("0.33.0")))
    assert not any(r.get("kernel") == "_fwd_kernel" for r in res.rows if r["verdict"] != "not-selected")
    assert any("FLASH_ATTN ViT" in note for note in res.notes), res.notes


@pytest.mark.parametrize("version,fits", [("0.33.0", False), ("0.34.0", True)])
def test_fit_block_is_taken_on_sm120_in_0_34_only(tmp_path, version, fits):
    heads = random.choice([8, 16])
    cfg = tmp_path / "m.json"
    cfg.write_text('{"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128, '
                   '"hidden_size": 1024, "torch_dtype": "bfloat16", '
                   f'"vision_config": {{"num_attention_heads": {heads}, "hidden_size": {heads * 256}}}}}')
    res = run_audit(AuditOptions("vllm", str(cfg), "rtx-pro-6000", batches=(1,), seq_lens=(random.randint(512, 4096),),
                                 out=tmp_path / version, kernels=("vllm-vit-attention",),
                                 engine_wheel=_wheel(version), mm_encoder_attn_backend="TRITON_ATTN"))
    (row,) = [r for r in res.rows if r.get("kernel") == "_fwd_kernel"]
    assert (row["verdict"] == "fits") is fits, row
    assert (row["smem_bytes"] <= 101376) is fits, row
    assert row["block_m"] == (64 if fits else 128), row
    assert ("triton_prefill_attention.py:342 if current_platform.is_cuda():" in row["reason"]) is fits, row["reason"]
