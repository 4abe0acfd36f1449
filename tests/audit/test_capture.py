"""tileprobe.audit.capture: the engine's own launcher, run from its wheel under a stand-in device, picks the target's
branch; the captured launch compiles to the bytes Triton gives the engine's own kernel object; the session leaves the
process as it was. The engine wheels come from the wheel cache (tests/conftest.py fetches them for triton tests);
the expected block sizes are read from the engine file's branch text here, never typed."""

from __future__ import annotations

import ast
import sys
from dataclasses import replace

import pytest
import torch
from _engine_own import EXTEND_BRANCH, captured, extend_blocks, tritons_own
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from tileprobe.audit import capture, jobs, kernels, loader
from tileprobe.backends.triton.compile import compile_job
from tileprobe.models import ATTENTION_PRESETS, AttentionConfig
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

EXTEND = kernels.KERNELS["sglang-extend-attention"]


def _model(rng, head_dim=None) -> AttentionConfig:
    kv = rng.choice([1, 2, 4, 8])
    return AttentionConfig("m", kv * rng.choice([1, 2, 4, 8]), kv, head_dim or rng.choice([64, 128, 256]))


@pytest.mark.parametrize("target_name", ["rtx-pro-6000", "h200"])
def test_extend_attention_takes_the_targets_branch(sglang, rng, target_name):
    model = _model(rng)
    pt = kernels.Point(rng.randint(1, 16), rng.randint(1, 4096))
    (launch,) = captured(sglang, profile(target_name), EXTEND, model, pt)
    branch = EXTEND_BRANCH[target_name]
    line, (bm, bn) = extend_blocks(sglang.read_text(EXTEND.module_file), branch, model.head_dim)
    assert (launch.arg("BLOCK_M"), launch.arg("BLOCK_N")) == (bm, bn), (target_name, model, launch.branches)
    assert any(b.startswith(f"{EXTEND.module_file}:{line} ") and branch in b for b in launch.branches)
    assert launch.call_site.startswith(EXTEND.module_file + ":") and launch.kernel == "_fwd_kernel"
    q = dict(launch.args)["Q_Extend"]
    assert q.dtype == "bf16" and q.shape == (pt.batch * pt.seq_len, model.heads, model.head_dim)


def _triton_own_shared(src, target, model, point, tmp_path, monkeypatch, entry=EXTEND, only=None) -> dict:
    """kernel name -> Triton's own metadata.shared for it (tests/audit/_engine_own.py), `only` that kernel if named."""
    keep = None if only is None else (lambda kernel, tuned: kernel == only)
    return {k: b for k, _, b in tritons_own(src, target, entry, model, point, tmp_path, monkeypatch, keep)}


def test_captured_launch_bytes_are_tritons_own(sglang, rng, tmp_path, monkeypatch):
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model = _model(rng, head_dim=rng.choice([64, 128]))
    pt = kernels.Point(rng.randint(2, 8), rng.randint(64, 2048))
    (launch,) = captured(sglang, target, EXTEND, model, pt)
    build = compile_job(jobs.job_of(sglang, launch, target.cc_int))
    own = _triton_own_shared(sglang, target, model, pt, tmp_path, monkeypatch)
    assert build.shared == own["_fwd_kernel"], (target.name, model)


def test_vllm_unified_attention_compiles_from_the_engines_own_module_to_tritons_bytes(vllm, rng, tmp_path,
                                                                                      monkeypatch):
    """vLLM's kernel calls helpers of another engine module and reads module globals in its defaults: it is compiled
    from the engine's own module (tileprobe.audit.loader), and its bytes are still Triton's own, for every kernel the
    backend's step launches at a random phase (the 2D launch, or the 3D one and reduce_segments)."""
    entry = kernels.KERNELS["vllm-unified-attention"]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model = replace(_model(rng, head_dim=rng.choice([64, 128])), dtype=rng.choice(["bf16", "fp32"]))
    pt = kernels.Point(rng.randint(2, 8), rng.randint(64, 2048), window=rng.choice([None, 128, 4096]),
                       phase=rng.choice(["prefill", "decode", "mixed"]))
    launches = [la for la in captured(vllm, target, entry, model, pt) if la.kernel != "reshape_and_cache_kernel_flash"]
    attention = next(la for la in launches if la.kernel == "kernel_unified_attention")
    assert dict(attention.args)["query_ptr"].dtype == model.dtype and attention.arg("HEAD_SIZE") == model.head_dim
    assert attention.arg("SLIDING_WINDOW") == (pt.window or 0)
    own = _triton_own_shared(vllm, target, model, pt, tmp_path, monkeypatch, entry)
    for launch in launches:
        job = jobs.job_of(vllm, launch, target.cc_int,
                          lambda src, la: loader.module_source(entry, src, target, la.kernel))
        assert compile_job(job).shared == own[launch.kernel], (target, model, pt, launch.kernel)


