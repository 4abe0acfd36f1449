"""export triton-configs --tune: the engine tuners' search spaces, the refusal without a GPU of the target's arch,
and a whole tune on Triton's CPU interpreter (small space, small problem): configs over the limit are compiled
(the real Triton compile for the target's arch) and never launched, a config whose result is wrong (SGLang's kernel
with BLOCK_SIZE_K = 256 over a 128-wide fp8 scale block reads one scale per 256 columns: a real wrong config, which
SGLang's tuner filters out of its space) is never chosen, and the engine's own lookup (from its source) loads the
written folder. On a GPU: a real tune of a few configs (gpu marker)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.engines import sglang, vllm
from tileprobe.engines import triton_configs as tc
from tileprobe.errors import UsageError
from tileprobe.triton import tune

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def test_search_spaces_are_the_engine_tuners():
    """vLLM and SGLang on CUDA: 5 x 4 x 3 x 4 x 2 x 4 distinct configs; with fp8 block [128, 128] vLLM keeps the
    tiles that are multiples of the block (BLOCK_SIZE_K and BLOCK_SIZE_N in {128, 256}), SGLang the K tiles that
    divide it (64, 128)."""
    full = tune.search_space("vllm", tc.scheme("bf16"))
    assert len(full) == 1920 and len({tuple(c[k] for k in KEYS) for c in full}) == 1920
    assert {c["BLOCK_SIZE_M"] for c in full} == {16, 32, 64, 128, 256}
    assert {c["num_stages"] for c in full} == {2, 3, 4, 5} and {c["GROUP_SIZE_M"] for c in full} == {1, 16, 32, 64}
    assert tune.search_space("sglang", tc.scheme("bf16")) == full
    assert tune.search_space("vllm", tc.scheme("fp8")) == full  # per-tensor fp8: no block, no filter
    v = tune.search_space("vllm", tc.scheme("fp8-block"))
    s = tune.search_space("sglang", tc.scheme("fp8-block"))
    assert len(v) == 640 and {(c["BLOCK_SIZE_K"], c["BLOCK_SIZE_N"]) for c in v} == {
        (k, n) for k in (128, 256) for n in (128, 256)}
    assert len(s) == 1280 and {c["BLOCK_SIZE_K"] for c in s} == {64, 128}
    assert {c["BLOCK_SIZE_N"] for c in s} == {32, 64, 128, 256}
    assert all(c in full for c in v + s)


def test_tune_refuses_without_a_gpu_of_the_arch(tmp_path):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is visible here")
    except ImportError:
        pass
    f = tmp_path / vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200")
    f.write_text(json.dumps({"1": dict(zip(KEYS, (16, 64, 128, 1, 4, 3)))}))
    p = subprocess.run([sys.executable, "-m", "tileprobe", "export", "triton-configs", str(f), "--target", "h200",
                        "--out", str(tmp_path / "o"), "--tune"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--tune" in lines[0] and ("CUDA" in lines[0] or "GPU" in lines[0]), p.stderr
    assert not (tmp_path / "o").exists()


SCRIPT = r'''
import json, sys
import torch
from pathlib import Path
from tileprobe.triton import tune
inputs, out, space, seed, cache = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
opts = tune.TuneOptions(device="cpu", dtype=torch.float32, space=space, jobs=2, seed=seed, cache_dir=cache,
                        confirm_top=8, tolerance=(1e-4, 1e-4),
                        launch_overrides={"compute_type": "tl.float32", "USE_GDC": False, "launch_pdl": False})
files, prov = tune.run(Path(inputs), "sglang", None, "rtx-pro-6000", out, None, 256, opts)
print(json.dumps({"files": [str(f.path) for f in files], "prov": prov}))
'''


def _cfg(bm, bn, bk, warps=4, stages=2):
    return dict(zip(KEYS, (bm, bn, bk, 1, warps, stages)))


@pytest.mark.triton
def test_interpreted_tune_prunes_checks_and_writes_what_sglang_loads(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    try:
        src = tc.find_engine("sglang")
    except UsageError as exc:
        pytest.skip(str(exc))
    from _engine_exec import sglang_namespace
    from tileprobe.targets import PROFILES
    r = random.Random()
    good = [_cfg(16, 32, 64), _cfg(16, 64, 128, stages=r.choice([2, 3]))]
    wrong = _cfg(16, 32, 256)  # one fp8 scale per 256 columns of K: wrong for K = 256 (two 128-blocks)
    over = _cfg(128, 256, 128, warps=8, stages=4)  # (4-1) * (128*128 + 128*256) fp8 bytes alone > 101376
    space = good + [wrong, over]
    r.shuffle(space)
    scheme = tc.scheme("fp8-block")
    m = r.choice([1, 2])
    f = tmp_path / "in" / "triton_3_4_0" / sglang.config_file_name(8, 32, scheme, "NVIDIA H200")
    f.parent.mkdir(parents=True)
    # two M keys, each tuned on its own; the second is 4, not a large M: each screened and confirmed launch runs on
    # Triton's CPU interpreter, whose time grows with M (64 cost about 20 CPU s more and proves nothing 4 does not)
    f.write_text(json.dumps({str(m): over, "4": over}))  # the input's entry is the over-limit one
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(f), str(out), json.dumps(space), str(r.randrange(10**6)),
                        str(tmp_path / "cache")], capture_output=True, text=True, timeout=1500, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    prov = res["prov"]
    launched = set(prov["launch_log"])
    assert tune._label(over) not in launched  # pruned: compiled, never launched
    assert launched == {tune._label(c) for c in good + [wrong]}
    assert prov["totals"]["space"] == 4 and prov["totals"]["pruned_over_limit"] == 1 and prov["totals"]["left"] == 3
    target = PROFILES["rtx-pro-6000"]
    monkeypatch.setenv(sglang.USER_ENV, str(out))
    for dev in (x for x in res["files"]):
        rel = str(Path(dev).relative_to(out))
        for key in (str(m), "4"):
            rec = prov["files"][rel]["entries"][key]
            assert rec["pruned_configs"] == [over] and rec["left"] == 3 and rec["screened"] == 3
            assert rec["rejected_wrong"] == [wrong], rec["confirmed"]
            assert rec["winner"] in good and rec["bytes"] <= 101376
        name = Path(dev).name.split("device_name=")[1].split(",dtype")[0].replace("_", " ")
        ns = sglang_namespace(src, tmp_path / "tree", name, target.smem_optin, target.sms, (12, 0))
        loaded = ns["get_moe_configs"](8, 32, "fp8_w8a8", 128, 128)
        assert loaded == {int(k): v for k, v in json.loads(Path(dev).read_text()).items()}
        assert loaded[m] == prov["files"][rel]["entries"][str(m)]["winner"]


@pytest.mark.gpu
@pytest.mark.triton
def test_gpu_tune_of_a_few_configs(tmp_path):
    """A real tune on the GPU (its own arch's profile), a handful of configs, bf16, two M keys. On the lent H200
    (Triton 3.6.0) set TILEPROBE_ANY_TRITON=1, as for tests/test_triton_gpu.py."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tileprobe.targets import PROFILES, resolve_target
    dev_target, devices = resolve_target(None)
    if not devices or dev_target.name not in PROFILES:
        pytest.skip("no GPU with a target profile")
    try:
        tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))
    r = random.Random()
    space = [_cfg(16, 64, 128), _cfg(32, 64, 64, stages=3), _cfg(64, 128, 64, warps=8, stages=3),
             _cfg(256, 256, 256, warps=8, stages=5)]  # the last: over any opt-in limit
    f = tmp_path / "in" / vllm.config_file_name(128, 768, tc.scheme("bf16"), devices[0].device_name)
    f.parent.mkdir()
    f.write_text(json.dumps({"1": space[0], "16": space[1]}))
    opts = tune.TuneOptions(space=space, jobs=4, seed=r.randrange(10**6), confirm_top=3)
    files, prov = tune.run(f, "vllm", None, dev_target.name, tmp_path / "out", [devices[0].device_name], None, opts)
    assert tune._label(space[3]) not in set(prov["launch_log"])
    for rec in next(iter(prov["files"].values()))["entries"].values():
        assert rec["winner"] in space[:3] and rec["us_graph_median"] > 0 and rec["pruned_configs"] == [space[3]]
    rows = [json.loads(x) for x in (tmp_path / "out" / tune.ROWS_DIR / "results.jsonl").read_text().splitlines()]
    assert len(rows) == prov["totals"]["rows"] > 0 and {r["evidence"] for r in rows} == {"verified"}
    import triton
    added = prov["totals"]["jit_entries_added_by_launches"]
    if triton.__version__ == tune_pinned_triton():
        assert added == 0  # every launch found the workers' cubin (the key matches under the engines' Triton)
    else:  # another Triton (the lent GPU's 3.6.0) keys its cache otherwise: launches may compile again, slower only
        assert 0 <= added <= len(rows), (added, triton.__version__)


