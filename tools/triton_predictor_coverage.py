"""How much of the engines' shipped Triton trees the triton-moe predictor answers, and whether every answer is exact.

Plans every distinct launch of vLLM's and SGLang's shipped fused_moe config trees, each file on its own device's
arch, with check-configs' own planning (tileprobe.triton.audit.plan, target None), and asks the predictor
(tileprobe.predict.triton_moe) for each. With --check, each launch's bytes are also taken from Triton itself: its
own stages (make_ttir, make_ttgir) and the first passes of make_llir up to and including AllocateSharedMemory, in
the order triton/backends/nvidia/compiler.py runs them, then the module's `ttg.shared` (what make_llir copies into
metadata.shared; nothing after that pass changes it). That skips LLVM and ptxas, about 5x faster than a compile;
--confirm K compiles K of the checked launches fully (tileprobe.backends.triton.compile) to show both numbers agree.
Results per launch are cached by the launch's key in --cache (JSON lines), so a run can be resumed.

PYTHONPATH=. python3 tools/triton_predictor_coverage.py [--check all|N] [--confirm K] [--seed S] [--cache FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from triton import compiler as triton_compiler
from triton import knobs
from triton._C.libtriton import ir, nvidia, passes
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptx_version_from_options
from triton.runtime import jit as triton_jit

from tileprobe.backends.triton import source as src_mod
from tileprobe.backends.triton.compile import TritonBuild, compile_many, jit_function, stand_in
from tileprobe.backends.triton.toolchain import cache_root, installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.families import triton_moe as tm
from tileprobe.predict._common import CannotPredict
from tileprobe.predict.triton_moe import predict
from tileprobe.triton import audit
from tileprobe.triton_sweep import engine_kernel_source

ROOT = Path(__file__).resolve().parent.parent


def allocated_shared(job) -> int:
    """ttg.shared after Triton's AllocateSharedMemory pass, for the launch `job` (a KernelJob)."""
    fn = jit_function(src_mod.load(job.source, cache_root(None)))
    target = GPUTarget("cuda", job.cc, 32)
    backend = triton_compiler.make_backend(target)
    binder = triton_jit.create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = {k: stand_in(v) for k, v in job.kwargs}
    kwargs.setdefault("debug", knobs.runtime.debug)
    kwargs.setdefault("instrumentation_mode", knobs.compilation.instrumentation_mode)
    bound, spec, options = binder(*[stand_in(a) for a in job.args], **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
    src = triton_compiler.ASTSource(fn, signature, constexprs, attrs)
    opts = backend.parse_options(dict(options.__dict__))
    stages: dict = {}
    backend.add_stages(stages, opts, src.language)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    mod = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)
    mod = stages["ttgir"](stages["ttir"](mod, {}), {})
    pm = ir.pass_manager(mod.context)  # make_llir's passes up to the allocation, in its order (no sanitizers)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm, False)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, job.cc, get_ptx_version_from_options(opts, target.arch))
    pm.run(mod, "tileprobe-allocate")
    return int(mod.get_int_attr("ttg.shared"))


