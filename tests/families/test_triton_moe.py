"""triton-moe with the real compiler and the engines' own kernels (read from an installed engine or a cached wheel:
$TILEPROBE_ENGINE_WHEELS or <user cache>/wheels; skipped when neither engine can be found)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from tileprobe.engines import triton_configs as tc  # noqa: E402
from tileprobe.errors import UsageError  # noqa: E402
from tileprobe.families import triton_moe as tm  # noqa: E402
from tileprobe.triton.sweep import engine_kernel_source  # noqa: E402
from tileprobe.backends.triton.compile import TritonBuild, compile_many  # noqa: E402

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 101376  # RTX PRO 6000 / RTX 5090 opt-in


def _engine(name):
    try:
        return engine_kernel_source(name, None)
    except UsageError as exc:
        pytest.skip(f"{name} {tm.ENGINES[name].release}: {exc}")


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("triton-moe-cache")


# The public report (sglang #8513, Triton 3.3+ on an RTX PRO 6000-class GPU): BLOCK 64x128x128, 4 warps, 4 stages,
# bf16 -> "out of resource: shared memory, Required: 147456, Hardware limit: 101376".
REPORTED = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 4}


@pytest.fixture(scope="session")
def builds(cache):
    """For each engine: the reported bf16 config, and a random small config under each scheme (sm_120)."""
    r = random.Random()
    small = {"BLOCK_SIZE_M": r.choice([16, 32]), "BLOCK_SIZE_N": r.choice([64, 128]), "BLOCK_SIZE_K": 128,
             "GROUP_SIZE_M": r.choice([1, 16]), "num_warps": 4, "num_stages": r.choice([2, 3])}
    m = r.choice([1, 3, 16, 33])
    print(f"small {small} M={m}")
    jobs, labels = [], []
    for engine in ("vllm", "sglang"):
        _, src = _engine(engine)
        jobs.append(tm.launch_job(engine, src, "bf16", "gate_up", 128, 1536, 2048, 64, 8, REPORTED, 120))
        labels.append((engine, "reported"))
        for quant in tm.QUANTS:
            gemm = r.choice(tm.GEMMS)
            n, k = tm.gemm_shape(gemm, 2048, 768)
            jobs.append(tm.launch_job(engine, src, quant, gemm, 128, n, k, m, 8, small, 120))
            labels.append((engine, quant))
    return dict(zip(labels, compile_many(jobs, 2, cache)))


def test_the_reported_out_of_resources(builds):
    for engine in ("vllm", "sglang"):
        b = builds[(engine, "reported")]
        assert isinstance(b, TritonBuild), b
        over = b.fits(LIMIT)
        assert over is not None and over.text.startswith("out of resource: shared memory, Required: 147456, "
                                                         "Hardware limit: 101376")


def test_every_scheme_compiles_for_sm120(builds):
    for (engine, what), b in builds.items():
        assert isinstance(b, TritonBuild), (engine, what, b)
        assert b.arch == "sm120" and b.shared > 0 and b.regs and b.fits(232448) is None


def test_the_launch_is_the_engines(builds):
    _, src = _engine("vllm")
    e = dict(REPORTED, BLOCK_SIZE_M=16)
    # fp8 on capability 9.0 with BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N swaps A and B; on 12.0 it does not
    kw90 = dict(tm.launch_job("vllm", src, "fp8", "down", 128, 2048, 768, 4, 8, e, 90).kwargs)
    kw120 = dict(tm.launch_job("vllm", src, "fp8", "down", 128, 2048, 768, 4, 8, e, 120).kwargs)
    assert kw90["SWAP_AB"] and not kw120["SWAP_AB"] and kw90["MUL_ROUTED_WEIGHT"] and kw90["top_k"] == 1
    # vLLM's naive assignment (M*top_k*4 <= E): no sorted_token_ids, EM = tokens * BLOCK_SIZE_M
    job = tm.launch_job("vllm", src, "bf16", "gate_up", 128, 1536, 2048, 4, 8, e, 120)
    assert dict(job.kwargs)["naive_block_assignment"] and job.args[7] is None and job.args[12] == 32 * 16
    # TritonExperts.apply passes router weights to the down GEMM only
    assert job.args[6] is None and tm.launch_job("vllm", src, "bf16", "down", 128, 2048, 768, 4, 8, e, 120).args[6]
    # fp8-block caps BLOCK_SIZE_K at the 128 block
    assert dict(tm.launch_job("vllm", src, "fp8-block", "gate_up", 128, 1536, 2048, 64, 8,
                              dict(REPORTED, BLOCK_SIZE_K=256), 120).kwargs)["BLOCK_SIZE_K"] == 128


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tileprobe", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=600)


def test_sweep_answers_per_m_with_the_users_file(tmp_path, cache):
    """A user folder with a file for one SKU holding an over-limit entry: that SKU's rows pick it (and say the
    engine's error), the other SKUs fall back to the engine's default."""
    _engine("vllm")
    folder = tmp_path / "tuned"
    folder.mkdir()
    fits = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 2}
    name = "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition.json"
    (folder / name).write_text(json.dumps({"1": fits, "64": REPORTED}))
    out = tmp_path / "out"
    p = _cli("sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--quant", "bf16",
             "--target", "rtx-pro-6000", "--config-dir", folder, "--batch", "1,64", "--out", out, "--jobs", "2",
             "--cache-dir", cache, "--json", "--compile-all")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2  # three SKUs x two GEMMs x two batch sizes
    for r in rows:
        assert r["evidence"] == "compiled" and r["family"] == "triton-moe" and r["engine"] == "vllm 0.33.0"
        assert r["verdict"] == ("fits" if r["smem_bytes"] <= LIMIT else "smem-over-limit")
        user = r["device_name"].endswith("Blackwell Workstation Edition")
        assert r["config_source"].startswith("user:" if user else "default"), r["config_source"]
        if user and r["batch"] == 64:
            assert r["verdict"] == "smem-over-limit" and r["tile"] == "64x128x128"
            assert "out of resource: shared memory, Required: 147456, Hardware limit: 101376" in r["reason"]
        if user and r["batch"] == 1:
            assert r["tile"] == "16x64x128" and r["verdict"] == "fits"


@pytest.mark.parametrize("args, needle", [
    (["--quant", "int4"], "--quant"),
    (["--device-name", "NVIDIA Imaginary GPU"], "unknown device name"),
    (["--engine-wheel", "/nonexistent.whl"], "no such file"),
    (["--engine", "tgi"], "unknown engine"),
])
def test_bad_input_is_one_line(tmp_path, args, needle):
    base = ["sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b",
            "--target", "rtx-pro-6000", "--out", tmp_path / "o"]
    p = _cli(*base, *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    # one line; an environment's fix may follow it on a `help:` line (a missing wheel: the fetch that brings it)
    assert needle in lines[0] and len(lines) - any(l.startswith("help: ") for l in lines[1:]) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_malformed_user_file_is_one_line(tmp_path):
    _engine("vllm")
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition.json").write_text("{1: ")
    p = _cli("sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--target",
             "rtx-pro-6000", "--config-dir", folder, "--out", tmp_path / "o")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


def test_known_good_write_and_check(tmp_path, cache):
    """A known-good file made from a sweep on an H200 (the reported entry fits 232448 B) checks clean; the same tiles
    held to a 101376 B limit are regressions, with Triton's own error text."""
    _engine("vllm")
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / "E=128,N=768,device_name=NVIDIA_H200.json").write_text(json.dumps({"64": REPORTED}))
    out, kg = tmp_path / "out", tmp_path / "kg.json"
    p = _cli("sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--target", "h200",
             "--config-dir", folder, "--batch", "64", "--out", out, "--jobs", "2", "--cache-dir", cache)
    assert p.returncode == 0, p.stderr
    p = _cli("known-good", "write", out, "--out", kg)
    assert p.returncode == 0, p.stderr
    doc = json.loads(kg.read_text())
    assert len(doc["tiles"]) == 2 and all(t["batches"] == [64] for t in doc["tiles"])
    need = {t["smem_bytes"] for t in doc["tiles"]}
    assert len(need) == 1 and LIMIT < min(need) <= 232448  # sm_90 buffers more stages than sm_120 for this entry
    env = {"TILEPROBE_CACHE_DIR": str(cache)}
    p = _cli("check", kg, "--jobs", "2", "--nvcc", tmp_path / "no-nvcc-here", env=env)  # a Triton file needs no nvcc
    assert p.returncode == 0 and "0 regression(s) in 2 tiles" in p.stdout, (p.stdout, p.stderr)
    doc["target"]["smem_optin"] = LIMIT
    kg.write_text(json.dumps(doc))
    p = _cli("check", kg, "--jobs", "2", env=env)
    assert p.returncode == 1, (p.stdout, p.stderr)
    bad = [ln for ln in p.stdout.splitlines() if ln.startswith("REGRESSION")]
    assert len(bad) == 2 and all(f"Required: {min(need)}, Hardware limit: 101376" in ln for ln in bad)


