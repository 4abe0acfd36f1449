"""The committed blocklists reach the engines people run: each file loads with the flashinfer release its engine pins
(that release's own TacticsBlocklist and _collect_metadata, imported from its wheel in a subprocess, never
installed), filter() removes exactly the listed IDs, and the SGLang-default file blocks nothing that fits.

The flashinfer 0.7.2 / 0.7.2.post1 and vLLM 0.33.0 / SGLang 0.5.23 wheels are read from $TILEPROBE_WHEELS (default:
tileprobe's wheel cache, which tests/conftest.py fills with `pip download --no-deps` when this file is collected);
the tests that need a wheel are skipped, naming it, when it is not there (a failed download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tileprobe.engines import flashinfer as ef
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.engines import fetch, packages, serving_pins
from tileprobe.errors import UsageError
from tileprobe.targets import DEVICE_NAMES, device_names, profile

ROOT = Path(__file__).resolve().parents[2]
BLOCKLISTS = ROOT / "results" / "blocklists"
WHEELS = Path(os.environ.get("TILEPROBE_WHEELS") or fetch.cache_dir())
# The engines and the release each pins (read from their wheels' METADATA; asserted below when the wheels are here).
# SGLang: "off" is its default; "on" is for SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=1 (written with that variable set).
ENGINES = {"flashinfer-0.7.4": ("flashinfer", "0.7.4", ("on", "off")), "vllm-0.33.0": ("vllm", "0.7.2.post1", ("on",)),
           "sglang-0.5.23": ("sglang", "0.7.2", ("off", "on"))}
# Every SM120/SM121 profile with known device names: the 3 with their own sweeps, and the other SM120 GPUs whose
# files come from rtx-pro-6000's rows (same sm_120a, same 101376 B limit; each file says so in rows_note).
TARGETS = tuple(t for t in DEVICE_NAMES if profile(t).arch in tid.SM120_ARCHS)


def _site(version: str, tmp_path_factory=None) -> Path:
    """A folder holding that flashinfer release's package (for PYTHONPATH): the install, or its unpacked wheel."""
    inst = packages.installed("flashinfer-python")
    if inst is not None and inst.version == version:
        return Path(inst.install)
    wheels = packages.wheels_in(WHEELS, "flashinfer-python") if WHEELS.is_dir() else []
    pkg = next((packages.from_wheel(w) for w in wheels if packages.from_wheel(w).version == version), None)
    if pkg is None:
        pytest.skip(f"no flashinfer-python {version} wheel in {WHEELS} (set TILEPROBE_WHEELS)")
    return packages.unpack_flashinfer(pkg).parent


# Runs inside the release's own flashinfer: its loader and its metadata, on a CPU-only torch with the device name
# faked where _collect_metadata asks torch for it.
_LOADER_SCRIPT = r"""
import json, sys
import torch
cases = json.load(sys.stdin)
name = {"gpu": None}
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_name = lambda *a: name["gpu"]
import flashinfer.tactics_blocklist as tb
from flashinfer.autotuner import _collect_metadata

class MoERunner:  # the autotuner keys a runner by its class name only
    pass

out = {"loader": tb.__file__, "results": []}
for c in cases:
    name["gpu"] = c["gpu"]
    bl = tb.TacticsBlocklist()
    r = {"file": c["file"], "gpu": c["gpu"], "loaded": bl.load(c["file"]),
         "metadata_version": _collect_metadata()["flashinfer_version"], "kept": {}}
    for key, full in c["offered"].items():
        r["kept"][key] = bl.filter(key.rsplit("::", 1)[0], MoERunner(), full)
    out["results"].append(r)
print(json.dumps(out))
"""


def _run_loader(site: Path, cases: list[dict]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-c", _LOADER_SCRIPT], input=json.dumps(cases), capture_output=True,
                       text=True, timeout=600, env=env, cwd=str(site))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _offered(doc: dict) -> dict[str, list[int]]:
    """The tactics MoERunner.get_valid_tactics offers per key: gemm1 0..n1-1, gemm2 n1..n1+n2-1."""
    n = doc["tileprobe"]["counts"]
    return {tid.OP_KEYS["gemm1"]: list(range(n["gemm1"])),
            tid.OP_KEYS["gemm2"]: list(range(n["gemm1"], n["gemm1"] + n["gemm2"]))}


