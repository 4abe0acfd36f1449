"""Diagnostic (device or CPU): every BLOCK_SIZE_M=256 / num_warps=4 config of the tuners' space (144), both GEMMs of
qwen3-30b-a3b at M=16 (vLLM's launch, bf16, sm_90), compiled by tileprobe's compile_many as the tune compiles them:
prints how many fail with which one-line error and writes every result as JSON. Made to name the compiler's line for
the 48 configs the H200 tune found not compiling under Triton 3.6.0 (results/h200/triton-moe-tune/).

PYTHONPATH=. TILEPROBE_ENGINE_WHEELS=DIR python3 tools/triton_no_compile_probe.py CACHE_DIR OUT.json [FIRST_N]
"""
import collections, json, sys
from tileprobe.families import triton_moe as tm
from tileprobe.backends.triton.compile import compile_many
from tileprobe.triton.audit import canonical, constexpr_positions
from tileprobe.triton.sweep import engine_kernel_source

if __name__ == "__main__":
    import triton
    _, src = engine_kernel_source("vllm", None)
    consts = constexpr_positions(src)
    cfgs = [dict(BLOCK_SIZE_M=256, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=g, num_warps=4, num_stages=s)
            for n in (64, 128, 256) for k in (64, 128, 256) for g in (1, 16, 32, 64) for s in (2, 3, 4, 5)]
    cfgs = cfgs[:int(sys.argv[3])] if len(sys.argv) > 3 else cfgs
    jobs, keys = [], []
    for c in cfgs:
        for gemm in tm.GEMMS:
            nn, kk = tm.gemm_shape(gemm, 2048, 768)
            jobs.append(canonical(tm.launch_job("vllm", src, "bf16", gemm, 128, nn, kk, 16, 8, c, 90, 1), consts))
            keys.append((json.dumps(c), gemm))
    res = compile_many(jobs, 16, sys.argv[1])
    out = {"triton": triton.__version__, "configs": len(cfgs), "results": []}
    for (c, g), b in zip(keys, res):
        out["results"].append({"config": json.loads(c), "gemm": g, "shared": getattr(b, "shared", None),
                               "regs": getattr(b, "regs", None), "error": getattr(b, "line", None)})
    print(json.dumps(collections.Counter((r["error"] or "ok")[:200] for r in out["results"]), indent=1))
    print(json.dumps(out), file=open(sys.argv[2], "w"))
