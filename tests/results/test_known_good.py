"""The guard: every known-good file still holds (static re-probe with the real nvcc and CUTLASS), a broken copy
fails `tileprobe check` with a one-line reason in bytes, and files are made and updated from sweeps.

Which files are guarded here: every *.json in results/known_good/ of this repository. Any other files, in this or any
repository, are guarded one item per tile by tileprobe's pytest plugin: `pytest --tileprobe-known-good PATH`
(tileprobe/pytest_plugin.py; tested in tests/test_pytest_plugin.py).
"""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _session_draw import SM120_ARCHS, sm120_archs
from _synth import TC, add_runtime, make_static, meta_for, write_set

from tileprobe.backends.cutlass import static_probe
from tileprobe.results import known_good
from tileprobe.results import resultset
from tileprobe.results import schema
from tileprobe.errors import UsageError

REPO_KG = Path(__file__).resolve().parents[2] / "results" / "known_good"


def committed_files() -> list[Path]:
    """The committed files this session re-probes: every file, except that of the SM120 family's two arch-specific
    builds (sm_120a: RTX 5090, RTX PRO 6000; sm_121a: DGX Spark; the same tile lists, the same sources, only the
    gencode differs) one is drawn per session (tests/_session_draw.py: sm120_archs); TILEPROBE_TEST_EVERY_ARCH=1
    re-probes every file. Each file is still re-probed in about every other run, and its tiles in every run."""
    files = sorted(REPO_KG.glob("*.json")) if REPO_KG.is_dir() else []
    archs = sm120_archs()
    return [f for f in files
            if (arch := json.loads(f.read_text())["target"].get("arch")) not in SM120_ARCHS or arch in archs]


def pytest_generate_tests(metafunc):
    if "known_good_file" in metafunc.fixturenames:
        files = committed_files()
        metafunc.parametrize("known_good_file", files, ids=[f.name for f in files])


@pytest.mark.nvcc
def test_known_good_file_still_holds(known_good_file, toolchain, monkeypatch):
    """Each committed file, re-probed with the real nvcc: every tile in one sizes-only unit (the files hold 11 to 42
    tiles; the default cap of 32 per unit would parse CUTLASS twice for most of them, and under `-n 2` the other core
    is busy with another test anyway). The unit size must change no byte, and this test holds that as well: the files'
    bytes were recorded by sweeps that built the same tiles in units of at most 32 (each file's `command`). The
    rtx-5090 and rtx-pro-6000 files list the same sm_120a configs, so their one unit is built once per session."""
    monkeypatch.setenv(static_probe.CONFIGS_PER_TU_ENV, "64")
    res = known_good.check_file(known_good_file, toolchain, jobs=os.cpu_count() or 1)
    assert res.checked == len(known_good.load_file(known_good_file)["tiles"]) > 0
    assert not res.regressions, "\n".join(res.regressions)


def tileprobe(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=1800,
                          **kw)


def per_stage_bytes(m: int, n: int, k: int) -> int:
    """One SM120 NVFP4 mainloop stage from first principles (see test_static_probe.py)."""
    return (m + n) * k // 2 + (max(m, 128) + max(n, 128)) * k // 16


