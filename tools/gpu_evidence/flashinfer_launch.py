"""On the lent GPU: run each case of fi_expected.json (tools/gpu_evidence/flashinfer_prepare.py) through FlashInfer's
own wrappers as vLLM / SGLang call them (flashinfer_case.py) under the launch shim (launch_shim.cpp, LD_PRELOAD), and
write one row per FlashInfer kernel launch: the kernel (demangled), the dynamic shared memory the launch asked for,
the MaxDynamicSharedMemorySize it set (and read back with cudaFuncGetAttributes at the launch), against the bytes
tileprobe's flashinfer-attention family gave for that kernel on this target, plus the case's fp32 reference check.

    python3 tools/gpu_evidence/flashinfer_launch.py --carry .gpu-carry --out $OUT

Steps: install the carried wheels into /tmp/site (pip --no-index --no-deps --target), unpack the slim FlashInfer into
/tmp/fipkg, build the shim, build the JIT modules the cases need (fi_expected.json "modules") in parallel, one
process each, with FlashInfer's own get_batch_prefill_module (ninja, MAX_JOBS = cores; no shim), then run all cases
in one process under the shim (a case that dies takes the rest to a process of their own each). FlashInfer links its
JIT modules with `c++ ... -lcudart` (jit/cpp_ext.py), i.e. against the shared libcudart, so the shim sees their
cudaLaunchKernel / cudaLaunchKernelExC (PDL) / cudaFuncSetAttribute calls.
"""

from __future__ import annotations

import argparse
import glob
import json
import lzma
import io
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE, PKG, WS = Path("/tmp/site"), Path("/tmp/fipkg"), Path("/tmp/fiws")

BUILD_SCRIPT = r'''
import json, sys, time, traceback
t = time.time()
import torch
import flashinfer
from flashinfer.prefill import get_batch_prefill_module
backend, hd = sys.argv[1], int(sys.argv[2])
bf = torch.bfloat16
args = (bf, bf, bf, torch.int32, hd, hd, 0, False, False, False)
rec = {"backend": backend, "head_dim": hd}
try:
    get_batch_prefill_module(backend, *args)
    rec["ok"] = True
except Exception as exc:
    rec["ok"] = False
    rec["error"] = (f"{type(exc).__name__}: {exc}")[-6000:]
from flashinfer.jit.attention import modules as m
spec = (m._gen_batch_prefill_primary_module if backend == "fa2" else m.gen_batch_prefill_module)(backend, *args)
rec["uri"] = spec.name
try:
    text = spec.ninja_path.read_text()
    rec["cuda_arch_flags"] = [ln.strip(" $") for ln in text.split("cuda_arch_flags =", 1)[1].split("ldflags", 1)[0]
                              .splitlines() if ln.strip(" $")]
    rec["ldflags"] = " ".join(ln.strip(" $") for ln in text.split("ldflags =", 1)[1].split("rule", 1)[0].splitlines())
    rec["nvcc"] = next((ln.split("=", 1)[1].strip() for ln in text.splitlines() if ln.startswith("nvcc =")), None)
    rec["cuda_home"] = next((ln.split("=", 1)[1].strip() for ln in text.splitlines() if ln.startswith("cuda_home =")), None)
except Exception as exc:
    rec["ninja_error"] = repr(exc)
rec["seconds"] = round(time.time() - t, 1)
print("BUILD " + json.dumps(rec), flush=True)
'''


def parse_args_list(s: str) -> list[str]:
    """Top-level template arguments of the first `<...>` in s."""
    depth, cur, out = 0, "", []
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">":
            depth -= 1
            if depth == 0:
                out.append(cur.strip())
                return out
        elif ch == "," and depth == 1:
            out.append(cur.strip())
            cur = ""
            continue
        if depth >= 1:
            cur += ch
    return out


def _int(a: str) -> int | None:
    m = re.fullmatch(r"(?:\([\w:]+\))?\s*(\d+)[uUlL]*", a.strip())
    return int(m.group(1)) if m else None


