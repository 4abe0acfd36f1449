"""The MLA audit entries (tileprobe.audit.entries.sglang_mla, vllm_mla): for random MLA ranks and points, every launch
the engine's own launcher makes compiles to the bytes Triton gives the engine's own kernel object; every device
branch a launch records is what the engine file says at that line (read here from the file); SGLang's extend takes
its target branch's block sizes; the SM120 sparse decode makes one launch per config of its @triton.autotune
decorator (read from the file; it has no pruning hook), and the engine's own backend choice decides whether it runs."""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from _engine_own import EXTEND_BRANCH, answered, captured, extend_blocks, tritons_own

from tileprobe.audit import capture, jobs, vllm_mla_step
from tileprobe.audit.entry import Elsewhere, Point
from tileprobe.audit.kernels import KERNELS
from tileprobe.engines.triton_configs import find_engine
from tileprobe.models import ATTENTION_PRESETS, AttentionConfig
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

SGLANG_DENSE = ("sglang-mla-decode", "sglang-mla-extend-absorbed", "sglang-mla-extend-mha")
SPARSE = KERNELS["sglang-mla-sparse-decode"]
ENV = "SGLANG_SM120_FLASHMLA_BACKEND"


def _mla_model(rng) -> tuple[AttentionConfig, Point]:
    """Random MLA dims (the latent widths the engines special-case: 512 + 64 as DeepSeek/Kimi, 256 + 32), heads,
    tp, dtype and point."""
    rank, rope = rng.choice([(512, 64), (256, 32)])
    heads = rng.choice([16, 32, 64, 128])
    tp = rng.choice([t for t in (1, 2, 4, 8) if heads // t >= 8])
    model = AttentionConfig("m", heads, heads, 0, rng.choice(["bf16", "fp16"]), kv_lora_rank=rank,
                            qk_rope_head_dim=rope, qk_nope_head_dim=rng.choice([64, 128]),
                            v_head_dim=rng.choice([64, 128]), model_type="deepseek_v3")
    return model, Point(rng.randint(2, 16), rng.randint(64, 4096), tp)


def _v4_model(rng) -> tuple[AttentionConfig, Point]:
    heads = rng.choice([64, 128])
    model = AttentionConfig("v4", heads, 1, 512, "bf16", sliding_window=rng.choice([128, 256]),
                            model_type="deepseek_v4", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=448,
                            v_head_dim=512)
    return model, Point(rng.randint(1, 32), rng.randint(128, 8192), rng.choice([1, 2, 4]))


def _bytes_are_tritons_own(src, target, entry, model, point, tmp_path, monkeypatch):
    launches = captured(src, target, entry, model, point)
    assert launches, entry.name
    ours = [(la.kernel, answered(jobs.job_of(src, la, target.cc_int))) for la in launches]
    own = [(k, b) for k, _, b in tritons_own(src, target, entry, model, point, tmp_path, monkeypatch)]
    assert ours == own, (entry.name, model, point)
    return launches


def _branches_are_the_files(src, launches):
    """Each recorded branch 'file:line text' is the engine file's statement at that line: an `if` whose test
    unparses to the text, the `else:` of the named if, or the assignment of the named device expression."""
    for la in launches:
        for b in la.branches:
            where, text = b.split(" ", 1)
            rel, line = where.rsplit(":", 1)
            source = src.read_text(rel)
            at = source.splitlines()[int(line) - 1].strip()
            if text.startswith("else (of line "):
                assert at == "else:", (b, at)
            elif " (evaluated)" in text:
                name = text.split(" = ", 1)[0]
                assert at.startswith(f"{name} = ") or at.startswith(f"{name}: "), (b, at)
            else:
                node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.If) and n.lineno == int(line))
                assert f"if {ast.unparse(node.test)}:" == text, (b, ast.unparse(node.test))