def _files(engine_dir: str) -> list[Path]:
    return sorted((BLOCKLISTS / engine_dir).rglob("*.json"))


def test_the_committed_set_is_complete():
    """Every engine x target x SKU name x dtype pair x the engine's finalize mode(s), and nothing else."""
    want = set()
    for engine_dir, (_, _, modes) in ENGINES.items():
        for t in TARGETS:
            for gpu in device_names(t):
                for d in tid.PAIRS:
                    for f in modes:
                        want.add((engine_dir, t, gpu, d, f))
    got = set()
    for f in BLOCKLISTS.rglob("*.json"):
        doc = json.loads(f.read_text())
        prov = doc["tileprobe"]
        engine_dir, target = f.relative_to(BLOCKLISTS).parts[:2]
        assert prov["target"] == target
        assert prov["flashinfer"]["version"] == ENGINES[engine_dir][1] == doc["_metadata"]["flashinfer_version"]
        assert prov["engine"]["name"] == ENGINES[engine_dir][0]
        assert prov["numbering"]["state"] == "exact", f  # committed files were compared with the engine's own
        own_rows = prov["rows_target"] == target
        assert own_rows == ("rows_note" not in prov) and (own_rows or target not in ("rtx-pro-6000", "rtx-5090",
                                                                                      "dgx-spark-gb10")), f
        got.add((engine_dir, target, doc["_metadata"]["gpu"], prov["dtypes"], prov["finalize_fusion"]))
    assert got == want


@pytest.mark.parametrize("engine_dir", sorted(ENGINES))
def test_each_file_loads_with_its_releases_own_loader_and_filters_exactly_its_ids(engine_dir, rng):
    files = _files(engine_dir)
    assert files
    version = ENGINES[engine_dir][1]
    site = _site(version)
    others = [n for t in TARGETS for n in device_names(t)]
    cases = []
    for f in files:
        doc = json.loads(f.read_text())
        gpu = doc["_metadata"]["gpu"]
        cases.append({"file": str(f), "gpu": gpu, "offered": _offered(doc)})
        wrong = rng.choice([n for n in others if n != gpu])
        cases.append({"file": str(f), "gpu": wrong, "offered": _offered(doc)})
    out = _run_loader(site, cases)
    assert Path(out["loader"]).resolve().is_relative_to(site.resolve()), out["loader"]  # that release's own file
    for c, r in zip(cases, out["results"]):
        doc = json.loads(Path(c["file"]).read_text())
        assert r["metadata_version"] == version == doc["_metadata"]["flashinfer_version"]
        own = r["gpu"] == doc["_metadata"]["gpu"]
        assert r["loaded"] is own, (c["file"], r["gpu"])
        rows = {json.loads(l)["config"]: json.loads(l) for l in
                (ROOT / doc["tileprobe"]["rows"] / "results.jsonl").read_text().splitlines()}
        ids = tid.tactic_ids(doc["tileprobe"]["dtypes"], tid.FINALIZE_MODES[doc["tileprobe"]["finalize_fusion"]],
                             doc["tileprobe"]["arch"], site / "flashinfer")
        assert [[t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab] for t in ids] == doc["tileprobe"]["tactics"]
        over = {t.id for t in ids if rows[t.config.name]["verdict"] == "smem-over-limit"}
        for key, full in c["offered"].items():
            listed = set(doc["invalid_tactics"][key]) if own else set()
            assert r["kept"][key] == [i for i in full if i not in listed]
        assert {i for v in doc["invalid_tactics"].values() for i in v} == over


