"""`python -m tileprobe.audit.runtime` (the GPU attention check's entry point, run by hand on the lent machine): bad
input is one line on stderr and exit code 2, never a traceback, as the CLI's is."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")


def _run(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k != "TILEPROBE_ENGINE_WHEELS"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")  # no engine wheel anywhere
    return subprocess.run([sys.executable, "-m", "tileprobe.audit.runtime", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_missing_engine_wheel_is_one_line_and_exit_2(tmp_path):
    res = _run(tmp_path, "--slim", str(tmp_path / "slim"))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    first, *rest = res.stderr.strip().splitlines()
    assert first.startswith("python -m tileprobe.audit.runtime: error: need ")
    assert "no wheel of it is in the wheel cache" in first
    assert all(line.startswith("help: ") for line in rest)  # at most the fetch hint
    assert not (tmp_path / "slim").exists() or not any((tmp_path / "slim").iterdir())


@pytest.mark.parametrize("args", [["--case", "no-such-case", "--dry-run"], ["--dry-run"]])
def test_bad_options_exit_2_without_a_traceback(tmp_path, args):
    res = _run(tmp_path, *args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("python -m tileprobe.audit.runtime: error: --")


# ---------------------------------------------------------------------------------------------------------------
# A check that did not run is never printed as a measurement and never exits 0; a control not caught exits 1
# ---------------------------------------------------------------------------------------------------------------


def _run_here(tmp_path, *args, **env):
    """The module with this machine's wheel cache (not emptied) and `env` on top (CUDA_VISIBLE_DEVICES="": no GPU)."""
    return subprocess.run([sys.executable, "-m", "tileprobe.audit.runtime", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_without_a_gpu_nothing_is_run_printed_or_written_and_the_exit_is_3(tmp_path):
    res = _run_here(tmp_path, "--out", str(tmp_path / "out"), "--case", "sglang-decode-gqa", CUDA_VISIBLE_DEVICES="")
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("python -m tileprobe.audit.runtime: not run: no GPU"), line
    assert "worst/bound" not in res.stdout and " us" not in res.stdout and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
    help_text = _run_here(tmp_path, "--help").stdout
    assert "3" in help_text and "not run" in help_text  # the code is documented in --help


def _sglang_or_skip():
    from tileprobe.engines.triton_configs import find_engine
    from tileprobe.errors import UsageError

    try:
        find_engine("sglang")
    except UsageError as exc:
        pytest.skip(f"no sglang wheel: {exc}")


def test_a_dry_run_prints_no_number_it_did_not_measure_and_exits_3_and_model_picks_the_dimensions(tmp_path, capsys):
    """--dry-run (inputs built on the CPU and the launches captured, nothing launched or checked) returns 3 and its
    line carries no measurement; --model gives the case its model (gpt-oss-120b's dimensions and sinks for a case
    whose preset is qwen3-30b-a3b)."""
    _sglang_or_skip()
    from tileprobe.audit import runtime

    code = runtime.main(["--dry-run", "--out", str(tmp_path / "out"), "--case", "sglang-decode-gqa", "--model",
                         "gpt-oss-120b"])
    assert code == 3
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("sglang-decode-gqa")]
    assert "not-run" in line and "not measured" in line, line
    assert "worst/bound" not in line and " us" not in line and "0.0000" not in line, line
    (row,) = [json.loads(r) for r in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert row["verdict"] == "not-run" and row["us_median"] is None and row["worst_ratio"] is None
    assert row["problem"].startswith("gpt-oss-120b: "), row["problem"]


def test_model_picks_the_cases_that_apply_with_its_dimensions_and_window():
    """--model: a config.json (Llama-3.1-8B: GQA, full attention) gets the GQA cases with its dimensions; Gemma-3
    (sliding layers) the window cases at its own window; an MLA preset the MLA case only; no --model: every case at
    the presets, the window cases at gpt-oss's 128 as before."""
    from tileprobe.audit import runtime_cases as rc
    from tileprobe.models import ATTENTION_PRESETS, attention_model

    models = Path(__file__).resolve().parents[2] / "results" / "audit" / "models"
    llama = attention_model(str(models / "llama-3.1-8b.json"))
    got = rc.cases(132, llama)
    assert [c.name for c in got] == ["sglang-extend-gqa", "sglang-prefill-gqa", "sglang-decode-gqa",
                                     "vllm-unified-prefill-gqa", "vllm-unified-decode-gqa"]
    assert all(rc.model_of(c) is llama for c in got)
    gemma = attention_model(str(models / "gemma-3-4b.json"))
    w = rc.window_of(gemma)
    assert w and w != 128
    windowed = [c for c in rc.cases(132, gemma) if "window" in c.name]
    assert windowed and all(f"window {w}" in c.what and "sinks" not in c.what for c in windowed)
    assert [c.name for c in rc.cases(132, ATTENTION_PRESETS["kimi-k2"])] == ["vllm-mla-decode"]
    default = rc.cases(132)
    assert len(default) == 12 and {rc.model_of(c).name for c in default} == {"qwen3-30b-a3b", "gpt-oss-120b",
                                                                              "kimi-k2"}
    assert all("window 128, sinks" in c.what or "window 128 (via kv_indices), sinks" in c.what
               for c in default if "window" in c.name)


def test_model_with_none_of_the_cases_asked_is_one_line_and_exit_2(tmp_path):
    """An MLA preset has none of the GQA cases: one line naming the cases that apply to it, exit 2."""
    res = _run_here(tmp_path, "--dry-run", "--out", str(tmp_path / "out"), "--case", "sglang-decode-gqa",
                    "--model", "kimi-k2")
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "vllm-mla-decode" in line and "kimi-k2" in line and "sglang-decode-gqa" in line, line


def test_a_corruption_control_not_caught_exits_1(tmp_path, monkeypatch, capsys):
    """A verified case whose flipped-element control passed the check (NOT CAUGHT) fails the run (exit 1)."""
    from types import SimpleNamespace

    from tileprobe.audit import runtime
    from tileprobe.families import triton_audit as fam
    from tileprobe.results.rows import Outcome
    from tileprobe.targets import profile
    from tileprobe.verdict import Verdict

    gpu = dataclasses.replace(profile("h200"), gpu_index=0, source="cuda-python device query")
    cfg = fam.make_config("sglang 0.5.23", "k", "decode_attention_fwd", 16, 64, 128, 4, 2, "sm_90", "x.py:1", "abc")
    fields = {"rel_err": 1e-3, "atol": 0.0156, "rtol": 0.02, "tolerance": "t", "checked_elements": 10,
              "bad_elements": 0, "bad_groups": 0, "worst_group": 0, "worst_ratio": 0.5, "us_median": 3.0,
              "us_spread": 0.1, "launch_status": "ran"}
    flipped = {"bad_elements": 0, "worst_ratio": 0.9}  # the control passed: the check would miss a wrong output

    def run_case(case, *a, **k):
        return cfg, Outcome(cfg, Verdict.OK, "10 elements within the bound"), dict(fields), flipped

    src = SimpleNamespace(label=lambda: "sglang 0.5.23", origin=str(tmp_path / "sglang.whl"), read_text=lambda p: "")
    for name, value in (("device_target", lambda: gpu), ("gpu_target", lambda: gpu), ("run_case", run_case),
                        ("find_engine", lambda e, w=None: src), ("nvcc_version", lambda: None)):
        monkeypatch.setattr(runtime, name, value, raising=False)
    code = runtime.main(["--out", str(tmp_path / "out"), "--case", "sglang-decode-gqa", "--seed", "1"])
    out = capsys.readouterr().out
    assert "NOT CAUGHT" in out
    assert code == 1
