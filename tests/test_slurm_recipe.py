"""The SLURM job array of docs/commands.md (linked from the README), run as written: each `tileprobe` line of its
block with SLURM_ARRAY_TASK_ID set to every index of `#SBATCH --array`, then its merge line; the merged folder
equals the unsharded sweep.

The sweep line gets the options that keep it cheap and GPU-free here (a predicted static sweep: the rows under test
are the shard arithmetic and the merge, which the model's rows exercise exactly like compiled ones)."""

import glob
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tileprobe.families import FAMILIES
from tileprobe.results.writer import load_rows, row_key

DOC = Path(__file__).resolve().parent.parent / "docs" / "commands.md"


def recipe() -> tuple[list[int], list[str]]:
    """The task ids of `#SBATCH --array=a-b` and the tileprobe lines of the docs block that holds it."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    block = next(b for b in blocks if "#SBATCH --array" in b)
    a, b = re.search(r"#SBATCH --array=(\d+)-(\d+)", block).groups()
    return list(range(int(a), int(b) + 1)), [line for line in block.splitlines() if line.startswith("tileprobe ")]


def argv(line: str, env: dict, cwd: Path, extra: list[str]) -> list[str]:
    words = shlex.split(os.path.expandvars(line.replace("${SLURM_ARRAY_TASK_ID}", env.get("SLURM_ARRAY_TASK_ID", ""))))
    out = []
    for w in words[1:]:
        out += sorted(os.path.relpath(p, cwd) for p in glob.glob(str(cwd / w))) if "*" in w else [w]
    return [sys.executable, "-m", "tileprobe", *out, *(extra if words[1] == "sweep" else [])]


def test_readme_slurm_array_merges_to_the_unsharded_sweep(tmp_path, rng):
    ids, lines = recipe()
    sweep_line = next(line for line in lines if line.startswith("tileprobe sweep"))
    merge_line = next(line for line in lines if line.startswith("tileprobe merge"))
    tiles = rng.sample(list(FAMILIES["sm120-nvfp4"].default_tiles), 4)
    extra = ["--predict-only", "--target", "rtx-pro-6000", "--family", "sm120-nvfp4", "--tiles", ",".join(tiles),
             "--schedules", "cooperative,pingpong", "--epilogue", "no-c,with-c"]
    for task_id in ids:  # each array task, as SLURM would start it: only the variable differs
        env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task_id))
        p = subprocess.run(argv(sweep_line, env, tmp_path, extra), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr
    shards = sorted(tmp_path.glob("runs/shard-*"))
    assert [s.name for s in shards] == [f"shard-{i}" for i in ids]
    p = subprocess.run(argv(merge_line, {}, tmp_path, []), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"merged {len(ids)} folder(s)" in p.stdout
    full = tmp_path / "full"
    p = subprocess.run([sys.executable, "-m", "tileprobe", "sweep", *extra, "--out", str(full)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    merged, plain = load_rows(tmp_path / "runs" / "all"), load_rows(full)
    assert len(plain) == 4 * 2 * 2
    assert sum(len(load_rows(s)) for s in shards) == len(plain)
    ident = [(row_key(r), r["verdict"], r["smem_bytes"], r["stages"]) for r in plain]
    assert [(row_key(r), r["verdict"], r["smem_bytes"], r["stages"]) for r in merged] == ident
