"""`tileprobe audit --engine vllm --target rtx-pro-6000` of a pure Mamba-2 model (Mamba2ForCausalLM) and of a
Falcon-H1 (FalconH1ForCausalLM, attention and a Mamba-2 mixer side by side in every layer), end to end as a user runs
it: the SSM layers are in the audit's rows (the Mamba-2 mixer's Triton launches, sized by the config's SSM fields),
and Falcon-H1's attention layers are in its forward path too; the pure Mamba-2 model has no attention row at all.

The configs are the field-derived stand-ins of tests/test_model_configs.py (MAMBA2: transformers' Mamba2Config
defaults, which are mistralai/Mamba-Codestral-7B-v0.1's sizes; FALCON_H1: the 0.5B row of transformers' Falcon-H1
table), not published files: no verbatim copy of either model's config.json was found (tests/data/configs/README.md).
One audit per model, shared by its asserts, run in this process (tileprobe.audit.run.run_audit, what the command runs
before it prints; `tileprobe audit` end to end as a subprocess is tests/audit/test_run.py's and test_path_audit.py's).

Both models run the same Mamba-2 mixer kernels through the same entries, so the claim that every launch of them is
answered (fits or over, never unanswered or refused) is proven once, on Falcon-H1's whole audit (its sizing included).
Mamba-2's audit is the same run with the Triton sizing left out (`compile_many` answers every sized launch "not sized
in this test"): its own claims are the capture's (the mixer's launches with the config's shapes and chunking), the
engine's attention selection (none) and the compiled forward path (final norm and lm_head only), none of which reads
a size; its sizing would be about 16 CPU s of Triton allocation proving again what Falcon-H1's proves."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from test_model_configs import FALCON_H1, MAMBA2

from tileprobe.audit import run as audit_run
from tileprobe.audit.run import AuditOptions, run_audit
from tileprobe.backends.triton.compile import TritonCompileError
from tileprobe.models import attention_model

pytestmark = [pytest.mark.triton, pytest.mark.engine_wheels]

# the vLLM Mamba-2 mixer's Triton kernels (vllm/model_executor/layers/mamba/ops): the chunked SSD scan of a prefill,
# the causal conv of prefill and decode, and the decode's selective state update
SSD = ("_chunk_cumsum_fwd_kernel", "_chunk_state_fwd_kernel", "_state_passing_fwd_kernel", "_bmm_chunk_fwd_kernel",
       "_chunk_scan_fwd_kernel")
MIXER = (*SSD, "_causal_conv1d_fwd_kernel", "_causal_conv1d_update_kernel", "_selective_scan_update_kernel")
NOT_SIZED = "not sized in this test (Falcon-H1's audit sizes the same mixer kernels)"


def _not_sized(jobs, *args, on_result=None, **kwargs):
    """compile_many's stand-in for Mamba-2's audit: no launch is sized (see the module docstring)."""
    out = [TritonCompileError(NOT_SIZED) for _ in jobs]
    for i, b in enumerate(out):
        if on_result is not None:
            on_result(i, b)
    return out


def _audit(tmp: Path, name: str, doc: dict, sized: bool = True):
    """`tileprobe audit --engine vllm --model <folder> --target rtx-pro-6000 --batch 1 --seq-len 1024 --jobs 2`, in
    this process: (the Audit, its results.jsonl rows, its run.json, the config folder, what it printed). A refusal
    (UsageError: the command's exit 2) or an internal error (its exit 4) raises here and fails the test."""
    folder = tmp / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(doc))
    out = tmp / f"out-{name}"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        if not sized:
            mp.setattr(audit_run, "compile_many", _not_sized)
        res = run_audit(AuditOptions("vllm", str(folder), "rtx-pro-6000", batches=(1,), seq_lens=(1024,), jobs=2,
                                     out=out, command="tileprobe audit (tests/audit/test_ssm_models.py)"))
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln.strip()]
    run = json.loads((out / "run.json").read_text())
    return res, rows, run, folder, printed.getvalue()


