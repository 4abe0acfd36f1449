"""tileprobe.models: a Hugging Face config.json's MoE fields, each under any of the names public configs use, become
the presets' MoEModel; a missing or wrong-typed field is one line naming it (exit 2 from the CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.errors import UsageError
from tileprobe.models import EXPERT_FIELDS, read_attention, read_config
from tileprobe.workloads import MoEModel

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("experts", "num_experts_per_tok", "moe_intermediate_size", "hidden_size")


def _config(rng) -> tuple[dict, dict]:
    """A config.json with random MoE fields (one of the experts spellings), and the values drawn."""
    want = {"experts": rng.choice([8, 32, 60, 64, 128, 160, 256, 384, 512]), "hidden": rng.choice([2048, 2880, 4096,
            5120, 7168]), "inter": rng.choice([512, 768, 1408, 1536, 2048, 14336]), "shared": rng.choice([0, 1, 2])}
    want["top_k"] = rng.randint(1, min(10, want["experts"]))
    doc = {"model_type": rng.choice(["deepseek_v3", "qwen3_moe", "mixtral"]), "hidden_size": want["hidden"],
           rng.choice(EXPERT_FIELDS): want["experts"], "num_experts_per_tok": want["top_k"],
           "moe_intermediate_size": want["inter"], "intermediate_size": want["inter"] * rng.randint(3, 9),
           "vocab_size": 129280, "rope_scaling": {"type": "yarn"}}
    if want["shared"]:
        doc["n_shared_experts"] = want["shared"]
    return doc, want


def _write(tmp_path: Path, doc) -> Path:
    folder = tmp_path / "My-MoE-Model"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(doc))
    return path


def test_good_config_reads_into_the_presets_model(tmp_path, rng):
    doc, want = _config(rng)
    block = rng.choice([None, [128, 128]])
    if block is not None:
        doc["quantization_config"] = {"quant_method": "fp8", "weight_block_size": block, "fmt": "e4m3"}
    c = read_config(_write(tmp_path, doc))
    assert c.moe() == MoEModel("My-MoE-Model", want["hidden"], want["inter"], want["experts"], want["top_k"],
                               want["shared"])
    assert c.experts_field in doc and c.inter_field == "moe_intermediate_size"
    assert c.scheme() == ("bf16" if block is None else "fp8-block")
    # Mixtral / gpt-oss spell the expert size intermediate_size (no moe_intermediate_size); Llama 4 nests text_config.
    del doc["moe_intermediate_size"]
    c = read_config(_write(tmp_path, {"architectures": ["X"], "text_config": doc}))
    assert c.moe_intermediate_size == doc["intermediate_size"] and c.experts == want["experts"]


@pytest.mark.parametrize("field", REQUIRED)
def test_missing_field_is_named(tmp_path, rng, field):
    doc, _ = _config(rng)
    drop = EXPERT_FIELDS if field == "experts" else ("moe_intermediate_size", "intermediate_size") \
        if field == "moe_intermediate_size" else (field,)
    for k in drop:
        doc.pop(k, None)
    with pytest.raises(UsageError) as exc:
        read_config(_write(tmp_path, doc))
    assert "no " in str(exc.value) and drop[0] in str(exc.value) and "\n" not in str(exc.value)


def test_wrong_type_is_named_and_the_cli_says_it_in_one_line(tmp_path, rng):
    doc, _ = _config(rng)
    field = rng.choice(["hidden_size", "num_experts_per_tok", "moe_intermediate_size",
                        next(k for k in EXPERT_FIELDS if k in doc)])
    good = doc[field]
    doc[field] = rng.choice([str(good), float(good) + 0.5, True, [good], -good])
    path = _write(tmp_path, doc)
    with pytest.raises(UsageError, match=field):
        read_config(path)
    p = subprocess.run([sys.executable, "-m", "tileprobe", "export", "triton-configs", "--engine", "vllm", "--model",
                        str(path), "--target", "rtx-pro-6000", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()
    doc[field] = good
    doc["quantization_config"] = {"quant_method": "fp8", "weight_block_size": "128,128"}
    with pytest.raises(UsageError, match="weight_block_size"):
        read_config(_write(tmp_path, doc))


def test_attention_fields_read_as_named(tmp_path, rng):
    """read_attention: KV heads default to the heads (MHA), head_dim to hidden_size / heads, dtype from torch_dtype,
    the windows the layers attend with from layer_types; under text_config for a multimodal config."""
    heads = rng.choice([8, 16, 32, 64])
    hidden = heads * rng.choice([64, 80, 128])
    window = rng.choice([128, 512, 4096])
    doc = {"num_attention_heads": heads, "hidden_size": hidden, "sliding_window": window, "torch_dtype": "float32",
           "layer_types": rng.choice([["sliding_attention", "full_attention"], ["full_attention"]]),
           "model_type": "x"}
    nested = rng.random() < 0.5
    (tmp_path / "config.json").write_text(json.dumps({"text_config": doc} if nested else doc))
    a = read_attention(tmp_path / "config.json")
    assert (a.heads, a.kv_heads, a.head_dim, a.dtype) == (heads, heads, hidden // heads, "fp32")
    assert set(a.windows()) == {window if "sliding" in t else None for t in doc["layer_types"]}
    assert not a.mla and not a.sinks


@pytest.mark.parametrize("field", ["num_attention_heads", "torch_dtype", "layer_types", "kv_lora_rank",
                                   "attn_type_list"])
def test_attention_field_of_the_wrong_type_is_named(tmp_path, rng, field):
    doc = {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
    doc[field] = rng.choice({"num_attention_heads": ["32", 0, -4], "torch_dtype": [16, "float8"],
                             "layer_types": ["full", [1, 2]], "kv_lora_rank": ["512", 2.5],
                             "attn_type_list": [[0, "1"], [True, 1], "01"]}[field])
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=field):
        read_attention(tmp_path / "config.json")
