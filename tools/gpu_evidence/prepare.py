"""Prepare the FlashAttention-2 launch evidence for the lent GPU (run here, no GPU): vLLM's own
`flash_attn_varlen_func` and `_vllm_fa2_C.abi3.so` from its wheel, and what tileprobe's fa2 family answers for the
same calls on the device's target (h100 / h200, sm_90: the .so has no sm_90 code, so the driver JIT-compiles its
compute_80 PTX there, as on SM120).

The .so (74 MB in vLLM 0.34.0) is over the device tool's 64 MiB carry limit, so every fatbin container that holds no
kernel of the cases' head dims is left in place with its entries' payloads zeroed (headers kept: the CUDA runtime's
lazy module loading only reads a container when one of its kernels is first launched), and the file is carried
xz-compressed. Nothing else in it changes.

    python tools/gpu_evidence/prepare.py --out .gpu-carry [--wheel vllm-0.34.0-...whl]
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import re
import struct
import tarfile
import zipfile
from pathlib import Path

from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import fa2
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.binary.cubin import kernels
from tileprobe.binary.elf import images_in
from tileprobe.engines.triton_configs import find_engine
from tileprobe.targets import PROFILES

SO = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
MAGIC = struct.pack("<I", 0xBA55ED50)
HEADS, KV_HEADS = 32, 8
# (phase, head_dim, batch, new tokens per sequence, context per sequence)
CASES = [("prefill", 64, 2, 300, 0), ("prefill", 128, 2, 300, 0), ("decode", 64, 4, 1, 1000),
         ("decode", 128, 4, 1, 1000), ("decode", 128, 40, 1, 700)]


def containers(blob: bytes) -> list[tuple[int, int]]:
    out, i = [], blob.find(MAGIC)
    while i >= 0:
        _, ver, hs, body = struct.unpack_from("<IHHQ", blob, i)
        if ver == 1 and hs == 16 and i + hs + body <= len(blob):
            out.append((i, i + hs + body))
            i = blob.find(MAGIC, i + hs + body)
        else:
            i = blob.find(MAGIC, i + 4)
    return out


def slim(path: Path, dims: set[int]) -> tuple[bytes, list[int]]:
    blob = bytearray(path.read_bytes())
    spans = containers(bytes(blob))
    keep = set()
    for im in images_in(path):
        c = int(im.origin.split()[2])
        if any(re.search(rf"Flash_fwd_kernel_traits<({'|'.join(map(str, dims))}), ", k.demangled)
               and "bfloat16" in k.demangled for k in kernels(im)):
            keep.add(c)
    for n, (a, b) in enumerate(spans, 1):
        if n in keep:
            continue
        p = a + 16
        while p + 64 <= b:
            _, _, ehs, psize = struct.unpack_from("<HHIQ", blob, p)
            if ehs < 64 or p + ehs + psize > b:
                break
            blob[p + ehs:p + ehs + psize] = bytes(psize)
            p += ehs + psize
    return bytes(blob), sorted(keep)


def expected(wheel: str, target: str) -> list[dict]:
    src = find_engine("vllm", wheel)
    ctx = Context(PROFILES[target], src, cache_root(None))
    out = []
    for phase, d, batch, new, context in CASES:
        call = KernelCall("attention (full)", phase, "fa2", "flash_attn_varlen_func",
                          dict(fa_version=2, head_dim=d, head_dim_v=d, heads=HEADS, kv_heads=KV_HEADS, dtype="bf16",
                               kv_cache_dtype="auto", paged=True, page_size=16, window=None, softcap=0.0,
                               sinks=False, causal=True), "tools/gpu_evidence", src.label())
        a = fa2.answer(call, ctx)
        launches = {}
        for seg in a.bytes.answer.split(" | "):
            name, _, rest = seg.partition(": ")
            m = re.search(r"= (\d+) B(?: \([^)]*\))? \+ (\d+) B static", rest)
            if name.startswith("flash_fwd") and m:
                launches[name] = int(m.group(1)) - int(m.group(2))  # the dynamic part: what the launch asks for
            elif name.startswith("flash_fwd"):
                launches[name] = 0 if "0 B dynamic" in rest or "dynamic" not in rest else None
        out.append({"phase": phase, "head_dim": d, "batch": batch, "new": new, "context": context,
                    "tileprobe_kernel": a.kernel, "tileprobe_bytes": a.bytes.answer, "expected_dynamic": launches,
                    "verdict": str(a.verdict(ctx.target)), "target": target, "engine": src.label()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wheel", default=None)
    ap.add_argument("--target", default="h100")
    args = ap.parse_args()
    src = find_engine("vllm", args.wheel)
    args.out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src.origin) as z:
        tmp = args.out / "fa2.so.tmp"
        tmp.write_bytes(z.read(SO))
        data, keep = slim(tmp, {c[1] for c in CASES})
        tmp.unlink()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            def add(name: str, payload: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            add("vllm/__init__.py", b"")
            for rel in ("vllm/vllm_flash_attn/__init__.py", "vllm/vllm_flash_attn/flash_attn_interface.py"):
                add(rel, z.read(rel))
            add(SO, data)
        (args.out / "fa2.tar.xz").write_bytes(lzma.compress(buf.getvalue(), preset=6))
    (args.out / "fa2_expected.json").write_text(json.dumps({"engine": src.label(), "wheel": Path(src.origin).name,
                                                            "kept_containers": keep,
                                                            "cases": expected(src.origin, args.target)}, indent=1))
    print(f"{args.out / 'fa2.tar.xz'}: {(args.out / 'fa2.tar.xz').stat().st_size} B; kept containers {keep}")


if __name__ == "__main__":
    main()
