"""`tileprobe recommend`: batch-size buckets -> the fastest verified-correct tile and its runner-up."""

import json
import subprocess
import sys

from dataclasses import replace

from _synth import TC, add_runtime, make_static, meta_for, write_set

from tileprobe.results import resultset
from tileprobe.families import FAMILIES, expand_configs
from tileprobe.reports.recommend import FORMAT, buckets, lookup, recommend_document
from tileprobe.results.rows import Outcome, StaticInfo, make_row
from tileprobe.targets import profile
from tileprobe.verdict import Verdict
from tileprobe.workloads import points_for


def tileprobe(*args):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=300)


def test_buckets_cover_every_batch_size_once(rng):
    for _ in range(30):
        measured = sorted(set(rng.sample(range(1, 2049), rng.randint(1, 8))))
        bs = buckets(measured)
        assert [b[3] for b in bs] == measured and bs[0][1] == 1 and bs[-1][2] is None
        for n in range(1, measured[-1] + 50):
            owners = [b for b in bs if b[1] <= n and (b[2] is None or n <= b[2])]
            assert len(owners) == 1
            want = max((m for m in measured if m <= n), default=measured[0])
            assert owners[0][3] == want


def test_best_and_runner_up_are_the_two_fastest_ok_rows(tmp_path, rng):
    static = make_static(rng, tiles=["128x128x128", "128x256x128", "128x64x128", "128x32x128"],
                         epilogues=("no-c", "with-c"))
    batches = sorted(rng.sample([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], 4))
    runtime = add_runtime(rng, static, batches=batches, fail_rate=0.3)
    for r in runtime:  # failures that look fast must not be picked
        if r["verdict"] != "ok" and r.get("us_median") is not None:
            r["us_median"] = 0.01
        r["us_spread"] = 0.0  # no ties here (test_ties_... covers them)
    folder = write_set(tmp_path / "s", static + runtime, meta_for())
    out = tmp_path / "rec.json"
    p = tileprobe("recommend", str(folder), "--out", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == FORMAT and doc["epilogue"] == "no-c" and doc["target"]["smem_optin"] == 101376
    per = doc["workloads"]["qwen3-30b-a3b"]
    for gemm in ("gate_up", "down"):
        assert [b["measured_batch"] for b in per[gemm].values()] == batches
        for name, b in per[gemm].items():
            ok = sorted((r for r in runtime if r["gemm"] == gemm and r["batch"] == b["measured_batch"]
                         and r["epilogue"] == "no-c" and r["verdict"] == "ok"), key=lambda r: r["us_median"])
            assert (b["best"] or {}).get("config") == (ok[0]["config"] if ok else None)
            assert (b["runner_up"] or {}).get("config") == (ok[1]["config"] if len(ok) > 1 else None)
            if ok:
                best = b["best"]
                assert best["us_median"] == ok[0]["us_median"] and best["stages"] == "auto"
                assert best["stages_resolved"] == ok[0]["stages"] and best["tile_bytes_k"] == ok[0]["tile_bytes_k"]
                n = rng.randint(b["min_batch"], b["max_batch"] or b["min_batch"] + 1000)
                assert lookup(doc, "qwen3-30b-a3b", gemm, n) == best
    p = tileprobe("recommend", str(folder), "--epilogue", "with-c")
    assert p.returncode == 0 and json.loads(p.stdout)["epilogue"] == "with-c"


def test_static_only_results_are_refused_in_one_line(tmp_path, rng):
    folder = write_set(tmp_path / "s", make_static(rng, tiles=["128x128x128"]), meta_for())
    p = tileprobe("recommend", str(folder))
    assert p.returncode == 2 and "no runtime rows" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    static = make_static(rng, tiles=["128x128x128"])
    for r in static:  # fitting tiles, so the sweep has runtime rows (only the routing is wrong)
        r.update(verdict="fits", smem_bytes=90112, headroom_bytes=101376 - 90112)
    folder = write_set(tmp_path / "r", static + add_runtime(rng, static, batches=(1, 8), fail_rate=0), meta_for())
    p = tileprobe("recommend", str(folder), "--routing", "skewed")
    assert p.returncode == 2 and "--routing 'skewed'" in p.stderr


def test_ties_are_broken_by_the_stated_rule_whatever_the_measured_order(rng):
    """Two tiles whose medians lie within each other's spread are a tie: the smaller SharedStorage wins in every
    sweep, whichever was measured faster this time."""
    from tileprobe.results.resultset import rank

    base = rng.uniform(50, 500)
    small = {"config": "b_small", "us_median": base, "us_spread": base * 0.02, "smem_bytes": 60000}
    big = {"config": "a_big", "us_median": base, "us_spread": base * 0.02, "smem_bytes": 90000}
    slow = {"config": "c_slow", "us_median": base * 1.5, "us_spread": base * 0.01, "smem_bytes": 1000}
    for _ in range(10):
        jitter = rng.uniform(-0.01, 0.01) * base
        runs = [dict(small, us_median=base + jitter), dict(big, us_median=base - jitter), slow]
        rng.shuffle(runs)
        ranked = rank(runs)
        assert [r["config"] for r in ranked] == ["b_small", "a_big", "c_slow"]
        assert ranked[0]["tie_with"] == ["a_big"]
    apart = rank([dict(small, us_median=base * 1.2), big, slow])
    assert [r["config"] for r in apart][:2] == ["a_big", "b_small"] and "tie_with" not in apart[0]


def test_a_recommended_tile_round_trips_to_the_exact_config_measured(tmp_path, rng):
    """Cluster and the family's extra fields (dtypes, tactic) are kept: config_from_entry(best) is the measured
    config, for every bucket. flashinfer-moe's SM90 tactics carry clusters other than 1x1x1."""
    arch, target = rng.choice([("sm_90a", "h200"), ("sm_120a", "rtx-pro-6000")])
    configs = [c for c in expand_configs(FAMILIES["flashinfer-moe"], arch) if not c.unsupported_reason]
    if arch == "sm_90a":  # make sure a non-1x1x1 cluster can win
        configs = [c for c in configs if c.cluster != (1, 1, 1)] + rng.sample(configs, 3)
    configs = rng.sample(configs, min(len(configs), 8))
    dev = replace(profile(target), gpu_index=0)
    points = points_for(["qwen3-30b-a3b"], None, sorted(rng.sample([1, 4, 16, 64, 256], 3)), "uniform", 1, 1, 3)
    rows = []
    for c in configs:
        info = StaticInfo(stages=rng.randint(2, 6), smem_bytes=rng.randrange(40000, dev.smem_optin, 1024),
                          threads_per_cta=384)
        rows.append(make_row(c, profile(target), TC, Outcome(c, Verdict.FITS, "sized", info)))
        for p in points:
            rows.append(make_row(c, dev, TC, Outcome(c, Verdict.OK, "verified", info),
                                 {"gpu_index": 0, "us_median": round(rng.uniform(5, 500), 3), "us_spread": 0.0,
                                  "seed": 3}, p.columns()))
    meta = meta_for(target)
    meta["family"] = "flashinfer-moe"
    folder = write_set(tmp_path / "s", rows, meta)
    doc = recommend_document(resultset.load(folder), epilogue=rng.choice(sorted({c.epilogue for c in configs})))
    measured = {c.key for c in configs}
    seen = 0
    for per in doc["workloads"].values():
        for buckets_ in per.values():
            for b in buckets_.values():
                for tile in (b["best"], b["runner_up"]):
                    if tile:
                        cfg = resultset.config_from_entry(tile)
                        assert cfg.key == tile["config"] and cfg.key in measured, (cfg.key, tile["config"])
                        assert tile["cluster"] == "x".join(map(str, cfg.cluster))
                        assert tile["dtypes"] and tile["tactic"]
                        seen += 1
    assert seen