def tune_pinned_triton() -> str:
    """The Triton release the engines pin (the one whose cache key tileprobe's workers reproduce)."""
    from tileprobe.backends.triton.toolchain import ENGINE_TRITON
    return ENGINE_TRITON


JIT = r'''
import json, os, sys
from pathlib import Path
cache, tdir, cc, job_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.environ["TRITON_CACHE_DIR"] = tdir
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
from tileprobe.backends.triton.compile import jit_function, stand_in
from tileprobe.backends.triton.source import KernelSource, load
d = json.loads(job_json)
class Stub:  # all JITFunction.run asks the driver before its compile (warmup: nothing is launched)
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", cc, 32)
driver.set_active(Stub())
fn = jit_function(load(KernelSource(d["text"], d["function"], "test"), Path(cache)))
k = fn.warmup(*[stand_in(a) for a in d["args"]], grid=(1,), **{key: stand_in(v) for key, v in d["kwargs"]})
print(json.dumps({"hash": k.hash, "shared": k.metadata.shared}))
'''


@pytest.mark.triton
def test_jit_launch_finds_the_cubin_the_tune_compiled(tmp_path):
    """Triton's own JIT path (JITFunction.warmup: binder, _pack_args, compile's file-cache lookup), run with the
    engine launch's real integer arguments and a driver stub that reports sm_90, finds the entry tileprobe's worker
    compiled from the canonical job in the shared TRITON_CACHE_DIR: same key, nothing added. A launch tileprobe did
    not compile (another stage count) adds exactly its own entry, so the check can fail."""
    import base64
    pytest.importorskip("triton")
    from tileprobe.backends.triton.compile import compile_many
    from tileprobe.triton.audit import canonical, constexpr_positions
    from tileprobe.families import triton_moe as tm
    from tileprobe.triton.sweep import engine_kernel_source
    try:
        _, source = engine_kernel_source("vllm", None)
    except UsageError as exc:
        pytest.skip(str(exc))
    r = random.Random()
    entry = _cfg(r.choice([16, 32]), r.choice([32, 64]), r.choice([64, 128]), stages=r.choice([2, 3]))
    m, gemm = r.choice([1, 16, 24]), r.choice(tm.GEMMS)
    job = tm.launch_job("vllm", source, "bf16", gemm, 128, *tm.gemm_shape(gemm, 2048, 768), m, 8, entry, 90)
    tdir, cache = tmp_path / "triton-jit", tmp_path / "cache"
    built = compile_many([canonical(job, constexpr_positions(source))], 1, cache, triton_cache=str(tdir),
                         worker_env={"TRITON_CACHE_DIR": str(tdir), "TRITON_INTERPRET": None})[0]
    before = set(os.listdir(tdir))

    def warm(j):
        d = {"text": source.text, "function": source.function, "args": list(j.args),
             "kwargs": [list(x) for x in j.kwargs]}
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}
        p = subprocess.run([sys.executable, "-c", JIT, str(cache), str(tdir), "90", json.dumps(d)],
                           capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    got = warm(job)
    assert set(os.listdir(tdir)) == before and built.shared == got["shared"]
    assert base64.b32encode(bytes.fromhex(got["hash"])).decode().rstrip("=") in before
    other = tm.launch_job("vllm", source, "bf16", gemm, 128, *tm.gemm_shape(gemm, 2048, 768), m, 8,
                          entry | {"num_stages": entry["num_stages"] + 2}, 90)
    got2 = warm(other)
    assert set(os.listdir(tdir)) - before == {base64.b32encode(bytes.fromhex(got2["hash"])).decode().rstrip("=")}


@pytest.mark.triton
def test_prune_only_needs_no_gpu_and_launches_nothing(tmp_path):
    """--prune-only: every config compiled for the target's arch and counted; nothing launched, no config file."""
    pytest.importorskip("triton")
    try:
        tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))
    r = random.Random()
    fits = _cfg(16, r.choice([32, 64]), 64, stages=r.choice([2, 3]))
    over = _cfg(128, 256, 128, warps=8, stages=4)  # 3 * (128*128 + 128*256) bf16 bytes alone = 294912 > 232448
    f = tmp_path / "in" / vllm.config_file_name(128, 768, tc.scheme("bf16"), "NVIDIA H200")
    f.parent.mkdir()
    f.write_text(json.dumps({"16": fits}))
    opts = tune.TuneOptions(space=[over, fits], prune_only=True, jobs=2, cache_dir=str(tmp_path / "cache"))
    files, prov = tune.run(f, "vllm", None, "h200", tmp_path / "out", None, 2048, opts)
    assert files == [] and prov["launch_log"] == [] and prov["evidence"].startswith("compiled, not launched")
    t = prov["totals"]
    assert (t["space"], t["pruned_over_limit"], t["pruned_no_compile"], t["left"]) == (2, 1, 0, 1)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tileprobe-provenance.json"]


