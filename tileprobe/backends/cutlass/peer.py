"""`--peer torch`: torch._scaled_grouped_mm (FP8 e4m3, rowwise scales, bf16 out, fast accumulation) timed on the same
per-expert problems as tileprobe's points, in a child process per GPU (torch is never imported by tileprobe
itself). Rows gain `peer_us` (median µs) and `speedup` (peer_us / us_median: > 1 means the probed tile is faster).

Child: python -m tileprobe.backends.cutlass.peer --gpu N --points FILE   (FILE: JSON [[point_id, rotate, [[m, n, k], ...]], ...])
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tileprobe.targets import child_visible_devices

PEERS = ("torch",)


def available(peer: str) -> str | None:
    """None when the peer can run here, else why not (one line)."""
    if peer not in PEERS:
        return f"unknown peer {peer!r}; known: {', '.join(PEERS)}"
    if importlib.util.find_spec("torch") is None:
        return "--peer torch needs torch, which is not installed in this environment"
    return None


def measure(gpu_index: int, points: list[tuple[int, int, list[tuple[int, int, int]]]], timeout_s: float = 1800) -> dict:
    """{point_id: µs} (None where torch failed) from a child process on one GPU; {} and `error` on failure."""
    with tempfile.TemporaryDirectory(prefix="tileprobe-peer-") as tmp:
        f = Path(tmp) / "points.json"
        f.write_text(json.dumps(points))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=child_visible_devices(gpu_index))
        try:
            p = subprocess.run([sys.executable, "-m", "tileprobe.backends.cutlass.peer", "--points", str(f)], capture_output=True,
                               text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"torch peer timed out after {timeout_s:.0f} s"}
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            return {"error": f"torch peer exited {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:200]}"}
        return {int(k): v for k, v in json.loads(lines[-1]).items()}


def time_torch(problems: list[list[int]], rotate: int) -> float:
    """Median µs per launch of torch._scaled_grouped_mm on these (M, N, K) problems, rotating over `rotate` input
    sets; each of 7 repeats times enough launches to fill about 10 ms (3 to 400). Needs torch and a GPU."""
    import torch  # the child process only: tileprobe itself never imports torch

    e = len(problems)
    n, k = problems[0][1], problems[0][2]
    ms = [p[0] for p in problems]
    offs = torch.tensor([sum(ms[: i + 1]) for i in range(e)], dtype=torch.int32, device="cuda")
    sets = []
    for _ in range(max(1, rotate)):
        a = (torch.randn(sum(ms), k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(e, n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        sa = torch.rand(sum(ms), device="cuda", dtype=torch.float32) + 0.5
        sb = torch.rand(e, n, device="cuda", dtype=torch.float32) + 0.5
        sets.append((a, b.transpose(-2, -1), sa, sb))

    def call(i):
        a, bt, sa, sb = sets[i % len(sets)]
        return torch._scaled_grouped_mm(a, bt, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)

    for i in range(5):
        call(i)
    torch.cuda.synchronize()
    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(3):
        call(i)
    t.record()
    torch.cuda.synchronize()
    iters = int(min(400, max(3, 10.0 / max(s.elapsed_time(t) / 3, 1e-3))))
    times = []
    for _ in range(7):
        s.record()
        for i in range(iters):
            call(i)
        t.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(t) * 1000 / iters)
    del sets
    torch.cuda.empty_cache()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=Path, required=True)
    args = ap.parse_args()
    out = {}
    for pid, rotate, problems in json.loads(args.points.read_text()):
        try:
            out[pid] = round(time_torch(problems, rotate), 3)
        except Exception as exc:  # one point's failure (shape torch refuses, memory) costs only that point
            sys.stderr.write(f"point {pid}: {type(exc).__name__}: {exc}\n")
            out[pid] = None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
