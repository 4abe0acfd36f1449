"""Prepare the FlashInfer attention launch evidence for the lent GPU (run here, no GPU needed): a slim FlashInfer of
the release vLLM pins (its Python package, the headers and csrc sources its batch-prefill JIT modules compile from),
the wheels `import flashinfer` needs that the device image lacks, and what tileprobe's flashinfer-attention family
answers for the same calls on the device's target.

Writes, under --out (the ignored .gpu-carry/):
- fi_pkg.tar.xz: flashinfer/ (every .py outside the big unrelated subpackages, plus those the kept modules import at
  module level; small package data), its dist-info, and data/{include/flashinfer, cutlass/include,
  cutlass/tools/util/include, cccl/libcudacxx/include} and data/csrc/{batch_prefill*, batch_decode*,
  tvm_ffi_utils.h}. Dropped: every prebuilt cubin / large unrelated source, data/cccl/{cub,thrust}, data/spdlog (no
  batch-prefill source includes them: `nvcc -M` of all 40 sources of the four modules, run here, reads none).
- fi_wheels/*.whl: apache-tvm-ffi at vLLM's pin (FlashInfer 0.7 loads its JIT modules through tvm_ffi); every other
  Requires-Dist that `import flashinfer` and the wrappers import is in the device image (KINDS.md), and the rest
  (cuda-tile, nccl4py, nccl-extensions, nvidia-cudnn-frontend, nvidia-cutlass-dsl) are optional at import.
- fi_expected.json: the cases, the JIT modules they need (backend, head dim), and per case the family's answer
  (kernel, bytes text, per-tile dynamic bytes).

    python tools/gpu_evidence/flashinfer_prepare.py --out .gpu-carry [--verify]

--verify (here, CPU): unpacks the tarball, installs tvm-ffi for this interpreter into a temp target, and in a
`python -S` whose path holds only that, the slim package and this interpreter's site-packages minus FlashInfer,
tvm_ffi and the packages the device lacks, runs `import flashinfer`, imports the wrappers, generates the JitSpec of
each module (FLASHINFER_CUDA_ARCH_LIST=9.0a), checks its sources and include folders exist, and (with nvcc here)
preprocesses one paged kernel source of each module with the module's own nvcc flags (`-M`).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HEADS, KV_HEADS = 32, 8
# Subpackages of flashinfer/ whose .py files are left out unless a kept module imports them at module level.
DROP_DIRS = ("experimental/", "moe_ep/", "fused_moe/", "comm/", "diffusion_ops/", "gdn_kernels/", "kda_kernels/",
             "data/")
DATA_DIRS = ("data/include/flashinfer/", "data/cutlass/include/", "data/cutlass/tools/util/include/",
             "data/cccl/libcudacxx/include/")
CSRC = re.compile(r"data/csrc/(batch_prefill[^/]*|batch_decode[^/]*|tvm_ffi_utils\.h)$")
PKG_DATA = (".json", ".typed")
# Requires-Dist of flashinfer-python that the device image holds (KINDS.md "Python packages already there") or that
# `import flashinfer` treats as optional; everything else is downloaded as a wheel.
ON_DEVICE = {"click", "cuda-python", "einops", "ninja", "numpy", "nvidia-ml-py", "packaging", "requests", "tabulate",
             "torch", "tqdm"}
OPTIONAL = {"cuda-tile", "nccl-extensions", "nccl4py", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl"}
# Top-level modules the device lacks (hidden from --verify's interpreter).
ABSENT_ON_DEVICE = ("flashinfer", "tvm_ffi", "cutlass", "cudnn", "cutile_cache", "nccl", "nvidia_cutlass_dsl")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")

# (id, engine, phase, wrapper, backend as the engine passes it, head dim, batch, new tokens, context, page size,
#  sized: the family sizes this call's kernel)
CASES = [
    ("vllm-prefill-128", "vllm", "prefill", "prefill-paged", "auto", 128, 2, 300, 0, 16, True),
    ("vllm-decode-64", "vllm", "decode", "decode", "auto", 64, 4, 1, 1000, 16, True),
    ("vllm-decode-128", "vllm", "decode", "decode", "auto", 128, 4, 1, 1000, 16, True),
    ("sglang-prefill-paged-64", "sglang", "prefill", "prefill-paged", "fa2", 64, 2, 300, 0, 1, True),
    ("sglang-prefill-paged-128", "sglang", "prefill", "prefill-paged", "fa2", 128, 2, 300, 0, 1, True),
    ("sglang-decode-64", "sglang", "decode", "decode", "fa2", 64, 4, 1, 1000, 1, True),
    ("sglang-decode-128", "sglang", "decode", "decode", "fa2", 128, 4, 1, 1000, 1, True),
    # SGLang's extend with no cached prefix runs its ragged wrapper (backend "auto": FA3 on SM90), which the family
    # does not size: observed for the record, compared with the family's FA3 paged bytes for the head dim.
    ("sglang-prefill-ragged-128", "sglang", "prefill", "prefill-ragged", "auto", 128, 2, 300, 0, 1, False),
]
# vLLM's prefill at head dim 64 is FA3 too: a fourth JIT module (about 2 more minutes of nvcc): opt-in.
EXTRA_FA3_64 = ("vllm-prefill-64", "vllm", "prefill", "prefill-paged", "auto", 64, 2, 300, 0, 16, True)
MODULES = [["fa2", 64], ["fa2", 128], ["fa3", 128]]


# ---- the slim package -----------------------------------------------------------------------------------------------

def _module_imports(src: str, modname: str, is_pkg: bool) -> set[str]:
    """Absolute names of the flashinfer modules `src` imports at module level (function bodies skipped)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    base = modname.split(".") if is_pkg else modname.split(".")[:-1]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("flashinfer"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parent = base[: len(base) - (child.level - 1)]
                    mod = ".".join(parent + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.startswith("flashinfer"):
                    out.add(mod)
                    out.update(f"{mod}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return out


def select_files(names: list[str], read) -> list[str]:
    """The wheel members to carry."""
    py = {n for n in names if n.startswith("flashinfer/") and n.endswith(".py")}
    mod_of = {}
    for n in py:
        rel = n[: -len(".py")]
        is_pkg = rel.endswith("/__init__")
        mod = rel[: -len("/__init__")] if is_pkg else rel
        mod_of[mod.replace("/", ".")] = (n, is_pkg)
    keep = {n for n in py if not n[len("flashinfer/"):].startswith(DROP_DIRS)}
    todo = list(keep)
    while todo:  # module-level import closure into the dropped subpackages
        n = todo.pop()
        rel = n[: -len(".py")]
        is_pkg = rel.endswith("/__init__")
        mod = (rel[: -len("/__init__")] if is_pkg else rel).replace("/", ".")
        for imp in _module_imports(read(n).decode(errors="replace"), mod, is_pkg):
            parts = imp.split(".")
            for i in range(1, len(parts) + 1):  # the module and every package above it
                hit = mod_of.get(".".join(parts[:i]))
                if hit and hit[0] not in keep:
                    keep.add(hit[0])
                    todo.append(hit[0])
    other = {n for n in names if n.startswith("flashinfer/") and n.endswith(PKG_DATA)
             and not n[len("flashinfer/"):].startswith(DROP_DIRS)}
    data = {n for n in names if n.startswith("flashinfer/") and (n[len("flashinfer/"):].startswith(DATA_DIRS)
                                                                 or CSRC.match(n[len("flashinfer/"):]))}
    meta = {n for n in names if re.match(r"flashinfer_python-[^/]+\.dist-info/(METADATA|WHEEL|top_level\.txt|"
                                         r"entry_points\.txt)$", n)}
    return sorted(keep | other | data | meta)


def build_tarball(wheel: Path, out: Path) -> dict:
    with zipfile.ZipFile(wheel) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        sel = select_files(names, z.read)
        buf = io.BytesIO()
        raw = 0
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for n in sel:
                payload = z.read(n)
                raw += len(payload)
                info = tarfile.TarInfo(n)
                info.size, info.mode, info.mtime = len(payload), 0o644, 0
                tar.addfile(info, io.BytesIO(payload))
    out.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    groups: dict[str, int] = {}
    for n in sel:
        key = "python" if n.endswith(".py") else ("data/" + n.split("/")[2] if "/data/" in n else "other")
        groups[key] = groups.get(key, 0) + 1
    return {"files": len(sel), "raw_bytes": raw, "xz_bytes": out.stat().st_size, "by_kind": groups}


# ---- wheels ---------------------------------------------------------------------------------------------------------

def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheels_needed(fi_wheel: Path, vllm_wheel: Path) -> list[str]:
    """name==version of each FlashInfer requirement to carry: not extra-only, not on the device, not optional;
    at vLLM's exact pin where it has one."""
    vllm_pins = {}
    for req in _requires(vllm_wheel):
        m = re.match(r"([A-Za-z0-9_.\-]+)\s*==\s*([^;,\s]+)\s*$", req)
        if m:
            vllm_pins[_canon(m.group(1))] = m.group(2)
    out = []
    for req in _requires(fi_wheel):
        if "extra ==" in req:
            continue
        name = _canon(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
        if name in ON_DEVICE or name in OPTIONAL:
            continue
        if name not in vllm_pins:
            raise SystemExit(f"{req}: not pinned by vLLM and not known to be on the device; add it to ON_DEVICE, "
                             "OPTIONAL or pin it here")
        out.append(f"{name}=={vllm_pins[name]}")
    return out


def download(specs: list[str], dest: Path, python: str = "3.12") -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest),
               spec]
        subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


# ---- the family's answers -----------------------------------------------------------------------------------------

def expected(cases, vllm_wheel: Path, sglang_wheel: Path, target: str) -> list[dict]:
    from tileprobe.audit.path.call import Context, KernelCall
    from tileprobe.audit.path.families import flashinfer_attention as fa
    from tileprobe.backends.triton.toolchain import cache_root
    from tileprobe.engines.triton_configs import find_engine
    from tileprobe.targets import PROFILES

    srcs = {"vllm": find_engine("vllm", str(vllm_wheel)), "sglang": find_engine("sglang", str(sglang_wheel))}
    ctxs = {e: Context(PROFILES[target], s, cache_root(None)) for e, s in srcs.items()}
    fa3_ref: dict[int, dict] = {}
    out = []
    for cid, engine, phase, wrapper, backend, d, batch, new, context, page, sized in cases:
        params = dict(heads=HEADS, kv_heads=KV_HEADS, head_dim=d, head_dim_v=d, dtype="bf16", kv_cache_dtype="auto",
                      page_size=page, window=None, softcap=0.0, sinks=False, causal=True)
        eng, ctx = srcs[engine], ctxs[engine]
        call = KernelCall("attention (full)", phase, fa.NAME, "FLASHINFER", params, "tools/gpu_evidence", eng.label())
        a = fa.answer(call, ctx)
        kind, chosen = fa.route(call, ctx, fa.Shape(call))
        row = {"id": cid, "engine": engine, "engine_label": eng.label(), "phase": phase, "wrapper": wrapper,
               "backend": backend, "head_dim": d, "batch": batch, "new": new, "context": context, "page_size": page,
               "sized": sized, "family_route": kind, "family_route_why": chosen, "tileprobe_kernel": a.kernel,
               "tileprobe_bytes": a.bytes.answer, "tileprobe_smem": a.smem_bytes,
               "verdict": str(a.verdict(ctx.target)), "notes": list(a.notes), "target": target}
        if kind == "fa2":
            rx = r"CTA_TILE_Q=(\d+) \([^;]*?\): NUM_MMA_KV=(\d+) .*?sizeof\(SharedStoragePaged\) = (\d+) B"
            row["fa2_tiles"] = {t: {"num_mma_kv": int(k), "bytes": int(b)} for t, k, b in
                                re.findall(rx, a.bytes.answer)}
        elif kind == "fa3":
            m = re.search(r"CTA_Q=(\d+) CTA_KV=(\d+) stages=(\d+)", a.kernel)
            row["fa3"] = {"cta_q": int(m.group(1)), "cta_kv": int(m.group(2)), "stages": int(m.group(3)),
                          "bytes": a.smem_bytes} if m else None
            fa3_ref[d] = row["fa3"]
        out.append(row)
    for row in out:  # the informational ragged FA3 rows: the family's FA3 paged numbers for the head dim
        if not row["sized"] and row["head_dim"] in fa3_ref:
            row["fa3_paged_reference"] = fa3_ref[row["head_dim"]]
    return out


# ---- local verification -------------------------------------------------------------------------------------------

VERIFY_SCRIPT = r'''
import json, os, re, subprocess, sys, time
t = time.time()
import torch
import flashinfer
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper
from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper
from flashinfer.jit.attention import modules as m
from flashinfer.jit import env as jit_env
res = {"import_s": round(time.time() - t, 1), "flashinfer": flashinfer.__version__, "file": flashinfer.__file__,
       "absent_imported": [n for n in sys.argv[2].split(",") if n in sys.modules], "modules": []}
import tvm_ffi
res["tvm_ffi"] = tvm_ffi.__file__
bf = torch.bfloat16
# left out of the slim package on purpose (no batch-prefill source includes them; nvcc ignores a missing -I)
DROPPED = ("data/cccl/cub", "data/cccl/thrust", "data/spdlog/include")
for backend, hd in json.loads(sys.argv[1]):
    args = (bf, bf, bf, torch.int32, hd, hd, 0, False, False, False)
    spec = (m._gen_batch_prefill_primary_module if backend == "fa2" else m.gen_batch_prefill_module)(backend, *args)
    spec.write_ninja()
    text = spec.ninja_path.read_text()
    incs = re.findall(r"(?:-I|-isystem )(\S+)", text)
    pkg_incs = [p for p in incs if "/flashinfer/" in p]
    row = {"backend": backend, "head_dim": hd, "name": spec.name, "sources": len(spec.sources),
           "missing_sources": [str(s) for s in spec.sources if not os.path.exists(s)],
           "missing_include_dirs": [p for p in pkg_incs if not os.path.isdir(p) and not p.endswith(DROPPED)],
           "dropped_include_dirs": [p for p in pkg_incs if not os.path.isdir(p) and p.endswith(DROPPED)]}
    if sys.argv[3] == "1":  # preprocess one paged kernel source with the module's own nvcc flags
        src = next(s for s in spec.sources if "paged" in s.name and "mask_1" in s.name)
        cmd = subprocess.run(["ninja", "-C", str(spec.ninja_path.parent), "-f", spec.ninja_path.name, "-t",
                              "commands"], capture_output=True, text=True).stdout
        line = next(ln for ln in cmd.splitlines() if str(src) in ln and " -c " in ln)
        line = re.sub(r"--generate-dependencies-with-compile -MF \S+", "", line)
        line = re.sub(r" -c (\S+) -o \S+", r" -M \1", line)
        extra = os.environ.get("TP_VERIFY_EXTRA_INC")
        if extra:
            line = line.replace(" -M ", f" -I{extra} -M ", 1)
        p = subprocess.run(line, shell=True, capture_output=True, text=True)
        deps = re.findall(r"\S+", p.stdout.replace("\\\n", " "))
        row["nvcc_M"] = {"source": src.name, "rc": p.returncode, "error": p.stderr[-600:] if p.returncode else "",
                         "flashinfer_headers": sum("/flashinfer/data/" in d for d in deps)}
    res["modules"].append(row)
print(json.dumps(res))
'''


def verify(tarball: Path, modules: list, headers: bool, extra_inc: str | None) -> dict:
    import site
    import sysconfig
    tmp = Path(tempfile.mkdtemp(prefix="fi-verify-"))
    try:
        pkg, target, fake = tmp / "pkg", tmp / "site", tmp / "devsite"
        with tarfile.open(fileobj=io.BytesIO(lzma.decompress(tarball.read_bytes()))) as t:
            t.extractall(pkg, filter="data") if sys.version_info >= (3, 12) else t.extractall(pkg)
        pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
        whl_dir = tmp / "wheels"
        specs = [p.name.split("-")[0].replace("_", "-") + "==" + p.name.split("-")[1]
                 for p in sorted((tarball.parent / "fi_wheels").glob("*.whl"))]
        wheels = download(specs, whl_dir, pyver)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--target", str(target), *map(str, wheels)], check=True)
        # this interpreter's packages, minus FlashInfer, tvm_ffi and what the device lacks
        fake.mkdir()
        sp = Path(sysconfig.get_paths()["purelib"])
        absent_dists = ("flashinfer", "apache_tvm_ffi", "cuda_tile", "nvidia_cudnn_frontend", "nvidia_cutlass",
                        "nccl")
        for f in sp.iterdir():
            if f.name in ABSENT_ON_DEVICE or f.suffix == ".pth" or f.name.startswith(absent_dists) \
                    or f.name == "cuda":
                continue
            (fake / f.name).symlink_to(f)
        if (sp / "cuda").is_dir():  # cuda.bindings / cuda.core / cuda.pathfinder are on the device; cuda.tile not
            (fake / "cuda").mkdir()
            for f in (sp / "cuda").iterdir():
                if f.name != "tile":
                    (fake / "cuda" / f.name).symlink_to(f)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FLASHINFER"))}
        env |= {"PYTHONPATH": os.pathsep.join([str(target), str(pkg), str(fake)]),
                "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "FLASHINFER_WORKSPACE_BASE": str(tmp / "ws")}
        if extra_inc:
            env["TP_VERIFY_EXTRA_INC"] = extra_inc
        p = subprocess.run([sys.executable, "-S", "-c", VERIFY_SCRIPT, json.dumps(modules),
                            ",".join(("cutlass", "cudnn", "nccl", "cuda.tile")), "1" if headers else "0"],
                           capture_output=True, text=True, env=env, timeout=1800, cwd=tmp)
        if p.returncode != 0:
            return {"ok": False, "error": (p.stderr or p.stdout)[-3000:]}
        res = json.loads(p.stdout.strip().splitlines()[-1])
        res["ok"] = (not res["absent_imported"] and "/pkg/flashinfer/" in res["file"]
                     and str(target) in res["tvm_ffi"]
                     and all(not r["missing_sources"] and not r["missing_include_dirs"]
                             and r.get("nvcc_M", {"rc": 0})["rc"] == 0 for r in res["modules"]))
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wheels", type=Path, default=Path.home() / ".cache" / "tileprobe" / "wheels",
                    help="folder holding the engine and FlashInfer wheels")
    ap.add_argument("--vllm-wheel", default="vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    ap.add_argument("--sglang-wheel", default="sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")
    ap.add_argument("--flashinfer-wheel", default=None, help="default: the release the vLLM wheel pins")
    ap.add_argument("--target", default="h100")
    ap.add_argument("--with-fa3-hd64", action="store_true",
                    help="also vLLM's hd-64 prefill (a fourth JIT module, FA3 hd 64: about 2 more build minutes)")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--verify-headers", action="store_true", help="with --verify: nvcc -M one source per module")
    ap.add_argument("--verify-extra-include", default=None,
                    help="with --verify-headers: a folder holding curand_kernel.h when this CUDA has none (the FA3 "
                         "sources include it through cutlass/util)")
    args = ap.parse_args()
    vllm_wheel = args.wheels / args.vllm_wheel
    sglang_wheel = args.wheels / args.sglang_wheel
    if args.flashinfer_wheel:
        fi_wheel = Path(args.flashinfer_wheel)
        fi_wheel = fi_wheel if fi_wheel.is_file() else args.wheels / fi_wheel
    else:
        pin = next(re.match(r"flashinfer-python\s*==\s*(\S+)", r).group(1) for r in _requires(vllm_wheel)
                   if re.match(r"flashinfer-python\s*==", r))
        fi_wheel = next(args.wheels.glob(f"flashinfer_python-{pin}-*.whl"))
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("fi_*"):
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    tar = args.out / "fi_pkg.tar.xz"
    stats = build_tarball(fi_wheel, tar)
    specs = wheels_needed(fi_wheel, vllm_wheel)
    wheels = download(specs, args.out / "fi_wheels")
    cases = CASES + ([EXTRA_FA3_64] if args.with_fa3_hd64 else [])
    modules = MODULES + ([["fa3", 64]] if args.with_fa3_hd64 else [])
    exp = {"flashinfer_wheel": fi_wheel.name, "wheels": [w.name for w in wheels], "modules": modules,
           "heads": HEADS, "kv_heads": KV_HEADS, "package": stats,
           "cases": expected(cases, vllm_wheel, sglang_wheel, args.target)}
    (args.out / "fi_expected.json").write_text(json.dumps(exp, indent=1))
    sizes = {p.name: p.stat().st_size for p in sorted(args.out.rglob("fi_*")) if p.is_file()}
    sizes |= {f"fi_wheels/{w.name}": w.stat().st_size for w in wheels}
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(json.dumps({"package": stats, "sizes": sizes, "fi_total": sum(sizes.values()),
                      "gpu_carry_total": total}, indent=1))
    for c in exp["cases"]:
        print(c["id"], c["family_route"], c["tileprobe_kernel"], c.get("fa2_tiles") or c.get("fa3")
              or c.get("fa3_paged_reference"))
    if args.verify:
        res = verify(tar, modules, args.verify_headers, args.verify_extra_include)
        print(json.dumps({"verify": res}, indent=1))
        if not res.get("ok"):
            sys.exit(1)


if __name__ == "__main__":
    main()