def test_a_file_is_skipped_by_another_releases_loader(rng):
    """The version stamp is what made the old files dead for vLLM and SGLang users: 0.7.2.post1's loader skips a
    0.7.4 file, and 0.7.4's skips a vLLM one."""
    vllm_file = rng.choice(_files("vllm-0.33.0"))
    fi_file = rng.choice(_files("flashinfer-0.7.4"))
    for site_version, f in (("0.7.2.post1", fi_file), ("0.7.4", vllm_file)):
        doc = json.loads(f.read_text())
        out = _run_loader(_site(site_version), [{"file": str(f), "gpu": doc["_metadata"]["gpu"],
                                                 "offered": _offered(doc)}])
        assert out["results"][0]["loaded"] is False, (site_version, f)


def test_the_sglang_default_file_blocks_nothing_good():
    """SGLang 0.5.23 runs finalize off: its files list nothing, and every tactic they let through fits. The
    finalize-on IDs 26 and 27 would, in SGLang's numbering, be swap-AB tiles that fit: two good tactics lost."""
    defaults = [f for f in _files("sglang-0.5.23") if "not set here" in json.loads(f.read_text())["tileprobe"][
        "engine"]["finalize_read"]]
    assert len(defaults) == len(_files("sglang-0.5.23")) // 2 > 0
    for f in _files("sglang-0.5.23"):  # the others: written with the switch on, and named so
        prov = json.loads(f.read_text())["tileprobe"]
        assert (f in defaults) == (prov["finalize_fusion"] == "off") == f.name.endswith("finalize-off.json")
        assert f in defaults or "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=1 is set here" in prov["engine"]["finalize_read"]
    for f in defaults:
        doc = json.loads(f.read_text())
        prov = doc["tileprobe"]
        assert prov["finalize_fusion"] == "off" and prov["engine"]["finalize_fusion"] == "off"
        assert all(ids == [] for ids in doc["invalid_tactics"].values()), f
        rows = {json.loads(l)["config"]: json.loads(l) for l in
                (ROOT / prov["rows"] / "results.jsonl").read_text().splitlines()}
        ids = tid.tactic_ids(prov["dtypes"], False, prov["arch"])  # the model of the installed release, which
        assert [[t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab] for t in ids] == prov["tactics"]  # must agree
        assert all(rows[t.config.name]["verdict"] == "fits" for t in ids), f
        if prov["dtypes"] != "nvfp4xnvfp4":
            continue
        vllm = json.loads(next(p for p in _files("vllm-0.33.0") if p.name == f.name.replace("finalize-off",
                                                                                              "finalize-on")
                               and p.parent.name == f.parent.name).read_text())
        on_ids = vllm["invalid_tactics"][tid.OP_KEYS["gemm2"]]
        assert on_ids == [26, 27]
        in_sglang = [t for t in ids if t.id in on_ids]
        assert [(t.tactic, t.epilogue, t.swap_ab) for t in in_sglang] == [
            ("CtaShape256x128x64B", "none", True), ("CtaShape128x256x64B", "none", True)]
        assert all(rows[t.config.name]["verdict"] == "fits" for t in in_sglang)


# ---------------------------------------------------------------------------------------------------------------
# The pins and finalize modes, from the real wheels
# ---------------------------------------------------------------------------------------------------------------


def _need(dist: str) -> None:
    if not (WHEELS.is_dir() and packages.wheels_in(WHEELS, dist)) and packages.installed(dist) is None:
        pytest.skip(f"no {dist} wheel in {WHEELS} (set TILEPROBE_WHEELS)")


