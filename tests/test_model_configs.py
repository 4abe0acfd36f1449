"""Models as users name them, read the way the engines read them (tileprobe.model_config, tileprobe.models).

Published config.json files (tests/data/configs/README.md says where each copy comes from) read through transformers'
config classes give the layers the engine sees: Gemma-3-27B's full-attention layers (its file has no layer_types),
Gemma-3-4B's head counts (its text_config has none); a Mamba-2 model has SSM dims and no attention; a Falcon-H1 has
both in every layer; `--model org/name` is read from huggingface_hub's cache offline, and without cache or network it
is one line naming the preset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tileprobe import model_config
from tileprobe.errors import UsageError
from tileprobe.models import ATTENTION_PRESETS, SSMDims, VisionDims, attention_model, read_config
from tileprobe.workloads import PRESETS as MOE_PRESETS

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "configs"
QWEN_ID = "Qwen/Qwen3-30B-A3B"


def _published(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def _gemma_layers(n: int) -> tuple[str, ...]:
    """Gemma-3's pattern as Gemma3TextConfig derives it: every 6th layer full attention, the rest sliding."""
    return tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n))


def test_gemma3_27b_has_its_full_attention_layers():
    assert "layer_types" not in _published("gemma-3-27b-it")["text_config"]  # the published file states none
    a = attention_model(str(CONFIGS / "gemma-3-27b-it"))
    assert (a.heads, a.kv_heads, a.head_dim, a.dtype, a.sliding_window) == (32, 16, 128, "bf16", 1024)
    assert a.layer_types == _gemma_layers(62) and a.layer_types.count("full_attention") == 10
    assert a.windows() == (1024, None)
    assert a.vision == VisionDims(16, 1152 // 16) and a.architecture == "Gemma3ForConditionalGeneration"
    assert (a.name, a.model_type, a.ssm, a.moe) == ("gemma-3-27b-it", "gemma3_text", None, None)


def test_without_the_config_class_the_file_alone_misses_them(monkeypatch):
    """The hand reader (a model_type transformers does not know) sees the file only: every layer sliding, and no
    heads for Gemma-3-4B. This is what the config class adds."""
    monkeypatch.setattr(model_config, "config_class", lambda model_type: None)
    a = attention_model(str(CONFIGS / "gemma-3-27b-it"))
    assert a.layer_types == () and a.windows() == (1024,)
    with pytest.raises(UsageError, match="no text_config.num_attention_heads"):
        attention_model(str(CONFIGS / "gemma-3-4b-it"))


def test_gemma3_4b_heads_come_from_the_config_class():
    assert "num_attention_heads" not in _published("gemma-3-4b-it")["text_config"]
    a = attention_model(str(CONFIGS / "gemma-3-4b-it"))
    assert (a.heads, a.kv_heads, a.head_dim, a.sliding_window) == (8, 4, 256, 1024)  # Gemma3TextConfig's defaults
    assert a.layer_types == _gemma_layers(34) and a.windows() == (1024, None)


def test_a_wrong_typed_field_is_still_named_when_the_class_refuses_it(tmp_path):
    doc = _published("gemma-3-27b-it")
    doc["text_config"]["num_attention_heads"] = "32"
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="num_attention_heads is '32'") as exc:
        attention_model(str(tmp_path))
    assert "\n" not in str(exc.value)


def test_qwen3_moe_file_reads_as_its_preset():
    a, preset = attention_model(str(CONFIGS / "Qwen3-30B-A3B")), ATTENTION_PRESETS["qwen3-30b-a3b"]
    assert (a.heads, a.kv_heads, a.head_dim, a.dtype, a.mla) == (preset.heads, preset.kv_heads, preset.head_dim,
                                                                   preset.dtype, preset.mla)
    assert a.windows() == preset.windows() == (None,)
    assert replace(a.moe, name=preset.moe.name) == preset.moe and a.quant is None
    assert replace(read_config(CONFIGS / "Qwen3-30B-A3B").moe(), name="qwen3-30b-a3b") == MOE_PRESETS["qwen3-30b-a3b"]


# Mamba-2 and Falcon-H1: no published config.json of either was found in the stored public sources (the README
# beside the published copies says so); these carry the fields each family's engine code reads, at the sizes
# transformers' Mamba2Config defaults (mistralai/Mamba-Codestral-7B-v0.1's) and its Falcon-H1 table (0.5B) state.
MAMBA2 = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64,
          "num_heads": 128, "head_dim": 64, "state_size": 128, "n_groups": 8, "chunk_size": 256, "conv_kernel": 4,
          "expand": 2, "vocab_size": 32768, "time_step_limit": [0.0, float("inf")], "torch_dtype": "bfloat16"}
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 1024,
             "num_hidden_layers": 36, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
             "mamba_d_ssm": 1536, "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1,
             "mamba_chunk_size": 128, "mamba_d_conv": 4, "torch_dtype": "bfloat16"}


