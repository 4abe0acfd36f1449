"""The vllm-prefix-prefill entry (vLLM 0.33.0 prefix_prefill.context_attention_fwd): the captured launch compiles to
the bytes Triton gives the engine's own kernel object; its block sizes, warps and stages are what the engine file's
launcher text sets; the caller chain (ROCM_ATTN only) and CUDA's backend list are read from the wheel here, and
`chooses` says Elsewhere on CUDA targets because of them. Dims, dtype, window, point and target are random per run."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest
import triton
from _engine_own import call_launcher, tritons_own

from tileprobe.audit import capture, jobs, kernels, loader
from tileprobe.backends.triton.compile import compile_job
from tileprobe.models import AttentionConfig
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

ENTRY = kernels.KERNELS["vllm-prefix-prefill"]
TORCH_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def _model(rng) -> AttentionConfig:
    kv = rng.choice([1, 2, 4, 8])
    return AttentionConfig("m", kv * rng.choice([1, 2, 4, 8]), kv, rng.choice([64, 96, 128]),
                           rng.choice(["bf16", "fp16", "fp32"]))


def _capture(src, target, model, pt):
    with capture.engine_session(src, target, ENTRY.allow, ENTRY.stand_ins) as s:
        elsewhere = ENTRY.chooses(s, model, pt)
        call_launcher(s, ENTRY, model, pt)
    return elsewhere, s.launches


def _launcher_text(text: str):
    """context_attention_fwd's constant assignments after its ALiBi branch, and its `_fwd_kernel[...]( )` call's
    keyword arguments that are literals or names of those assignments."""
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == ENTRY.launcher)
    consts = {n.targets[0].id: n.value.value for n in fn.body if isinstance(n, ast.Assign)
              and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)}
    call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                and ast.unparse(n.func.value) == "_fwd_kernel")
    kw = {}
    for k in call.keywords:
        if isinstance(k.value, ast.Constant):
            kw[k.arg] = k.value.value
        elif isinstance(k.value, ast.Name) and k.value.id in consts:
            kw[k.arg] = consts[k.value.id]
    return kw


def test_captured_launch_is_the_engines_and_its_bytes_are_tritons_own(vllm, rng, tmp_path, monkeypatch):
    target = profile(rng.choice(["rtx-pro-6000", "h200"]))
    model = _model(rng)
    pt = kernels.Point(rng.randint(1, 8), rng.randint(17, 4096), window=rng.choice([None, 128, 4096]))
    _, launches = _capture(vllm, target, model, pt)
    (launch,) = launches
    assert launch.kernel == "_fwd_kernel" and launch.call_site.startswith(ENTRY.module_file + ":")
    set_by_text = _launcher_text(vllm.read_text(ENTRY.module_file))
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_SIZE", "num_warps", "num_stages"} <= set(set_by_text)
    for name, value in set_by_text.items():
        assert launch.arg(name) == value, (name, launch.arg(name), value)
    q = dict(launch.args)["Q"]
    assert q.dtype == model.dtype and q.shape[1:] == (model.heads, model.head_dim)
    assert launch.arg("BLOCK_DMODEL") == model.head_dim
    assert launch.arg("BLOCK_DMODEL_PADDED") == triton.next_power_of_2(model.head_dim)
    assert launch.arg("x") == 16 // TORCH_BYTES[model.dtype] and launch.arg("SLIDING_WINDOW") == (pt.window or 0)
    assert launch.arg("num_queries_per_kv") == model.heads // model.kv_heads
    job = jobs.job_of(vllm, launch, target.cc_int, lambda s, la: loader.module_source(ENTRY, s, target, la.kernel))
    build = compile_job(job)
    ((_, _, own),) = tritons_own(vllm, target, ENTRY, model, pt, tmp_path, monkeypatch)
    assert build.shared == own, (target.name, model)


def _calls(src, name: str) -> set[str]:
    """The wheel's files (outside the defining module) that call `name`(...)."""
    out = set()
    for rel in src.files_under("vllm"):
        if not rel.endswith(".py"):
            continue
        text = src.read_text(rel)
        if f"{name}(" not in text:
            continue
        tree = ast.parse(text)
        if any(isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == name for n in ast.walk(tree)):
            out.add(rel)
    return out


def test_on_cuda_the_engine_runs_another_backend(vllm, rng):
    """prefix_prefill's context_attention_fwd is imported only by chunked_prefill_paged_decode, which only the ROCm
    backend calls; vLLM's CUDA priority list (vllm/platforms/cuda.py) never names ROCM_ATTN: Elsewhere, at that
    function's line."""
    importers = {rel for rel in vllm.files_under("vllm") if rel.endswith(".py")
                 and "prefix_prefill import context_attention_fwd" in vllm.read_text(rel)}
    assert importers == {"vllm/v1/attention/ops/chunked_prefill_paged_decode.py"}
    assert _calls(vllm, "chunked_prefill_paged_decode") <= {"vllm/v1/attention/backends/rocm_attn.py",
                                                            "vllm/v1/attention/ops/chunked_prefill_paged_decode.py"}
    cuda = vllm.read_text("vllm/platforms/cuda.py")
    fn = next(n for n in ast.parse(cuda).body if isinstance(n, ast.FunctionDef)
              and n.name == "_get_backend_priorities")
    assert "ROCM_ATTN" not in ast.get_source_segment(cuda, fn)
    assert "AttentionBackendEnum.ROCM_ATTN" in vllm.read_text("vllm/platforms/rocm.py")
    target = profile(rng.choice(["rtx-pro-6000", "h200", "b200"]))
    elsewhere, launches = _capture(vllm, target, _model(rng), kernels.Point(rng.randint(1, 8), rng.randint(17, 4096)))
    assert elsewhere is not None and len(launches) == 1
    file, line = elsewhere.line.rsplit(":", 1)
    assert file == "vllm/platforms/cuda.py" and cuda.splitlines()[int(line) - 1].startswith(
        "def _get_backend_priorities")
    assert "ROCM_ATTN" in elsewhere.runs and "TRITON_ATTN" in elsewhere.runs


def test_serves_says_why_not_for_mla_and_sinks(rng):
    model = _model(rng)
    assert ENTRY.serves(model) is None
    assert "sink" in ENTRY.serves(replace(model, sinks=True))
    mla = replace(model, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    assert mla.mla and "MLA" in ENTRY.serves(mla)
