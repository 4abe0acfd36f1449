"""export triton-configs with no input file: from --workload, per SKU name of rtx-pro-6000, the folder holds what the
engine loads there today (its shipped file, or its default heuristic at the tuner's batch sizes) made to fit, the
engine's own lookup (its functions, cut from its source and run here) reads that folder back, and the command prints
the variable to set. DeepSeek-V3 at tp4 gives E=256, N=512: the Server Edition has a shipped file in both engines
(SGLang's in another Triton release's folder), the other SKU names none, so both sources are exercised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _engine_exec import sglang_namespace, unpack_configs, vllm_namespace
from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import sglang, vllm
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError
from tileprobe.targets import DEVICE_NAMES, PROFILES
from tileprobe.workloads import PRESETS

ROOT = Path(__file__).resolve().parents[2]
TARGET = PROFILES["rtx-pro-6000"]
SERVER = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
MODEL, TP = PRESETS["deepseek-v3"], 4
E, N, K, TOPK = MODEL.experts, MODEL.inter // TP, MODEL.hidden, MODEL.top_k


def _source(engine: str) -> tc.EngineSource:
    if installed() is None:
        pytest.skip("Triton is not installed")
    try:
        return tc.find_engine(engine)
    except UsageError as exc:
        pytest.skip(str(exc))


def _export(engine, quant, devs, out):
    args = ["export", "triton-configs", "--engine", engine, "--workload", MODEL.name, "--tp", TP, "--quant", quant,
            "--target", TARGET.name, "--out", out, "--jobs", 2]
    for d in devs:
        args += ["--device-name", d]
    p = subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                       timeout=900, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout.splitlines()


def _fits(rec: dict) -> bool:
    return rec["original_bytes"] <= TARGET.smem_optin if rec["kept"] else rec["substitute_bytes"] <= TARGET.smem_optin


def _check(prov: dict, written: Path, out: Path, before, after, keys) -> None:
    """Every entry fits; the engine reading the folder runs, at each key, today's config where it fitted and the
    substitute where it did not."""
    recs = prov["files"][str(written.relative_to(out))]["entries"]
    assert set(recs) == {str(k) for k in keys} and all(_fits(r) for r in recs.values()), recs
    for k in keys:
        r, now = recs[str(k)], before(k)
        # A substitute keeps the M tile (SGLang's down GEMM takes it from the up config anyway).
        assert after(k) == (now if r["kept"] else r["substitute"] | {"BLOCK_SIZE_M": now["BLOCK_SIZE_M"]}), \
            (written.name, k)


def test_vllm_from_a_workload_writes_what_it_loads_today_made_to_fit(tmp_path, rng):
    src = _source("vllm")
    devs = [SERVER, rng.choice([d for d in DEVICE_NAMES[TARGET.name] if d != SERVER])]
    out = tmp_path / "out"
    lines = _export("vllm", "fp8-block", devs, out)
    assert lines[-1].startswith(f"use: export VLLM_TUNED_CONFIG_FOLDER={out} ")
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    root = unpack_configs(src, vllm.CONFIGS_DIR, tmp_path / "tree")  # the shipped files, where vLLM looks
    for dev in devs:
        today, then = vllm_namespace(src, root, dev, None), vllm_namespace(src, root, dev, str(out))
        shipped = today["get_moe_configs"](E, N, "fp8_w8a8", 128, 128)
        assert any(line.startswith(f"today: {dev} gate_up:") and ("shipped" in line) == (shipped is not None)
                   for line in lines), (dev, lines)
        written = out / vllm.config_file_name(E, N, tc.scheme("fp8-block"), dev)
        loaded = then["get_moe_configs"](E, N, "fp8_w8a8", 128, 128)
        assert loaded == {int(k): v for k, v in json.loads(written.read_text()).items()}

        def run(ns, m):
            return ns["try_get_optimal_moe_config"]((E, 2 * N, K), (E, K, N), TOPK, "fp8_w8a8", m,
                                                    block_shape=[128, 128])

        _check(prov, written, out, lambda m: run(today, m), lambda m: run(then, m), list(loaded))
        if shipped is not None:
            assert list(loaded) == list(shipped)  # the shipped file's own keys, in its order


def test_sglang_from_a_workload_writes_what_it_loads_today_made_to_fit(tmp_path, rng, monkeypatch):
    src = _source("sglang")
    devs = [SERVER, rng.choice([d for d in DEVICE_NAMES[TARGET.name] if d != SERVER])]
    out = tmp_path / "out"
    lines = _export("sglang", "bf16", devs, out)
    assert lines[-1].startswith(f"use: export SGLANG_MOE_CONFIG_DIR={out} ")
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    root = unpack_configs(src, sglang.CONFIGS_DIR, tmp_path / "tree")
    cc = tuple(int(x) for x in TARGET.cc.split("."))
    vdir = out / "configs" / f"triton_{sglang.TRITON_VERSION.replace('.', '_')}"
    for dev in devs:
        monkeypatch.delenv(sglang.USER_ENV, raising=False)
        today = sglang_namespace(src, root, dev, TARGET.smem_optin, TARGET.sms, cc)
        shipped = today["get_moe_configs"](E, N, None, 0, 0)
        shipped_down = today["get_moe_configs"](E, N, None, 0, 0, False, True)  # the up file when no _down file
        assert any(line.startswith(f"today: {dev} gate_up:") and ("shipped" in line) == (shipped is not None)
                   for line in lines), (dev, lines)

        def run(ns, m):
            up, (down, _) = ns["try_get_optimal_moe_config"]((E, 2 * N, K), (E, K, N), TOPK, None, m,
                                                             is_marlin=False, block_shape=None,
                                                             per_channel_quant=False, return_down_config=True)
            return up, down or up

        up = vdir / sglang.config_file_name(E, N, tc.scheme("bf16"), dev)
        down = vdir / sglang.config_file_name(E, N, tc.scheme("bf16"), dev, True)
        keys = {int(k) for f in (up, down) if f.is_file() for k in json.loads(f.read_text())}
        before = {m: run(today, m) for m in keys}  # today's answers, before the variable is set
        monkeypatch.setenv(sglang.USER_ENV, str(out))
        then = sglang_namespace(src, root, dev, TARGET.smem_optin, TARGET.sms, cc)
        loaded = then["get_moe_configs"](E, N, None, 0, 0)
        assert loaded == {int(k): v for k, v in json.loads(up.read_text()).items()}
        _check(prov, up, out, lambda m: before[m][0], lambda m: run(then, m)[0], list(loaded))
        assert down.is_file() == (shipped_down is not None and shipped_down != shipped), dev
        if down.is_file():
            loaded = then["get_moe_configs"](E, N, None, 0, 0, False, True)
            assert loaded == {int(k): v for k, v in json.loads(down.read_text()).items()}
            _check(prov, down, out, lambda m: before[m][1], lambda m: run(then, m)[1], list(loaded))
