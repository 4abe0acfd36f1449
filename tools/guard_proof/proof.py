"""The launch guard proven on a GPU: run from the repository root on a machine with nvcc and a GPU.

    python3 tools/guard_proof/proof.py --out DIR

1. builds limit_sweep.cu (C++ guard, tileprobe/guard.h) and runs it: every dynamic request from 0 to 2 KiB past the
   opt-in limit, for kernels with 0, 112, 4096, 12352 and 49152 static bytes (ptxas rounds 100 and 12345 up); the
   guard's answer against the real cudaFuncSetAttribute + launch + marker check at each request;
2. compares what `tileprobe inspect` reads from that binary (no GPU) with cudaFuncGetAttributes for every kernel;
3. the Python guard (tileprobe.guard) on a cuda-python CUfunction and CUkernel of the same code: every byte within
   2 KiB of the bound and every 509th below, against cuFuncSetAttribute + cuLaunchKernel + the marker;
4. the Python guard on compiled Triton kernels whose shared memory straddles the limit, against Triton's own launch;
5. the row-in-shared-memory example (examples/row_in_smem.cu) at the kv_len bound `tileprobe inspect` solved.
Writes DIR/proof.json (everything) and prints a summary. Each part records its own error instead of stopping the rest.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tileprobe.binary import expr  # noqa: E402
from tileprobe.binary.cubin import kernels  # noqa: E402
from tileprobe.binary.elf import images_in  # noqa: E402
from tileprobe.binary.inspect import Request, answer  # noqa: E402
from tileprobe import guard  # noqa: E402
from tileprobe.targets import profile  # noqa: E402

HERE = Path(__file__).resolve().parent
ARCH = ["-gencode", "arch=compute_90a,code=sm_90a"]


def run(cmd: list[str], timeout: float = 300) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {(p.stderr or p.stdout)[-2000:]}")
    return p.stdout


def part(results: dict, name: str, fn) -> None:
    t0 = time.time()
    try:
        results[name] = fn()
    except Exception as exc:  # recorded, and the next part still runs
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    results[name + "_seconds"] = round(time.time() - t0, 2)
    print(f"[{name}] {time.time() - t0:.1f} s", flush=True)


def build(work: Path) -> dict:
    inc = f"-I{guard.include_dir()}"
    run(["nvcc", "-O2", inc, *ARCH, "-o", str(work / "limit_sweep"), str(HERE / "limit_sweep.cu")])
    run(["nvcc", "-O2", inc, *ARCH, "-cubin", "-o", str(work / "limit_sweep.cubin"), str(HERE / "limit_sweep.cu")])
    run(["nvcc", "-O2", inc, *ARCH, "-o", str(work / "row_in_smem"), str(ROOT / "examples" / "row_in_smem.cu")])
    return {"nvcc": run(["nvcc", "--version"]).strip().splitlines()[-1]}


def cpp_sweep(work: Path) -> dict:
    lines = [json.loads(line) for line in run([str(work / "limit_sweep"), "1"], timeout=400).splitlines()
             if line.startswith("{")]
    return {"device": lines[0], "attributes": [x for x in lines if "attributes" in x],
            "sweeps": [x for x in lines if "kernel" in x]}


def inspect_vs_driver(work: Path, attributes: list[dict]) -> dict:
    found = {k.demangled.split("(")[0].removeprefix("void "): k for im in images_in(work / "limit_sweep")
             for k in kernels(im)}
    rows, mismatches = [], 0
    for a in attributes:
        k = found.get(a["attributes"])
        row = {"kernel": a["attributes"], "driver": {x: a[x] for x in ("sharedSizeBytes", "numRegs", "localSizeBytes",
                                                                         "maxThreadsPerBlock")}}
        if k is None:
            row["inspect"] = None
            mismatches += 1
        else:
            row["inspect"] = {"sharedSizeBytes": k.static_smem, "numRegs": k.registers,
                              "localSizeBytes": k.stack_frame, "maxThreadsPerBlock": k.max_threads}
            mismatches += row["inspect"] != row["driver"]
        rows.append(row)
    return {"kernels": rows, "mismatches": mismatches}


def python_guard(work: Path) -> dict:
    import numpy as np
    from cuda.bindings import driver as cu

    def ok(r):
        err, *v = r
        if int(err) != 0:
            raise RuntimeError(f"CUDA driver: {err}")
        return v[0] if len(v) == 1 else v

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    data = (work / "limit_sweep.cubin").read_bytes()
    mod = ok(cu.cuModuleLoadData(data))
    lib = ok(cu.cuLibraryLoadData(data, [], [], 0, [], [], 0))
    optin = guard.fits(ok(cu.cuModuleGetFunction(mod, b"no_static")), 0).optin_bytes
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    out = []
    for name in (b"no_static", b"_Z11with_staticILi4096EEvPjj", b"_Z11with_staticILi12345EEvPjj"):
        for kind in ("CUfunction", "CUkernel"):
            fn = ok(cu.cuModuleGetFunction(mod, name)) if kind == "CUfunction" else ok(cu.cuLibraryGetKernel(lib, name))
            bound = guard.max_dynamic_smem(fn)
            slots = optin + 2049
            buf = ok(cu.cuMemAlloc(slots * 4))
            ok(cu.cuMemsetD32(buf, 0xFFFFFFFF, slots))
            tried, launched, disagree = [], {}, []
            for d in range(0, optin + 2049):
                if d + 2048 < bound and d % 509:
                    continue
                tried.append(d)
                if kind == "CUfunction":
                    set_ok = int(cu.cuFuncSetAttribute(fn, attr, d)[0]) == 0
                else:
                    set_ok = int(cu.cuKernelSetAttribute(attr, d, fn, dev)[0]) == 0
                vals = (np.array([int(buf)], dtype=np.uint64), np.array([d], dtype=np.uint32))
                params = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
                err = cu.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, d, 0, params.ctypes.data, 0)[0]
                launched[d] = (int(err) == 0, set_ok)
            ok(cu.cuCtxSynchronize())
            got = np.zeros(slots, dtype=np.uint32)
            ok(cu.cuMemcpyDtoH(got.ctypes.data, buf, slots * 4))
            ok(cu.cuMemFree(buf))
            ran_at = []
            for d in tried:
                want = (d * 2654435761 ^ 0x5A5A5A5A) & 0xFFFFFFFF
                ran = launched[d][0] and int(got[d]) == want
                if ran:
                    ran_at.append(d)
                if bool(guard.fits(fn, d)) != ran:
                    disagree.append(d)
            first_fail = next((d for d in tried if d not in set(ran_at)), None)
            f = guard.fits(fn, bound + 1)
            out.append({"kernel": name.decode(), "handle": kind, "guard_max_dynamic": bound, "static": f.static_bytes,
                        "optin": f.optin_bytes, "tried": len(tried), "ran": len(ran_at),
                        "real_last_ran": max(ran_at) if ran_at else None, "real_first_failed": first_fail,
                        "disagreements": disagree[:20], "reason_at_bound_plus_1": f.reason,
                        "reason_at_bound": guard.fits(fn, bound).reason})
    return {"sweeps": out}


def triton_guard() -> dict:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm, rn, rk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

    gen = torch.Generator(device="cuda").manual_seed(int(time.time()))
    size = 1024
    a = torch.randn(size, size, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16, generator=gen)
    rows = []
    for bm, bn, bk, stages in [(128, 128, 64, 3), (128, 256, 64, 3), (256, 128, 64, 4), (256, 256, 64, 3),
                               (256, 256, 64, 4), (128, 256, 128, 3), (256, 256, 128, 2), (128, 128, 128, 5),
                               (256, 128, 128, 4), (128, 128, 64, 7)]:
        c = torch.empty(size, size, device="cuda", dtype=torch.float16)
        row = {"config": f"{bm}x{bn}x{bk} stages={stages}"}
        grid = (size // bm, size // bn)
        try:
            ck = mm.warmup(a, b, c, size, size, size, BM=bm, BN=bn, BK=bk, num_stages=stages, num_warps=8, grid=grid)
            f = guard.fits(ck)
            row.update(shared=int(ck.metadata.shared), guard=bool(f), reason=f.reason, static=f.static_bytes)
        except Exception as exc:
            row["compile_error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        try:
            mm[grid](a, b, c, size, size, size, BM=bm, BN=bn, BK=bk, num_stages=stages, num_warps=8)
            torch.cuda.synchronize()
            ref = (a.double() @ b.double())
            err = float((c.double() - ref).norm() / ref.norm())
            row.update(launched=True, rel_err=err)
        except Exception as exc:
            row.update(launched=False, launch_error=f"{type(exc).__name__}: {str(exc)[:200]}")
        row["agree"] = row["guard"] == row["launched"]
        rows.append(row)
    return {"triton": triton.__version__, "torch": torch.__version__, "configs": rows}


def row_example(work: Path) -> dict:
    req = Request("(Dl+Dr+kv_len)*4", {"Dl": 512, "Dr": 64}, "kv_len")
    images = images_in(work / "row_in_smem")
    found = [k for im in images for k in kernels(im) if k.name == "row_attention"]
    (a,) = answer(images, found, profile("h200"), req)
    bound = a.solved["value"]
    text = run([str(work / "row_in_smem"), "512", "64", "1024", str(bound), str(bound + 1)])
    return {"inspect_solved_kv_len": bound, "static": a.static_smem, "run": text.strip().splitlines()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    work = args.out / "build"
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"command": "python3 tools/guard_proof/proof.py --out $OUT",
                 "nvidia_smi": run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).strip()}
    part(res, "build", lambda: build(work))
    part(res, "cpp", lambda: cpp_sweep(work))
    part(res, "inspect_vs_driver", lambda: inspect_vs_driver(work, res["cpp"].get("attributes", [])))
    part(res, "python", lambda: python_guard(work))
    part(res, "triton", triton_guard)
    part(res, "row_example", lambda: row_example(work))
    (args.out / "proof.json").write_text(json.dumps(res, indent=1) + "\n")
    for s in res.get("cpp", {}).get("sweeps", []):
        print(f"C++ {s['kernel']}: static {s['static']}, guard bound {s['guard_max_dynamic']}, real last ran "
              f"{s['real_last_ran']}, first failed {s['real_first_failed']}, {s['agree']}/{s['requests_tried']} agree")
    for s in res.get("python", {}).get("sweeps", []):
        print(f"py {s['handle']} {s['kernel']}: bound {s['guard_max_dynamic']}, real last {s['real_last_ran']}, "
              f"first failed {s['real_first_failed']}, disagreements {s['disagreements']}")
    print("inspect vs driver mismatches:", res.get("inspect_vs_driver", {}).get("mismatches"))
    for r in res.get("triton", {}).get("configs", []):
        print("triton", r)
    print("row example:", res.get("row_example"))
    for k, v in res.items():
        if isinstance(v, dict) and "error" in v:
            print(f"ERROR in {k}: {v['error']}")


if __name__ == "__main__":
    main()