@pytest.mark.parametrize("name", SGLANG_DENSE)
def test_sglang_mla_launches_compile_to_tritons_own_bytes_on_the_engines_branch(sglang, rng, tmp_path, monkeypatch,
                                                                                name):
    entry = KERNELS[name]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model, pt = _mla_model(rng)
    (phase,) = entry.phases  # decode, extend (over a cached prefix) or prefill (no prefix): the engine's step
    pt = replace(pt, phase=phase)
    launches = _bytes_are_tritons_own(sglang, target, entry, model, pt, tmp_path, monkeypatch)
    _branches_are_the_files(sglang, launches)
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    h = model.heads // pt.tp
    if name == "sglang-mla-decode":
        counts, stage1, stage2 = launches
        assert counts.kernel == "get_num_kv_splits_triton"  # the backend's per-sequence split count, then the two stages
        assert (stage1.kernel, stage2.kernel) == ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2")
        args = dict(stage1.args)
        assert args["Q"].shape == (pt.batch, h, latent) and args["K_Buffer"].shape[1:] == (1, latent)
        # the value buffer is the latent buffer's first kv_lora_rank columns: same row stride, one KV head
        assert args["V_Buffer"].shape[1:] == (1, model.kv_lora_rank)
        assert args["V_Buffer"].strides == args["K_Buffer"].strides and stage1.arg("HAS_MLA") is True
        assert dict(stage2.args)["Mid_O"].shape[2] == stage2.arg("MAX_KV_SPLITS")
    else:
        (launch,) = launches
        lq = latent if name.endswith("absorbed") else model.qk_nope_head_dim + model.qk_rope_head_dim
        q, k = dict(launch.args)["Q_Extend"], dict(launch.args)["K_Extend"]
        assert q.shape == (pt.batch * pt.seq_len, h, lq) and k.shape[1] == (1 if name.endswith("absorbed") else h)
        assert q.dtype == model.dtype
        line, blocks = extend_blocks(sglang.read_text(entry.module_file), EXTEND_BRANCH[target.name], lq)
        assert (launch.arg("BLOCK_M"), launch.arg("BLOCK_N")) == blocks, (target.name, lq, launch.branches)
        assert any(b.startswith(f"{entry.module_file}:{line} ") and EXTEND_BRANCH[target.name] in b
                   for b in launch.branches)


def test_vllm_mla_decode_compiles_to_tritons_own_bytes_on_the_engines_branch(vllm, rng, tmp_path, monkeypatch):
    """TritonMLAImpl's call: the paged latent cache (blocks, 16, 1, rank+rope) and its rank view; the MLA tile widths
    are the body of the `if` the engine file has for this latent width (read here), recorded as the branch taken."""
    entry = KERNELS["vllm-mla-decode"]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model, pt = _mla_model(rng)
    launches = _bytes_are_tritons_own(vllm, target, entry, model, pt, tmp_path, monkeypatch)
    _branches_are_the_files(vllm, launches)
    stage1 = launches[0]
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    k = dict(stage1.args)["K_Buffer"]
    assert k.shape[1:] == (vllm_mla_step.BLOCK_SIZE, 1, latent) and stage1.arg("IS_MLA") is True
    text = vllm.read_text(entry.module_file)
    fn = next(n for n in ast.parse(text).body
              if isinstance(n, ast.FunctionDef) and n.name == "_decode_grouped_att_m_fwd")
    node = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and f"Lk == {latent}" in ast.unparse(n.test))
    want = {ast.unparse(s.targets[0]): ast.literal_eval(s.value) for s in node.body if isinstance(s, ast.Assign)}
    assert (stage1.arg("BLOCK_DMODEL"), stage1.arg("BLOCK_DPE")) == (want["BLOCK_DMODEL"], want["BLOCK_DPE"])
    assert any(b.startswith(f"{entry.module_file}:{node.lineno} ") for b in stage1.branches), stage1.branches



def test_vllm_mla_decode_is_formed_by_the_wheels_own_impl(vllm, rng, tmp_path):
    """The call of decode_attention_fwd is TritonMLAImpl.forward_mqa's, compiled from the wheel being audited: a copy
    of the wheel whose forward_mqa takes `factor` times the KV splits it computes makes the captured launch take
    that many more, with nothing in tileprobe changed."""
    entry, target = KERNELS["vllm-mla-decode"], profile("rtx-pro-6000")
    model, pt = _mla_model(rng)
    pt = replace(pt, seq_len=rng.choice([2048, 4096]), phase="decode")
    factor = rng.choice([2, 4])
    copy = tmp_path / Path(vllm.origin).name
    with zipfile.ZipFile(vllm.origin) as z, zipfile.ZipFile(copy, "w") as w:
        for name in z.namelist():
            if name.endswith((".py", ".dist-info/METADATA")):
                data = z.read(name)
                if name == vllm_mla_step.TRITON_MLA:
                    data, n = re.subn(rb"num_kv_splits = _compute_num_kv_splits\(",
                                      b"num_kv_splits = %d * _compute_num_kv_splits(" % factor, data)
                    assert n == 1
                w.writestr(name, data)

    def splits(src):
        launches = captured(src, target, entry, model, pt)
        return {la.arg("NUM_KV_SPLITS") for la in launches if la.kernel == "_fwd_grouped_kernel_stage1"}

    (own,), (planted,) = splits(vllm), splits(find_engine("vllm", copy))
    assert planted == own * factor, (own, planted, factor)

