"""tileprobe.predict against what nvcc measured: every committed static row, the member-level layout dumps, and (with
nvcc) three random configs compiled fresh each run. Expected numbers come from compiled binaries only, never from the
predictor's formulas."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from tileprobe.predict import FAMILIES, CannotPredict, Unbuildable, fits, predict, rule_set, smem_bytes, stages
from tileprobe.results.resultset import legacy_config_key

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes")


def _stages_of(row: dict) -> int:
    """The stage count the row's config asked for, from its field; files written before the field existed go through
    the one legacy reader (tileprobe.results.resultset.legacy_config_key), as every other reader of old files does."""
    st = row.get("stages_configured") or legacy_config_key(row["config"])["stages"]
    return 0 if st == "auto" else int(st)


def _committed_rows() -> list:
    out = []
    for path in sorted(ROOT.glob("results/static/*/results.jsonl")) + sorted(ROOT.glob("results/h200/*/results.jsonl")):
        for i, line in enumerate(path.read_text().splitlines()):
            row = json.loads(line)
            if row.get("family") not in FAMILIES:
                continue
            if row.get("gemm"):  # a runtime row (results/h200/flashinfer-moe): its static twin carries the sizes
                continue
            out.append(pytest.param(row, id=f"{path.parent.name}:{i}:{row['config']}"))
    return out


ROWS = _committed_rows()


def test_committed_rows_cover_both_versions_and_families():
    seen = {(p.values[0]["family"], p.values[0]["cutlass_version"]) for p in ROWS
            if p.values[0].get("smem_bytes") is not None}
    assert {("sm120-nvfp4", "4.5.0"), ("sm120-nvfp4", "4.2.0"), ("sm90-fp8", "4.5.0")} <= seen


@pytest.mark.parametrize("row", ROWS)
def test_committed_static_row(row):
    """Byte-exact on every committed row that has sizes; rows tileprobe marked unsupported are Unbuildable."""
    args = dict(family=row["family"], tile=row["tile"], schedule=row["schedule"], stages=_stages_of(row),
                epilogue=row["epilogue"], swap_ab=row["swap_ab"], arch=row["arch"],
                cutlass_version=row["cutlass_version"], engine=row.get("engine"), cutlass_hash=row.get("cutlass_hash"))
    if row["family"] == "flashinfer-moe":
        args.update(dtypes=row["dtypes"], cluster=tuple(int(c) for c in row["cluster"].split("x")))
    if row["family"] == "vllm-moe" and row["arch"] == "sm_100a":  # no SM100 rules: refused, never guessed
        with pytest.raises(CannotPredict):
            predict(**args)
        return
    if row.get("smem_bytes") is None:
        assert row["verdict"] == "unsupported", row["verdict"]
        with pytest.raises(Unbuildable) as exc:
            predict(**args)
        # flashinfer drops its 128x128x256B / 256x128x128B tactics for grouped GEMM; CUTLASS itself would fit < 2
        # stages for them, which is the model's reason
        assert exc.value.kind == "unsupported" or (row["family"] == "flashinfer-moe"
                                                   and exc.value.kind == "too-few-stages"), exc.value.kind
        return
    p = predict(**args)
    got = {c: getattr(p, c) for c in COLUMNS}
    want = {c: row[c] for c in COLUMNS}
    assert got == want
    assert sum(p.parts.values()) == p.smem_bytes
    # the verdict the static probe wrote follows from the bytes and the row's limit
    if row["verdict"] in ("fits", "smem-over-limit"):
        assert p.fits(row["smem_limit_bytes"]) == (row["verdict"] == "fits")


def _layout_rows() -> list:
    out = []
    for path in sorted((ROOT / "results" / "predict_calibration").glob("layout__*.jsonl")):
        family, version = re.match(r"layout__(.+)__cutlass-(.+)\.jsonl", path.name).groups()
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out.append(pytest.param(family, version, d, id=f"{family}-{version}-{d['tile']}-{d['schedule']}-"
                                                         f"s{d['stages_req']}-{d['epilogue']}-swap{int(d['swap_ab'])}"))
    return out


@pytest.mark.parametrize("family,version,d", _layout_rows())
def test_layout_dump_members(family, version, d):
    """Member by member against cutlass_harness/layout.cu dumps (sizeof/offsetof read from the compiled types)."""
    p = predict(family, d["tile"], d["schedule"], d["stages_req"], d["epilogue"], d["swap_ab"],
                cutlass_version=version)
    assert (p.stages, p.smem_bytes, p.smem_mainloop_bytes, p.smem_epilogue_bytes) == (
        d["stages"], d["k_size"], d["ml_size"], d["ep_size"])
    parts = p.parts
    assert parts["tensors.mainloop.A"] == d["A_size"]
    assert parts["tensors.mainloop.B"] == d["B_size"]
    if "SFA_size" in d:
        assert parts["tensors.mainloop.SFA"] == d["SFA_size"]
        assert parts["tensors.mainloop.SFB"] == d["SFB_size"]
    assert p.smem_bytes - p.kernel_level_bytes == d["k_tensors_size"]
    assert parts["pipelines.mainloop"] == d["kp_ml_size"]
    assert parts["pipelines.epi_load"] == d["kp_epi_size"]
    assert parts.get("pipelines.math_wg_order") == d.get("kp_math_size")
    assert parts["scheduler_response"] == d["k_resp_size"]
    ep_tmaps = parts["tensormaps.epilogue.tensormap_C"] + parts["tensormaps.epilogue.tensormap_D"]
    assert ep_tmaps == d["ep_tensormaps_size"]


# Hand-checked examples (numbers read off compiled binaries, see results/predict_calibration) ------------------------

def test_convenience_functions():
    assert stages("sm120-nvfp4", (128, 128, 128), "cooperative") == 4
    assert smem_bytes("sm120-nvfp4", "128x128x128", "pingpong", epilogue="with-c") == 89088
    assert fits("sm120-nvfp4", "128x32x128", "cooperative", epilogue="with-c", limit_bytes=101376)  # exactly at it
    assert not fits("sm120-nvfp4", "128x32x128", "cooperative", cutlass_version="4.2.0", limit_bytes=101376)
    assert smem_bytes("sm90-fp8", "256x256x128", "cooperative", stages=4, arch="sm_90a") == 280576


def test_42_vs_45_carveout():
    """4.2.0 charges 16 B of barriers and no kernel-level storage per the whole budget, and stores no SFB for
    N < 128; 4.5.0 reserves scheduler/tensormap storage and charges a 128-row SFB, so 128x32x128 no-c gets 8 stages
    (over the limit by 1024 B) on 4.2.0 and 7 on 4.5.0 (results/static/diff_cutlass_4.5.0_vs_4.2.0.md)."""
    old = predict("sm120-nvfp4", "128x32x128", "cooperative", cutlass_version="4.2.0")
    new = predict("sm120-nvfp4", "128x32x128", "cooperative", cutlass_version="4.5.0")
    assert (old.stages, old.smem_bytes, new.stages, new.smem_bytes) == (8, 102400, 7, 97280)
    assert old.parts["tensors.mainloop.SFB"] == 16  # an empty array_aligned<ue4m3, 0>


def test_unbuildable_configs():
    with pytest.raises(Unbuildable) as exc:
        predict("sm120-nvfp4", "128x16x128", "pingpong")
    assert exc.value.kind == "tile" and "N >= 32" in exc.value.reason
    with pytest.raises(Unbuildable) as exc:  # nvcc: Divisibility Condition (results/predict_calibration)
        predict("sm120-nvfp4", "128x48x128", "cooperative")
    assert exc.value.kind == "tile"
    with pytest.raises(Unbuildable) as exc:
        predict("sm120-nvfp4", "128x192x128", "pingpong")
    assert exc.value.kind == "tile"
    with pytest.raises(Unbuildable) as exc:
        predict("sm120-nvfp4", "256x256x512", "cooperative")
    assert exc.value.kind == "too-few-stages" and exc.value.at_two_stages.stages == 2
    assert exc.value.at_two_stages.smem_bytes > 101376
    with pytest.raises(Unbuildable) as exc:
        predict("sm120-nvfp4", "128x128x128", "cooperative", stages=1)
    assert exc.value.kind == "too-few-stages"
    with pytest.raises(Unbuildable) as exc:
        predict("sm90-fp8", "64x128x128", "cooperative")
    assert exc.value.kind == "unsupported"


@pytest.mark.parametrize("version", ["4.3.0", "4.4.2", "3.9.2", "5.0.0", "4.5.1", "4.2.1", "latest", ""])
def test_unknown_version_cannot_predict(version):
    with pytest.raises(CannotPredict, match="CUTLASS"):
        predict("sm120-nvfp4", "128x128x128", "cooperative", cutlass_version=version)


def test_unknown_family_cannot_predict():
    with pytest.raises(CannotPredict, match="family"):
        predict("no-such-family", "128x128x128", "cooperative")
    with pytest.raises(CannotPredict, match="4.5.0"):  # sm90-fp8 was verified on 4.5.0 only
        predict("sm90-fp8", "128x128x128", "cooperative", cutlass_version="4.2.0")


def _measured(**want) -> dict:
    """The committed compiled row of one flashinfer-moe config (sizes nvcc measured), never the model's own numbers."""
    found = [p.values[0] for p in ROWS if p.values[0]["family"] == "flashinfer-moe" and p.values[0].get("smem_bytes")
             and all(p.values[0].get(k) == v for k, v in want.items())]
    assert found, f"no committed compiled row for {want}"
    return found[0]