def classify(name: str) -> dict:
    """The launched kernel in the family's terms."""
    i = name.find("AttentionKernelTraits<")
    if "PrefillWithKVCacheKernel" in name and i >= 0:
        a = parse_args_list(name[i:])
        return {"kind": "fa3", "head_dim_qk": _int(a[1]), "head_dim_vo": _int(a[2]), "cta_q": _int(a[3]),
                "cta_kv": _int(a[4]), "stages": _int(a[5])}
    i = name.find("KernelTraits<")
    for fn, kind in (("BatchPrefillWithPagedKVCacheKernel", "fa2-paged"),
                     ("BatchPrefillWithRaggedKVCacheKernel", "fa2-ragged")):
        if fn in name and i >= 0:
            a = parse_args_list(name[i:])
            return {"kind": kind, "mask_mode": a[0], "cta_tile_q": _int(a[1]), "num_mma_q": _int(a[2]),
                    "num_mma_kv": _int(a[3]), "num_mma_d_qk": _int(a[4]), "num_mma_d_vo": _int(a[5]),
                    "num_warps_q": _int(a[6]), "num_warps_kv": _int(a[7])}
    if "MergeStates" in name or "AttentionSum" in name:
        return {"kind": "merge"}
    if "BatchDecodeWithPagedKVCacheKernel" in name:
        return {"kind": "decode-cuda-cores"}
    return {"kind": "other"}


def expected_for(case: dict, k: dict) -> tuple[int | None, str]:
    """(tileprobe's dynamic bytes for this launched kernel, how it was matched)."""
    if k["kind"] == "fa2-paged" and case.get("fa2_tiles"):
        t = case["fa2_tiles"].get(str(k["cta_tile_q"]))
        if t is None:
            return None, f"the family names no CTA_TILE_Q={k['cta_tile_q']} for this call"
        how = f"family CTA_TILE_Q={k['cta_tile_q']}: NUM_MMA_KV={t['num_mma_kv']}"
        if t["num_mma_kv"] != k["num_mma_kv"]:
            how += f" (launched NUM_MMA_KV={k['num_mma_kv']})"
        return t["bytes"], how
    fa3 = case.get("fa3") or case.get("fa3_paged_reference")
    if k["kind"] == "fa3" and fa3:
        how = f"family FA3 CTA_Q={fa3['cta_q']} CTA_KV={fa3['cta_kv']} stages={fa3['stages']}"
        if (fa3["cta_q"], fa3["cta_kv"], fa3["stages"]) != (k["cta_q"], k["cta_kv"], k["stages"]):
            how += f" (launched CTA_Q={k['cta_q']} CTA_KV={k['cta_kv']} stages={k['stages']})"
        return fa3["bytes"], how
    if k["kind"] == "fa2-ragged" and case.get("fa2_tiles"):
        t = case["fa2_tiles"].get(str(k["cta_tile_q"]))
        return (t["bytes"] if t else None), "family's FA2 *paged* bytes for the tile (the ragged kernel is not sized)"
    return None, "not sized by the family"


