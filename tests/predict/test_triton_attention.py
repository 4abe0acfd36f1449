"""The triton-attention rules (the engines' decode / unified / lightning attention kernels) equal Triton's own
shared-memory allocation where they answer.

The launches are the ones `tileprobe audit` captures (the engines' own launchers under the rtx-pro-6000 stand-in):
SGLang's MHA decode and extend for gpt-oss-120b, SGLang's prefill (vision) attention for gqa-h128-fp32, vLLM's
unified attention for gpt-oss-120b, vLLM's MLA decode for kimi-k2 and vLLM's lightning attention for minimax-m1;
each run draws random variations of them (dtypes, head sizes, blocks, warps, stages, windows) within the rules'
scope, sizes them by Triton 3.8.0's own passes up to AllocateSharedMemory, and compiles one in full. Skipped
without Triton or the engine wheels.
"""

from __future__ import annotations

import dataclasses

import pytest
from _triton_rules import assert_tritons_bytes, capture, draw, vary

from tileprobe.audit import attention_rule
from tileprobe.audit.capture import Launch, TensorArg
from tileprobe.predict import CannotPredict
from tileprobe.predict import triton_attention

CAPTURES = (("sglang", "gpt-oss-120b", ("sglang-decode-attention", "sglang-extend-attention")),
            ("sglang", "results/audit/models/gqa-h128-fp32.json", ("sglang-context-attention",)),
            ("vllm", "gpt-oss-120b", ("vllm-unified-attention",)), ("vllm", "kimi-k2", ("vllm-mla-decode",)),
            ("vllm", "minimax-m1", ("vllm-lightning-attention",)))
# the data pointers whose dtype a variation changes (q / K / V, the KV pool's buffers, the output)
QKV = ("Q", "K_Buffer", "V_Buffer", "query_ptr", "key_cache_ptr", "value_cache_ptr", "output_ptr", "Q_Extend",
       "K_Extend", "V_Extend", "O_Extend", "K", "V", "Out")


@pytest.fixture(scope="module")
def captured():
    """(launch, job) of every launch the audit captures for CAPTURES on rtx-pro-6000 (batch 1)."""
    return capture("rtx-pro-6000", CAPTURES)


def _dtype(launch: Launch, dt: str) -> dict:
    return {k: dataclasses.replace(launch.arg(k), dtype=dt) for k in QKV if isinstance(launch.arg(k), TensorArg)}


