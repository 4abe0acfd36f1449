"""Several workers: the same default sweep on --gpus A (e.g. 0) and --gpus B (e.g. 0,1, or 0,0 to share one GPU).

Shows that the two result sets hold the same rows (configs, points, verdicts; timings within noise), that each
worker recorded its device, that SIGKILL of the sweep mid-way loses no finished row and --resume completes the set,
and the wall-time ratio A/B of two uninterrupted sweeps. Run on the GPU machine with a warm build cache:
PYTHONPATH=. python3 benchmarks/multi_gpu.py --a 0 --b 0,1 --save DIR
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cmd(gpus: str, out: Path, seed: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tileprobe", "sweep", "--gpus", gpus, "--seed", str(seed), "--out", str(out),
            *extra]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")


def timed(c: list[str], log: Path, ok=(0,)) -> float:
    """Run `c`, its output to `log`; exit unless its code is in `ok`. Seconds it took."""
    start = time.perf_counter()
    p = subprocess.run(c, capture_output=True, text=True, env=env(), timeout=1800)
    log.write_text(p.stdout + p.stderr)
    if p.returncode not in ok:
        sys.exit(f"{' '.join(c)} failed ({p.returncode}): {(p.stdout + p.stderr)[-1500:]}")
    return time.perf_counter() - start


def rows(out: Path) -> dict:
    got = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("workload"):
            got[(r["config"], r["gemm"], r["batch"])] = r
    return got


def _key(r: dict) -> tuple:
    return (r["config"], r.get("workload"), r.get("gemm"), r.get("batch"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", default="0")
    ap.add_argument("--b", default="0,1")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "big"))
    ap.add_argument("--kill-after", type=float, default=15.0)
    ap.add_argument("--save", type=Path, required=True)
    args = ap.parse_args()
    save = args.save
    save.mkdir(parents=True, exist_ok=True)
    # Fill the build cache with every static and runtime harness (one launched point), so that the two timed
    # sweeps below measure the same warm work and their ratio is the launch phase's, not the compiler's.
    wall_warm = timed(cmd(args.a, save / "warmup", args.seed, "--batch", "1"), save / "warmup.log")
    wall_a = timed(cmd(args.a, save / "a", args.seed), save / "a.log")
    wall_b = timed(cmd(args.b, save / "b", args.seed), save / "b.log")

    # SIGKILL a sweep on B mid-way, then resume it.
    killed = save / "b_killed"
    p = subprocess.Popen(cmd(args.b, killed, args.seed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env())
    time.sleep(args.kill_after)
    p.send_signal(signal.SIGKILL)
    p.wait()
    time.sleep(3)  # a harness in flight finishes or dies on its own; its row was never written
    before = len(rows(killed))
    lines_before = (killed / "results.jsonl").read_text().splitlines()
    wall_resume = timed(cmd(args.b, killed, args.seed, "--resume"), save / "resume.log")
    lines_after = (killed / "results.jsonl").read_text().splitlines()

    ra, rb, rk = rows(save / "a"), rows(save / "b"), rows(killed)
    same_keys = set(ra) == set(rb) == set(rk)
    same_verdicts = all(ra[k]["verdict"] == rb[k]["verdict"] == rk[k]["verdict"] for k in ra if k in rb and k in rk)
    diffs = [100 * abs(ra[k]["us_median"] - rb[k]["us_median"]) / ra[k]["us_median"]
             for k in ra if k in rb and ra[k].get("us_median") and rb[k].get("us_median")]
    rec = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seed": args.seed, "gpus_a": args.a,
        "gpus_b": args.b, "rows": len(ra), "same_keys": same_keys, "same_verdicts": same_verdicts,
        "us_median_diff_pct": {"median": round(statistics.median(diffs), 2) if diffs else None,
                               "max": round(max(diffs), 2) if diffs else None},
        "workers_b": sorted({f"{r['worker']}@gpu{r['gpu_index']}" for r in rb.values()}),
        "rows_per_worker_b": {w: sum(1 for r in rb.values() if r["worker"] == w)
                              for w in sorted({r["worker"] for r in rb.values()})},
        "kill": {"after_s": args.kill_after, "rows_on_disk_after_kill": before,
                 "first_rows_kept_verbatim": lines_after[: len(lines_before)] == lines_before,
                 "rows_after_resume": len(rk), "duplicate_keys": len(lines_after) - len({_key(json.loads(l)) for l in lines_after}),
                 "resume_s": round(wall_resume, 1)},
        "phases_a": json.loads((save / "a" / "run.json").read_text()).get("phases"),
        "phases_b": json.loads((save / "b" / "run.json").read_text()).get("phases"),
        "references_b": json.loads((save / "b" / "run.json").read_text()).get("references"),
        "wall_warmup_build_s": round(wall_warm, 1), "wall_a_s": round(wall_a, 1), "wall_b_s": round(wall_b, 1), "ratio_a_over_b": round(wall_a / wall_b, 2),
    }
    pa, pb = rec["phases_a"] or {}, rec["phases_b"] or {}
    if pa.get("launch_s") and pb.get("launch_s"):
        rec["launch_phase_ratio_a_over_b"] = round(pa["launch_s"] / pb["launch_s"], 2)
    print(json.dumps(rec, indent=1))
    (save / "multi_gpu.json").write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
