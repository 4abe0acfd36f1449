"""tileprobe's pytest plugin, run the way a user's CI runs it (pytester: a throwaway project and pytest session):
one item per known-good tile with readable ids and markers, a broken tile fails naming the tile, its bytes and the
evidence, -m/-k select and deselect like any test, bad paths are one line."""

import contextlib
import copy
import json
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tileprobe.engines import triton_configs
from tileprobe.results import known_good

# pytester's in-process runs put sys.modules back as it was before them: Triton first imported inside one is dropped
# from it while its C extension stays loaded, and the next import fails (the triton tests then skipped); import it
# here, before any run, where it is installed
with contextlib.suppress(ImportError):
    import triton  # noqa: F401

# pytester points HOME at its own folder, which moves the user cache (and its wheels/) away: the engine wheels are
# looked up where they are now, before any test runs, and named to the engine lookup through its environment variable
ENGINE_WHEEL_DIRS = os.pathsep.join(str(d) for d in triton_configs.wheel_dirs())


@pytest.fixture
def engine_wheels(monkeypatch):
    monkeypatch.setenv(triton_configs.WHEELS_ENV, ENGINE_WHEEL_DIRS)


REPO_KG = Path(__file__).resolve().parent.parent / "results" / "known_good"
SRC = REPO_KG / "rtx-pro-6000__sm120-nvfp4.json"


def plugin_args() -> list[str]:
    """Installed tileprobe loads the plugin from its pytest11 entry point; a source checkout names it."""
    if any(ep.name == "tileprobe" for ep in entry_points(group="pytest11")):
        return []
    return ["-p", "tileprobe.pytest_plugin"]


def small_file(tmp: Path, rng, broken: bool) -> tuple[Path, dict, dict | None]:
    doc = known_good.load_file(SRC)
    victim = next(e for e in doc["tiles"] if e["tile"] == "128x256x128" and e["stages"] == "auto"
                  and e["epilogue"] == "no-c" and not e["swap_ab"])
    good = rng.choice([e for e in doc["tiles"] if e is not victim and e["stages"] == "auto"])
    bad = None
    tiles = [good]
    if broken:
        bad = copy.deepcopy(victim)
        bad["stages"] = 4  # an explicit over-full pipeline: 4 stages of 128x256x128 cannot fit 101376 B
        tiles.append(bad)
    doc["tiles"] = tiles
    path = tmp / "tiles__sm120-nvfp4.json"
    path.write_text(json.dumps(doc))
    return path, good, bad


def test_collect_only_ids_and_markers(pytester, rng):
    path, good, bad = small_file(pytester.path, rng, broken=True)
    cfg = known_good.config_from_entry(good)
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(path), "-m", "tileprobe", "--collect-only",
                           "-q")
    ids = [line for line in r.outlines if "::" in line]
    assert len(ids) == 4, r.outlines  # two tiles, a static and a launch item each
    assert f"{path.name}::{cfg.name}[static]" in ids and f"{path.name}::{cfg.name}[launch]" in ids, ids
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(path), "-m", "tileprobe and not gpu",
                           "--collect-only", "-q")
    assert sorted(line.rsplit("[", 1)[1] for line in r.outlines if "::" in line) == ["static]", "static]"]
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(path), "-m", "tileprobe and not nvcc",
                           "--collect-only", "-q")
    assert not [line for line in r.outlines if "::" in line], r.outlines
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(path), "-k", "s4 and static",
                           "--collect-only", "-q")
    (only,) = [line for line in r.outlines if "::" in line]
    assert "128x256x128" in only and "_s4_" in only and only.endswith("[static]"), only


@pytest.mark.nvcc
def test_a_good_tile_passes_and_a_broken_one_fails_with_the_bytes(pytester, rng, toolchain):
    path, good, bad = small_file(pytester.path, rng, broken=True)
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(path), "-m", "tileprobe",
                           "--tileprobe-cache-dir", str(toolchain.cache), "--tileprobe-jobs", "1", "-rs", "-v")
    out = r.stdout.str()
    has_gpu = bool(known_good.devices_for(known_good.target_from_dict(known_good.load_file(path)["target"])))
    outcomes = r.parseoutcomes()
    assert outcomes.get("failed") == (2 if has_gpu else 1), out  # the broken tile's static (and launch) item
    assert outcomes.get("passed") == (2 if has_gpu else 1), out
    if not has_gpu:
        assert outcomes.get("skipped") == 2 and "no sm_120a GPU here" in out, out
    lines = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert lines, out
    line = lines[0]
    assert "128x256x128" in line and "stages=4" in line and "rtx-pro-6000" in line, line
    assert f"was fits (sized: SharedStorage {bad['smem_bytes']} B, headroom {bad['headroom_bytes']} B)" in line, line
    assert "now smem-over-limit (sized): SharedStorage " in line and "> opt-in 101376 B by" in line, line