def test_the_session_leaves_the_process_as_it_was(sglang, rng):
    before = dict(sys.modules)
    cuda = {k: getattr(torch.cuda, k) for k in capture.cuda_answers(profile("h200"))}
    runs, meta_path, trace = (JITFunction.run, Autotuner.run), list(sys.meta_path), sys.gettrace()
    target = profile(rng.choice(["rtx-pro-6000", "h200", "b200"]))
    with capture.engine_session(sglang, target, EXTEND.allow, EXTEND.stand_ins) as s:
        s.module(EXTEND.module)
        assert torch.cuda.get_device_capability() == tuple(int(x) for x in target.cc.split("."))
        assert torch.cuda.get_device_properties(0).shared_memory_per_block_optin == target.smem_optin
        assert "sglang.kernels.ops.attention.extend_attention" in sys.modules
    assert dict(sys.modules) == before
    assert {k: getattr(torch.cuda, k) for k in cuda} == cuda
    assert (JITFunction.run, Autotuner.run) == runs and sys.meta_path == meta_path and sys.gettrace() is trace


def test_a_module_outside_the_allowlist_is_an_import_error_naming_it(sglang, rng):
    left_out = rng.choice([m for m in EXTEND.allow if m != EXTEND.module])
    before = dict(sys.modules)
    with capture.engine_session(sglang, profile("h200"), [m for m in EXTEND.allow if m != left_out],
                                EXTEND.stand_ins) as s:
        with pytest.raises(ImportError, match=f"{left_out} is not among the engine modules"):
            EXTEND.drive(s, ATTENTION_PRESETS["qwen3-30b-a3b"], kernels.Point(2, 64))  # the step imports every module
    assert dict(sys.modules) == before


def test_vllm_follows_its_blackwell_large_head_choice(vllm, rng):
    """unified_attention's `tuned_large_head` (head 256, prefill, capability family 10.x) picks BLOCK_M and the
    launch's warps and stages: the captured launch has what the engine file's `if tuned_large_head:` body assigns
    on b200, and the row's branch text says the expression's value, on each target."""
    entry = kernels.KERNELS["vllm-unified-attention"]
    text = vllm.read_text(entry.module_file)
    body = next(n for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.If) and ast.unparse(n.test) == "tuned_large_head").body
    set_to = {ast.unparse(s.targets[0]): ast.literal_eval(s.value) for s in body
              if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)}
    kv = rng.choice([1, 2, 4, 8])
    model = AttentionConfig("m", kv * rng.choice([1, 2, 4, 8]), kv, 256)
    pt = kernels.Point(rng.randint(1, 8), rng.randint(16, 4096))
    for name, tuned in (("b200", True), (rng.choice(["rtx-pro-6000", "h200"]), False)):
        (launch,) = [la for la in captured(vllm, profile(name), entry, model, pt)
                     if la.kernel == "kernel_unified_attention"]
        (branch,) = [b for b in launch.branches if b.split(" ", 2)[1] == "tuned_large_head"]
        assert branch.endswith(f"-> {tuned}"), (name, branch)
        got = (launch.arg("BLOCK_M"), launch.arg("num_warps"), launch.arg("num_stages"))
        want = (set_to["BLOCK_M"], set_to["launch_num_warps"], set_to["launch_num_stages"])
        assert (got == want) is tuned, (name, got, want)


def test_vllm_lightning_attention_runs_in_fp32_and_its_kv_parallel_bytes_are_tritons(vllm, rng, tmp_path,
                                                                                    monkeypatch):
    """Every kernel lightning_attention launches (the `NAME[grid](` calls of the engine file, in order) is captured
    from the layer's own prefill (a batch of one), in fp32 whatever the model's dtype, but for the state history
    _fwd_kv_reduce reads (KV_HISTORY: the layer's state cache, in its state dtype, the model's under vLLM's default
    mamba_cache_dtype "auto"); _fwd_kv_parallel (the one vllm #41508 reports) compiles to Triton's bytes."""
    entry = kernels.KERNELS["vllm-lightning-attention"]
    text = vllm.read_text(entry.module_file)
    launched = [n.func.value.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
                and n.func.value.id.startswith("_fwd")]
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model = replace(_model(rng, head_dim=rng.choice([64, 128])), dtype=rng.choice(["bf16", "fp16"]),
                    linear_attention=True)
    pt = kernels.Point(1, rng.randint(300, 4096))
    launches = captured(vllm, target, entry, model, pt)
    assert [la.kernel for la in launches] == sorted(launched, key=lambda k: text.index(f"{k}[grid]"))
    assert {v.dtype for la in launches for n, v in la.args if isinstance(v, capture.TensorArg)
            and n != "KV_HISTORY"} == {"fp32"}
    assert next(la for la in launches if la.kernel == "_fwd_kv_reduce").arg("KV_HISTORY").dtype == model.dtype
    kvp = next(la for la in launches if la.kernel == "_fwd_kv_parallel")
    build = compile_job(jobs.job_of(vllm, kvp, target.cc_int))
    own = _triton_own_shared(vllm, target, model, pt, tmp_path, monkeypatch, entry, only="_fwd_kv_parallel")
    assert build.shared == own["_fwd_kv_parallel"], (target.name, model)