def test_autotune_seed_kernel(tmp_path, cache):
    """SGLang's DeepSeek-V4 sparse decode kernel: every autotune config sized for an RTX PRO 6000 and an H200;
    what the autotuner is left with is exactly the configs whose bytes fit."""
    _engine("sglang")
    kernel = "sglang/kernels/ops/attention/flash_mla_sm120_triton.py:_tiled_sparse_decode_kernel"
    for target, limit in (("rtx-pro-6000", LIMIT), ("h200", 232448)):
        p = _cli("autotune", "--kernel", kernel, "--engine", "sglang", "--target", target, "--jobs", "2",
                 "--cache-dir", cache)
        assert p.returncode == 0, p.stderr
        lines = [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("  BLOCK_T=")]
        assert len(lines) == 3
        fits = 0
        for ln in lines:
            shared = int(ln.split(": ")[1].split(" B shared")[0])
            assert ("fits" in ln) == (shared <= limit) and ("OutOfResources" in ln) == (shared > limit)
            fits += shared <= limit
        assert f"the autotuner is left with {fits} of 3" in p.stdout


def test_autotune_bad_input(tmp_path):
    p = _cli("autotune", "--kernel", "nofile.py:k", "--target", "rtx-pro-6000")
    assert p.returncode == 2 and "nofile.py" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    f = tmp_path / "k.py"
    f.write_text("import triton\n\n@triton.jit\ndef k(x):\n    pass\n")
    p = _cli("autotune", "--kernel", f"{f}:k", "--target", "rtx-pro-6000")
    assert p.returncode == 2 and "not an @triton.autotune kernel" in p.stderr, p.stderr


