"""Compile SGLang's own SM120 NVFP4 MoE kernel (the small-M "MTP" MMA kernel, not CUTLASS) from its wheel and record
each entry's shared memory as ptxas reports it.

usage: python tools/sglang_mtp_smem.py OUT_DIR --target rtx-pro-6000 [--wheel PATH] [--version 0.5.23]
Writes OUT_DIR/engine_rows.jsonl (one row per kernel entry and weight layout) and OUT_DIR/command.json (the
command). These are not tileprobe result rows (no CUTLASS config; the row schema does not apply).

What SGLang 0.5.23 runs for NVFP4 MoE on SM120 (read from its python package): `--moe-runner-backend cutlass` is
refused for NVFP4 ("not supported for NVFP4 MoE. Use --moe-runner-backend flashinfer_cutlass"); the flashinfer_cutlass
backend calls FlashInfer's CUTLASS fused MoE (tileprobe family flashinfer-moe), except that on SM120, for a non-gated
relu2 MoE with EP = TP = 1, `sglang.kernels.ops.gemm.sm120_nvfp4_moe.try_nvfp4_moe` first tries its own JIT kernel
`Sm120Nvfp4MoeMtpMma` (csrc/gemm/sm120_nvfp4_moe_mtp_mma.cuh) for 1..4 tokens of one model shape (hidden 1024,
expert intermediate 1344, 512 experts, top-22). Its shared memory is static (`__shared__` arrays), so ptxas states it.

The wheel is downloaded with `pip download --no-deps sglang==VERSION` into a temporary folder (never committed)
unless --wheel names one; the template arguments are read from the wheel's sm120_nvfp4_moe.py (`make_cpp_args(...)`),
and the kernel is compiled the way its JIT does (-O3, -DSGL_CUDA_ARCH, C++20, the wheel's include folders plus
tvm-ffi's headers) for the target's arch.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import tvm_ffi

from tileprobe.targets import profile

OP = "sglang/kernels/ops/gemm/sm120_nvfp4_moe.py"
JIT = "sglang/kernels/jit/"
HEADER = "gemm/sm120_nvfp4_moe_mtp_mma.cuh"
COMPILE_TIMEOUT_S = 1200
_ARGS = re.compile(r"make_cpp_args\(([^)]*pair_layout)\)")
_PTXAS = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'\n(?:ptxas info\s*: Function properties[^\n]*\n"
                    r"(?:[^\n]*\n)*?)?ptxas info\s*: Used (\d+) registers([^\n]*)", re.M)
_SMEM = re.compile(r"(\d+) bytes smem")


def _download(version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", f"sglang=={version}",
           "-d", str(dest)]
    subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=True)
    return next(dest.glob("sglang-*.whl"))


def probe(wheel: Path, arch: str, work: Path) -> tuple[list[int | str], list[dict], str]:
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(JIT) and name.endswith((".h", ".cuh", ".hpp")) or name == OP:
                zf.extract(name, work)
    m = _ARGS.search((work / OP).read_text())
    if not m:
        raise SystemExit(f"sglang_mtp_smem: no make_cpp_args(..., pair_layout) in {OP} of {wheel.name}")
    args = [a.strip() for a in m.group(1).split(",")]
    src = work / "probe.cu"
    inst = [f"template struct sglang::Sm120Nvfp4MoeMtpMma<{', '.join(args[:-1]).replace('False', 'false')}, {p}>;"
            for p in ("false", "true")]
    src.write_text(f'#include "{HEADER}"\n' + "\n".join(inst) + "\n")
    num = arch.removeprefix("sm_").removesuffix("a")
    tvm_inc = Path(tvm_ffi.__file__).parent / "include"
    cmd = ["nvcc", "-std=c++20", "-O3", f"-DSGL_CUDA_ARCH={int(num) * 10}", "--expt-relaxed-constexpr",
           f"-gencode=arch=compute_{num}a,code=sm_{num}a", "-Xptxas", "-v",
           "-I", str(work / JIT / "include"), "-I", str(work / JIT / "csrc"), "-I", str(tvm_inc),
           "-c", str(src), "-o", str(work / "probe.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise SystemExit(f"sglang_mtp_smem: nvcc failed: {proc.stderr.strip().splitlines()[-1:]}")
    entries = [{"entry": e, "arch": a, "regs_per_thread": int(r),
                "smem_bytes": int(_SMEM.search(rest).group(1)) if _SMEM.search(rest) else 0}
               for e, a, r, rest in _PTXAS.findall(proc.stderr)]
    return args, entries, shlex.join(cmd[:1] + cmd[1:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--target", default="rtx-pro-6000")
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--wheel", type=Path)
    a = ap.parse_args(argv)
    target = profile(a.target)
    arch = target.arch
    with tempfile.TemporaryDirectory(prefix="tp-sglang-") as tmp:
        wheel = a.wheel or _download(a.version, Path(tmp))
        start = time.monotonic()
        args, entries, nvcc_cmd = probe(wheel, arch, Path(tmp))
        secs = round(time.monotonic() - start, 1)
    rows = []
    for e in entries:
        head = target.smem_optin - e["smem_bytes"]
        rows.append({"family": "sglang-moe", "engine": f"sglang {a.version}", "target": target.name, "arch": arch,
                     "kernel": "Sm120Nvfp4MoeMtpMma", "template_args": args[:-1], "entry": e["entry"],
                     "pair_layout": "nvfp4_pair_mma" in e["entry"], "regs_per_thread": e["regs_per_thread"],
                     "smem_bytes": e["smem_bytes"], "smem_kind": "static (__shared__ arrays)",
                     "smem_limit_bytes": target.smem_optin, "headroom_bytes": head,
                     "verdict": "fits" if head >= 0 else "smem-over-limit", "evidence": "compiled",
                     "reason": f"compiled for {arch}; ptxas: {e['smem_bytes']} B static smem; not launched",
                     "compile_seconds": secs})
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "engine_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a.out / "command.json").write_text(json.dumps({
        "command": shlex.join(["python", "tools/sglang_mtp_smem.py", *(argv or sys.argv[1:])]),
        "wheel": wheel.name, "nvcc": nvcc_cmd.replace(str(Path(tempfile.gettempdir())), "$TMP"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
    for r in rows:
        print(f"{r['entry'][:60]}: {r['smem_bytes']} B smem, {r['verdict']}")
    return 0 if rows else 2


if __name__ == "__main__":
    sys.exit(main())