@pytest.fixture(scope="module")
def mamba2(vllm, tmp_path_factory):
    return _audit(tmp_path_factory.mktemp("ssm"), "mamba2-codestral-fields", MAMBA2, sized=False)


@pytest.fixture(scope="module")
def falcon_h1(vllm, tmp_path_factory):
    return _audit(tmp_path_factory.mktemp("ssm"), "falcon-h1-0.5b-fields", FALCON_H1)


def _answered(res, rows: list[dict], printed: str) -> None:
    # the audit returned (the command's exit 1: a launch over the limit, as the SSD scan's largest autotune configs
    # are, or 3: an unanswered forward-path slot, cuBLAS or Inductor), never refused (2) nor crashed (4), and nothing
    # it printed is a traceback
    assert "Traceback" not in printed, printed[-3000:]
    assert rows and len(rows) == len(res.rows), (len(rows), len(res.rows))


def _mixer_rows(rows: list[dict]) -> dict[str, list[dict]]:
    got: dict[str, list[dict]] = {}
    for r in rows:
        if r["family"] == "triton-audit" and r["verdict"] != "not-selected":
            got.setdefault(r["kernel"], []).append(r)
    return got


def _shapes(row: dict) -> dict[str, str]:
    """`name=dtype[AxBxC]` pairs of a Triton row's problem column."""
    text = row["problem"].split(": ", 1)[1].split(" (", 1)[0]
    return dict(part.split("=", 1) for part in text.split())


def _check_mixer(rows: list[dict], doc: dict, heads: int, head_dim: int, state: int, groups: int,
                 sized: bool = True) -> None:
    """Every kernel of the engine's Mamba-2 mixer is a row, sized by the config's SSM fields (tp 1: all heads and
    groups on one rank): x (tokens, heads, head_dim), B/C (tokens, groups, state), the decode state (heads, head_dim,
    state), and the conv over x, B and C (heads * head_dim + 2 * groups * state channels: the engine's conv_dim)."""
    got = _mixer_rows(rows)
    assert set(MIXER) <= set(got), sorted(got)
    tokens = 1024
    state_in = _shapes(got["_chunk_state_fwd_kernel"][0])
    assert state_in["x_ptr"].endswith(f"[{tokens}x{heads}x{head_dim}]"), state_in
    assert state_in["b_ptr"].endswith(f"[{tokens}x{groups}x{state}]"), state_in
    assert _shapes(got["_chunk_scan_fwd_kernel"][0])["C_ptr"].endswith(f"[{tokens}x{groups}x{state}]")
    assert _shapes(got["_selective_scan_update_kernel"][0])["A_ptr"] == f"fp32[{heads}x{head_dim}x{state}]"
    conv = heads * head_dim + 2 * groups * state
    assert _shapes(got["_causal_conv1d_fwd_kernel"][0])["w_ptr"] == f"bf16[{conv}x{doc_conv(doc)}]"
    # every launch of them was answered: fits or over the limit, none unanswered or refused (the rule-predicted
    # ones in either audit; the sized ones where the audit sized them)
    answered = ("fits", "smem-over-limit")
    assert all(r["verdict"] in answered or not sized and NOT_SIZED in r["reason"] for rs in got.values() for r in rs), \
        {k: sorted({r["verdict"] for r in rs}) for k, rs in got.items()}
    if not sized:
        assert all(r["verdict"] in answered for rs in got.values() for r in rs if r["evidence"] == "predicted")


def doc_conv(doc: dict) -> int:
    return doc.get("conv_kernel") or doc["mamba_d_conv"]