def launches() -> list[dict]:
    """Every distinct launch of both engines' shipped trees, each file on its own device (check-configs' plan)."""
    out = []
    for engine in ("vllm", "sglang"):
        src, source = engine_kernel_source(engine, None)
        files = tc.read_source_tree(src, triton_lookup.engine_module(engine).CONFIGS_DIR)
        checks, _ = audit.plan(files, engine, source, None, None)
        seen = {}
        for c in checks:
            if c.job is not None:
                seen.setdefault(c.job, c)
        for job, c in seen.items():
            cfg = c.config
            out.append({"engine": src.label(), "quant": cfg.get("quant"), "gemm": cfg.get("gemm"),
                        "arch": cfg.arch, "cc": tm.arch_cc(cfg.arch), "entry": tm.entry_of(cfg),
                        "n": int(cfg.get("gemm_n")), "k": int(cfg.get("gemm_k")), "kernel": source.sha256,
                        "job": job})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", default="0", help="launches to check against Triton's allocation: all or a number")
    ap.add_argument("--confirm", type=int, default=0, help="checked launches also compiled fully")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/tileprobe-predictor-coverage.jsonl"))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "triton-moe" / "predictor-coverage.json")
    a = ap.parse_args()
    t = installed()
    if t is None:
        sys.exit("needs Triton installed\nhelp: run `tileprobe doctor`")
    seed = a.seed if a.seed is not None else random.randrange(2**31)
    rows = launches()
    answered, why, by = 0, Counter(), Counter()
    for r in rows:
        try:
            r["predicted"] = predict(r["engine"], r["quant"], r["entry"], r["cc"], t.version, r["n"], r["k"],
                                     kernel_sha256=r["kernel"])
            answered += 1
        except CannotPredict as exc:
            r["predicted"] = None
            why[str(exc)] += 1
            by[f"{r['engine']} | {r['quant']} | {r['arch']}"] += 1
    rng = random.Random(seed)
    todo = list(rows) if a.check == "all" else rng.sample(rows, min(int(a.check), len(rows)))
    cache = {}
    if a.cache.is_file():
        for line in a.cache.read_text().splitlines():
            d = json.loads(line)
            cache[d["key"]] = d["shared"]
    t0 = time.perf_counter()
    with a.cache.open("a") as f:
        for r in todo:
            key = r["job"].key(t.version)
            if key not in cache:
                cache[key] = allocated_shared(r["job"])
                f.write(json.dumps({"key": key, "shared": cache[key]}) + "\n")
                f.flush()
            r["allocated"] = cache[key]
    check_s = time.perf_counter() - t0
    wrong = [{k: r[k] for k in ("engine", "quant", "gemm", "arch", "entry", "n", "k", "predicted", "allocated")}
             for r in todo if r["predicted"] is not None and r["predicted"] != r["allocated"]]
    confirm = rng.sample(todo, min(a.confirm, len(todo)))
    builds = compile_many([r["job"] for r in confirm], 1)
    confirmed = [{"arch": r["arch"], "quant": r["quant"], "entry": r["entry"], "allocated": r["allocated"],
                  "compiled": b.shared if isinstance(b, TritonBuild) else str(b)} for r, b in zip(confirm, builds)]
    doc = {
        "what": "the triton-moe predictor over every distinct launch of vLLM's and SGLang's shipped fused_moe config "
                "trees (each file on its own device's arch, check-configs' plan); checked launches compare it with "
                "Triton's own AllocateSharedMemory result (ttg.shared, i.e. metadata.shared)",
        "tool": "tools/triton_predictor_coverage.py", "command": shlex.join(["python3", *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": seed, "triton": t.version,
        "kernels": sorted({f"{r['engine']} {r['kernel']}" for r in rows}),
        "distinct_launches": len(rows), "answered": answered, "cannot_predict": len(rows) - answered,
        "cannot_predict_share": round((len(rows) - answered) / len(rows), 4),
        "cannot_predict_by_group": dict(sorted(by.items())), "cannot_predict_why": dict(why.most_common()),
        "by_arch": dict(sorted(Counter(r["arch"] for r in rows).items())),
        "checked": len(todo), "checked_answered": sum(r["predicted"] is not None for r in todo),
        "checked_exact": sum(r["predicted"] is not None and r["predicted"] == r["allocated"] for r in todo),
        "wrong": wrong, "check_seconds": round(check_s, 1),
        "confirmed_by_full_compile": confirmed,
        "confirm_agree": sum(c["allocated"] == c["compiled"] for c in confirmed),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(rows)} distinct launches: predictor answered {answered}, cannot predict {len(rows) - answered}; "
          f"checked {len(todo)}, {doc['checked_exact']} of {doc['checked_answered']} answered exact, {len(wrong)} "
          f"wrong; full compile agreed on {doc['confirm_agree']} of {len(confirmed)}; wrote {a.out}")


if __name__ == "__main__":
    main()
