"""How long does `tileprobe check-configs` take on the whole shipped vLLM and SGLang H100/H200 Triton MoE trees
against one target, cold (empty build cache) and warm (the same cache again), and how does the cold time split?

For each engine: the shipped config files named after an H100 or H200 (every scheme tileprobe sizes) are copied
from the engine (installed or its wheel: $TILEPROBE_ENGINE_WHEELS) into a temporary folder with the engine's layout,
then `tileprobe check-configs FOLDER --target T --jobs J --out OUT` runs twice in a fresh process each, the first
with an empty --cache-dir. Prints and appends one JSON record per engine to results/benchmarks/triton_trees.jsonl;
the cold run's rows are kept in results/triton-moe/check-configs/<engine>-h100-h200__<target>/.

PYTHONPATH=. python3 benchmarks/triton_trees.py [--target rtx-pro-6000] [--jobs 2] [--engines vllm,sglang]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from tileprobe.backends.triton.toolchain import installed
from tileprobe.engines import triton_configs as tc
from tileprobe.engines import triton_lookup
from tileprobe.targets import profile

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ("NVIDIA_H100", "NVIDIA_H200")  # file-name prefixes: H100 80GB HBM3, H100 PCIe, H100, H200, H200 NVL


def small_smem_devices(engine: str) -> set[str]:
    """The engine's file-name spelling of every known device whose opt-in limit is below 128 KiB (101376 B)."""
    mod = triton_lookup.engine_module(engine)
    return {mod.device_file_name(n) for n, t in triton_lookup.known_device_names().items()
            if profile(t).smem_optin < 128 * 1024}


def _version(triton_dir: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in triton_dir.split("_")[1:]) if triton_dir else ()


def copy_tree(engine: str, dest: Path, select: str, since: tuple[int, ...] = ()) -> int:
    src = tc.find_engine(engine)
    mod = triton_lookup.engine_module(engine)
    small = small_smem_devices(engine)
    n = 0
    for f in tc.read_source_tree(src, mod.CONFIGS_DIR):
        keep = f.name.device_name.startswith(DEVICES) if select == "h100-h200" else f.name.device_name in small
        if not keep or tc.scheme_of(f.name) is None or (since and f.triton_dir and _version(f.triton_dir) < since):
            continue
        out = dest / f.rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(src.read_text(f"{mod.CONFIGS_DIR}/{f.rel}"))
        n += 1
    return n


def run(cmd: list[str], timeout: float) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ | {"PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0, p.stdout, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtx-pro-6000", help="a profile, or 'own': each file against its device")
    ap.add_argument("--select", default="h100-h200", choices=("h100-h200", "small-smem"),
                    help="h100-h200: the files named after an H100 or H200; small-smem: the files named after a GPU "
                         "with a 101376 B opt-in limit (RTX PRO 6000, GB10, RTX 4090, L40S), each against its own")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--engines", default="vllm,sglang")
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--cache-dir", help="the (empty) build cache to fill, kept afterwards (default: a temporary one)")
    ap.add_argument("--since", default="", help="SGLang: only the configs/triton_X_Y_Z folders from this Triton "
                                                "release on (e.g. 3.4.0; the engine on Triton 3.8 reads them newest first)")
    ap.add_argument("--warm-only", action="store_true",
                    help="only the warm run, on a --cache-dir an earlier run filled (records warm_s; cold fields null)")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    for engine in a.engines.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            cache = Path(a.cache_dir) / engine if a.cache_dir else Path(tmp) / "cache"
            if a.warm_only and not (cache.exists() and any(cache.iterdir())):
                sys.exit(f"--warm-only: --cache-dir {cache} is empty")
            if not a.warm_only and cache.exists() and any(cache.iterdir()):
                sys.exit(f"--cache-dir {cache} is not empty: a cold run needs an empty cache")
            since = tuple(int(x) for x in a.since.split(".")) if a.since else ()
            files = copy_tree(engine, tree, a.select, since)
            label = a.select + (f"-since-{a.since}" if since and engine == "sglang" else "")
            out = ROOT / "results" / "triton-moe" / "check-configs" / f"{engine}-{label}__{a.target}"
            if out.exists() and not a.warm_only:
                shutil.rmtree(out)
            base = [sys.executable, "-m", "tileprobe", "check-configs", str(tree), "--engine", engine,
                    "--jobs", str(a.jobs), "--cache-dir", str(cache)] + (
                        ["--target", a.target] if a.target != "own" else [])
            cold_s, cold_out, rc = (None, "", None) if a.warm_only else run(base + ["--out", str(out)], a.timeout)
            warm_s, warm_out, wrc = run(base, a.timeout)
        phases = None if a.warm_only else json.loads((out / "run.json").read_text())["phases"]
        rec = {
            "benchmark": "triton_trees", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "engine": tc.find_engine(engine).label(), "target": a.target, "select": a.select, "since": a.since or None, "jobs": a.jobs,
            "files": files,
            "cores": os.cpu_count(), "python": platform.python_version(),
            "triton": installed().version if installed() else None,
            "cold_s": None if cold_s is None else round(cold_s, 1), "warm_s": round(warm_s, 1),
            "exit_code": rc if rc is not None else wrc,
            "cold_phases": phases,  # plan_s (read + launch stand-ins), compile_s (wall), compiler_s (sum per compile)
            "cold_summary": cold_out.strip().splitlines()[-1] if cold_out else None,
            "warm_summary": warm_out.strip().splitlines()[-1],
            "rows": str(out.relative_to(ROOT)),
            "command": " ".join(["tileprobe"] + base[3:]),
        }
        print(json.dumps(rec, indent=1))
        if not a.no_save:
            path = ROOT / "results" / "benchmarks" / "triton_trees.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
