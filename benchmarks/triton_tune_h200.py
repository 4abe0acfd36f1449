"""A real pruned tune on the lent H200: qwen3-30b-a3b, vLLM, bf16, the engine's shipped H200 file as input
(`E=128,N=768,device_name=NVIDIA_H200.json`), `--batches 1,16,64,256`; then the shipped entry at each of those M
timed the same way (runtime.run_point: element-wise check, graph timing over rotated routings), for comparison.
Prints and appends one JSON record to results/benchmarks/triton_tune_h200.jsonl, and writes it to OUT/record.json
(on the device only OUT comes back).

    PYTHONPATH=. python3 benchmarks/triton_tune_h200.py --any-triton --out $OUT/tune [--batches 1,16,64,256]
        [--jobs N] [--cache-dir .tp-cache/tune] [--no-save]

The build cache defaults to .tp-cache/tune (git-ignored: kept on a warm device between calls), so a run cut by the
device's per-command limit resumes with every config already compiled. With no TILEPROBE_ENGINE_WHEELS set, the
slimmed wheels in .engine-wheels/ are used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tileprobe.backends.triton import runtime as rt  # noqa: E402
from tileprobe.backends.triton.source import load  # noqa: E402
from tileprobe.backends.triton.toolchain import cache_root  # noqa: E402
from tileprobe.engines import triton_configs as tc  # noqa: E402
from tileprobe.engines import vllm  # noqa: E402
from tileprobe.families import family  # noqa: E402
from tileprobe.families import triton_moe as tm  # noqa: E402
from tileprobe.targets import resolve_target  # noqa: E402
from tileprobe.triton_sweep import engine_kernel_source  # noqa: E402
from tileprobe.workloads import PRESETS  # noqa: E402

SHIPPED = "E=128,N=768,device_name=NVIDIA_H200.json"


def shipped_time(entry: dict, m: int, seed: int, cache: Path, l2: int) -> dict:
    """The shipped entry at M, both GEMMs, as the tune confirms its candidates."""
    _, source = engine_kernel_source("vllm", None)
    kernel = load(source, cache)
    model, fam = PRESETS["qwen3-30b-a3b"], family(tm.NAME)
    e = {**{"num_warps": 4, "num_stages": 3}, **{k: entry[k] for k in tm.ENTRY_KEYS if k in entry}}
    out = {"entry": e, "gemms": {}}
    for g in tm.GEMMS:
        n, k = tm.gemm_shape(g, model.hidden, model.inter)
        job = tm.launch_job("vllm", source, "bf16", g, model.experts, n, k, m, model.top_k, e, 90)
        naive = bool(dict(job.kwargs).get("naive_block_assignment", False))
        p = rt.Problem("vllm", "bf16", g, model.experts, n, k, m, model.top_k)
        got = rt.run_point(kernel, job, p, seed, "cuda", fam.atol, fam.rtol, l2, naive)
        out["gemms"][g] = {"verified": got["verified"], "us_graph_median": round(got["us_graph_median"], 3)}
    out["us_graph_median"] = round(sum(v["us_graph_median"] for v in out["gemms"].values()), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--jobs", default=str(os.cpu_count() or 1))
    ap.add_argument("--cache-dir", default=str(ROOT / ".tp-cache" / "tune"))
    ap.add_argument("--any-triton", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    if not os.environ.get(tc.WHEELS_ENV) and (ROOT / ".engine-wheels").is_dir():
        os.environ[tc.WHEELS_ENV] = str(ROOT / ".engine-wheels")
    src = tc.find_engine("vllm")
    text = src.read_text(f"{vllm.CONFIGS_DIR}/{SHIPPED}")
    shipped = {int(k): v for k, v in json.loads(text).items()}
    batches = [int(b) for b in a.batches.split(",")]
    jobs = int(a.jobs)
    # the estimate: every config of the space, both GEMMs, one specialisation for the naive M (M*top_k*4 <= E)
    # and one for the rest; ~1 s per compile per core
    classes = len({m * 8 * 4 <= 128 for m in batches})
    est_compiles = 1920 * 2 * classes
    print(f"estimate: {est_compiles} compiles / {jobs} workers ~ {est_compiles / jobs:.0f} s at 1 s each (cold)",
          flush=True)
    out = Path(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / SHIPPED
        inp.write_text(text)
        cmd = [sys.executable, "-m", "tileprobe", "export", "triton-configs", str(inp), "--engine", "vllm",
               "--target", "h200", "--out", str(out), "--tune", "--batches", a.batches, "--jobs", str(jobs),
               "--cache-dir", a.cache_dir] + (["--any-triton"] if a.any_triton else [])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - t0
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        raise SystemExit(f"tune failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    info = next(iter(prov["files"].values()))
    _, devices = resolve_target("h200")
    dev = devices[0]
    per_m = {}
    for m in batches:
        rec = info["entries"][str(m)]
        ship = shipped_time(shipped[m], m, prov["seed"] + 7 * m, cache_root(a.cache_dir), dev.l2_bytes)
        per_m[str(m)] = {"winner": rec["winner"], "us_graph_median": rec["us_graph_median"], "bytes": rec["bytes"],
                         "screened": rec["screened"], "confirmed": len(rec["confirmed"]),
                         "rejected_wrong": len(rec["rejected_wrong"]), "left": rec["left"],
                         "pruned_over_limit": rec["pruned_over_limit"], "pruned_no_compile": rec["pruned_no_compile"],
                         "shipped": ship,
                         "speedup_vs_shipped": round(ship["us_graph_median"] / rec["us_graph_median"], 3)
                         if rec["us_graph_median"] else None}
    record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "benchmark": "triton_tune_h200",
              "command": " ".join(["tileprobe"] + cmd[3:]).replace(str(out), "OUT"), "wall_s": round(wall, 2),
              "gpu": dev.device_name, "driver": dev.driver, "cores": os.cpu_count(), "jobs": jobs,
              "machine": platform.machine(), "python": platform.python_version(),
              "triton": metadata.version("triton"), "torch": metadata.version("torch"), "engine": prov["engine"],
              "workload": "qwen3-30b-a3b tp1 bf16", "input": SHIPPED, "totals": prov["totals"],
              "estimate_compiles": est_compiles, "per_m": per_m}
    line = json.dumps(record)
    print(line)
    out.mkdir(parents=True, exist_ok=True)
    (out / "record.json").write_text(line + "\n")
    if not a.no_save:
        dest = ROOT / "results" / "benchmarks" / "triton_tune_h200.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
