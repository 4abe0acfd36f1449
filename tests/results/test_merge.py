"""`tileprobe merge`: shards of a real sweep join into the unsharded sweep's rows; conflicting toolchains are
refused unless forced; duplicates are dropped. The sweeps here are `--predict-only` (rows from tileprobe's model,
evidence `predicted`, nothing compiled): the subject is the merge, which reads rows and their run.json the same way
whatever made them; the compiled sharded path is tests/test_ray_sweep.py's and tests/test_slurm_recipe.py's."""

import json
import subprocess
import sys

from _synth import TC, add_runtime, make_static, meta_for, write_set

from tileprobe.families import FAMILIES
from tileprobe.results.writer import load_rows, row_key


def tileprobe(*args, env=None):
    p = subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=1800,
                       env=env)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def test_merged_shards_equal_the_unsharded_sweep(tmp_path, rng):
    fam = FAMILIES["sm120-nvfp4"]
    tiles = rng.sample(list(fam.default_tiles), rng.choice([2, 3]))
    n = rng.choice([2, 3])  # shards
    common = ["sweep", "--predict-only", "--target", "rtx-pro-6000", "--family", "sm120-nvfp4", "--tiles",
              ",".join(tiles), "--schedules", "cooperative,pingpong"]
    p = tileprobe(*common, "--out", str(tmp_path / "full"))
    assert p.returncode == 0, p.stderr
    for i in range(n):
        p = tileprobe(*common, "--shard", f"{i}/{n}", "--out", str(tmp_path / f"s{i}"))
        assert p.returncode == 0, p.stderr
    report = (tmp_path / "full" / "report.md").read_text()  # every sweep writes its report
    assert "Evidence: static only — predicted (predicted by the model for sm_120a; nothing compiled)" in report
    assert (tmp_path / "full" / "smem__rtx-pro-6000.png").read_bytes()[:4] == b"\x89PNG"
    full = load_rows(tmp_path / "full")
    shards = [load_rows(tmp_path / f"s{i}") for i in range(n)]
    assert len(full) == 2 * len(tiles) and sum(map(len, shards)) == len(full) and all(shards)
    assert {r["evidence"] for r in full} == {"predicted"}
    # merged in an order that is not the shards' own: the unsharded order comes back
    order = rng.sample(range(n), n)
    p = tileprobe("merge", *[str(tmp_path / f"s{i}") for i in order], "--out", str(tmp_path / "m"))
    assert p.returncode == 0, p.stderr
    merged = load_rows(tmp_path / "m")

    def ident(rows):
        return [(row_key(r), r["verdict"], r["smem_bytes"], r["stages"]) for r in rows]

    assert ident(merged) == ident(full)  # same rows, and back in the unsharded order
    meta = json.loads((tmp_path / "m" / "run.json").read_text())
    assert len(meta["merged_from"]) == n and meta["target"]["smem_optin"] == 101376
    assert (tmp_path / "m" / "report.md").is_file() and (tmp_path / "m" / "results.csv").is_file()
    # merging a shard with the full sweep drops the duplicates
    p = tileprobe("merge", str(tmp_path / "full"), str(tmp_path / "s0"), "--out", str(tmp_path / "m2"))
    assert p.returncode == 0 and f"{len(shards[0])} duplicate(s) dropped" in p.stdout, p.stdout
    assert ident(load_rows(tmp_path / "m2")) == ident(full)


def test_conflicting_toolchains_are_refused_unless_forced(tmp_path, rng):
    a_rows = make_static(rng, tiles=["128x128x128", "128x64x128"])
    other = dict(TC, nvcc_version="12.9.41")
    b_rows = [dict(r, **other) for r in make_static(rng, tiles=["128x256x128"])]
    a = write_set(tmp_path / "a", a_rows, meta_for())
    b = write_set(tmp_path / "b", b_rows, meta_for(tc=other))
    p = tileprobe("merge", str(a), str(b), "--out", str(tmp_path / "m"))
    assert p.returncode == 2 and "refusing to merge" in p.stderr and "12.9.41" in p.stderr and "--force" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "m" / "results.jsonl").exists()
    p = tileprobe("merge", str(a), str(b), "--out", str(tmp_path / "m", ), "--force")
    assert p.returncode == 0, p.stderr
    rows = load_rows(tmp_path / "m")
    assert len(rows) == len(a_rows) + len(b_rows)
    assert "2 different toolchains" in (tmp_path / "m" / "report.md").read_text()


def test_sweeps_from_different_gpus_keep_both(tmp_path, rng):
    sa = make_static(rng, tiles=["128x128x128", "128x64x128"])
    sb = make_static(rng, tiles=["128x128x128", "128x64x128"], target="rtx-5090")
    a = write_set(tmp_path / "a", sa + add_runtime(rng, sa, batches=(1, 8)), meta_for())
    b = write_set(tmp_path / "b", sb + add_runtime(rng, sb, batches=(1, 8)), meta_for("rtx-5090"))
    p = tileprobe("merge", str(a), str(b), str(a), "--out", str(tmp_path / "m"))
    assert p.returncode == 2 and "named twice" in p.stderr
    p = tileprobe("merge", str(a), str(b), "--out", str(tmp_path / "m"))
    assert p.returncode == 0, p.stderr
    rows = load_rows(tmp_path / "m")
    assert sorted(row_key(r) for r in rows) == sorted(row_key(r) for r in load_rows(a) + load_rows(b))
    meta = json.loads((tmp_path / "m" / "run.json").read_text())
    assert sorted(t["name"] for t in meta["targets"]) == ["rtx-5090", "rtx-pro-6000"] and meta["target"] is None
    report = (tmp_path / "m" / "report.md").read_text()
    assert "## Verdicts on rtx-pro-6000" in report and "## Verdicts on rtx-5090" in report
