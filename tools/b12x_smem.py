"""Compile FlashInfer's CuTe-DSL SM12x MoE kernels ("b12x") for sm_120a on a machine without a GPU and record the
shared memory each one allocates, as the DSL's own allocator sizes it.

usage: python tools/b12x_smem.py OUT_DIR [--presets qwen3-30b-a3b,...] [--target rtx-pro-6000]
Writes OUT_DIR/engine_rows.jsonl (one row per kernel x tile M x preset) and OUT_DIR/command.json (the command).
These are not tileprobe result rows (no CUTLASS config; the row schema does not apply).

How: flashinfer.fused_moe.cute_dsl.blackwell_sm12x.moe_dispatch compiles each kernel with `cute.compile` on fake
tensors (no device memory), for CUTE_DSL_ARCH. Four things need a GPU only to *pick* a launch, not to compile, and
are given fixed values here: the SM count (get_num_sm -> the target profile's SMs), the persistent grid size
(mac_override, get_max_active_clusters -> the SM count) and torch's CUDA-graph capture query (False). triton
(imported by unrelated W4A16 helpers) is replaced by an empty stand-in module when it is not installed. Each kernel
allocates its storage with one `SmemAllocator.allocate(Storage)` (a @cute.struct); the figure is that struct's
`size_in_bytes()` at that call, while the DSL traces the kernel inside `cute.compile`.

What the figure is, exactly (its evidence word is EVIDENCE, `dsl-allocator`, not `compiled`): the compile runs to the
end, but the bytes are not read from the compiled kernel. These kernels launch with no `smem=`, so the launch asks for
the DSL's `cute.kernel_smem_size(kernel)` (cutlass_dsl/cutlass.py, generate_launch_op), which the compiler resolves
from all of the kernel's allocations; with one allocate() per kernel it should equal the struct's size, but this tool
does not read that value, so it does not claim it.
Kernels: the static kernel (tile M 32), the micro kernel, and the dynamic kernel at each tile M its
`_select_dynamic_tile_m` can return (16, 32, 64, 128), gated SiLU NVFP4 W4A4.

This runs in a child process per kernel (the DSL and flashinfer are imported only there), with a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tileprobe.targets import Target, profile

CHILD_TIMEOUT_S = 900
EVIDENCE = "dsl-allocator"  # the storage struct's size at SmemAllocator.allocate, not the compiled kernel's size
# (hidden H, intermediate I, experts E, top-k) from tileprobe.workloads presets (public model configs)
PRESETS = {"qwen3-30b-a3b": (2048, 768, 128, 8), "qwen3-235b-a22b": (4096, 1536, 128, 8),
           "deepseek-v3": (7168, 2048, 256, 8), "gpt-oss-120b": (2880, 2880, 128, 4),
           "qwen3-next-80b-a3b": (2048, 512, 512, 10)}  # I <= 512: the branch-paired gated dynamic kernel
KERNELS = [("static", 32), ("micro", 0), ("dynamic", 16), ("dynamic", 32), ("dynamic", 64), ("dynamic", 128)]

_CHILD = r'''
import json, os, sys
from unittest import mock
try:
    import triton  # noqa: F401
except ImportError:  # only the W4A16 route-pack helpers use it; the NVFP4 kernels compile without it
    for name in ("triton", "triton.language"):
        sys.modules[name] = mock.MagicMock(name=name)
    sys.modules["triton"].__version__ = "3.4.0"
    sys.modules["triton"].jit = lambda fn=None, **kw: (fn if fn is not None else (lambda f: f))
import torch, torch.cuda
torch.cuda.is_current_stream_capturing = lambda: False
import cutlass, cutlass.utils
import flashinfer
from flashinfer.fused_moe.cute_dsl.blackwell_sm12x import moe_dispatch as md
kind, tile_m, H, I, E, topk, sms = json.loads(sys.argv[1])
md.get_num_sm = lambda dev: sms
md.get_max_active_clusters = lambda *a, **k: sms
md._refuse_during_capture = lambda what: None
seen = []
orig = cutlass.utils.SmemAllocator.allocate
def allocate(self, what, *a, **k):
    seen.append([getattr(what, "__name__", str(what)), int(what.size_in_bytes())])
    return orig(self, what, *a, **k)
cutlass.utils.SmemAllocator.allocate = allocate
made = []
orig_init = {}
def watch(cls):
    init = cls.__init__
    def __init__(self, *a, **k):
        init(self, *a, **k)
        made.append(self)
    cls.__init__ = __init__
from flashinfer.fused_moe.cute_dsl.blackwell_sm12x import moe_static_kernel, moe_micro_kernel
from flashinfer.fused_moe.cute_dsl.blackwell_sm12x._moe_dynamic import generic, gated
for c in (moe_static_kernel.MoEStaticKernel, moe_micro_kernel.MoEMicroKernel, generic.MoEDynamicKernel,
          gated.MoEGatedDynamicKernel):
    watch(c)
rows = 32
if kind == "static":
    md._get_static_kernel(E, E, rows, H, I, topk, rows, mac_override=sms)
elif kind == "micro":
    md._get_micro_kernel(E, E, rows, H, I, topk, rows, mac_override=sms)
else:
    md._get_dynamic_kernel(E, rows, H, I, topk, rows, tile_m=tile_m, intermediate_size=I)
k = made[-1] if made else None
print(json.dumps({"storage": seen, "kernel_class": type(k).__name__ if k else None,
                  "ab_stage": getattr(k, "ab_stage", None), "epi_stage": getattr(k, "epi_stage", None),
                  "tile_shape_mnk": [int(x) for x in getattr(k, "tile_shape_mnk", ())] or None,
                  "smem_capacity": getattr(k, "smem_capacity", None),
                  "flashinfer": flashinfer.__version__}))
'''


def probe(kind: str, tile_m: int, preset: str, target: Target, cache: Path) -> dict:
    h, i, e, topk = PRESETS[preset]
    env = dict(os.environ, CUTE_DSL_ARCH=target.arch, FLASHINFER_WORKSPACE_BASE=str(cache))
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([kind, tile_m, h, i, e, topk, target.sms])],
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    secs = round(time.monotonic() - start, 1)
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not last:
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        return {"error": err[0][:300], "seconds": secs}
    out = json.loads(last[-1])
    out["seconds"] = secs
    return out


def row(kind: str, tile_m: int, preset: str, target: Target, got: dict) -> dict:
    h, i, e, topk = PRESETS[preset]
    arch, limit = target.arch, target.smem_optin
    base = {"family": "flashinfer-b12x", "engine": f"flashinfer {got.get('flashinfer', '?')}", "target": target.name,
            "arch": arch,
            "kernel": kind, "tile_m": got.get("tile_shape_mnk", [tile_m])[0] if got.get("tile_shape_mnk") else
            (tile_m or None), "workload": preset, "hidden": h, "intermediate": i, "experts": e, "top_k": topk,
            "smem_limit_bytes": limit, "compile_seconds": got.get("seconds")}
    if "error" in got:
        return base | {"verdict": "compile-error", "evidence": None, "reason": got["error"], "smem_bytes": None}
    sizes = [s for _, s in got["storage"]]
    smem = max(sizes) if sizes else None
    head = limit - smem if smem is not None else None
    verdict = "fits" if head is not None and head >= 0 else "smem-over-limit"
    return base | {"tile_shape_mnk": got["tile_shape_mnk"], "kernel_class": got["kernel_class"],
                   "stages": got["ab_stage"], "epi_stages": got["epi_stage"],
                   "stage_cap_capacity": got["smem_capacity"],
                   "storage": got["storage"], "smem_bytes": smem, "headroom_bytes": head, "verdict": verdict,
                   "evidence": EVIDENCE,
                   "reason": (f"the CuTe DSL compiled it for {arch}; its SmemAllocator storage struct is {smem} B "
                              f"{'<=' if verdict == 'fits' else '>'} opt-in {limit} B ({got['ab_stage']} A/B stages); "
                              "size read at allocate(), not from the compiled kernel; not launched")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--presets", default="qwen3-30b-a3b")
    ap.add_argument("--target", default="rtx-pro-6000", help="an SM12x profile: its arch, SM count and opt-in limit")
    args = ap.parse_args(argv)
    target = profile(args.target)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    bad = [p for p in presets if p not in PRESETS]
    if bad:
        print(f"b12x_smem: unknown preset(s) {', '.join(bad)}; known: {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for preset in presets:
        for kind, tile_m in KERNELS:
            # a fresh flashinfer cache each time: a cached kernel object is loaded without compiling (nothing sized)
            with tempfile.TemporaryDirectory(prefix="tp-b12x-") as cache:
                r = row(kind, tile_m, preset, target, probe(kind, tile_m, preset, target, Path(cache)))
            print(json.dumps({k: r.get(k) for k in ("workload", "kernel", "tile_m", "stages", "smem_bytes",
                                                     "verdict", "reason")}), flush=True)
            rows.append(r)
    (args.out / "engine_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (args.out / "command.json").write_text(json.dumps({"command": shlex.join(["python", "tools/b12x_smem.py",
                                                                          *(argv or sys.argv[1:])]),
                                                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                                  indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
