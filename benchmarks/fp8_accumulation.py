"""Why the engines' fp8 per-tensor Triton fused_moe came out `incorrect` on the H200 at K >= 2048, in figures: the
sm_90 fp8 MMA accumulator's reduced precision (Triton's default for fp8 dots on capability 9.0,
max_num_imprecise_acc_default = 2**30; CUTLASS/cuBLAS "fast accumulation") against tileprobe's checks.

For each K: (1) the engine's own fused_moe_kernel, fp8 per-tensor (`fp8_w8a8`), as compiled by default and with its
fp8 dots promoted to fp32 every 32 of K (the kernel's `tl.dot(a, b, acc=accumulator)` given
max_num_imprecise_acc=32); (2) torch._scaled_mm on the same kind of e4m3 data with use_fast_accum True and False.
Each is checked against tileprobe's fp64 reference under main's rule (|out - ref| <= 0.02 + 0.02 |ref|, absolute)
and under the contract's bound (tileprobe/results/tolerance.py: atol * rms(ref_group) + rtol * |ref|). Printed per
line: K, bad elements under the old rule, under the new bound, worst |err| / bound, pooled relative error.

    PYTHONPATH=$PWD TILEPROBE_ENGINE_WHEELS=DIR python3 benchmarks/fp8_accumulation.py --out results/h200/fp8-acc.json

(DIR: slim engine wheels, tools/slim_engine_wheel.py.) Needs a GPU of capability 9.0 for the reduced-precision
behaviour; elsewhere the figures are fp32 accumulation's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import torch
import triton

from tileprobe.backends.triton import runtime as rt
from tileprobe.backends.triton.source import load
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.families import triton_moe as tm
from tileprobe.families.base import Accumulation
from tileprobe.results import tolerance
from tileprobe.triton.sweep import engine_kernel_source

OLD_ATOL = OLD_RTOL = 2e-2  # main 349c23a: families/triton_moe.py, an absolute atol
ENTRY = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
         "num_stages": 3}
PROMOTE = ("acc=accumulator)", "acc=accumulator, max_num_imprecise_acc=32)")


def figures(out, ref, groups, bound: tolerance.Bound) -> dict:
    got = tolerance.check(out, ref, groups, bound)
    o, r = out.double().reshape(ref.shape), ref.double()
    old = int((~((o - r).abs() <= OLD_ATOL + OLD_RTOL * r.abs())).sum())
    return {"elements": got["checked_elements"], "bad_old_rule": old, "bad_new_bound": got["bad_elements"],
            "worst_err_over_bound": got["worst_ratio"], "rel_err": got["rel_err"],
            "max_err_over_rms": float((o - r).abs().max() / r.pow(2).mean().sqrt()), "atol": bound.atol,
            "rtol": bound.rtol, "tolerance": bound.text}


def engine_rows(engine: str, ks: list[int], m: int, seed: int, cache: Path, cc: int) -> list[dict]:
    _, src = engine_kernel_source(engine, None)
    promoted_src = replace(src, text=src.text.replace(*PROMOTE))
    kernels = {"default": load(src, cache), "promoted": load(promoted_src, cache)}
    rows = []
    for k in ks:
        experts, top_k, n = 16, 8, 1024
        p = rt.Problem(engine, "fp8", "gate_up", experts, n, k, m, top_k)
        prep = rt.prepare(p, seed + k, "cuda")
        job = tm.launch_job(engine, src, "fp8", "gate_up", experts, n, k, m, top_k, ENTRY, cc)
        bound = tolerance.derive(tm.FAMILY.atol, tm.FAMILY.rtol, k, tm.accumulation("fp8", cc, 128))
        for how, kernel in kernels.items():
            naive = bool(dict(job.kwargs).get("naive_block_assignment", False))
            j = replace(job, source=promoted_src) if how == "promoted" else job
            rt.run_point(kernel, j, p, seed + k, "cuda", bound, naive=naive, timed=False, prepared=prep)
            f = figures(prep.tensors.c.reshape(m * top_k, n), prep.ref.reshape(m * top_k, n), prep.tensors.topk_ids,
                        bound)
            rows.append({"what": f"{engine} fused_moe fp8 per-tensor, {how} accumulation", "k": k, "m": m, **f})
    return rows


def scaled_mm_rows(ks: list[int], m: int, seed: int) -> list[dict]:
    rows = []
    for k in ks:
        g = torch.Generator(device="cuda").manual_seed(seed + k)
        a = torch.rand(m, k, generator=g, device="cuda") * 2 - 1
        b = torch.rand(2048, k, generator=g, device="cuda") * 2 - 1
        sa, sb = a.abs().amax() / 448, b.abs().amax() / 448
        qa, qb = (a / sa).to(torch.float8_e4m3fn), (b / sb).to(torch.float8_e4m3fn)
        ref = (qa.double() * sa.double()) @ (qb.double() * sb.double()).T
        groups = torch.zeros(m, dtype=torch.int64, device="cuda")
        for fast in (True, False):
            out = torch._scaled_mm(qa, qb.T, scale_a=sa.float().reshape(()), scale_b=sb.float().reshape(()),
                                   out_dtype=torch.bfloat16, use_fast_accum=fast)
            acc = Accumulation("fp8-reduced", None, "cuBLAS fp8 fast accumulation") if fast else Accumulation()
            bound = tolerance.derive(tm.FAMILY.atol, tm.FAMILY.rtol, k, acc)
            rows.append({"what": f"torch._scaled_mm use_fast_accum={fast}", "k": k, "m": m,
                         **figures(out, ref, groups, bound)})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--ks", default="768,2048,4096,7168")
    ap.add_argument("--m", type=int, default=256, help="tokens (fused_moe) / rows (scaled_mm)")
    ap.add_argument("--engines", default="vllm,sglang")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    ks = [int(x) for x in a.ks.split(",")]
    seed = a.seed if a.seed is not None else random.randrange(2**31)
    major, minor = torch.cuda.get_device_capability()
    cc = major * 10 + minor
    rows = scaled_mm_rows(ks, a.m, seed)
    for engine in [e for e in a.engines.split(",") if e]:
        rows += engine_rows(engine, ks, a.m, seed, cache_root(a.cache_dir), cc)
    for r in rows:
        print(f"{r['what']:<58} K={r['k']:<5} bad old {r['bad_old_rule']:>6} / new {r['bad_new_bound']:>3} of "
              f"{r['elements']}; worst err/bound {r['worst_err_over_bound']:.3g}; max err {r['max_err_over_rms']:.3g}"
              f" rms; rel {r['rel_err']:.3g}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "cc": cc, "seed": seed,
                                 "torch": torch.__version__, "triton": triton.__version__,
                                 "old_rule": f"|out - ref| <= {OLD_ATOL} + {OLD_RTOL}*|ref|", "rows": rows}, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