def test_a_pure_mamba2_model_audits_its_ssm_layers_and_no_attention(mamba2):
    res, rows, run, folder, printed = mamba2
    _answered(res, rows, printed)
    _check_mixer(rows, MAMBA2, heads=MAMBA2["num_heads"], head_dim=MAMBA2["head_dim"], state=MAMBA2["state_size"],
                 groups=MAMBA2["n_groups"], sized=False)
    chunk = {_shapes(r)["states_ptr"] for r in _mixer_rows(rows)["_state_passing_fwd_kernel"]}
    # the SSD scan steps chunk by chunk: 1024 tokens in chunks of the config's chunk_size
    want = f"[{1024 // MAMBA2['chunk_size']}x{MAMBA2['num_heads']}x{MAMBA2['head_dim'] * MAMBA2['state_size']}]"
    assert len(chunk) == 1 and chunk.pop().endswith(want), (chunk, want)
    # no attention layer anywhere: no backend selected, no attention entry (not even a not-selected one), and the
    # forward path has only the head (the mixer's launches are the Triton rows)
    assert run.get("attention_backend") is None, run.get("attention_backend")
    assert not [r for r in rows if "attention" in r["kernel"] or "attention" in (r.get("layer") or "")], \
        [(r["kernel"], r.get("layer")) for r in rows if "attention" in r["kernel"] or "attention" in (r.get("layer") or "")]
    path = [r["layer"] for r in rows if r["family"] != "triton-audit"]
    assert path == ["final norm", "lm_head"], path
    lm = next(r for r in rows if r.get("layer") == "lm_head")
    assert f"n={MAMBA2['vocab_size']}" in lm["problem"], lm["problem"]
    a = attention_model(str(folder))  # what the audit read: no attention heads, the SSM dims
    assert (a.heads, a.kv_heads, a.layer_types) == (0, 0, ())


def test_falcon_h1_audits_its_attention_and_ssm_layers(falcon_h1):
    res, rows, run, folder, printed = falcon_h1
    _answered(res, rows, printed)
    _check_mixer(rows, FALCON_H1, heads=FALCON_H1["mamba_n_heads"], head_dim=FALCON_H1["mamba_d_head"],
                 state=FALCON_H1["mamba_d_state"], groups=FALCON_H1["mamba_n_groups"])
    # the attention layers: the engine's own backend selection ran, and the forward path has the attention slot of
    # prefill and decode with the config's head counts (or, under a Triton backend, its launches are Triton rows)
    sel = run["attention_backend"]
    assert sel["backend"] in sel["valid"], sel
    attn = [r for r in rows if (r.get("layer") or "").startswith("attention")]
    triton_attn = [r for r in rows if r["family"] == "triton-audit" and r["verdict"] != "not-selected"
                   and r["kernel"] not in MIXER]
    heads, kv, hd = FALCON_H1["num_attention_heads"], FALCON_H1["num_key_value_heads"], FALCON_H1["head_dim"]
    if sel["triton"]:
        assert triton_attn and not attn, (sel, [r["kernel"] for r in triton_attn])
    else:
        assert sorted(r["phase"] for r in attn) == ["decode", "prefill"], [(r["layer"], r["phase"]) for r in attn]
        assert all(f"heads={heads}, kv_heads={kv}, head_dim={hd}," in r["problem"] for r in attn), \
            [r["problem"] for r in attn]
        assert all(r["layer"] == "attention (full)" for r in attn)  # no sliding window in the config
        for layer in ("linear qkv", "kv-cache write", "linear o"):
            assert any(r.get("layer") == layer for r in rows), layer
        qkv = next(r for r in rows if r.get("layer") == "linear qkv")
        assert f"n={(heads + 2 * kv) * hd}" in qkv["problem"], qkv["problem"]
    # each of the config's layers is both (transformers' FalconH1Config, which vLLM's falcon_h1 reads: every decoder
    # layer holds an attention and a Mamba-2 mixer): as many hybrid layers as num_hidden_layers
    a = attention_model(str(folder))
    assert a.layer_types == ("hybrid",) * FALCON_H1["num_hidden_layers"], a.layer_types
    assert (a.heads, a.kv_heads, a.head_dim) == (heads, kv, hd) and a.ssm is not None