def test_bad_paths_and_the_triton_option_are_one_line(pytester):
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(pytester.path / "none.json"))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert any("no known-good file or folder at" in line for line in r.errlines), r.errlines
    bad = pytester.path / "x.json"
    bad.write_text("{}")
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(bad))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert any("not a tileprobe known-good file" in line for line in r.errlines), r.errlines
    r = pytester.runpytest(*plugin_args(), "--tileprobe-configs", str(pytester.path / "nothing"))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert any("no config file or folder at" in line or "needs tileprobe[triton]" in line for line in r.errlines), \
        r.errlines
    r = pytester.runpytest(*plugin_args(), "--tileprobe-configs", str(pytester.path))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert any("no engine config files" in line or "needs tileprobe[triton]" in line for line in r.errlines), \
        r.errlines


def test_launch_items_run_on_a_gpu_of_the_files_arch(pytester, monkeypatch, toolchain, rng):
    """A fake H200 and fake harnesses, as in test_known_good.py (no GPU needed): with a GPU of the file's arch the
    [launch] items launch; the tile whose harness now crashes fails naming the GPU, the point and the signal, the
    other passes, and the [static] items pass."""
    import json as _json

    from _fakes import fake_harness

    from tileprobe import pytest_plugin, targets
    from tileprobe.backends.cutlass import runtime
    from tileprobe.backends.cutlass.build import BuildResult
    from tileprobe.results import known_good as kg
    from tileprobe.results.rows import Outcome, StaticInfo
    from tileprobe.verdict import Verdict

    doc = _json.loads((REPO_KG / "h200__sm90-fp8.json").read_text())
    doc["tiles"] = [t for t in doc["tiles"] if t["verdict"] == "ok"][:2]
    crashing = rng.randrange(2)
    path = pytester.path / "h200__sm90-fp8.json"
    path.write_text(_json.dumps(doc))

    def fake_static(configs, *a, **k):
        by = {known_good.config_from_entry(e).key: e for e in doc["tiles"]}
        return [Outcome(c, Verdict.FITS, "sized", StaticInfo(stages=4, smem_bytes=by[c.key]["smem_bytes"],
                                                             threads_per_cta=384)) for c in configs]

    keys = [known_good.config_from_entry(e).key for e in doc["tiles"]]
    scripts = {keys[i]: fake_harness(pytester.path, {}, default="segv" if i == crashing else "ok", name=f"h{i}")
               for i in range(2)}
    dev = targets.replace(targets.profile("h200"), gpu_index=0)
    monkeypatch.setattr(pytest_plugin, "probe_static", fake_static)
    monkeypatch.setattr(kg, "query_devices", lambda: [dev])
    monkeypatch.setattr(runtime, "build_many", lambda reqs, *a, **k: [
        BuildResult(r, True, scripts[r.configs[0].key], "", 0.1, True, []) for r in reqs])
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {})
    r = pytester.runpytest_inprocess(*plugin_args(), "--tileprobe-known-good", str(path), "-m", "tileprobe",
                                     "--tileprobe-cache-dir", str(toolchain.cache), "--tileprobe-jobs", "1")
    out = r.stdout.str()
    outcomes = r.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("skipped")) == (3, 1, None), out
    tile = doc["tiles"][crashing]["tile"]
    (line,) = [x for x in out.splitlines() if x.startswith("REGRESSION")][:1]
    assert tile in line and "now crashed on GPU 0 (NVIDIA H200)" in line and "SIGSEGV" in line, line
    assert f"{known_good.config_from_entry(doc['tiles'][crashing]).name}[launch]" in out, out


