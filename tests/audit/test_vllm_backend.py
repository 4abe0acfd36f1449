"""vLLM's TRITON_ATTN step driven through the backend's own metadata builder and impl (tileprobe.audit.vllm_backend):
the engine, not tileprobe, picks the decode path. A decode batch under the builder's `seq_threshold_3D` runs the 3D
launch and `reduce_segments`, with 64 softmax segments on capability 12.0 where the 16-segment grid under-fills the
SMs and 16 elsewhere; a prefill batch runs the 2D launch alone. Before the driver, no audit had a decode row."""

from __future__ import annotations

from tileprobe.audit import kernels
from tileprobe.audit.run import AuditOptions, run_audit
from tileprobe.models import AttentionConfig
from tileprobe.targets import profile

from _engine_own import captured

ENTRY = kernels.KERNELS["vllm-unified-attention"]


def _step(vllm, target: str, model, point) -> dict:
    return {la.kernel: la for la in captured(vllm, profile(target), ENTRY, model, point)}


def test_decode_runs_the_3d_launch_and_reduce_segments_the_builder_sizes_per_capability(vllm, rng):
    kv = rng.choice([4, 8])
    model = AttentionConfig("m", kv * rng.choice([1, 2, 8]), kv, rng.choice([64, 128]))
    seq = rng.randint(256, 8192)
    prefill = _step(vllm, "rtx-pro-6000", model, kernels.Point(rng.randint(1, 8), seq))
    assert set(prefill) == {"reshape_and_cache_kernel_flash", "kernel_unified_attention"}, sorted(prefill)
    assert len(prefill["kernel_unified_attention"].grid) == 2
    segments = {}
    for target in ("rtx-pro-6000", "dgx-spark-gb10", "h200"):
        step = _step(vllm, target, model, kernels.Point(1, seq, phase="decode"))
        assert set(step) == {"reshape_and_cache_kernel_flash", "kernel_unified_attention", "reduce_segments"}, target
        attention, reduce = step["kernel_unified_attention"], step["reduce_segments"]
        assert len(attention.grid) == 3 and attention.grid[2] == attention.arg("NUM_SEGMENTS_PER_SEQ"), attention.grid
        assert reduce.arg("NUM_SEGMENTS_PER_SEQ") == attention.grid[2]
        segments[target] = attention.grid[2]
    # vllm/v1/attention/backends/triton_attn.py: 64 segments only where is_device_capability((12, 0)) and one
    # request's 16-segment grid leaves SMs idle (188 SMs, kv heads 4 or 8); 12.1 and 9.0 keep 16
    assert segments == {"rtx-pro-6000": 64, "dgx-spark-gb10": 16, "h200": 16}, segments
    branch = [b for b in next(iter(_step(vllm, "rtx-pro-6000", model,
                                          kernels.Point(1, seq, phase="decode")).values())).branches
              if "is_device_capability((12, 0))" in b]
    assert branch, "the SM120 segment branch is not on the row"


def test_gpt_oss_decode_rows_name_the_3d_launch_and_reduce_segments(tmp_path):
    res = run_audit(AuditOptions("vllm", "gpt-oss-120b", "rtx-pro-6000", out=tmp_path / "a",
                                 kernels=("vllm-unified-attention",)))
    rows = [r for r in res.rows if r.get("kernel") in ("kernel_unified_attention", "reduce_segments")]
    decode = {r["kernel"] for r in rows if r["phase"] == "decode"}
    assert decode == {"kernel_unified_attention", "reduce_segments"}, [(r["kernel"], r["phase"]) for r in rows]
    assert all(r["verdict"] == "fits" and 0 < r["smem_bytes"] < 101376 for r in rows if r["phase"] == "decode")
    assert any("prefill" in r["phase"] for r in rows if r["kernel"] == "kernel_unified_attention")