def curand_include(cuda: str) -> tuple[str | None, str]:
    """FlashInfer's FA3 sources include cutlass/util/.../tensor_fill.h, which includes <curand_kernel.h>: the
    toolkit's, else the pip nvidia-curand wheel's headers (linked into a folder of their own)."""
    if Path(cuda, "include", "curand_kernel.h").is_file():
        return None, f"{cuda}/include/curand_kernel.h"
    for d in sys.path:
        for sub in ("nvidia/cu13/include", "nvidia/curand/include", "nvidia/cu12/include"):
            if Path(d, sub, "curand_kernel.h").is_file():
                inc = Path("/tmp/fi_curand_inc")
                inc.mkdir(exist_ok=True)
                for h in Path(d, sub).glob("curand*.h"):
                    if not (inc / h.name).exists():
                        (inc / h.name).symlink_to(h)
                return str(inc), f"{d}/{sub} (linked into {inc}; FLASHINFER_EXTRA_CUDAFLAGS=-I{inc})"
    return None, "none found (FA3 modules will not compile)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--carry", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run (builds + cases)")
    ap.add_argument("--arch-list", default=None, help="FLASHINFER_CUDA_ARCH_LIST (default: FlashInfer's own pick "
                                                      "from the visible GPU)")
    args = ap.parse_args()
    t0 = time.time()
    left = lambda: args.budget - (time.time() - t0)  # noqa: E731
    args.out.mkdir(parents=True, exist_ok=True)
    exp = json.loads((args.carry / "fi_expected.json").read_text())
    wheels = sorted(glob.glob(str(args.carry / "fi_wheels" / "*.whl")))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(SITE), *wheels], check=True, timeout=300)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress((args.carry / "fi_pkg.tar.xz").read_bytes()))) as t:
        t.extractall(PKG)
    cuda = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    shim = Path("/tmp/launch_shim.so")
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", f"-I{cuda or '/usr/local/cuda'}/include",
                    str(HERE / "launch_shim.cpp"), "-o", str(shim), "-ldl"], check=True, timeout=300)
    cores = os.cpu_count() or 16
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(SITE), str(PKG)] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])), "FLASHINFER_WORKSPACE_BASE": str(WS),
        "MAX_JOBS": str(cores), "PYTHONUNBUFFERED": "1"}
    if cuda:
        env["CUDA_HOME"] = cuda
    if args.arch_list:
        env["FLASHINFER_CUDA_ARCH_LIST"] = args.arch_list
    inc, curand_from = curand_include(cuda or "/usr/local/cuda")
    if inc:
        env["FLASHINFER_EXTRA_CUDAFLAGS"] = (env.get("FLASHINFER_EXTRA_CUDAFLAGS", "") + f" -I{inc}").strip()
    import torch  # noqa: PLC0415 - the device's torch, for the record
    nvcc_v = subprocess.run([f"{cuda}/bin/nvcc" if cuda else "nvcc", "--version"], capture_output=True,
                            text=True).stdout.strip().splitlines()[-1:]
    env_rec = {"device": torch.cuda.get_device_name(0), "cc": ".".join(map(str, torch.cuda.get_device_capability(0))),
               "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
               "nvcc": nvcc_v[0] if nvcc_v else None, "cores": cores, "flashinfer_wheel": exp["flashinfer_wheel"],
               "wheels": exp["wheels"], "curand_kernel_h": curand_from}
    print(json.dumps(env_rec), flush=True)

    # ---- JIT builds: one process per module, all at once ------------------------------------------------------------
    builds, procs = [], []
    tb = time.time()
    for backend, hd in exp["modules"]:
        procs.append(subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, backend, str(hd)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for (backend, hd), p in zip(exp["modules"], procs):
        try:
            out, _ = p.communicate(timeout=max(10.0, left() - 90))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            builds.append({"backend": backend, "head_dim": hd, "ok": False, "error": "build timed out",
                           "log_tail": out[-3000:]})
            continue
        rec = next((json.loads(ln[6:]) for ln in out.splitlines() if ln.startswith("BUILD ")), None)
        builds.append(rec or {"backend": backend, "head_dim": hd, "ok": False, "error": "no result",
                              "log_tail": out[-3000:]})
        if rec and not rec.get("ok"):
            rec["log_tail"] = out[-3000:]
    build_s = round(time.time() - tb, 1)
    print(json.dumps({"builds_seconds": build_s, "builds": [{k: b.get(k) for k in (
        "backend", "head_dim", "ok", "seconds", "cuda_arch_flags", "error")} for b in builds]}), flush=True)

    # ---- the cases, under the shim ----------------------------------------------------------------------------------
    logs = Path("/tmp/fi_logs")
    logs.mkdir(exist_ok=True)
    specs = []
    for n, case in enumerate(exp["cases"]):
        log = logs / f"{case['id']}.jsonl"
        log.unlink(missing_ok=True)
        specs.append({**case, "heads": exp["heads"], "kv_heads": exp["kv_heads"], "seed": 2000 + n, "log": str(log)})
    results: dict[str, dict] = {}
    shim_log = logs / "_process.jsonl"  # the shim's own line, and anything before the first case's run()
    shim_log.unlink(missing_ok=True)
    case_env = env | {"LD_PRELOAD": str(shim), "TILEPROBE_LAUNCH_LOG": str(shim_log), "CUDA_MODULE_LOADING": "LAZY"}

    def run(batch: list[dict]) -> str:
        try:
            p = subprocess.run([sys.executable, str(HERE / "flashinfer_case.py"), json.dumps(batch)],
                               capture_output=True, text=True, timeout=max(20.0, left() - 15), env=case_env)
            text = p.stdout + "\n" + p.stderr
        except subprocess.TimeoutExpired as exc:
            text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            text += "\n[timed out]"
        for ln in text.splitlines():
            if ln.startswith("CASE "):
                r = json.loads(ln[5:])
                results[r["id"]] = r
        return text

    tail = run(specs)
    for s in specs:  # a case the shared process never reported: once more, alone
        if s["id"] not in results and left() > 40:
            one = run([s])
            if s["id"] not in results:
                results[s["id"]] = {"id": s["id"], "ok": False, "error": "no result", "log_tail": one[-3000:]}
    rows, failures, raw = [], 0, []
    for case in specs:
        check = results.get(case["id"], {"ok": False, "error": "no result", "log_tail": tail[-3000:]})
        log = Path(case["log"])
        events = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.exists() else []
        fi = [e for e in events if "flashinfer" in e.get("name", "")]
        raw.extend({"case": case["id"], **e} for e in fi)
        launches = [e for e in fi if e["event"] == "launch"]
        sets: dict[str, int] = {}
        for e in fi:
            if e["event"] == "set_max_dynamic":
                sets[e["name"]] = e["value"]
        base = {"case": case["id"], "engine": case["engine"], "engine_label": case["engine_label"],
                "phase": case["phase"], "wrapper": case["wrapper"], "backend_asked": case["backend"],
                "backend_resolved": check.get("resolved_backend"), "family_route": case["family_route"],
                "head_dim": case["head_dim"], "batch": case["batch"], "new_tokens": case["new"],
                "context": case["context"], "page_size": case["page_size"], "plan_info": check.get("plan_info"),
                "check": {k: check.get(k) for k in ("ok", "max_abs_err", "out_finite", "error")},
                "tileprobe_kernel": case["tileprobe_kernel"], "tileprobe_verdict": case["verdict"]}
        if not launches:
            failures += case["sized"]
            rows.append({**base, "error": check.get("error") or "no FlashInfer launch recorded",
                         "traceback": check.get("traceback") or check.get("log_tail"),
                         "shim_loaded": shim_log.exists() and "shim-loaded" in shim_log.read_text(),
                         "events": events[:5]})
            continue
        for e in launches:
            k = classify(e["name"])
            want, how = expected_for(case, k)
            family_kernel = (k["kind"] == "fa2-paged" and case["family_route"] == "fa2") or \
                            (k["kind"] == "fa3" and case["family_route"] == "fa3")
            sized = case["sized"] and family_kernel
            match = (want == e["value"]) if want is not None else None
            if sized:
                failures += not (match and check.get("ok"))
            rows.append({**base, "kernel": k, "kernel_demangled": e["name"], "api": e.get("api"),
                         "launch_attrs": e.get("launch_attrs"), "grid_ctas": e.get("extra"),
                         "launch_dynamic_smem": e["value"], "set_max_dynamic": sets.get(e["name"]),
                         "max_dynamic_readback": e.get("max_dynamic"), "static_smem": e.get("static_smem"),
                         "tileprobe_dynamic": want, "tileprobe_match_basis": how, "match": match,
                         "counted": sized})
        if case["sized"] and not any(r.get("counted") for r in rows if r["case"] == case["id"]):
            failures += 1  # the family's kernel never launched for a call it sizes
            rows.append({**base, "error": "no launch of the kernel the family names",
                         "launched": sorted({classify(e['name'])['kind'] for e in launches})})
    meta = {**env_rec, "builds_seconds": build_s, "builds": builds, "total_seconds": round(time.time() - t0, 1)}
    (args.out / "fi_launches.jsonl").write_text("".join(json.dumps({**r, "env": env_rec}) + "\n" for r in rows))
    (args.out / "fi_run.json").write_text(json.dumps({"meta": meta, "cases": list(results.values())}, indent=1))
    (args.out / "fi_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in raw))
    for r in rows:
        k = r.get("kernel") or {}
        print(json.dumps({"case": r["case"], "kind": k.get("kind"), "tile": k.get("cta_tile_q") or k.get("cta_q"),
                          "nkv": k.get("num_mma_kv") or k.get("cta_kv"), "api": r.get("api"),
                          "dyn": r.get("launch_dynamic_smem"), "set": r.get("set_max_dynamic"),
                          "tp": r.get("tileprobe_dynamic"), "match": r.get("match"), "counted": r.get("counted"),
                          "resolved": r.get("backend_resolved"), "err": (r["check"].get("max_abs_err")),
                          "error": r.get("error")}))
    print(f"{len(rows)} rows, {failures} counted failures, {meta['total_seconds']} s (builds {build_s} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
