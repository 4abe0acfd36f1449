"""`tileprobe audit` end to end (a subprocess, as a user runs it): rows written per distinct launch, exit per the fit
rule with one OVER line per launch over the limit; bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.audit.kernels import kernels_for
from tileprobe.models import ATTENTION_PRESETS
from tileprobe.targets import PROFILES

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tileprobe", "audit", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})


def _one_line_exit_2(p) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tileprobe: error:") and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def _exit_for(rows: list[dict]) -> int:
    """The audit's exit contract over every row it wrote: 1 a kernel fails, 3 some unanswered, else 0."""
    verdicts = {r["verdict"] for r in rows if not (r.get("autotune_dropped") and r["verdict"] != "fits")}
    if verdicts & {"smem-over-limit", "compile-error", "no-code", "refused"}:
        return 1
    return 3 if "unanswered" in verdicts or not rows else 0


def _config(rng) -> dict:
    kv = rng.choice([1, 2, 4, 8])
    return {"model_type": "llama", "num_attention_heads": kv * rng.choice([1, 2, 4]), "num_key_value_heads": kv,
            "head_dim": rng.choice([64, 128]), "hidden_size": 4096, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("field", ["num_attention_heads", "hidden_size"])
def test_config_missing_a_field_is_one_line_naming_it(tmp_path, rng, field):
    doc = _config(rng)
    doc.pop(field)
    doc.pop("head_dim")  # hidden_size is needed only where head_dim is absent
    # a model_type transformers has no config class for: no class default fills the field (a llama config would get
    # LlamaConfig's 32 heads / 4096 hidden, as vLLM itself would read it)
    doc["model_type"] = rng.choice(["tileprobe_unknown", "my_private_arch"])
    (tmp_path / "config.json").write_text(json.dumps(doc))
    line = _one_line_exit_2(_cli("--engine", "sglang", "--model", tmp_path, "--target", "rtx-pro-6000"))
    assert field in line and "config.json" in line, line


def test_config_wrong_type_is_one_line_naming_it(tmp_path, rng):
    doc = _config(rng)
    field = rng.choice(["num_key_value_heads", "head_dim", "sliding_window"])
    doc[field] = rng.choice(["128", 1.5, [8], True])
    (tmp_path / "config.json").write_text(json.dumps(doc))
    line = _one_line_exit_2(_cli("--engine", "sglang", "--model", tmp_path / "config.json", "--target", "h200"))
    assert field in line, line


def test_unknown_engine_model_and_unserved_model_are_one_line(tmp_path, rng):
    assert "--engine" in _one_line_exit_2(_cli("--engine", rng.choice(["trtllm", "vllm2", "SGLang"]), "--model",
                                               "qwen3-30b-a3b"))
    assert "preset" in _one_line_exit_2(_cli("--engine", "sglang", "--model", tmp_path / "nope"))
    engine = rng.choice(["sglang", "vllm"])
    wrong = rng.choice(["sglang-extend", "unified_attention", "vllm-unified-attention-x", "fused_moe"])
    line = _one_line_exit_2(_cli("--engine", engine, "--model", "qwen3-30b-a3b", "--kernel", wrong))
    assert wrong in line and all(k.name in line for k in kernels_for(engine)), line
    # DeepSeek-V4 (MLA ranks, model_type deepseek_v4): no Triton launcher of tileprobe's serves it on vLLM; its path
    # is still audited, and an audit whose kernels are unanswered never exits 0
    doc = _config(rng) | {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 448, "v_head_dim": 512,
                          "model_type": "deepseek_v4"}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    p = _cli("--engine", "vllm", "--model", tmp_path, "--target", "h200", "--out", tmp_path / "v4")
    rows = [json.loads(ln) for ln in (tmp_path / "v4" / "results.jsonl").read_text().splitlines() if ln.strip()]
    assert p.returncode == _exit_for(rows) != 0 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert any(r["family"] == "compiled-audit" and r["layer"].startswith("attention") for r in rows)


@pytest.mark.triton
@pytest.mark.parametrize("mla", [False, True])
def test_audit_writes_a_row_per_distinct_launch_and_exits_by_the_fit_rule(sglang, tmp_path, rng, mla):
    preset = rng.choice(sorted(p for p, m in ATTENTION_PRESETS.items() if m.mla == mla))
    target = rng.choice(["rtx-pro-6000", "h200"])
    batch, seq = rng.randint(2, 64), rng.randint(16, 8192)
    out = tmp_path / "out"
    p = _cli("--engine", "sglang", "--model", preset, "--target", target, "--batch", batch, "--seq-len", seq,
             "--out", out, "--jobs", 1, "--attention-backend", "triton")
    assert p.returncode in (0, 1, 3) and "Traceback" not in p.stderr, (p.returncode, p.stdout[-2000:], p.stderr)
    every = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert json.loads((out / "run.json").read_text())["attention_backend"]["forced"] is True
    assert p.returncode == _exit_for([r for r in every if r["verdict"] != "not-selected"])
    # the Triton launches (the compiled kernels on the path are tests/audit/path's)
    rows = [r for r in every if r["verdict"] != "not-selected" and r["family"] == "triton-audit"]
    model = ATTENTION_PRESETS[preset]
    windows = len(set(model.windows()))
    # MHA/GQA: extend attention once per layer window, decode attention's split-K stages (stage 1, stage 2), no
    # context attention (the vision encoder's: no preset has a vision_config). MLA: extend attention twice (the absorbed layer after a
    # cached prefix, q head dim kv_lora_rank + rope; the up-projected MHA layer without one, qk_nope + rope), no
    # context attention, decode attention's two stages on the latent cache
    # (the decode step's own split-count launches, get_num_kv_splits_triton, are rows of the decode entry too)
    ops = [r["gemm"].split()[0] for r in rows if r["kernel"] != "get_num_kv_splits_triton"]
    want = (2, 0, 2) if model.mla else (windows, 0, 2)
    assert (ops.count("extend_attention_fwd"), ops.count("context_attention_fwd"), ops.count("decode_attention_fwd")) \
        == want, rows
    assert any(r["kernel"] == "get_num_kv_splits_triton" and r["phase"] == "decode" for r in rows), rows
    if model.mla:
        heads = model.heads
        dims = sorted(int(r["problem"].split("Q_Extend=")[1].split("]")[0].split("x")[-1]) for r in rows
                      if r["gemm"].startswith("extend"))
        assert dims == sorted([model.qk_nope_head_dim + model.qk_rope_head_dim,
                               model.kv_lora_rank + model.qk_rope_head_dim]), rows
        # decode stage 1 reads q (B, H, kv_lora_rank + rope) against the one latent KV head
        q = f"Q=bf16[{batch}x{heads}x{model.kv_lora_rank + model.qk_rope_head_dim}]"
        assert len([r for r in rows if r["gemm"].startswith("decode") and q in r["problem"]]) == 1, rows
    limit = PROFILES[target].smem_optin
    over = [r for r in rows if r["smem_bytes"] > limit]
    # predictor first: a launch a stated rule answers (tileprobe.predict.triton_attention) is predicted, any other
    # is sized by Triton's own allocation (no cubin either way)
    assert all(r["smem_limit_bytes"] == limit and r["regs_per_thread"] is None
               and (r["evidence"] == "predicted" if r["predicted_smem_bytes"] is not None else
                    r["evidence"] == "sized" and r["prediction"].startswith("cannot predict: ")) for r in rows), rows
    assert all(r["verdict"] == ("smem-over-limit" if r in over else "fits") for r in rows), rows
    assert not over or p.returncode == 1
    assert len([ln for ln in p.stdout.splitlines() if ln.startswith("OVER ")]) == len(over)
    extend = next(r for r in rows if r["gemm"].startswith("extend"))
    want = "CUDA_CAPABILITY[0] == 12" if target == "rtx-pro-6000" else "CUDA_CAPABILITY[0] >= 9"
    file, line = extend["config_source"].rsplit(":", 1)
    assert want in extend["reason"] and file == "sglang/kernels/ops/attention/extend_attention.py", extend
    assert want in sglang.read_text(file).splitlines()[int(line) - 1], extend["config_source"]
    assert (out / "report.md").is_file() and (out / "results.csv").is_file()


@pytest.mark.triton
def test_the_engines_own_attention_backend_decides_which_attention_kernels_run(request, tmp_path, rng):
    """Without --attention-backend, an attention entry runs only where the engine's own selection picks its backend;
    the others are not-selected rows naming the line that chose, whose text names the backend chosen."""
    engine = rng.choice(["sglang", "vllm"])
    src = request.getfixturevalue(engine)
    preset = rng.choice(["qwen3-30b-a3b", "gpt-oss-120b"])
    out = tmp_path / "out"
    p = _cli("--engine", engine, "--model", preset, "--target", rng.choice(["rtx-pro-6000", "h200"]), "--batch", 2,
             "--seq-len", rng.randint(64, 2048), "--out", out, "--jobs", 1, "--kernel",
             ",".join(k.name for k in kernels_for(engine) if k.backend))
    # 3 when the engine runs none of these Triton launchers (0 launches answered never passes)
    assert p.returncode in (0, 1, 3) and "Traceback" not in p.stderr, (p.returncode, p.stdout[-2000:], p.stderr)
    sel = json.loads((out / "run.json").read_text())["attention_backend"]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    file, line = sel["line"].rsplit(":", 1)
    assert sel["backend"] in src.read_text(file).splitlines()[int(line) - 1], sel
    backend_of = {k.name: k.backend for k in kernels_for(engine)}
    for r in rows:
        entry = next(k for k in kernels_for(engine) if k.name == r["gemm"] or  # a not-selected row's op: the entry
                     (r["verdict"] != "not-selected" and k.launcher == r["gemm"].split()[0]))
        if r["verdict"] == "not-selected":
            assert r["config_source"] == sel["line"] and sel["backend"] in r["reason"], r
            assert backend_of[entry.name] != sel["backend"], r
        else:
            assert sel["backend"] in {backend_of[k.name] for k in kernels_for(engine) if k.launcher == entry.launcher}
    # every served attention entry of another backend is a not-selected row; one of the chosen backend, launched
    model = ATTENTION_PRESETS[preset]
    served = [k for k in kernels_for(engine) if k.backend and k.serves(model) is None]
    elsewhere = {r["kernel_file"] for r in rows if r["verdict"] == "not-selected"}
    assert elsewhere == {k.module_file for k in served if k.backend != sel["backend"]}, (elsewhere, sel)
    assert any(r["verdict"] != "not-selected" for r in rows) == any(k.backend == sel["backend"] for k in served)


def test_no_torch_is_one_line_naming_the_extra(rng):
    """The audit's stand-in tensors are torch's: without torch, one line and exit 2 before any capture."""
    code = ("import sys; sys.modules['torch'] = None; from tileprobe.cli import main; "
            f"sys.argv = ['tileprobe', 'audit', '--engine', {rng.choice(['vllm', 'sglang'])!r}, '--model', "
            f"{rng.choice(sorted(ATTENTION_PRESETS))!r}, '--target', 'rtx-pro-6000']; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    line = _one_line_exit_2(p)
    assert "torch" in line and "tileprobe[audit]" in line, line


@pytest.mark.triton
def test_the_users_tuned_folder_is_what_the_audit_sizes_and_the_fix_is_a_folder_that_fits(vllm, tmp_path, rng):
    """vLLM reads VLLM_TUNED_CONFIG_FOLDER first: a file there for the target's SKU whose configs are over the limit
    makes the captured fused_moe launches over (exit 1), and the SET line names the folder to write instead."""
    model = ATTENTION_PRESETS[rng.choice(["kimi-k2", "deepseek-v3"])]  # fp8 [128, 128]: Triton on sm_120
    cfg = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 8,
           "num_stages": rng.choice([4, 5, 6])}
    name = (f"E={model.moe.experts},N={model.moe.inter},device_name=NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition,"
            "dtype=fp8_w8a8,block_shape=[128,128].json")
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / name).write_text(json.dumps({str(2**i): cfg for i in range(13)}))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "tileprobe", "audit", "--engine", "vllm", "--model", model.name,
                        "--target", "rtx-pro-6000", "--kernel", "vllm-fused-moe-decode", "--batch",
                        str(rng.randint(1, 64)), "--out", str(out), "--jobs", "1"], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT), "VLLM_TUNED_CONFIG_FOLDER": str(tmp_path / "tuned")})
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert p.returncode == 1 and rows and all(r["verdict"] == "smem-over-limit" for r in rows), (p.stdout, rows)
    assert all((r["block_m"], r["block_n"], r["block_k"], r["stages"]) == (128, 256, 128, cfg["num_stages"])
               for r in rows), rows
    sets = [ln for ln in p.stdout.splitlines() if ln.startswith("SET fused_moe_kernel")]
    assert len(sets) == 1 and "VLLM_TUNED_CONFIG_FOLDER" in sets[0] and "export triton-configs" in sets[0], p.stdout