def test_flashinfer_moe():
    """The rules that differ from sm120-nvfp4, each held against the committed row nvcc measured for it."""
    cases = [dict(tile="128x32x128", epilogue="default", swap_ab=False, arch="sm_120a", dtypes="nvfp4xnvfp4"),
             dict(tile="128x32x128", epilogue="finalize", swap_ab=False, arch="sm_120a", dtypes="nvfp4xnvfp4"),
             dict(tile="128x32x128", epilogue="finalize", swap_ab=True, arch="sm_120a", dtypes="nvfp4xnvfp4"),
             dict(tile="128x32x128", epilogue="default", swap_ab=False, arch="sm_120a", dtypes="mxfp8xmxfp4"),
             dict(tile="128x128x128", epilogue="finalize", swap_ab=False, arch="sm_90a", dtypes="fp8xfp8",
                  cluster="2x2x1")]
    for case in cases:
        row = _measured(**{"cluster": "1x1x1", **case})
        p = predict("flashinfer-moe", row["tile"], row["schedule"], epilogue=row["epilogue"], swap_ab=row["swap_ab"],
                    arch=row["arch"], dtypes=row["dtypes"], cluster=tuple(int(c) for c in row["cluster"].split("x")),
                    cutlass_version=row["cutlass_version"], engine=row["engine"], cutlass_hash=row["cutlass_hash"])
        assert {c: getattr(p, c) for c in COLUMNS} == {c: row[c] for c in COLUMNS}, case
    fi = "flashinfer 0.7.4"
    with pytest.raises(Unbuildable) as exc:
        predict("flashinfer-moe", "128x64x64", dtypes="mxfp8xmxfp4", engine=fi)
    assert exc.value.kind == "unsupported"
    with pytest.raises(Unbuildable) as exc:
        predict("flashinfer-moe", "128x128x512", dtypes="nvfp4xnvfp4", engine=fi)
    assert exc.value.kind == "too-few-stages"
    with pytest.raises(CannotPredict):  # not compiled: refused, not extrapolated
        predict("flashinfer-moe", "128x256x128", "cooperative", arch="sm_90a", engine=fi)
    with pytest.raises(Unbuildable):
        predict("flashinfer-moe", "128x128x128", arch="sm_90a", dtypes="nvfp4xnvfp4", engine=fi)


