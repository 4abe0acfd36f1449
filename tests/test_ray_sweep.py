"""`tileprobe sweep --ray`: a local Ray cluster started here (2 CPUs, no GPU) runs a static sweep (the real CLI and
nvcc, building a tiny describe harness: the subject is Ray, not CUTLASS; see the `cluster` fixture) as 2 shard tasks; the merged folder equals the same sweep without Ray; a task killed mid-sweep loses no finished row and
`--resume` re-runs that shard alone; a task killed after its first rows are on disk keeps them byte for byte, and
`--resume` neither rebuilds nor rewrites them and completes the shard. Without Ray installed, `--ray` is one line
and exit 2."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tileprobe.backends.cutlass.static_probe import configs_per_tu
from tileprobe.families import FAMILIES
from tileprobe.ray_sweep import SHARD_JSON, shard_dir
from tileprobe.results.writer import load_rows, row_key

from _tiny_harness import write_tiny_harness


def tileprobe(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tileprobe", *args], capture_output=True, text=True, timeout=1800,
                          **kw)


def ident(rows):
    return [(row_key(r), r["config"], r["verdict"], r["smem_bytes"], r["stages"]) for r in rows]


def test_ray_missing_is_one_line_and_exit_2(tmp_path):
    # the package as it is, with `ray` made unimportable (sys.modules[name] = None: find_spec answers None)
    code = ("import sys; sys.modules['ray'] = None; sys.argv = ['tileprobe'] + sys.argv[1:]; "
            "from tileprobe.cli import main; main()")
    p = subprocess.run([sys.executable, "-c", code, "sweep", "--ray", "local", "--predict-only", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == ["tileprobe: error: --ray needs Ray, an optional extra: pip install "
                                             "'tileprobe[ray]'"]
    assert not (tmp_path / "o" / "results.jsonl").exists()


UNIT = 3  # configs per sizes-only unit in these sweeps (TILEPROBE_CONFIGS_PER_TU; the default is 32)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster of this test's own: 2 CPUs, no GPU. The CLI joins it by its address. Its workers (and the
    tests' plain sweeps) build sizes-only units of UNIT configs, not 32, of a tiny describe harness
    (tests/_tiny_harness.py, TILEPROBE_HARNESS_DIR), not CUTLASS's: the subject here is Ray's sharding, kills and
    resumes, which need several real nvcc units, not large ones (the unit size's own effect is tests/backends/cutlass/
    test_static_probe.py's; CUTLASS's sizes are the static probe's and the known-good check's)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tileprobe[ray]'; CI installs it)")
    env = {"TILEPROBE_CONFIGS_PER_TU": str(UNIT),
           "TILEPROBE_HARNESS_DIR": str(write_tiny_harness(tmp_path_factory.mktemp("tiny-harness")))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # inherited by the workers ray.init starts and by the tests' own sweeps
    try:
        ctx = ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
        yield ctx.address_info["gcs_address"]
        ray.shutdown()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_bad_input_with_ray_is_one_line(tmp_path, cluster):
    for extra, word in ((["--gpus", "0"], "--gpus"), (["--shard", "0/2"], "--shard"), (["--tiles", "7x7"], "7x7"),
                        (["--ray-shards", "0"], "--ray-shards")):
        p = tileprobe("sweep", "--ray", cluster, "--static-only", "--target", "rtx-pro-6000", "--out",
                      str(tmp_path / "o"), *extra)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and word in p.stderr, p.stderr
    p = tileprobe("sweep", "--ray-shards", "2", "--predict-only", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "--ray-shards applies with --ray only" in p.stderr, p.stderr


@pytest.mark.nvcc
def test_ray_sweep_equals_the_plain_sweep_and_a_killed_task_resumes(tmp_path, cluster, toolchain, rng):
    """Two shard tasks of one config each (one tile, both schedules), both compiling at once on the 2 CPUs; the
    first to start is killed while it compiles. The plain sweep the merged rows are held to builds its configs one
    per unit (TILEPROBE_CONFIGS_PER_TU=1 in its environment): the very units the shards built, so it is served from
    the cache, and the test says so (no entry is added). That a unit's size changes no byte is held by the
    known-good check (tests/results/test_known_good.py), which re-sizes each committed file in one unit."""
    tile = rng.choice(list(FAMILIES["sm120-nvfp4"].default_tiles))
    cache = tmp_path / "cold-cache"  # cold: the killed task is certainly compiling when it is killed
    common = ["sweep", "--static-only", "--target", "rtx-pro-6000", "--family", "sm120-nvfp4", "--tiles", tile,
              "--schedules", "cooperative,pingpong", "--jobs", "1", "--cache-dir", str(cache)]
    out = tmp_path / "ray"
    n = 2  # two shard tasks of one config each (one unit each)
    n_configs = 2

    # 1. the shard tasks; kill the first task that starts, while it compiles
    drv = subprocess.Popen([sys.executable, "-m", "tileprobe", *common, "--ray", cluster, "--ray-shards", str(n),
                            "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 900
    while victim is None and time.monotonic() < deadline and drv.poll() is None:
        for i in range(n):
            f = shard_dir(out, i, n) / SHARD_JSON
            if f.is_file():
                info = json.loads(f.read_text())
                if not info["complete"]:
                    victim = (i, info["pid"])
                    kids = _descendants(info["pid"])  # its nvcc: killed with it, not left compiling
                    os.kill(info["pid"], signal.SIGKILL)
                    for v in kids:
                        try:
                            os.kill(v, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    break
        time.sleep(0.05)
    stdout, stderr = drv.communicate(timeout=1800)
    assert victim is not None, stdout + stderr
    k = victim[0]
    assert drv.returncode == 1, stdout + stderr
    assert f"shard {k}/{n} failed" in stdout and "--resume" in stdout, stdout
    killed = shard_dir(out, k, n)
    assert not json.loads((killed / SHARD_JSON).read_text())["complete"]
    assert not (killed / "results.jsonl").is_file() or load_rows(killed) == []  # it died before writing a row
    finished = {i: (shard_dir(out, i, n) / "results.jsonl").read_text() for i in range(n) if i != k}
    stamps = {i: (shard_dir(out, i, n) / SHARD_JSON).read_text() for i in finished}
    partial = load_rows(out)  # the finished shard(s), merged
    assert len(partial) == n_configs - n_configs // n

    # 2. --resume: only the killed shard runs again; the set is complete, no duplicate anywhere
    p = tileprobe(*common, "--ray", cluster, "--out", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{n - 1} complete from the earlier run" in p.stdout, p.stdout
    for i, text in finished.items():  # the finished shards were not run again: their files are as they were
        assert (shard_dir(out, i, n) / "results.jsonl").read_text() == text
        assert (shard_dir(out, i, n) / SHARD_JSON).read_text() == stamps[i]
    assert json.loads((killed / SHARD_JSON).read_text())["complete"]
    resumed = load_rows(out)
    keys = [row_key(r) for r in resumed]
    assert len(keys) == len(set(keys)) == n_configs

    # 3. the same sweep without Ray holds the same rows, in the same order; one config per unit, so its units are
    # the shards' and the cache serves them all
    built = _entries(cache)
    p = tileprobe(*common, "--out", str(tmp_path / "plain"), env=dict(os.environ, TILEPROBE_CONFIGS_PER_TU="1"))
    assert p.returncode == 0, p.stderr
    assert _entries(cache) == built, "the plain sweep compiled a unit the shards had not"
    plain = load_rows(tmp_path / "plain")
    assert len(plain) == n_configs
    assert ident(resumed) == ident(plain)
    # the rows merged after the kill were the final ones: every shard's but the killed one's (configs j % n == k)
    assert sorted(ident(partial)) == sorted(ident([r for j, r in enumerate(plain) if j % n != k]))

    # 4. the resumed folder is laid out as an uninterrupted --ray sweep's: each shard folder holds its configs
    # j % n == i, in order (the killed one's written afresh by --resume)
    for i in range(n):
        assert [r["config"] for r in load_rows(shard_dir(out, i, n))] == [r["config"] for r in plain[i::n]]
    # a shard's run.json records the plain command of that shard; run as recorded, it gives the shard's rows (the
    # shard that was never killed: its run.json is the first call's)
    keep = shard_dir(out, (k + 1) % n, n)
    cmd = json.loads((keep / "run.json").read_text())["command"]
    words = shlex.split(cmd)
    assert words[:2] == ["tileprobe", "sweep"] and "--ray" not in words and "--ray-shards" not in words, cmd
    assert words[words.index("--shard") + 1] == f"{(k + 1) % n}/{n}" and words[words.index("--out") + 1] == str(keep), cmd
    again = tmp_path / "again"
    words[words.index("--out") + 1] = str(again)
    p = tileprobe(*words[1:])
    assert p.returncode == 0, p.stderr
    assert ident(load_rows(again)) == ident(load_rows(keep))
    meta = json.loads((out / "run.json").read_text())
    assert len(meta["merged_from"]) == n and meta["configs"] == n_configs
    assert json.loads((out / "ray.json").read_text())["shards"] == n


def _descendants(pid: int) -> list[int]:
    """The processes a task started (its nvcc and their children), from /proc: killed with it, so the test's own
    orphans do not keep compiling."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
        for k in kids:
            out += [k, *_descendants(k)]
    return out