@pytest.mark.nvcc
def test_a_broken_copy_fails_check_with_the_bytes(tmp_path, toolchain, rng):
    src = REPO_KG / "rtx-pro-6000__sm120-nvfp4.json"
    doc = known_good.load_file(src)
    victim = next(e for e in doc["tiles"] if e["tile"] == "128x256x128" and e["stages"] == "auto"
                  and e["epilogue"] == "no-c" and not e["swap_ab"])
    intact = rng.choice([e for e in doc["tiles"] if e is not victim])
    broken = copy.deepcopy(victim)
    broken["stages"] = 4  # an explicit, over-full pipeline: 4 stages of 128x256x128 cannot fit in 101376 B
    doc["tiles"] = [broken, intact]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    expected = victim["smem_bytes"] + (4 - victim["stages_resolved"]) * per_stage_bytes(128, 256, 128)
    limit = doc["target"]["smem_optin"]
    assert limit == 101376 and expected > limit

    p = tileprobe("check", str(path), "--jobs", "1", "--cache-dir", str(toolchain.cache))
    assert p.returncode == 1, p.stdout + p.stderr
    regressions = [l for l in p.stdout.splitlines() if l.startswith("REGRESSION")]
    assert len(regressions) == 1, p.stdout
    line = regressions[0]
    assert "128x256x128" in line and "stages=4" in line and "was fits" in line and "now smem-over-limit" in line
    assert f"SharedStorage {expected} B > opt-in {limit} B by {expected - limit} B (4 stages)" in line
    assert "1 regression(s) in 2 tiles" in p.stdout

    # the same file, repaired, passes
    doc["tiles"] = [victim, intact]
    path.write_text(json.dumps(doc))
    p = tileprobe("check", str(path), "--jobs", "1", "--cache-dir", str(toolchain.cache))
    assert p.returncode == 0 and "0 regression(s) in 2 tiles" in p.stdout, p.stdout + p.stderr


@pytest.mark.nvcc
def test_check_compiles_an_engine_family_against_the_engines_own_cutlass(tmp_path, toolchain, rng):
    """`check --cutlass-dir OTHER` on a flashinfer-moe file: the tiles compile against (and the output names) the
    engine's bundled CUTLASS, the tree they were measured with, not OTHER (another CUTLASS version); the flag is said
    not to apply. One random tile of the committed file, re-sized by nvcc to its recorded bytes."""
    from tileprobe.engines.flashinfer import find_flashinfer

    src = REPO_KG / "rtx-pro-6000__flashinfer-moe.json"
    doc = known_good.load_file(src)
    label = find_flashinfer().label()
    tiles = [e for e in doc["tiles"] if e.get("engine") == label]
    if not tiles:
        pytest.skip(f"{src.name} holds no tiles measured with the installed {label}")
    tile = rng.choice(tiles)
    print("tile", tile["config"])
    doc["tiles"] = [tile]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(doc))
    other = tmp_path / "cutlass"
    (other / "include" / "cutlass").mkdir(parents=True)
    (other / "include" / "cutlass" / "version.h").write_text(
        "#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0\n")
    p = tileprobe("check", str(path), "--jobs", "1", "--cutlass-dir", str(other), "--cache-dir", str(toolchain.cache))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 regression(s) in 1 tiles" in p.stdout, p.stdout
    assert "another toolchain" not in p.stdout and "4.2.0" not in p.stdout.splitlines()[-1], p.stdout
    own = doc["toolchain"]
    assert f"CUTLASS {own['cutlass_version']} ({label}'s bundled copy, tree {own['cutlass_hash']})" in p.stdout
    assert "does not apply to flashinfer-moe" in p.stdout and "still fits; SharedStorage" not in p.stdout, p.stdout


