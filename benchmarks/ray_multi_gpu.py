"""The default runtime sweep through `--ray local` (a Ray head started on this machine, one task per GPU) against the
same sweep on `--gpus 0,1` (tileprobe's own workers), same seed, on a warm build cache.

Checks that the two result sets hold the same rows (configs, points, verdicts; timings within noise), that the Ray
tasks ran on different GPUs at the same time (each shard's shard.json: its GPU and its start/finish), and, with
--kill-after, that SIGKILL of one Ray task mid-sweep loses none of its finished rows and `--resume` re-runs only
that shard, completing the set with no duplicate. Run on the GPU machine:
PYTHONPATH=$PWD python3 benchmarks/ray_multi_gpu.py --save DIR
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from multi_gpu import env, rows, timed  # noqa: E402  (the same runner and row reader as the --gpus benchmark)


def cmd(out: Path, seed: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tileprobe", "sweep", "--seed", str(seed), "--out", str(out), *extra]


def shard_infos(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "ray-shards").glob("*/shard.json"))]


def _t(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "big"))
    ap.add_argument("--kill-after", type=float, default=0.0, help="also SIGKILL one Ray task after this many s")
    ap.add_argument("--save", type=Path, required=True)
    args = ap.parse_args()
    save = args.save
    save.mkdir(parents=True, exist_ok=True)
    wall_warm = timed(cmd(save / "warmup", args.seed, "--gpus", "0,1", "--batch", "1"), save / "warmup.log")
    wall_g = timed(cmd(save / "gpus", args.seed, "--gpus", "0,1"), save / "gpus.log")
    wall_r = timed(cmd(save / "ray", args.seed, "--ray", "local"), save / "ray.log")
    rg, rr = rows(save / "gpus"), rows(save / "ray")
    diffs = [100 * abs(rg[k]["us_median"] - rr[k]["us_median"]) / rg[k]["us_median"]
             for k in rg if k in rr and rg[k].get("us_median") and rr[k].get("us_median")]
    infos = shard_infos(save / "ray")
    spans = [(_t(i["started"]), _t(i["finished"])) for i in infos if i.get("finished")]
    overlap = max(0.0, min(b for _, b in spans) - max(a for a, _ in spans)) if len(spans) > 1 else 0.0
    rec = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seed": args.seed,
        "rows_gpus": len(rg), "rows_ray": len(rr), "same_keys": set(rg) == set(rr),
        "same_verdicts": all(rg[k]["verdict"] == rr[k]["verdict"] for k in rg if k in rr),
        "verdicts_ray": sorted({r["verdict"] for r in rr.values()}),
        "us_median_diff_pct": {"median": round(statistics.median(diffs), 2) if diffs else None,
                               "max": round(max(diffs), 2) if diffs else None},
        "ray_shards": [{k: i.get(k) for k in ("shard", "host", "gpu_ids", "CUDA_VISIBLE_DEVICES", "started",
                                               "finished", "wall_s", "new_rows")} for i in infos],
        "ray_shards_overlap_s": overlap,
        "wall_warmup_build_s": round(wall_warm, 1), "wall_gpus_s": round(wall_g, 1), "wall_ray_s": round(wall_r, 1),
    }
    if args.kill_after:
        killed = save / "ray_killed"
        p = subprocess.Popen(cmd(killed, args.seed, "--ray", "local"), stdout=open(save / "ray_killed.log", "w"),
                             stderr=subprocess.STDOUT, env=env())
        time.sleep(args.kill_after)
        victim = next((i for i in shard_infos(killed) if not i.get("complete")), None)
        if victim:
            os.kill(victim["pid"], signal.SIGKILL)
        rc = p.wait(timeout=1200)
        folder = killed / "ray-shards" / f"{victim['shard'][0]}-of-{victim['shard'][1]}" if victim else None
        kept = (folder / "results.jsonl").read_text().splitlines() if folder else []
        others = {str(f): f.stat().st_mtime for f in (killed / "ray-shards").glob("*/shard.json")
                  if folder is None or f.parent != folder}
        wall_resume = timed(cmd(killed, args.seed, "--ray", "local", "--resume"), save / "ray_resume.log")
        after = (folder / "results.jsonl").read_text().splitlines() if folder else []
        merged = (killed / "results.jsonl").read_text().splitlines()
        rk = rows(killed)
        rec["kill"] = {
            "after_s": args.kill_after, "killed_shard": victim["shard"] if victim else None, "driver_rc": rc,
            "rows_of_killed_shard_on_disk": len(kept), "kept_verbatim": after[: len(kept)] == kept,
            "other_shards_rerun": any(Path(f).stat().st_mtime != m for f, m in others.items()),
            "rows_after_resume": len(rk), "same_keys_as_gpus": set(rk) == set(rg),
            "duplicate_keys": len(merged) - len({(json.loads(x)["config"], json.loads(x).get("workload"),
                                                  json.loads(x).get("gemm"), json.loads(x).get("batch"))
                                                 for x in merged}),
            "resume_s": round(wall_resume, 1)}
    print(json.dumps(rec, indent=1))
    (save / "ray_multi_gpu.json").write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
