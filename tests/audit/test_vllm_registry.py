"""The audit asks vLLM's own model registry first: an architecture the release lists as no longer supported (its
`_PREVIOUSLY_SUPPORTED_MODELS`, read from the wheel) is one line and exit 2, naming the last release that loaded it
and the registry line that refuses it; an architecture the registry still loads goes on to the audit."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tileprobe.engines import vllm_registry

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, arch: str) -> Path:
    folder = tmp_path / arch
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": [arch], "model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8,
        "hidden_size": 4096, "num_hidden_layers": 2, "intermediate_size": 14336, "vocab_size": 128256,
        "torch_dtype": "bfloat16"}))
    return folder / "config.json"


def _audit(config: Path, out: Path):
    return subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--model", str(config),
                           "--target", "rtx-pro-6000", "--kernel", "vllm-unified-attention", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})


def test_a_retired_architecture_is_refused_in_one_line(vllm, rng, tmp_path):
    # the registry's dict, read here by its own walk of the file (not the module's), to draw from
    tree = ast.parse(vllm.read_text(vllm_registry.REGISTRY))
    table = next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == "_PREVIOUSLY_SUPPORTED_MODELS" for t in n.targets))
    arch = rng.choice(sorted(table) + ["MiniMaxM1ForCausalLM"] * 3)
    assert arch in table  # MiniMax-M1's kernels still ship, its model class does not
    p = _audit(_config(tmp_path, arch), tmp_path / "out")
    assert p.returncode == 2, (p.returncode, p.stdout[-800:], p.stderr)
    (line,) = p.stderr.strip().splitlines()
    assert arch in line and f"v{table[arch]}" in line and f"{vllm_registry.REGISTRY}:" in line, line
    assert vllm_registry.retired(vllm, rng.choice(["LlamaForCausalLM", "Qwen3MoeForCausalLM"])) is None