def _entries(cache: Path) -> dict[str, tuple[str, int | None]]:
    """Finished build-cache entries: name -> (meta.json text, the binary's mtime in ns)."""
    got = {}
    for meta in cache.glob("*/meta.json"):
        if meta.parent.name.startswith(".tmp-"):
            continue
        binary = meta.parent / "harness"
        got[meta.parent.name] = (meta.read_text(), binary.stat().st_mtime_ns if binary.is_file() else None)
    return got


@pytest.mark.nvcc
def test_a_task_killed_after_its_first_rows_keeps_them_and_resume_completes(tmp_path, cluster, toolchain, rng):
    """Rows land as each sizes-only unit is described, not when the shard ends: kill the task once its folder holds
    a row; those rows survive byte for byte, --resume does not rebuild their unit, and it completes the shard."""
    tiles = rng.sample(list(FAMILIES["sm120-nvfp4"].default_tiles), 2)
    # 2 tiles x 2 schedules x one epilogue (random) = 4 configs: more than one unit holds (UNIT), so two units of 2,
    # built one after the other (--jobs 1); the first unit's rows are on disk while the second compiles
    epilogue = rng.choice(["no-c", "with-c"])
    n_configs = len(tiles) * 2
    assert n_configs > UNIT and configs_per_tu() == UNIT
    cache = tmp_path / "cold-cache"
    common = ["sweep", "--static-only", "--target", "rtx-pro-6000", "--family", "sm120-nvfp4", "--tiles",
              ",".join(tiles), "--schedules", "cooperative,pingpong", "--epilogue", epilogue, "--jobs", "1",
              "--cache-dir", str(cache)]
    out = tmp_path / "ray"
    folder = shard_dir(out, 0, 1)
    jsonl = folder / "results.jsonl"

    drv = subprocess.Popen([sys.executable, "-m", "tileprobe", *common, "--ray", cluster, "--ray-shards", "1",
                            "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = False
    deadline = time.monotonic() + 1500
    while not killed and time.monotonic() < deadline and drv.poll() is None:
        if jsonl.is_file() and "\n" in jsonl.read_text():  # at least one whole row on disk
            info = json.loads((folder / SHARD_JSON).read_text())
            assert not info["complete"], "the shard finished before the test saw its first row"
            victims = [info["pid"], *_descendants(info["pid"])]
            os.kill(info["pid"], signal.SIGKILL)
            for v in victims[1:]:
                try:
                    os.kill(v, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed = True
        time.sleep(0.05)
    stdout, stderr = drv.communicate(timeout=1800)
    assert killed, stdout + stderr
    assert drv.returncode == 1 and "shard 0/1 failed" in stdout and "--resume" in stdout, stdout + stderr
    assert not json.loads((folder / SHARD_JSON).read_text())["complete"]
    before = jsonl.read_text()
    kept = load_rows(folder)
    assert 1 <= len(kept) < n_configs, len(kept)  # some rows, not all: it died mid-shard
    assert before.endswith("\n")
    assert ident(load_rows(out)) == ident(kept)  # the driver merged what the killed task had written
    built = _entries(cache)  # the unit(s) whose rows are on disk, finished before the kill
    assert built

    p = tileprobe(*common, "--ray", cluster, "--out", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads((folder / SHARD_JSON).read_text())["complete"]
    after = jsonl.read_text()
    assert after.startswith(before)  # the rows that survived the kill: the same bytes, not written again
    for name, entry in built.items():  # and their unit was served from the cache, not compiled again
        assert _entries(cache)[name] == entry, name
    assert len(_entries(cache)) > len(built)  # the unit the kill cut short was compiled by --resume
    resumed = load_rows(out)
    keys = [row_key(r) for r in resumed]
    assert len(keys) == len(set(keys)) == n_configs
    assert ident(resumed[:len(kept)]) == ident(kept)

    # the same sweep without Ray (the same units, so from the cache): the same rows in the same order
    p = tileprobe(*common, "--out", str(tmp_path / "plain"))
    assert p.returncode == 0, p.stderr
    assert ident(load_rows(tmp_path / "plain")) == ident(resumed)
