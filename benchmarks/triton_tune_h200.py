"""A real pruned tune on the lent H200: qwen3-30b-a3b, vLLM, bf16, the engine's shipped H200 file as input
(`E=128,N=768,device_name=NVIDIA_H200.json`; `--hidden 2048`: qwen3-235b-a22b at tp2 has the same file name,
and tileprobe's preset match would otherwise take its hidden size 4096), `--batches 1,16,64,256`; then the shipped
entry at each of those M timed the same way (runtime.run_point: element-wise check, graph timing over rotated
routings), for comparison.
Prints and appends one JSON record to results/benchmarks/triton_tune_h200.jsonl, and writes it to OUT/record.json
(on the device only OUT comes back).

    PYTHONPATH=. python3 benchmarks/triton_tune_h200.py --any-triton --out $OUT/tune [--batches 1,16,64,256]
        [--jobs N] [--cache-dir .tp-cache/tune] [--prune-only] [--no-save]

The build cache defaults to .tp-cache/tune (git-ignored: kept on a warm device between calls), so a run cut by the
device's per-command limit resumes with every config already compiled. The cold estimate printed first (~616 s for
1,16,64,256 on 16 cores) is at the 10-minute per-command limit; then run it twice on the same warm machine:
`--prune-only` (the compile of the whole space, no launch), then without it (the record carries both calls). With
no TILEPROBE_ENGINE_WHEELS set, the slimmed wheels in .engine-wheels/ are used.
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
from tileprobe.triton.sweep import engine_kernel_source  # noqa: E402
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
    ap.add_argument("--prune-only", action="store_true",
                    help="compile and prune only (fills the cache; a second call then tunes with it warm)")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    if not os.environ.get(tc.WHEELS_ENV) and (ROOT / ".engine-wheels").is_dir():
        os.environ[tc.WHEELS_ENV] = str(ROOT / ".engine-wheels")
    src = tc.find_engine("vllm")
    text = src.read_text(f"{vllm.CONFIGS_DIR}/{SHIPPED}")
    shipped = {int(k): v for k, v in json.loads(text).items()}
    batches = [int(b) for b in a.batches.split(",")]
    jobs = int(a.jobs)
    # the estimate: every config of the space, both GEMMs, one specialisation for vLLM's naive M (M*top_k*4 <= E)
    # and one for the rest; 0.7 s per compile per core (measured on the 2-core CPU machine, a sample of the space
    # for sm_90, under load), plus ~0.03 s per config and M to screen and ~3 s per confirmed config and M
    classes = len({m * 8 * 4 <= 128 for m in batches})
    est_compiles = 1920 * 2 * classes
    est = est_compiles * 0.7 / jobs + 1920 * 0.8 * len(batches) * 0.03 + 8 * len(batches) * 3
    print(f"estimate (cold cache): {est_compiles} compiles / {jobs} workers ~ {est_compiles * 0.7 / jobs:.0f} s, "
          f"whole tune ~ {est:.0f} s", flush=True)
    out = Path(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / SHIPPED
        inp.write_text(text)
        cmd = [sys.executable, "-m", "tileprobe", "export", "triton-configs", str(inp), "--engine", "vllm",
               "--target", "h200", "--out", str(out), "--tune", "--hidden", "2048", "--batches", a.batches,
               "--jobs", str(jobs),
               "--cache-dir", a.cache_dir] + (["--any-triton"] if a.any_triton else []) + (
                   ["--prune-only"] if a.prune_only else [])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(
                               [str(ROOT)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])})
        wall = time.perf_counter() - t0
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        raise SystemExit(f"tune failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    prov = json.loads((out / "tileprobe-provenance.json").read_text())
    prune_record = Path(a.cache_dir) / "prune-call.json"  # kept with the cache: the next call reports it
    if a.prune_only:
        prune_record.write_text(json.dumps({"wall_s": round(wall, 2), "jobs": jobs, "totals": prov["totals"]}))
        print(json.dumps({"prune_call": json.loads(prune_record.read_text())}))
        return
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
              "estimate_compiles": est_compiles, "estimate_s": round(est),
              "prune_call": json.loads(prune_record.read_text()) if prune_record.is_file() else None,
              "per_m": per_m}
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