def _write(tmp_path: Path, doc: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return tmp_path


def test_a_pure_mamba2_model_has_ssm_dims_and_no_attention(tmp_path):
    from tileprobe.audit.run import serving
    a = attention_model(str(_write(tmp_path, MAMBA2)))
    assert (a.heads, a.kv_heads, a.head_dim) == (0, 0, 0)
    assert a.ssm == SSMDims(heads=128, head_dim=64, state_size=128, groups=8, chunk_size=256, conv_kernel=4)
    served = serving("vllm", a)
    assert served and all(k.name.startswith("vllm-mamba2") for k in served), [k.name for k in served]
    from tileprobe.audit.kernels import kernels_for
    why = {k.name: k.serves(a) for k in kernels_for("sglang")}  # no audited SSM kernel: each entry says why not
    assert all(why.values()) and any("no attention layers" in w for w in why.values()), why


def test_falcon_h1_has_attention_and_mamba2_in_every_layer(tmp_path):
    from tileprobe.audit.run import serving
    doc = dict(FALCON_H1, mamba_d_head="auto")  # transformers resolves 'auto' to mamba_d_ssm / mamba_n_heads
    a = attention_model(str(_write(tmp_path, doc)))
    assert (a.heads, a.kv_heads, a.head_dim) == (8, 2, 64)
    assert a.ssm == SSMDims(heads=24, head_dim=64, state_size=128, groups=1, chunk_size=128, conv_kernel=4)
    assert a.windows() == (None,) and set(a.layer_types) <= {"hybrid"}  # transformers 5 names each layer hybrid
    names = {k.name for k in serving("vllm", a)}
    assert any(n.startswith("vllm-mamba2") for n in names) and any("mamba" not in n for n in names), names


def _cache(root: Path, repo_id: str, doc_text: str) -> None:
    """huggingface_hub's cache layout for one file: models--org--name/{refs/main, snapshots/<commit>/config.json}."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(doc_text)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def test_a_hub_id_reads_from_the_cache_offline(hf_cache):
    _cache(hf_cache, QWEN_ID, (CONFIGS / "Qwen3-30B-A3B" / "config.json").read_text())
    a, preset = attention_model(QWEN_ID), ATTENTION_PRESETS["qwen3-30b-a3b"]
    assert a.name == "Qwen3-30B-A3B" and a.moe.name == "Qwen3-30B-A3B"
    assert (a.heads, a.kv_heads, a.head_dim, a.windows()) == (preset.heads, preset.kv_heads, preset.head_dim,
                                                              preset.windows())
    assert replace(a.moe, name=preset.moe.name) == preset.moe
    assert read_config(QWEN_ID).moe() == replace(MOE_PRESETS["qwen3-30b-a3b"], name="Qwen3-30B-A3B")


def test_a_hub_id_offline_without_cache_is_one_line_naming_the_preset(hf_cache):
    with pytest.raises(UsageError) as exc:
        attention_model(QWEN_ID)
    msg = str(exc.value)
    assert "\n" not in msg and "--model qwen3-30b-a3b" in msg and "HF_HUB_OFFLINE" in msg and "config.json" in msg
    with pytest.raises(UsageError, match="--workload qwen3-30b-a3b"):
        read_config(QWEN_ID)
    assert model_config.matching_preset("openai/gpt-oss-120b", ATTENTION_PRESETS) == "gpt-oss-120b"
    assert model_config.matching_preset("nvidia/Nemotron-H-8B-Base-8K", ATTENTION_PRESETS) == "nemotron-h-8b"
    assert model_config.matching_preset("google/gemma-3-27b-it", ATTENTION_PRESETS) is None


def test_the_cli_says_no_network_and_no_cache_in_one_line(tmp_path):
    """Not offline, the Hub unreachable (a closed local port), an empty cache: exit 2, one line, no traceback, at
    once (one HEAD, none of huggingface_hub's retries)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env |= {"PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--model", QWEN_ID,
                        "--target", "rtx-pro-6000", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert QWEN_ID in lines[0] and "qwen3-30b-a3b" in lines[0] and "cannot be reached" in lines[0], lines[0]
    assert not (tmp_path / "o").exists()