@pytest.mark.triton
def test_triton_tiles_are_compiled_again_with_triton(pytester, tmp_path, engine_wheels):
    """A triton-moe known-good file (made from a sweep of the user's config file for an H200, as in
    tests/families/test_triton_moe.py): one [static] item per tile, marked triton, no [launch] item; they pass, and fail with
    Triton's own error text once the file's limit is an SM120 GPU's."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    from tileprobe.errors import UsageError
    from tileprobe.triton.sweep import engine_kernel_source

    try:
        engine_kernel_source("vllm", None)
    except UsageError as exc:
        pytest.skip(f"vllm's kernel is not readable here: {exc}")
    root = Path(__file__).resolve().parents[1]
    folder = tmp_path / "tuned"
    folder.mkdir()
    reported = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
                "num_stages": 4}  # sglang #8513's config: 147456 B under Triton 3.3+
    (folder / "E=128,N=768,device_name=NVIDIA_H200.json").write_text(json.dumps({"64": reported}))
    cache, out, kg = tmp_path / "cache", tmp_path / "out", pytester.path / "h200__triton-moe.json"
    env = {**os.environ, "PYTHONPATH": str(root), "TILEPROBE_CACHE_DIR": str(cache)}
    for args in (["sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--target",
                  "h200", "--config-dir", str(folder), "--batch", "64", "--out", str(out), "--jobs", "2"],
                 ["known-good", "write", str(out), "--out", str(kg)]):
        p = subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, env=env,
                           timeout=900, cwd=root)
        assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(kg.read_text())
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(kg), "-m", "tileprobe and triton",
                           "--collect-only", "-q")
    ids = [line for line in r.outlines if "::" in line]
    assert len(ids) == len(doc["tiles"]) == 2 and all(i.endswith("[static]") for i in ids), r.outlines
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(kg), "-m", "tileprobe")
    assert r.parseoutcomes().get("passed") == 2, r.stdout.str()
    need = {t["smem_bytes"] for t in doc["tiles"]}
    doc["target"]["smem_optin"] = 101376
    kg.write_text(json.dumps(doc))
    r = pytester.runpytest(*plugin_args(), "--tileprobe-known-good", str(kg), "-m", "tileprobe")
    out = r.stdout.str()
    assert r.parseoutcomes().get("failed") == 2, out
    bad = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(bad) == 2 and all(f"Required: {min(need)}, Hardware limit: 101376" in line for line in bad), bad


@pytest.mark.triton
def test_engine_config_files_per_entry_against_the_device_they_name(pytester, monkeypatch, engine_wheels):
    """--tileprobe-configs on a vLLM config folder: one item per entry, both GEMMs compiled with Triton for the device
    in each file's name through vLLM's own lookup. sglang #8513's entry (147456 B) fits an H200 and fails on an RTX
    PRO 6000 with Triton's own text; a small entry passes there; ids and markers select as usual."""
    pytest.importorskip("triton")
    from tileprobe.errors import UsageError
    from tileprobe.triton.sweep import engine_kernel_source

    try:
        engine_kernel_source("vllm", None)
    except UsageError as exc:
        pytest.skip(f"vllm's kernel is not readable here: {exc}")
    reported = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
                "num_stages": 4}
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 2}
    tuned = pytester.path / "tuned"
    tuned.mkdir()
    pro = "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition.json"
    (tuned / pro).write_text(json.dumps({"1": small, "64": reported}))
    (tuned / "E=128,N=768,device_name=NVIDIA_H200.json").write_text(json.dumps({"64": reported}))
    args = [*plugin_args(), "--tileprobe-configs", str(tuned), "-m", "tileprobe and triton"]
    r = pytester.runpytest(*args, "--collect-only", "-q")
    ids = sorted(line for line in r.outlines if "::" in line)
    assert ids == sorted([f"tuned/{pro}::M=1", f"tuned/{pro}::M=64",
                          "tuned/E=128,N=768,device_name=NVIDIA_H200.json::M=64"]), r.outlines
    r = pytester.runpytest(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR or r.parseoutcomes().get("failed") == 3, r.stdout.str()
    assert "matches qwen3-235b-a22b, qwen3-30b-a3b" in r.stdout.str()  # E=128,N=768 is two models: say which
    r = pytester.runpytest(*args, "--tileprobe-workload", "qwen3-30b-a3b", "--tileprobe-jobs", "2")
    out = r.stdout.str()
    outcomes = r.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed")) == (2, 1), out
    # distinct lines: with CI set, pytest's short summary repeats a failure's whole text, its second line included
    bad = sorted({line for line in out.splitlines() if line.startswith("REGRESSION")})
    assert len(bad) == 2 and all(pro in line and "M=64" in line and "Required: 147456, Hardware limit: 101376" in line
                                 for line in bad), bad


@pytest.mark.triton
def test_an_sglang_use_tma_entry_is_skipped_saying_why_and_the_good_entries_are_still_checked(pytester, engine_wheels):
    """SGLang ships USE_TMA entries (its TMA-descriptor launch, which tileprobe does not reproduce): the plugin used
    to crash with AttributeError on the whole file (a None launch handed to the compiler), failing the good entries
    too. The USE_TMA entry's item is skipped with the reason; the other entry is compiled and passes."""
    pytest.importorskip("triton")
    from tileprobe.errors import UsageError
    from tileprobe.families import triton_moe as tm
    from tileprobe.triton.sweep import engine_kernel_source

    try:
        engine_kernel_source("sglang", None)
    except UsageError as exc:
        pytest.skip(f"sglang's kernel is not readable here: {exc}")
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 2}
    folder = pytester.path / "moe" / "configs" / "triton_3_8_0"
    folder.mkdir(parents=True)
    name = "E=128,N=768,device_name=NVIDIA_H200.json"
    (folder / name).write_text(json.dumps({"1": small, "64": {**small, "USE_TMA": True}}))
    r = pytester.runpytest(*plugin_args(), "--tileprobe-configs", str(pytester.path / "moe"), "--tileprobe-engine",
                           "sglang", "--tileprobe-workload", "qwen3-30b-a3b", "-m", "tileprobe", "-rs")
    out = r.stdout.str()
    assert "AttributeError" not in out and "Traceback" not in out, out
    outcomes = r.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("skipped"), outcomes.get("failed")) == (1, 1, None), out
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "M=64" in skipped[0] and "USE_TMA" in skipped[0], skipped
    assert tm.TMA_REASON.split(":")[0] in out, out
