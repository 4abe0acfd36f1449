"""`tileprobe diff`: exactly the verdicts that changed, the sizes that moved and the timings beyond noise."""

import json
import subprocess
import sys
from pathlib import Path

from _synth import TC, add_runtime, make_static, meta_for, write_set

from tileprobe.reports import compare
from tileprobe.results import resultset
from tileprobe.results.writer import row_key


def test_diff_finds_exactly_what_moved(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128", "128x32x128"],
                         epilogues=("no-c", "with-c"))
    runtime = [r for r in add_runtime(rng, static, batches=(1, 8, 32), fail_rate=0.0)]
    a_rows = static + runtime
    b_rows = [dict(r, cutlass_version="4.6.0") for r in a_rows]
    b_static = [r for r in b_rows if not r.get("workload")]
    b_runtime = [r for r in b_rows if r.get("workload")]
    flip = rng.sample(b_static, 2)
    for r in flip:
        r["verdict"] = "compile-error" if r["verdict"] != "compile-error" else "fits"
    moved = rng.sample([r for r in b_static if r not in flip], 3)
    for r in moved:
        r["smem_bytes"] += rng.choice([-1, 1]) * rng.randrange(16, 4096, 16)
    timed = [r for r in b_runtime if r["us_median"] is not None]
    slow = rng.sample(timed, 4)
    spread_a = {row_key(r): r for r in runtime}
    for r in slow:  # beyond the band: more than the larger spread of the two
        band = max(r["us_spread"], spread_a[row_key(r)]["us_spread"])
        r["us_median"] = round(r["us_median"] + band * rng.uniform(1.5, 5) + 0.01, 3)
    quiet = rng.sample([r for r in timed if r not in slow], 4)
    for r in quiet:  # inside the band: noise, not a change
        r["us_median"] = round(r["us_median"] + r["us_spread"] * rng.uniform(-0.9, 0.9), 3)
    b_rows.append(dict(static[0], config=static[0]["config"].replace("noswap", "swap"), swap_ab=True))
    a = resultset.load(write_set(tmp_path / "a", a_rows, meta_for()))
    b = resultset.load(write_set(tmp_path / "b", b_rows, meta_for(tc=dict(TC, cutlass_version="4.6.0"))))
    d = compare.diff(a, b)
    assert {row_key(x) for x, _ in d.verdicts} == {row_key(r) for r in flip}
    assert {row_key(x) for x, _ in d.smem} == {row_key(r) for r in moved}
    assert {row_key(x) for x, _, _ in d.timing} == {row_key(r) for r in slow}
    assert len(d.only_b) == 1 and not d.only_a
    assert d.same == len(a_rows) - len(flip) - len(moved) - len(slow)
    text = compare.render(d)
    assert "4.5.0" in text and "4.6.0" in text
    assert f"{len(flip)} verdict(s) changed, {len(moved)} SharedStorage size(s) moved, {len(slow)} timing(s)" in text
    for r in moved:
        old = next(x for x in static if x["config"] == r["config"])
        assert f"| {r['smem_bytes'] - old['smem_bytes']} " in text


def test_missing_spread_uses_three_percent():
    a = {"us_median": 100.0, "us_spread": None}
    assert compare.noise_band(a, {"us_median": 102.0, "us_spread": 1.0}) == 3.0
    assert compare.noise_band({"us_median": 100.0, "us_spread": 0.5}, {"us_median": 90.0, "us_spread": 2.0}) == 2.0


def test_diff_across_targets_matches_configs(tmp_path, rng):
    make_a = make_static(rng, tiles=["128x128x128", "128x64x128"])
    a = write_set(tmp_path / "a", make_a, meta_for())
    rows_b = make_static(rng, tiles=["128x128x128", "128x64x128"], target="dgx-spark-gb10")
    b = write_set(tmp_path / "b", rows_b, meta_for("dgx-spark-gb10"))
    p = subprocess.run([sys.executable, "-m", "tileprobe", "diff", str(a), str(b), "--out", str(tmp_path / "d.md")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Compared across targets (rtx-pro-6000 vs dgx-spark-gb10)" in p.stdout
    assert (tmp_path / "d.md").read_text() == p.stdout
    # sm_120a and sm_121a builds of the same config are matched
    assert "0 only in A, 0 only in B" in p.stdout
    d = compare.diff(resultset.load(a), resultset.load(b))
    # a SharedStorage move is a size or a stage count that differs (the draws can give the same bytes at other stages)
    moved = {x["config"] for x, y in zip(make_a, rows_b)
             if (x["smem_bytes"], x["stages"]) != (y["smem_bytes"], y["stages"])}
    assert {ra["config"] for ra, _ in d.smem} == moved


def test_diff_across_engines_sets_each_sides_variants_of_a_shared_tile(rng):
    """vllm-moe vs flashinfer-moe on one target: no config matches by name, so the diff lists, per tile both engines
    size, every static row of each side (read here straight from the committed files), and nothing for a tile only
    one side has. Two folders of the same engine get no such section."""
    root = Path(__file__).resolve().parents[2] / "results" / "static"
    target = rng.choice(["rtx-pro-6000", "rtx-5090", "dgx-spark-gb10"])
    fa, fb = root / f"{target}__vllm-moe", root / f"{target}__flashinfer-moe"
    rows = {f: [json.loads(x) for x in (f / "results.jsonl").read_text().splitlines() if x.strip()] for f in (fa, fb)}
    tiles = {f: {r["tile"] for r in rs if not r.get("workload")} for f, rs in rows.items()}
    shared = tiles[fa] & tiles[fb]
    assert shared, tiles  # the committed folders share 128x128x128
    d = compare.diff(resultset.load(fa), resultset.load(fb))
    assert {t.split(" on ")[0] for t, _, _ in d.engines} == shared
    for t, ra, rb in d.engines:
        tile = t.split(" on ")[0]
        for f, side in ((fa, ra), (fb, rb)):
            want = sorted(r["config"] for r in rows[f] if r["tile"] == tile and not r.get("workload"))
            assert sorted(r["config"] for r in side) == want
    text = compare.render(d)
    assert "Across engines" in text
    for r in rows[fa]:
        assert str(r["smem_bytes"]) in text and r["engine"] in text
    same = compare.diff(resultset.load(fb), resultset.load(fb))
    assert same.engines == [] and "Across engines" not in compare.render(same)
