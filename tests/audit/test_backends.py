"""tileprobe.audit.backends: the attention backend each engine's own selection code, run from its wheel under the
target's stand-in device, picks for a model. The line a Selection names is checked against the engine's text read
here (it names the backend and lies in the selecting function); the known public facts are checked where there is
one (vLLM 0.33.0 and SGLang 0.5.23 run gpt-oss on SM120 through their Triton backends: vllm-project/vllm#40153,
SGLang's gpt_oss.py override); forced names are honoured or refused with the valid names; presets and targets are
drawn at random each run."""

from __future__ import annotations

import ast
import dataclasses
import os
import sys

import pytest
import torch

from tileprobe.audit import backends
from tileprobe.audit.kernels import KERNELS, entries_of
from tileprobe.audit.selection import ARCHITECTURES
from tileprobe.errors import UsageError
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.targets import profile

PRESETS = ("qwen3-30b-a3b", "gpt-oss-120b", "kimi-k2", "minimax-m1")
TARGETS = ("rtx-pro-6000", "h200")


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def engine(request):
    return request.getfixturevalue(request.param)


def _line_text(src, line: str) -> tuple[str, int, str]:
    rel, _, no = line.rpartition(":")
    return rel, int(no), src.read_text(rel).splitlines()[int(no) - 1]


def _enclosing(src, rel: str, no: int) -> ast.FunctionDef:
    tree = ast.parse(src.read_text(rel))
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno <= no <= n.end_lineno]
    return min(found, key=lambda n: n.end_lineno - n.lineno)


def test_selected_line_names_the_backend_in_the_selecting_function(engine, rng):
    target, preset = rng.choice(TARGETS), rng.choice(PRESETS)
    model = ATTENTION_PRESETS[preset]
    sel = backends.attention_backend(engine, profile(target), model)
    rel, no, text = _line_text(engine, sel.line)
    fn = _enclosing(engine, rel, no)
    if engine.engine == "vllm":
        assert f"AttentionBackendEnum.{sel.backend}" in text, (target, preset, sel)
        assert (rel, fn.name) == ("vllm/platforms/cuda.py", "_get_backend_priorities")
        # every backend the engine ranks above it in the list that ran was refused, with the engine's reasons
        ret = next(n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.lineno <= no <= n.end_lineno)
        ranked = [n.attr for n in ast.walk(ret) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id == "AttentionBackendEnum"]
        above = ranked[:ranked.index(sel.backend)]
        assert set(above) <= set(sel.refused), (sel.refused, above)
        assert sel.valid[0] == sel.backend
    else:
        assert f'"{sel.backend}"' in text, (target, preset, sel)
        arch = ARCHITECTURES[model.model_type]
        assert fn.name == "get_default_attn_backend" or arch in _registered(fn), (fn.name, _registered(fn))
        assert sel.backend in sel.valid
    assert sel.triton == backends.is_triton(engine.engine, sel.backend)
    assert not entries_of(sel.engine, sel.backend) or sel.triton


def test_a_sparse_mla_model_gets_the_engines_sparse_backend(engine, rng):
    """A config with the DSA indexer (`index_topk`, DeepSeek-V3.2 / GLM-5): the engine's own rules (SGLang's
    is_deepseek_dsa override, vLLM's use_sparse selector) pick a sparse backend, never a dense Triton MLA backend
    whose entries would then claim the model; the line that chose it names it."""
    base = ATTENTION_PRESETS[rng.choice(["deepseek-v3", "kimi-k2"])]
    model = dataclasses.replace(base, architecture="DeepseekV32ForCausalLM", model_type="deepseek_v32",
                                index_topk=rng.choice([1024, 2048]))
    target = profile(rng.choice(TARGETS))
    dense = backends.attention_backend(engine, target, base)
    sel = backends.attention_backend(engine, target, model)
    assert sel.backend != dense.backend and not entries_of(sel.engine, sel.backend), (dense, sel)
    assert sel.backend in _line_text(engine, sel.line)[2], sel