def test_flashinfer_moe_is_keyed_by_the_engine_release_and_its_tree(rng):
    """flashinfer-moe's rules stand for the releases whose own trees were compiled (the committed rows' engine and
    cutlass_hash): any other release, a checked release with another CUTLASS tree, or no release is refused, whatever
    CUTLASS version is named."""
    rows = [p.values[0] for p in ROWS if p.values[0]["family"] == "flashinfer-moe" and p.values[0].get("smem_bytes")]
    checked = sorted({r["engine"] for r in rows})
    assert {"flashinfer 0.7.4", "flashinfer 0.7.2.post1"} <= set(checked)
    row = rng.choice(rows)
    print("row", row["engine"], row["config"])
    args = dict(family="flashinfer-moe", tile=row["tile"], schedule=row["schedule"], epilogue=row["epilogue"],
                swap_ab=row["swap_ab"], arch=row["arch"], dtypes=row["dtypes"],
                cluster=tuple(int(c) for c in row["cluster"].split("x")), cutlass_version=row["cutlass_version"])
    assert predict(**args, engine=row["engine"], cutlass_hash=row["cutlass_hash"]).smem_bytes == row["smem_bytes"]
    other = f"flashinfer 0.{rng.randrange(8, 40)}.{rng.randrange(10)}"
    for engine, tree, word in ((None, row["cutlass_hash"], "none was named"), (other, row["cutlass_hash"], other),
                               (row["engine"], f"{rng.getrandbits(64):016x}", "bundled CUTLASS tree")):
        with pytest.raises(CannotPredict, match=word):
            predict(**args, engine=engine, cutlass_hash=tree)
    with pytest.raises(CannotPredict, match="4.2.0"):  # the release's own CUTLASS, not another version
        predict(**{**args, "cutlass_version": "4.2.0"}, engine=row["engine"])
    with pytest.raises(CannotPredict):
        rule_set("flashinfer-moe", "4.5.0")  # a CUTLASS version alone keys nothing for an engine family