def test_another_engine_release_is_refused(tmp_path):
    """A wheel of a release tileprobe has no manifest for: one line naming it and --rules-off, exit 2 (the one
    release rule, tileprobe.engines.manifest)."""
    import zipfile
    whl = tmp_path / "vllm-0.99.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("vllm-0.99.0.dist-info/METADATA", "Name: vllm\nVersion: 0.99.0\n")
        z.writestr("vllm/__init__.py", "")
    p = _cli("sweep", "--family", "triton-moe", "--engine", "vllm", "--engine-wheel", whl, "--workload",
             "qwen3-30b-a3b", "--target", "rtx-pro-6000", "--out", tmp_path / "o")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "vllm 0.99.0" in lines[0] and "no manifest" in lines[0] and "--rules-off" in lines[0], p.stderr


def test_tma_entries_are_unsupported_rows(tmp_path, cache):
    """SGLang's shipped H200 down file for E=256, N=512 has USE_TMA entries: SGLang then launches both GEMMs with
    TMA descriptors / c_sorted, which tileprobe does not reproduce: those rows say so (unsupported, nothing
    compiled) instead of sizing another launch; the other entries are compiled."""
    _engine("sglang")
    out = tmp_path / "out"
    p = _cli("sweep", "--family", "triton-moe", "--engine", "sglang", "--workload", "deepseek-v3", "--tp", "4",
             "--target", "h200", "--device-name", "NVIDIA H200", "--batch", "256,512", "--out", out, "--jobs", "2",
             "--cache-dir", cache)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    tma = [r for r in rows if r["verdict"] == "unsupported"]
    assert tma and all("TMA" in r["reason"] and r["evidence"] == "none" and r["smem_bytes"] is None for r in tma)
    assert {r["gemm"] for r in tma} == {"gate_up", "down"}
    # the others answered: compiled, or predicted where the predictor's rule is exact (predictor first)
    assert all(r["evidence"] in ("compiled", "predicted") and r["smem_bytes"] for r in rows
               if r["verdict"] != "unsupported")


def test_predict_only_equals_the_compiled_sweep(tmp_path, cache, rng):
    """`sweep --family triton-moe --predict-only` (no Triton: the predictor) and the same sweep compiled give the same
    rows, byte for byte, differing only in evidence (predicted / compiled), for a random engine, preset and batches
    inside the predictor's scope; outside it (fp8 with K = 360, gpt-oss-20b at tp 8) the predict-only sweep stops with
    one line, exit 2."""
    engine = rng.choice(["vllm", "sglang"])
    _engine(engine)
    preset = rng.choice(["qwen3-30b-a3b", "mixtral-8x7b"])
    quant = rng.choice(["bf16", "fp8"])
    target = rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"])
    batches = ",".join(str(m) for m in sorted(rng.sample([1, 2, 16, 48, 96, 256], 2)))
    base = ["sweep", "--family", "triton-moe", "--engine", engine, "--workload", preset, "--quant", quant, "--target",
            target, "--batch", batches, "--json"]
    print(engine, preset, quant, target, batches)
    p = _cli(*base, "--out", tmp_path / "pred", "--predict-only")
    assert p.returncode == 0, p.stderr
    c = _cli(*base, "--out", tmp_path / "comp", "--jobs", "2", "--cache-dir", cache, "--compile-all")
    assert c.returncode == 0, c.stderr
    read = lambda d: {(r["device_name"], r["gemm"], r["batch"]): r for r in map(json.loads, (d / "results.jsonl").read_text().splitlines())}  # noqa: E731
    pred, comp = read(tmp_path / "pred"), read(tmp_path / "comp")
    assert pred.keys() == comp.keys() and pred
    for key, r in pred.items():
        assert r["evidence"] == "predicted" and comp[key]["evidence"] == "compiled", key
        assert (r["smem_bytes"], r["verdict"], r["tile"], r["stages"]) == \
            (comp[key]["smem_bytes"], comp[key]["verdict"], comp[key]["tile"], comp[key]["stages"]), key
    assert json.loads((tmp_path / "pred" / "run.json").read_text())["evidence_mode"] == "predicted"
    bad = _cli("sweep", "--family", "triton-moe", "--engine", engine, "--workload", "gpt-oss-20b", "--tp", "8", "--quant",
               "fp8", "--target", target, "--batch", batches, "--out", tmp_path / "blk", "--predict-only")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "compile" in bad.stderr, bad.stderr
