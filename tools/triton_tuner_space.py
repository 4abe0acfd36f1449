"""The seed case in numbers: of an engine tuner's own search space (tileprobe.triton.tune.search_space: vLLM's /
SGLang's 1920 CUDA configs), how many would raise OutOfResources on a 101376 B GPU, for one model's two GEMMs.

Bytes per config from the predictor (tileprobe.predict.triton_moe: Triton 3.8.0, exact on every checked launch of its
scope; evidence `predicted`; a config it cannot predict is counted as `cannot_predict`), and a random sample of the space compiled
with the real Triton for the target (evidence `compiled`) to check the predictor on this very space: a config counts as
pruned when either GEMM it serves needs more than the limit. Writes results/triton-moe/tuner-space__<target>.json.

PYTHONPATH=. python3 tools/triton_tuner_space.py [--target rtx-pro-6000] [--sample 16] [--jobs 2] [--m 64]
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from tileprobe.backends.triton.compile import TritonBuild, compile_many
from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.families import triton_moe as tm
from tileprobe.predict._common import CannotPredict
from tileprobe.predict.triton_moe import TRITON_VERSIONS, predict
from tileprobe.targets import profile
from tileprobe.triton.tune import SPACE_SOURCE, search_space
from tileprobe.triton.sweep import engine_kernel_source
from tileprobe.workloads import PRESETS

ROOT = Path(__file__).resolve().parent.parent


def _need(label: str, quant: str, config: dict, cc: int, version: str, shapes: dict, kernel: str) -> int | None:
    """The bytes a config needs for the larger of its two GEMMs (None: the predictor cannot say for one of them)."""
    try:
        return max(predict(label, quant, config, cc, version, *shapes[g], kernel_sha256=kernel) for g in tm.GEMMS)
    except CannotPredict:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtx-pro-6000")
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--m", type=int, default=64, help="the batch size of the launch (its specialisation)")
    ap.add_argument("--sample", type=int, default=16, help="configs per (engine, quant) compiled to check")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    target = profile(a.target)
    cc = int(target.cc.replace(".", ""))
    model = PRESETS[a.preset]
    seed = a.seed if a.seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    t = installed()
    if t is None or t.version not in TRITON_VERSIONS:
        sys.exit(f"needs Triton {TRITON_VERSIONS[0]} installed for the compiled sample (found {t and t.version})")
    out = {"tool": "tools/triton_tuner_space.py", "command": shlex.join(["python3", *sys.argv]),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": seed, "target": target.name,
           "smem_limit_bytes": target.smem_optin, "cc": cc, "triton": t.version, "model": a.preset, "m": a.m,
           "evidence": "predicted (tileprobe.predict.triton_moe), with a random sample compiled (evidence compiled)",
           "spaces": []}
    for engine in ("vllm", "sglang"):
        src, source = engine_kernel_source(engine, None)
        for quant in ("bf16", "fp8"):
            space = search_space(engine, tc.scheme(quant))
            shapes = {g: tm.gemm_shape(g, model.hidden, model.inter) for g in tm.GEMMS}
            need = [_need(src.label(), quant, c, cc, t.version, shapes, source.sha256) for c in space]
            over = [i for i, b in enumerate(need) if b is not None and b > target.smem_optin]
            sample = rng.sample(range(len(space)), min(a.sample, len(space)))
            jobs = [tm.launch_job(engine, source, quant, g, model.experts, *shapes[g], a.m, model.top_k, space[i], cc)
                    for i in sample for g in tm.GEMMS]
            t0 = time.perf_counter()
            builds = compile_many(jobs, a.jobs)
            secs = time.perf_counter() - t0
            checked = []
            for j, i in enumerate(sample):
                bs = builds[2 * j:2 * j + 2]
                got = max(b.shared for b in bs) if all(isinstance(b, TritonBuild) for b in bs) else None
                checked.append({"config": space[i], "predicted": need[i], "compiled": got})
            rec = {"engine": src.label(), "quant": quant, "space": len(space), "space_source": SPACE_SOURCE[engine],
                   "gemms": {g: {"n": n, "k": k} for g, (n, k) in shapes.items()},
                   "over_limit": len(over), "left": len(space) - len(over),
                   "cannot_predict": sum(b is None for b in need),  # counted in "left": not known to be over
                   "sample_compiled": len(checked), "sample_agree": sum(c["predicted"] == c["compiled"] for c in checked),
                   "sample_compile_s": round(secs, 1), "sample": checked}
            print(f"{src.label()} {quant}: {len(over)} of {len(space)} over {target.smem_optin} B on {target.name} "
                  f"(predicted); sample {rec['sample_agree']}/{len(checked)} compiled equal ({secs:.0f} s)")
            out["spaces"].append(rec)
    path = a.out or ROOT / "results" / "triton-moe" / f"tuner-space__{target.name}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()