def test_version_aliases():
    assert rule_set("sm120-nvfp4", "4.5.x") == rule_set("sm120-nvfp4", "4.5") == rule_set("sm120-nvfp4", "4.5.0")
    assert rule_set("sm120-nvfp4", "4.2.x") == "4.2"


def test_importable_without_nvcc_torch_or_gpu():
    """The model needs nothing but the standard library and tileprobe.errors."""
    import subprocess
    import sys

    code = ("import sys; import tileprobe.predict as p; p.predict('sm90-fp8', '128x128x128', 'pingpong'); "
            "bad = [m for m in ('torch', 'cuda', 'pandas', 'tileprobe.backends.cutlass.build', 'tileprobe.backends.cutlass.toolchain') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/nonexistent"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Fresh compiles ---------------------------------------------------------------------------------------------------

def _random_config(rng: random.Random, version: str) -> tuple:
    """A config CUTLASS builds: drawn from the families' valid ranges until the predictor accepts it."""
    while True:
        family = rng.choice(["sm120-nvfp4", "sm90-fp8"])
        if family == "sm120-nvfp4":
            m = rng.choice([128, 256])
            n = rng.choice([32, 64, 96, 128, 256])
            k = rng.choice(range(64, 513, 64))
            schedule = rng.choice(["auto", "cooperative", "pingpong"])
            arch = rng.choice(["sm_120a", "sm_121a"])
        else:
            schedule = rng.choice(["cooperative", "pingpong"])
            m = rng.choice([128, 256] if schedule == "cooperative" else [64, 128, 192, 256])
            n = rng.choice(range(8, 257, 8))
            k = rng.choice(range(32, 257, 32))
            arch = "sm_90a"
        st = rng.choice([0, 0, 2, 3, 4, 5])
        epi, swap = rng.choice(["no-c", "with-c"]), rng.random() < 0.5
        try:
            predict(family, (m, n, k), schedule, st, epi, swap, arch, version)
        except Unbuildable:
            continue
        except CannotPredict:
            pytest.skip(f"no rules for CUTLASS {version}")
        return family, (m, n, k), schedule, st, epi, swap, arch


def _random_engine_config(rng: random.Random):
    """A flashinfer-moe config the engine builds and the model answers: a random arch, tactic, dtype pair, epilogue
    and swap from the installed flashinfer's own tactics."""
    from tileprobe.families import FAMILIES as FAMS, expand_configs

    fam = FAMS["flashinfer-moe"]
    cfgs = [c for c in expand_configs(fam, rng.choice(fam.archs)) if not c.unsupported_reason]
    rng.shuffle(cfgs)
    for c in cfgs:
        try:
            predict("flashinfer-moe", (c.tile.m, c.tile.n, c.tile.k), c.schedule, 0, c.epilogue, c.swap_ab, c.arch,
                    dtypes=c.get("dtypes"), cluster=c.cluster, engine=fam.engine()[0])
        except (Unbuildable, CannotPredict):  # not buildable, or a shape the model was never checked on
            continue
        return c
    pytest.fail("no flashinfer-moe config the model answers")


@pytest.mark.nvcc
def test_random_configs_against_nvcc(toolchain, rng):
    """Random configs of every family (the rng fixture's seed, printed, new each run), compiled and sized by nvcc,
    against the model."""
    from tileprobe.families import FAMILIES as FAMS, Config, Tile
    from tileprobe.backends.cutlass.static_probe import probe_static
    from tileprobe.sweep import make_toolchain
    from tileprobe.targets import profile
    from tileprobe.verdict import Verdict

    version = toolchain.cutlass.version
    picks = [_random_config(rng, version) for _ in range(2)]
    print("configs", picks)
    jobs = []
    for family in sorted({p[0] for p in picks}):
        mine = [p for p in picks if p[0] == family]
        configs = [Config(family, Tile(*t), sched, st, epi, swap, arch) for _, t, sched, st, epi, swap, arch in mine]
        jobs.append((configs, toolchain, [dict(pick=p, args=p, kw={}) for p in mine]))
    engine = _random_engine_config(rng)
    print("engine config", engine.name)
    etc = make_toolchain(None, None, str(toolchain.cache), FAMS["flashinfer-moe"])  # the engine's own CUTLASS
    jobs.append(([engine], etc, [dict(pick=engine.name, args=("flashinfer-moe", (engine.tile.m, engine.tile.n,
                 engine.tile.k), engine.schedule, 0, engine.epilogue, engine.swap_ab, engine.arch),
                 kw=dict(dtypes=engine.get("dtypes"), cluster=engine.cluster,
                         engine=FAMS["flashinfer-moe"].engine()[0], cutlass_hash=etc.cutlass.tree_hash))]))
    for configs, tc, wants in jobs:
        target = profile("h200" if configs[0].arch == "sm_90a" else "rtx-pro-6000")
        outs = probe_static(configs, target, tc.cutlass, tc.nvcc, tc.cache, jobs=1, timeout_s=1800)
        for w, out in zip(wants, outs):
            assert out.verdict in (Verdict.FITS, Verdict.SMEM_OVER_LIMIT), (w["pick"], out.reason)
            p = predict(*w["args"], cutlass_version=tc.cutlass.version, **w["kw"])
            got = {c: getattr(p, c) for c in COLUMNS}
            want = {c: getattr(out.info, c) for c in COLUMNS}
            assert got == want, w["pick"]