def _tune_nothing_left(tmp_path, files: dict[str, dict], out: Path, device_names=None):
    """A tune whose whole space is over the limit (nothing is launched, so no GPU and no interpreter run): at every
    M the input's entry is the only candidate for the file."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    try:
        tc.find_engine("vllm")
    except UsageError as exc:
        pytest.skip(str(exc))
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    for name, doc in files.items():
        (inp / name).write_text(json.dumps(doc))
    over = _cfg(64, 128, 128, stages=4)  # 3 * (64*128 + 128*128) bf16 bytes alone = 147456 > 101376
    opts = tune.TuneOptions(space=[over], device="cpu", dtype=torch.float32, jobs=2, seed=1)  # the session cache
    return tune.run(inp, "vllm", None, "rtx-pro-6000", out, device_names, 256, opts)


def test_tune_never_writes_an_input_entry_that_does_not_fit(tmp_path):
    """Nothing verified at M: main wrote the input's entry back whatever its bytes, here one over the limit. Now
    the fitting input entry is kept (said unverified) and the over-limit one is not written (the provenance says
    why, with its compiled bytes)."""
    r = random.Random()
    small_m, big_m = r.sample([1, 2, 4, 8, 16, 32, 64], 2)
    small = _cfg(16, r.choice([32, 64]), 64, stages=2)
    big = _cfg(64, 128, 128, stages=4)  # the space's own config, pruned there: 147456 B of buffers > 101376
    name = vllm.config_file_name(8, 32, tc.scheme("bf16"), "NVIDIA H200")
    out = tmp_path / "out"
    dev = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    files, prov = _tune_nothing_left(tmp_path, {name: {str(small_m): small, str(big_m): big}}, out, [dev])
    written = json.loads((out / vllm.config_file_name(8, 32, tc.scheme("bf16"), dev)).read_text())
    assert written == {str(small_m): small}, written
    (rec,) = [info["entries"] for info in prov["files"].values()]
    assert rec[str(small_m)]["kept_input_unverified"] == small
    assert rec[str(big_m)]["dropped_input"]["bytes"] >= 147456, rec[str(big_m)]
    assert any("not written" in line for line in tune.summary(files, prov))


def test_a_tune_that_fails_part_way_leaves_the_folder_as_it_was(tmp_path):
    """Two input files; the second is a scheme the tune refuses, after the first was tuned. main had written the
    first file's configs into OUT by then (no provenance). OUT (the user's own files, an older export's config
    file and provenance) must be byte for byte as before, and nothing left beside it."""
    r = random.Random()
    dev = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    good = vllm.config_file_name(8, 32, tc.scheme("bf16"), "NVIDIA H200")
    refused = "E=8,N=64,device_name=NVIDIA_H200,dtype=int8_w8a16.json"  # sorted after the bf16 file
    out = tmp_path / "out"
    out.mkdir()
    before = {"notes.txt": f"mine {r.random()}\n", "tileprobe-provenance.json": '{"old": true}\n',
              vllm.config_file_name(8, 32, tc.scheme("bf16"), dev): json.dumps({"8": _cfg(16, 32, 64)})}
    for rel, text in before.items():
        (out / rel).write_text(text)
    with pytest.raises(UsageError, match="does not launch"):
        _tune_nothing_left(tmp_path, {good: {"1": _cfg(16, 32, 64)}, refused: {"1": _cfg(16, 32, 64)}}, out, [dev])
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]
