"""On the lent GPU: run each case of fa2_expected.json (tools/gpu_evidence/prepare.py) through vLLM's own
flash_attn_varlen_func under the launch shim (launch_shim.cpp, LD_PRELOAD), and write one row per kernel launch:
the kernel the library launched (its demangled name), the dynamic shared memory the launch asked for and the
MaxDynamicSharedMemorySize it set, against the bytes tileprobe's fa2 family gave for that kernel on this target.

    python3 tools/gpu_evidence/fa2_launch.py --carry .gpu-carry --out $OUT
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import re
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAGS = ("Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K", "Is_softcap", "Split", "Append_KV")


def label(demangled: str) -> str | None:
    """The observed kernel in the fa2 family's words: flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<d, M, N, W,
    q, s, bf16>, <the template flags that are true>>."""
    m = re.search(r"flash::(flash_fwd_\w+)<Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+), (\w+), (\w+), "
                  r"cutlass::(\w+), Flash_kernel_traits<[^>]*> >, (.*)>\(", demangled)
    if not m:
        return None
    fn, d, bm, bn, w, q, s, elem, rest = m.groups()
    elem = {"bfloat16_t": "bf16", "half_t": "fp16"}.get(elem, elem)
    head = f"{fn}<Flash_fwd_kernel_traits<{d}, {bm}, {bn}, {w}, {q}, {s}, {elem}>"
    args = [a.strip() for a in rest.split(",")]
    if fn == "flash_fwd_splitkv_combine_kernel":
        return head + f", {args[0]}, Log_max_splits, " + ("Is_even_K" if args[-1] == "true" else "") + ">"
    flags = [f for f, a in zip(FLAGS, args) if a == "true"]
    return head + (", " + ", ".join(flags) if flags else "") + ">"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--carry", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    pkg = Path("/tmp/fa2pkg")
    with tarfile.open(fileobj=__import__("io").BytesIO(lzma.decompress((args.carry / "fa2.tar.xz").read_bytes()))) as t:
        t.extractall(pkg)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    shim = Path("/tmp/launch_shim.so")
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", f"-I{cuda}/include", str(HERE / "launch_shim.cpp"), "-o",
                    str(shim), "-ldl"], check=True, timeout=300)
    exp = json.loads((args.carry / "fa2_expected.json").read_text())
    import torch  # noqa: PLC0415 - the device's torch, for the record
    env_rec = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
               "python": platform.python_version(), "engine": exp["engine"], "wheel": exp["wheel"],
               "kept_containers": exp["kept_containers"]}
    rows, failures = [], 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, case in enumerate(exp["cases"]):
        log = Path(f"/tmp/launch_{n}.jsonl")
        log.unlink(missing_ok=True)
        spec = {**case, "heads": 32, "kv_heads": 8, "seed": 1000 + n}
        p = subprocess.run([sys.executable, str(HERE / "fa2_case.py"), json.dumps(spec)], capture_output=True,
                           text=True, timeout=600, env=os.environ | {"PYTHONPATH": str(pkg), "LD_PRELOAD": str(shim),
                                                                     "TILEPROBE_LAUNCH_LOG": str(log),
                                                                     "CUDA_MODULE_LOADING": "LAZY"})
        check = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else None
        events = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
        launches = [e for e in events if e["event"] == "launch" and "flash" in e["name"]]
        loaded = any(e["event"] == "shim-loaded" for e in events)
        sets = {e["name"]: e["value"] for e in events if e["event"] == "set_max_dynamic"}
        if p.returncode != 0 or not launches:
            failures += 1
            rows.append({**env_rec, "case": case, "error": (p.stderr + p.stdout)[-3000:], "launches": len(launches),
                         "shim_loaded": loaded, "events": events[:5]})
            continue
        for e in launches:
            name = label(e["name"])
            want = case["expected_dynamic"].get(name)
            ok = want is not None and want == e["value"]
            failures += not ok
            rows.append({**env_rec, "phase": case["phase"], "head_dim": case["head_dim"], "batch": case["batch"],
                         "new_tokens": case["new"], "context": case["context"], "kernel": name,
                         "kernel_demangled": e["name"], "launch_dynamic_smem": e["value"],
                         "set_max_dynamic": sets.get(e["name"]), "static_smem": e["static_smem"],
                         "tileprobe_dynamic": want, "match": ok, "check": check,
                         "tileprobe_answer": case["tileprobe_kernel"]})
    (args.out / "fa2_launches.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        print(json.dumps({k: r.get(k) for k in ("phase", "head_dim", "batch", "kernel", "launch_dynamic_smem",
                                                "set_max_dynamic", "tileprobe_dynamic", "match", "check", "error")}))
    print(f"{len(rows)} launch rows, {failures} not matching or failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