def _random_changes(rng, launch: Launch) -> dict:
    k = launch.kernel
    if k == "_fwd_grouped_kernel_stage1" and (launch.arg("HAS_MLA") or launch.arg("IS_MLA")):
        d, dpe = rng.choice([128, 256, 512]), rng.choice([0, 64])
        return {"BLOCK_DMODEL": d, "BLOCK_DV": d, "BLOCK_DPE": dpe, "Lk": d + dpe, "Lv": d,
                "BLOCK_N": rng.choice([16, 32, 64]), "num_warps": rng.choice([2, 4, 8]),
                **_dtype(launch, rng.choice(["bf16", "fp16"]))}
    if k == "_fwd_grouped_kernel_stage1":
        d = rng.choice([64, 128, 256])
        return {"BLOCK_DMODEL": d, "BLOCK_DV": d, "Lk": d, "Lv": d, "BLOCK_N": rng.choice([16, 32, 64]),
                "BLOCK_H": rng.choice([16, 32]), "num_warps": rng.choice([2, 4, 8]), "num_stages": 2,
                **_dtype(launch, rng.choice(["bf16", "fp16", "fp32"]))}
    if k == "kernel_unified_attention":
        d, dt = rng.choice([64, 128, 256]), rng.choice(["bf16", "fp16", "fp32"])
        return {"HEAD_SIZE": d, "HEAD_SIZE_PADDED": d, "TILE_SIZE": rng.choice([16, 32, 64]),
                "BLOCK_M": 16 if dt == "fp32" else rng.choice([16, 32, 64]), "num_warps": rng.choice([2, 4, 8]),
                "num_stages": rng.choice([2, 3, 4]), "SLIDING_WINDOW": rng.choice([0, 128, 1024]),
                "USE_SINKS": rng.random() < 0.5, **_dtype(launch, dt)}
    if k == "_fwd_kernel":  # SGLang's extend (BLOCK_DPE...) or prefill kernel
        d, m, n = rng.choice([32, 64, 128, 256, 512]), rng.choice([16, 32, 64, 128]), rng.choice([16, 32, 64, 128])
        head = rng.choice([d, d - 8, d // 2 + 8])
        changes = {"BLOCK_DMODEL": d, "BLOCK_M": m, "BLOCK_N": n, "num_warps": rng.choice([2, 4, 8]),
                   **_dtype(launch, rng.choice(["bf16", "fp16", "fp32"]))}
        if launch.arg("BLOCK_DPE") is None:
            return changes | {"Lk": head, "IS_CAUSAL": rng.random() < 0.5}
        dpe = rng.choice([0, 32, 64])
        return changes | {"BLOCK_DV": d, "BLOCK_DPE": dpe, "Lq": head + dpe, "Lv": head, "BLOCK_N_PREFIX": n,
                          "SLIDING_WINDOW_SIZE": rng.choice([-1, 127])}
    if k == "_fwd_kernel_stage2":
        dv = rng.choice([64, 128, 256, 512])
        return {"BLOCK_DV": dv, "Lv": dv, "num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([1, 2, 3])}
    if k in ("_fwd_diag_kernel", "_fwd_kv_parallel", "_fwd_none_diag_kernel"):
        c, d, e = rng.choice([16, 32, 64]), rng.choice([64, 128]), rng.choice([64, 128])
        changes = {"CBLOCK": c, "NUM_CBLOCK": 256 // c, "d": d, "e": e, "D_FBLOCK": d, "E_FBLOCK": e,
                   "num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([2, 3, 4])}
        return {k: v for k, v in changes.items() if launch.arg(k) is not None or k.startswith("num_")}
    if k == "_fwd_kv_reduce":
        f = rng.choice([32, 64, 128])
        return {"D_FBLOCK": f, "E_FBLOCK": f, "num_warps": rng.choice([2, 4, 8]), "num_stages": rng.choice([1, 2, 3]),
                **_fp32_history(launch)}
    return {}


def _fp32_history(launch: Launch) -> dict:
    """_fwd_kv_reduce's rule scope: the KV state in fp32 (vLLM gives a bf16 model a bf16 state cache, mamba_cache_dtype
    "auto"; an fp32 one with --mamba-ssm-cache-dtype float32)."""
    return {"KV_HISTORY": dataclasses.replace(launch.arg("KV_HISTORY"), dtype="fp32")}


RULED = ("_fwd_grouped_kernel_stage1", "kernel_unified_attention", "_fwd_kernel", "_fwd_diag_kernel",
         "_fwd_kv_parallel", "_fwd_none_diag_kernel", "_fwd_kernel_stage2", "_fwd_kv_reduce")


def _draw(rng, captured, kernel: str, varied: bool):
    if kernel == "_fwd_kv_reduce" and not varied:  # the engine's own launch with an fp32 state (the rule's scope)
        return draw(rng, captured, kernel, attention_rule.predict, lambda r, la, j: vary(la, j, _fp32_history(la)))
    return draw(rng, captured, kernel, attention_rule.predict,
                (lambda r, la, j: vary(la, j, _random_changes(r, la))) if varied else None)


@pytest.mark.triton
@pytest.mark.parametrize("kernel", RULED)
def test_rule_equals_tritons_allocation(kernel, captured, rng, tmp_path):
    for varied in (False, True):
        assert_tritons_bytes(*_draw(rng, captured, kernel, varied), tmp_path)


@pytest.mark.triton
def test_rule_equals_a_full_compile(captured, rng, tmp_path):
    assert_tritons_bytes(*_draw(rng, captured, rng.choice(RULED[:3]), True), tmp_path, full=True)


@pytest.mark.triton
def test_out_of_scope_launches_cannot_predict(captured, rng):
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_fwd_grouped_kernel_stage1"
                              and la.arg("IS_MLA")])
    with pytest.raises(CannotPredict, match="fp32"):  # MLA decode in fp32: its conversion scratch is not the table's
        attention_rule.predict(*vary(launch, job, _dtype(launch, "fp32")), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "kernel_unified_attention"
                              and not la.arg("IS_3D")])  # the 2D launch (the rule's scope; a decode's 3D is not)
    with pytest.raises(CannotPredict, match="fp32"):
        attention_rule.predict(*vary(launch, job, _dtype(launch, "fp32") | {"BLOCK_M": rng.choice([32, 64])}),
                               "3.8.0")
    with pytest.raises(CannotPredict, match="BLOCK_M"):
        attention_rule.predict(*vary(launch, job, {"BLOCK_M": rng.choice([8, 128])}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_fwd_kv_reduce"])
    assert launch.arg("KV_HISTORY").dtype == "bf16"  # the state cache vLLM gives MiniMax-M1 (bf16): 4096 B, not 0
    with pytest.raises(CannotPredict, match="fp32"):
        attention_rule.predict(launch, job, "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_fwd_kernel"])
    with pytest.raises(CannotPredict, match="num_stages"):
        attention_rule.predict(*vary(launch, job, {"num_stages": rng.choice([2, 3])}), "3.8.0")
    launch, job, _ = _draw(rng, captured, rng.choice(RULED), False)
    with pytest.raises(CannotPredict, match="sm_90"):
        attention_rule.predict(launch, dataclasses.replace(job, cc=90), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_fwd_grouped_kernel_stage1"
                              and la.kernel_file.startswith("sglang")])
    with pytest.raises(CannotPredict, match="BLOCK_H"):  # BLOCK_H 64 (rule 2's scope stops at 32)
        attention_rule.predict(*vary(launch, job, {"BLOCK_H": 64}), "3.8.0")
    launch, job = rng.choice([(la, j) for la, j in captured if la.kernel == "_fwd_kv_parallel"])
    with pytest.raises(CannotPredict, match="epilogue"):  # 16 x 128 x 64: the 32 KiB KV tile outgrows the loop
        attention_rule.predict(*vary(launch, job, {"CBLOCK": 16, "NUM_CBLOCK": 16, "d": 128, "e": 64,
                                                    "D_FBLOCK": 128, "E_FBLOCK": 64, "num_stages": 2}), "3.8.0")


def test_another_release_or_source_cannot_predict(rng):
    sha = rng.choice(list(triton_attention.CHECKED))[1]
    kernel = rng.choice(RULED)
    other = f"3.{rng.randrange(0, 8)}.{rng.randrange(0, 3)}"
    with pytest.raises(CannotPredict, match="Triton"):
        triton_attention.predict(kernel, {}, 120, other, source_sha256=sha)
    changed = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    with pytest.raises(CannotPredict, match="source"):
        triton_attention.predict(kernel, {}, 120, "3.8.0", source_sha256=changed)