def test_check_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    for args, needle in ((["check", str(tmp_path / "none.json")], "no known-good file"),
                         (["check", str(bad)], "not a tileprobe known-good file"),
                         (["check", str(tmp_path / "empty")], "no known-good file")):
        p = tileprobe(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and needle in lines[0], p.stderr


def test_write_records_identity_evidence_and_recommendations(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128"], stages=[0, 3],
                         epilogues=("no-c", "with-c"))
    runtime = add_runtime(rng, static, batches=(1, 8, 64), fail_rate=0.2)
    folder = write_set(tmp_path / "sweep", static + runtime, meta_for())
    out = tmp_path / "kg.json"
    (path, notes), = known_good.write(resultset.load(folder), out)
    doc = known_good.load_file(path)
    assert doc["target"]["name"] == "rtx-pro-6000" and doc["target"]["smem_optin"] == 101376
    assert doc["toolchain"]["cutlass_version"] == TC["cutlass_version"] and doc["command"] and doc["date"]
    by_cfg = {}
    for r in runtime:
        by_cfg.setdefault(r["config"], []).append(r["verdict"])
    expect_good = {s["config"] for s in static if s["verdict"] == "fits"
                   and all(v == "ok" for v in by_cfg.get(s["config"], []))}
    assert {e["config"] for e in doc["tiles"]} == expect_good
    assert {x["config"] for x in doc["not_good"]} == {s["config"] for s in static} - expect_good
    for e in doc["tiles"]:
        cfg = resultset.config_from_entry(e)
        assert cfg.key == e["config"]
        configured = resultset.legacy_config_key(e["config"])["stages"]
        assert e["stages"] == configured  # 'auto' or the explicit count, never the resolved one
        assert e["verdict"] == "ok" and e["evidence"] == "verified"
        src = next(s for s in static if s["config"] == e["config"])
        assert e["stages_resolved"] == src["stages"] and e["smem_bytes"] == src["smem_bytes"]
        assert e["headroom_bytes"] == 101376 - src["smem_bytes"]
    rec = doc["recommended"]["workloads"]["qwen3-30b-a3b"]
    assert set(rec) == {"gate_up", "down"} and list(rec["down"]) == ["1-7", "8-63", "64+"]


def test_update_refuses_other_versions_unless_accepted(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x64x128"])
    a = write_set(tmp_path / "a", static, meta_for())
    out = tmp_path / "kg.json"
    known_good.write(resultset.load(a), out)
    newer = dict(TC, cutlass_version="4.6.0", cutlass_hash="0123456789abcdef")
    flipped = [dict(r, **newer) for r in static]
    victim = rng.choice([r for r in flipped if r["verdict"] == "fits"] or flipped)
    victim.update(verdict="smem-over-limit", smem_bytes=110000, headroom_bytes=101376 - 110000,
                  reason="SharedStorage 110000 B > opt-in 101376 B by 8624 B (9 stages)")
    b = write_set(tmp_path / "b", flipped, meta_for(tc=newer))
    before = out.read_text()
    p = tileprobe("known-good", "write", str(b), "--out", str(out))
    assert p.returncode == 2 and out.read_text() == before
    line = p.stderr.strip()
    assert "\n" not in line and "CUTLASS version 4.5.0 -> 4.6.0" in line and "--accept-versions" in line
    p = tileprobe("known-good", "write", str(b), "--out", str(out), "--accept-versions")
    assert p.returncode == 0, p.stderr
    assert "CUTLASS version 4.5.0 -> 4.6.0" in p.stdout
    doc = known_good.load_file(out)
    assert doc["toolchain"]["cutlass_version"] == "4.6.0" and len(doc["history"]) == 1
    assert victim["config"] not in {e["config"] for e in doc["tiles"]}
    if any(r["config"] == victim["config"] and r["verdict"] == "fits" for r in static):
        assert re.search(rf"dropped {victim['config']}: was fits .* now smem-over-limit", p.stdout)


def test_update_under_a_new_toolchain_drops_tiles_it_did_not_re_probe(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x64x128", "128x32x128"])
    for r in static:  # every tile works under the old toolchain
        r.update(verdict="fits", smem_bytes=90000, headroom_bytes=101376 - 90000)
    out = tmp_path / "kg.json"
    known_good.write(resultset.load(write_set(tmp_path / "a", static, meta_for())), out)
    keep = rng.choice(static)
    newer = dict(TC, nvcc_version="13.1.0")
    b = write_set(tmp_path / "b", [dict(keep, **newer)], meta_for(tc=newer))
    (_, notes), = known_good.write(resultset.load(b), out, accept_versions=True)
    doc = known_good.load_file(out)
    assert [e["config"] for e in doc["tiles"]] == [keep["config"]]
    dropped = [n for n in notes if "not re-probed by this sweep under the new toolchain" in n]
    assert sorted(n.split()[1].rstrip(":") for n in dropped) == sorted(r["config"] for r in static if r is not keep)
    # same toolchain: tiles the sweep did not cover are kept
    same = write_set(tmp_path / "c", [dict(keep, **newer)], meta_for(tc=newer))
    known_good.write(resultset.load(same), out)
    assert [e["config"] for e in known_good.load_file(out)["tiles"]] == [keep["config"]]


def test_several_targets_need_one_file_each(tmp_path, rng):
    rows = make_static(rng, tiles=["128x128x128"]) + make_static(rng, tiles=["128x128x128"], target="rtx-5090")
    folder = write_set(tmp_path / "m", rows)
    with pytest.raises(UsageError, match="--out names one file"):
        known_good.write(resultset.load(folder), tmp_path / "one.json")
    written = known_good.write(resultset.load(folder), folder=tmp_path / "kg")
    assert sorted(p.name for p, _ in written) == ["rtx-5090__sm120-nvfp4.json", "rtx-pro-6000__sm120-nvfp4.json"]


def test_check_launches_every_working_tile_static_ones_too(tmp_path, monkeypatch, toolchain, rng):
    """A fake H200 and fake harnesses (no GPU needed): every tile recorded as working is launched, including one
    recorded only as `fits` (sized); the static tile that now crashes is a regression with what the launch showed."""
    import json as _json

    from _fakes import fake_harness

    from tileprobe import targets
    from tileprobe.results import known_good as kg
    from tileprobe.backends.cutlass import runtime
    from tileprobe.backends.cutlass.build import BuildResult
    from tileprobe.results.known_good import check_file
    from tileprobe.results.rows import Outcome, StaticInfo
    from tileprobe.verdict import Verdict

    doc = _json.loads((REPO_KG / "h200__sm90-fp8.json").read_text())
    doc["tiles"] = [t for t in doc["tiles"] if t["verdict"] == "ok"][:2]
    static_one = rng.randrange(2)
    doc["tiles"][static_one].update(verdict="fits", evidence="sized")
    path = tmp_path / "h200__sm90-fp8.json"
    path.write_text(_json.dumps(doc))

    def fake_static(configs, *a, **k):
        return [Outcome(c, Verdict.FITS, "sized", StaticInfo(stages=4, smem_bytes=doc["tiles"][i]["smem_bytes"],
                                                             threads_per_cta=384))
                for i, c in enumerate(configs)]

    scripts = [fake_harness(tmp_path, {}, name="good"), fake_harness(tmp_path, {}, default="segv", name="bad")]
    if static_one == 0:
        scripts.reverse()
    dev = targets.replace(targets.profile("h200"), gpu_index=0)
    monkeypatch.setattr(kg, "probe_static", fake_static)
    monkeypatch.setattr(kg, "query_devices", lambda: [dev])
    monkeypatch.setattr(runtime, "build_many", lambda reqs, *a, **k: [BuildResult(r, True, scripts[i], "", 0.1, True,
                                                                                  []) for i, r in enumerate(reqs)])
    monkeypatch.setattr(runtime, "measure_refs", lambda i: {})
    res = check_file(path, toolchain, jobs=1)
    assert res.checked == 2
    assert len(res.regressions) == 2  # gate_up and down of the crashing (static) tile
    tile = doc["tiles"][static_one]["tile"]
    assert all(tile in r and "was fits (sized)" in r and "now crashed" in r and "SIGSEGV" in r
               for r in res.regressions)
    assert any("2 working tile(s) launched on NVIDIA H200: 2 of 4 point(s) verified" in n for n in res.notes)


def test_only_ok_at_every_launched_point_is_working_and_the_counts_say_what_ran(tmp_path, rng):
    """ok + not-run + unchecked is not 'all verified'; all-unchecked is not `fits`; ok at every point that ran (some
    not run) is working, and the reason says how many ran; the file's counts are the sweep's."""
    static = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128", "128x32x128"])
    for s in static:  # every config fits, so only the runtime decides
        s.update(smem_bytes=90112, headroom_bytes=101376 - 90112, verdict="fits")
    runtime = add_runtime(rng, static, batches=(1, 8, 32, 128), fail_rate=0.0)
    by_cfg: dict[str, list[dict]] = {}
    for r in runtime:
        by_cfg.setdefault(r["config"], []).append(r)
    mixed, unchecked, partly = rng.sample(sorted(by_cfg), 3)
    clean = set(by_cfg) - {mixed, unchecked, partly}  # ok at every point

    def make(r, verdict):
        r.update(verdict=verdict, evidence={"unchecked": "launched", "not-run": "none"}[verdict], rel_err=None,
                 bad_elements=None, us_median=None if verdict == "not-run" else r["us_median"],
                 reason="launched and ran; correctness not checked" if verdict == "unchecked" else "harness ended")

    rows_m = by_cfg[mixed]
    make(rows_m[0], "unchecked")
    make(rows_m[1], "not-run")
    for r in by_cfg[unchecked]:
        make(r, "unchecked")
    n_unrun = rng.randint(1, len(by_cfg[partly]) - 1)
    for r in by_cfg[partly][:n_unrun]:
        make(r, "not-run")
    folder = write_set(tmp_path / "sweep", static + runtime, meta_for())
    (path, _), = known_good.write(resultset.load(folder), tmp_path / "kg.json")
    doc = known_good.load_file(path)
    tiles = {e["config"]: e for e in doc["tiles"]}
    bad = {x["config"]: x for x in doc["not_good"]}
    assert set(tiles) == {partly} | clean and set(bad) == {mixed, unchecked}
    assert bad[unchecked]["verdict"] == "unchecked" and bad[mixed]["verdict"] == "unchecked"
    assert "not verified at every point" in bad[mixed]["reason"]
    ran = len(by_cfg[partly]) - n_unrun
    assert tiles[partly]["verdict"] == "ok" and tiles[partly]["evidence"] == "verified"
    assert f"not-run {n_unrun}" in tiles[partly]["runtime"] and f"ok {ran}" in tiles[partly]["runtime"]
    c = doc["counts"]
    assert c["tiles"] == len(clean) + 1 and c["tiles_by_evidence"] == {"verified": len(clean) + 1}
    assert c["sweep_configs"] == len(static) and c["sweep_working"] == len(clean) + 1
    assert c["sweep_not_good_by_verdict"] == {"unchecked": 2}
    assert c["sweep_runtime_points"] == len(runtime)
    assert c["sweep_runtime_points_by_verdict"] == {
        v: sum(r["verdict"] == v for r in runtime) for v in {r["verdict"] for r in runtime}}
    schema.validate("known-good", doc)


@pytest.mark.triton
def test_check_compiles_a_triton_file_into_the_cache_dir_named(tmp_path, rng):
    """`check --cache-dir DIR` on a triton-moe known-good file: Triton's builds land in DIR (main ignored the option
    for Triton files and compiled into the default cache, here TILEPROBE_CACHE_DIR)."""
    pytest.importorskip("triton")
    from tileprobe.triton.sweep import engine_kernel_source

    try:
        engine_kernel_source("vllm", None)
    except UsageError as exc:
        pytest.skip(f"vllm's kernel is not readable here: {exc}")
    folder = tmp_path / "tuned"
    folder.mkdir()
    entry = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": rng.choice([32, 64]), "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
             "num_warps": 4, "num_stages": 2}
    (folder / "E=128,N=768,device_name=NVIDIA_H200.json").write_text(json.dumps({"64": entry}))
    out, kg, mine = tmp_path / "out", tmp_path / "h200__triton-moe.json", tmp_path / "mine"
    for args in (["sweep", "--family", "triton-moe", "--engine", "vllm", "--workload", "qwen3-30b-a3b", "--target",
                  "h200", "--config-dir", str(folder), "--batch", "64", "--out", str(out), "--jobs", "2"],
                 ["known-good", "write", str(out), "--out", str(kg)]):
        p = tileprobe(*args)
        assert p.returncode == 0, p.stderr[-2000:]
    p = tileprobe("check", str(kg), "--cache-dir", str(mine), "--jobs", "2")
    assert p.returncode == 0, (p.stdout, p.stderr[-2000:])
    built = list((mine / "triton").glob("*/*/result.json"))
    assert len(built) == 2, (sorted(mine.rglob("*"))[:20], p.stdout)  # gate_up and down at M=64
    assert {json.loads(b.read_text()).get("shared") for b in built} == {
        r["smem_bytes"] for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