def test_engine_pins_and_finalize_modes_read_from_the_wheels(monkeypatch):
    _need("vllm")
    _need("sglang")
    monkeypatch.delenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", raising=False)
    got = {}
    for name in ("vllm", "sglang"):
        pin = serving_pins.read_pin(name, WHEELS)
        folder = serving_pins.flashinfer_dir(pin, None, WHEELS)
        assert ef.find_flashinfer(folder).version == pin.flashinfer
        got[name] = (pin.version, pin.flashinfer, serving_pins.finalize_mode(pin, folder, {}).mode)
    assert got == {"vllm": ("0.33.0", "0.7.2.post1", "on"), "sglang": ("0.5.23", "0.7.2", "off")}
    pin = serving_pins.read_pin("sglang", WHEELS)
    folder = serving_pins.flashinfer_dir(pin, None, WHEELS)
    for value, mode in (("1", "on"), ("yes", "on"), ("0", "off"), ("FALSE", "off")):
        fin = serving_pins.finalize_mode(pin, folder, {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": value})
        assert fin.mode == mode and f"={value} is set here" in fin.why
    with pytest.raises(UsageError, match="EnvBool accepts"):
        serving_pins.finalize_mode(pin, folder, {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "maybe"})


# ---------------------------------------------------------------------------------------------------------------
# The readers on synthetic wheels (no download needed): what they accept and what they refuse
# ---------------------------------------------------------------------------------------------------------------


def _wheel(tmp_path: Path, name: str, version: str, requires: list[str], files: dict[str, str]) -> Path:
    whl = tmp_path / f"{name}-{version}-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        for rel, text in files.items():
            z.writestr(rel, text)
    return whl


def _vllm_files(call_args: str) -> dict[str, str]:
    return {serving_pins.VLLM_WRAPPER: 'flashinfer_cutlass_fused_moe = _lazy_import_wrapper(\n'
                                       '    "flashinfer.fused_moe", "cutlass_fused_moe"\n)\n',
            serving_pins.VLLM_CALLER: f"def apply(x):\n    _ = flashinfer_cutlass_fused_moe(\n        input=x,\n"
                                      f"{call_args}    )\n    return has_flashinfer_cutlass_fused_moe()\n"}


def test_vllm_reader_follows_the_call_and_the_pin(tmp_path, rng):
    v = f"9.{rng.randrange(100)}.0"
    pin_v = f"0.7.{rng.randrange(10)}.post{rng.randrange(5)}"
    d = tmp_path / "a"
    d.mkdir()
    _wheel(d, "vllm", v, [f"flashinfer-python=={pin_v}", "torch==2.14.0"], _vllm_files("        use_fused_finalize=False,\n"))
    pin = serving_pins.read_pin("vllm", d)
    assert (pin.version, pin.flashinfer) == (v, pin_v)
    fin = serving_pins.finalize_mode(pin, tmp_path)
    assert fin.mode == "off" and "use_fused_finalize=False" in fin.why
    e = tmp_path / "b"
    e.mkdir()
    _wheel(e, "vllm", v, ["flashinfer-python>=0.7"], _vllm_files(""))
    with pytest.raises(UsageError, match="not one exact"):
        serving_pins.read_pin("vllm", e).flashinfer  # noqa: B018
    f = tmp_path / "c"
    f.mkdir()
    _wheel(f, "vllm", v, [f"flashinfer-python=={pin_v}"], _vllm_files("        use_fused_finalize=flag,\n"))
    with pytest.raises(UsageError, match="not read here"):
        serving_pins.finalize_mode(serving_pins.read_pin("vllm", f), tmp_path)


def test_sglang_reader_needs_one_env_switch(tmp_path, rng):
    default = rng.choice(["True", "False"])
    files = {serving_pins.SGLANG_CALLER: "out = flashinfer_cutlass_fused_moe(x,\n    use_fused_finalize=envs.MY_SWITCH.get(),\n)\n",
             serving_pins.SGLANG_ENVIRON: f"class Envs:\n    MY_SWITCH = EnvBool({default})\n"}
    _wheel(tmp_path, "sglang", "0.9.1", ["flashinfer_python[cu13]==0.7.9"], files)
    pin = serving_pins.read_pin("sglang", tmp_path)
    assert pin.flashinfer == "0.7.9"
    fin = serving_pins.finalize_mode(pin, tmp_path, {})
    assert fin.mode == ("on" if default == "True" else "off") and fin.env_var == "MY_SWITCH"
    files[serving_pins.SGLANG_CALLER] += "flashinfer_cutlass_fused_moe(y)\n"  # a second call with no switch
    other = tmp_path / "two"
    other.mkdir()
    _wheel(other, "sglang", "0.9.1", ["flashinfer_python==0.7.9"], files)
    with pytest.raises(UsageError, match="do not all pass"):
        serving_pins.finalize_mode(serving_pins.read_pin("sglang", other), tmp_path, {})


def test_an_engines_finalize_mode_is_its_own(tmp_path, monkeypatch):
    """--finalize cannot contradict the engine; SGLang's switch, set, writes its finalize-on file."""
    _need("sglang")
    sweep = ROOT / "results" / "static" / "rtx-5090__flashinfer-moe__flashinfer-0.7.2"
    base = [sys.executable, "-m", "tileprobe", "export", "flashinfer-blocklist", str(sweep), "--engine", "sglang",
            "--engine-wheel", str(WHEELS), "--target", "rtx-5090", "--dtypes", "nvfp4xnvfp4", "--model-only"]
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"}
    p = subprocess.run(base + ["--out", str(tmp_path / "a"), "--finalize", "on"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 2 and "runs finalize fusion off" in p.stderr and len(p.stderr.splitlines()) == 1
    p = subprocess.run(base + ["--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=600,
                       env=dict(env, SGLANG_FLASHINFER_MOE_FUSED_FINALIZE="true"))
    assert p.returncode == 0, p.stderr
    (f,) = (tmp_path / "b").iterdir()
    doc = json.loads(f.read_text())
    assert f.name.endswith("__finalize-on.json") and doc["invalid_tactics"][tid.OP_KEYS["gemm2"]] == [26, 27]
    assert doc["_metadata"]["flashinfer_version"] == "0.7.2" and doc["tileprobe"]["numbering"]["state"] == \
        "model-unchecked"


def test_engine_wheel_and_the_wheel_cache_reach_the_blocklist(tmp_path, rng):
    """export flashinfer-blocklist takes the engine as every command does: --engine-wheel (the wheel file; its pinned
    flashinfer is looked for beside it, then installed, then cached), or nothing and the wheel cache is used."""
    _need("sglang")
    if packages.installed("sglang") is not None:
        pytest.skip("sglang is installed here: the cache fallback would not be reached")
    engine_whl = packages.wheels_in(WHEELS, "sglang")[0]
    fi_whl = next((w for w in packages.wheels_in(WHEELS, "flashinfer-python")
                   if packages.from_wheel(w).version == "0.7.2"), None)
    if fi_whl is None:
        pytest.skip(f"no flashinfer-python 0.7.2 wheel in {WHEELS}")
    sweep = ROOT / "results" / "static" / "rtx-5090__flashinfer-moe__flashinfer-0.7.2"
    cache = tmp_path / "cache"  # a wheel cache of this test's own, holding only these two wheels
    cache.mkdir()
    for w in (engine_whl, fi_whl):
        (cache / w.name).symlink_to(w)
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "TILEPROBE_ENGINE_WHEELS": str(cache),
            "PYTHONPATH": str(ROOT)}
    gpu = rng.choice(device_names("rtx-5090"))
    base = [sys.executable, "-m", "tileprobe", "export", "flashinfer-blocklist", str(sweep), "--engine", "sglang",
            "--target", "rtx-5090", "--dtypes", "nvfp4xnvfp4", "--model-only", "--gpu-name", gpu]
    read_from = {}
    for how, extra in (("wheel", ["--engine-wheel", str(engine_whl)]), ("cache", [])):
        out = tmp_path / f"out-{how}"
        p = subprocess.run(base + extra + ["--out", str(out)], capture_output=True, text=True, timeout=600, env=env,
                           cwd=ROOT)
        assert p.returncode == 0, (how, p.stderr)
        files = sorted(out.iterdir())
        assert len(files) == 1, (files, p.stdout)
        doc = json.loads(files[0].read_text())
        assert doc["_metadata"]["flashinfer_version"] == "0.7.2" and doc["_metadata"]["gpu"] == gpu
        read_from[how] = doc["tileprobe"]["engine"]["read_from"]
    assert read_from == {"wheel": str(engine_whl.resolve()), "cache": str(cache / engine_whl.name)}, read_from
    p = subprocess.run(base + ["--engine-wheel", str(engine_whl), "--wheels", str(WHEELS), "--out",
                               str(tmp_path / "x")], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 2 and "give one of them" in p.stderr