def _autotune_configs(text: str) -> tuple[list[tuple], list[str]]:
    """The @triton.autotune decorator of _tiled_sparse_decode_kernel: each config's (kwargs, num_warps, num_stages),
    and the decorator's keywords."""
    fn = next(n for n in ast.parse(text).body
              if isinstance(n, ast.FunctionDef) and n.name == "_tiled_sparse_decode_kernel")
    deco = next(d for d in fn.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func) == "triton.autotune")
    kw = {k.arg: k.value for k in deco.keywords}
    out = []
    for c in kw["configs"].elts:
        opts = {k.arg: ast.literal_eval(k.value) for k in c.keywords}
        out.append((ast.literal_eval(c.args[0]), opts.get("num_warps"), opts.get("num_stages")))
    return out, list(kw)


def test_sparse_decode_makes_one_launch_per_autotune_config_at_tritons_own_bytes(sglang, rng, tmp_path, monkeypatch):
    model, pt = _v4_model(rng)
    target = profile("rtx-pro-6000")
    configs, keywords = _autotune_configs(sglang.read_text(SPARSE.module_file))
    assert "prune_configs_by" not in keywords  # nothing prunes: every listed config is tried
    launches = _bytes_are_tritons_own(sglang, target, SPARSE, model, pt, tmp_path, monkeypatch)
    assert [la.autotune for la in launches] == [(i, len(configs), len(configs)) for i in range(len(configs))]
    assert [({"BLOCK_T": la.arg("BLOCK_T")}, la.arg("num_warps"), la.arg("num_stages")) for la in launches] == configs
    args = dict(launches[0].args)
    heads = model.heads // pt.tp
    assert args["Q_ptr"].shape == (pt.batch, heads if pt.tp == 1 else (64 if heads <= 64 else model.heads), 512)
    assert args["cache_uint8_ptr"].dtype == "u8" and args["cache_fp8_ptr"].dtype == "fp8e4nv"
    assert launches[0].arg("topk") % 64 == 0 and launches[0].arg("topk") >= model.sliding_window


def test_sparse_decode_runs_only_where_the_engine_chooses_it(sglang, rng, monkeypatch):
    """flash_mla_sm120's `_sm120_default_backend` (the engine's envs, SGLANG_SM120_FLASHMLA_BACKEND, default
    flashinfer) and deepseek_v4_backend's `get_platform().is_sm120`: the hook names the line whose test picked
    another kernel, and that line's text is the test."""
    model, pt = _v4_model(rng)
    assert SPARSE.serves(model) is None and SPARSE.serves(ATTENTION_PRESETS["kimi-k2"]) is not None
    for env, target, runs in ((None, "rtx-pro-6000", "flashinfer"), ("torch", "rtx-pro-6000", "PyTorch"),
                              ("triton", "rtx-pro-6000", None), ("triton", rng.choice(["h200", "b200"]), "FlashMLA")):
        if env is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, env)
        with capture.engine_session(sglang, profile(target), SPARSE.allow, SPARSE.stand_ins) as s:
            got = SPARSE.chooses(s, model, pt)
        if runs is None:
            assert got is None
            continue
        assert isinstance(got, Elsewhere) and runs in got.runs, (env, target, got)
        rel, line = got.line.rsplit(":", 1)
        assert sglang.read_text(rel).splitlines()[int(line) - 1].strip() == got.why, got


def test_mla_entries_serve_mla_models_but_not_deepseek_v4(rng):
    model, _ = _mla_model(rng)
    v4, _ = _v4_model(rng)
    plain = replace(model, kv_lora_rank=None)
    for name in (*SGLANG_DENSE, "vllm-mla-decode"):
        entry = KERNELS[name]
        assert entry.serves(model) is None and entry.serves(ATTENTION_PRESETS[rng.choice(["deepseek-v3", "kimi-k2"])]) \
            is None
        assert entry.serves(plain) and entry.serves(v4), name