def test_vllms_sparse_selection_does_not_read_the_audit_hosts_toolchain(vllm, rng, monkeypatch):
    """vLLM's `has_flashinfer()` asks the machine it runs on for nvcc and ninja (FlashInfer's JIT) unless
    flashinfer-cubin is there: the serving host's toolchain, not the audit host's. With neither on the audit host's
    PATH, a sparse-MLA model on SM120 still gets the engine's SM120 sparse backend (the answer on a host that has
    them), and a target where no backend is valid is one line naming the engine's reasons, not a traceback."""
    base = ATTENTION_PRESETS[rng.choice(["deepseek-v3", "kimi-k2"])]
    model = dataclasses.replace(base, architecture="DeepseekV32ForCausalLM", model_type="deepseek_v32",
                                index_topk=rng.choice([1024, 2048]))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    sel = backends.attention_backend(vllm, profile(rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"])), model)
    assert sel.backend == "FLASHINFER_MLA_SPARSE_SM120", sel
    target = rng.choice(["rtx-4090", "l40s"])
    with pytest.raises(UsageError) as err:
        backends.attention_backend(vllm, profile(target), model)
    line = str(err.value)
    assert "\n" not in line and f"finds no attention backend for {model.name} on {target}" in line, line
    assert "sparse not supported" in line, line


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_gpt_oss_on_sm120_runs_the_triton_backend(request, engine_name):
    src = request.getfixturevalue(engine_name)
    sel = backends.attention_backend(src, profile("rtx-pro-6000"), ATTENTION_PRESETS["gpt-oss-120b"])
    assert sel.triton and entries_of(sel.engine, sel.backend), sel
    assert all(e in KERNELS for e in entries_of(sel.engine, sel.backend))


def test_forced_valid_name_is_honoured(engine, rng):
    target, preset = rng.choice(TARGETS), rng.choice(PRESETS)
    model = ATTENTION_PRESETS[preset]
    default = backends.attention_backend(engine, profile(target), model)
    name = rng.choice(default.valid)
    sel = backends.attention_backend(engine, profile(target), model, name)
    assert (sel.backend, sel.forced) == (name, True)
    rel, no, text = _line_text(engine, sel.line)
    if engine.engine == "vllm":  # the `return` of get_attn_backend_cls's selected-backend branch
        assert text.strip().startswith("return") and _enclosing(engine, rel, no).name == "get_attn_backend_cls"
    else:  # the creator attention_registry.py registers under that name
        assert name in _registered(_enclosing(engine, rel, no)), (name, sel.line)


def _registered(fn: ast.FunctionDef) -> set:
    return {a.value for d in fn.decorator_list if isinstance(d, ast.Call) for a in d.args
            if isinstance(a, ast.Constant)}


def test_forced_unknown_name_names_the_valid_ones(engine, rng):
    target, preset = rng.choice(TARGETS), rng.choice(PRESETS)
    model = ATTENTION_PRESETS[preset]
    bogus = "".join(rng.choice("abcdefxyz_") for _ in range(12))
    with pytest.raises(UsageError) as err:
        backends.attention_backend(engine, profile(target), model, bogus)
    msg = str(err.value)
    default = backends.attention_backend(engine, profile(target), model)
    assert "\n" not in msg and bogus in msg and all(v in msg for v in default.valid), msg


def test_refused_name_gives_the_engines_reason(request):
    """vLLM refuses FLASH_ATTN for gpt-oss on SM120 (sinks need FA3/4, SM120 gets FA2) and SGLang refuses fa3 there
    (attention_registry.py's assert); each message names the engine's reason, read from the wheel here."""
    model = ATTENTION_PRESETS["gpt-oss-120b"]
    vllm = request.getfixturevalue("vllm")
    with pytest.raises(UsageError, match="sinks not supported.*valid: TRITON_ATTN"):
        backends.attention_backend(vllm, profile("rtx-pro-6000"), model, "FLASH_ATTN")
    sglang = request.getfixturevalue("sglang")
    text = sglang.read_text("sglang/srt/layers/attention/attention_registry.py")
    fn = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
              and n.name == "create_flashattention_v3_backend")
    reason = next(n.msg.value for n in ast.walk(fn) if isinstance(n, ast.Assert) and isinstance(n.msg, ast.Constant))
    with pytest.raises(UsageError) as err:
        backends.attention_backend(sglang, profile("rtx-pro-6000"), model, "fa3")
    assert reason.split(".")[0] in str(err.value) and "triton" in str(err.value)


def test_selection_leaves_the_process_as_it_was(engine, rng):
    cap, cuda, modules = torch.cuda.get_device_capability, torch.version.cuda, set(sys.modules)
    backends.attention_backend(engine, profile(rng.choice(TARGETS)), ATTENTION_PRESETS[rng.choice(PRESETS)])
    assert torch.cuda.get_device_capability is cap and torch.version.cuda == cuda
    assert not {m for m in set(sys.modules) - modules if m.split(".")[0] in ("vllm", "sglang")}


def test_a_pinned_flashinfer_that_is_not_here_is_read_as_the_nearest_release_and_said(rng, monkeypatch):
    """vLLM 0.34.0 pins flashinfer-python 0.7.3, which the package index here does not serve: its MLA selection
    imports flashinfer, read from the nearest release here, and the Selection says which (the audit prints it on its
    ATTENTION line and records it in run.json); with no FlashInfer release here at all, one line naming the fetch."""
    from tileprobe.engines import locate
    from tileprobe.engines.triton_configs import EngineSource

    found = [p for p in locate.releases("vllm") if p.wheel is not None and p.version == "0.34.0"]
    if not found:
        pytest.skip("no cached vllm 0.34.0 wheel (tileprobe engines fetch vllm==0.34.0)")
    if any(p.version == "0.7.3" for p in locate.releases(locate.FLASHINFER_DIST)):
        pytest.skip("flashinfer-python 0.7.3 is here: nothing to fall back from")
    src = EngineSource("vllm", "0.34.0", str(found[0].wheel), "wheel")
    model, target = ATTENTION_PRESETS["kimi-k2"], profile(rng.choice(TARGETS))
    sel = backends.attention_backend(src, target, model)
    here = sorted({p.version for p in locate.releases(locate.FLASHINFER_DIST)})
    assert len(sel.notes) == 1 and "pins flashinfer-python 0.7.3" in sel.notes[0], sel.notes
    read = sel.notes[0].split(" read ")[1].split(",")[0]
    assert read in here and read == locate.nearest("0.7.3", locate.releases(locate.FLASHINFER_DIST)).version
    monkeypatch.setattr(locate, "releases", lambda dist: [])
    with pytest.raises(UsageError, match="flashinfer-python==0.7.3"):
        backends.attention_backend(src, target, model)
