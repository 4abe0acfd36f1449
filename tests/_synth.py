"""Synthetic results for the report/recommend/diff/merge tests: rows in the real schema, random timings.

Static rows are built field by field like sweep.make_row builds them; runtime rows add real workload points
(workloads.points_for) with random medians, so the best tile per batch is known to the test and to nobody else.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tileprobe.families import FAMILIES, expand_configs
from tileprobe.results.writer import ResultsWriter
from tileprobe.targets import profile
from tileprobe.workloads import points_for

TC = {"cutlass_version": "4.5.0", "cutlass_source": "flashinfer", "cutlass_hash": "c5d864a34465695d",
      "nvcc_version": "13.0.88"}


def static_row(cfg, target, smem: int, stages: int, tc=TC) -> dict:
    head = target.smem_optin - smem
    verdict = "fits" if head >= 0 else "smem-over-limit"
    reason = (f"sized: SharedStorage {smem} B <= opt-in {target.smem_optin} B, headroom {head} B ({stages} stages); "
              "not launched" if head >= 0 else
              f"SharedStorage {smem} B > opt-in {target.smem_optin} B by {-head} B ({stages} stages)")
    return {"family": cfg.family, "target": target.name, "device_name": target.device_name, "cc": target.cc,
            "gpu_index": None, "arch": cfg.arch, "config": cfg.key, "tile": str(cfg.tile),
            "tile_bytes_k": cfg.tile.bytes_k(FAMILIES[cfg.family].ab_bits), "schedule": cfg.schedule, "epilogue": cfg.epilogue,
            "stages_configured": cfg.stages_label, "cluster": "1x1x1",
            "swap_ab": cfg.swap_ab, "stages": stages, "smem_bytes": smem, "smem_mainloop_bytes": smem - 10240,
            "smem_epilogue_bytes": 9216, "smem_limit_bytes": target.smem_optin, "cutlass_cap_bytes": 101376,
            "headroom_bytes": head, "threads_per_cta": 384, "ctas_per_sm": 1 if head >= 0 else 0,
            "verdict": verdict, "reason": reason, "evidence": "sized", "timestamp": "2026-01-01T00:00:00Z", **tc}


def make_static(rng: random.Random, tiles=None, target="rtx-pro-6000", stages=None, epilogues=("no-c",), tc=TC):
    fam = FAMILIES["sm120-nvfp4"]
    t = profile(target)
    configs = expand_configs(fam, "sm_120a" if t.cc == "12.0" else "sm_121a", tiles, None, stages,
                             list(epilogues))
    rows = []
    for c in configs:
        st = c.stages or rng.randint(2, 9)
        smem = rng.choice([rng.randrange(60000, t.smem_optin + 1, 1024), rng.randrange(60000, 130000, 1024)])
        rows.append(static_row(c, t, smem, st, tc))
    return rows


def add_runtime(rng: random.Random, static: list[dict], batches=(1, 8, 32, 128), workload="qwen3-30b-a3b",
                fail_rate=0.15) -> list[dict]:
    """Runtime rows for every fitting static row at every point; some fail (launch-error / incorrect)."""
    points = points_for([workload], None, list(batches), "uniform", 1, 1, 7)
    out = []
    for s in static:
        if s["verdict"] != "fits":
            continue
        for p in points:
            r = dict(s, gpu_index=0, device_name="NVIDIA RTX PRO 6000 Blackwell", driver="580.1", **p.columns())
            roll = rng.random()
            if roll < fail_rate / 2:
                r.update(verdict="launch-error", evidence="launched", launch_status="launch-error",
                         launch_reason="initialize: kErrorInternal", reason="initialize: kErrorInternal")
            elif roll < fail_rate:
                r.update(verdict="incorrect", evidence="launched", launch_status="ok", rel_err=0.5, bad_elements=9,
                         us_median=round(rng.uniform(5, 500), 3), us_spread=0.1,
                         reason="rel. Frobenius error 0.5 > tolerance 0.02")
            else:
                us = round(rng.uniform(5, 500), 3)
                gb = round(p.bytes_moved(4, 4, 16, s["epilogue"] == "with-c") / (us * 1e-6) / 1e9, 1)
                r.update(verdict="ok", evidence="verified", launch_status="ok", rel_err=0.004, bad_elements=0,
                         us_median=us, us_spread=round(us * rng.uniform(0.002, 0.02), 3),
                         tflops=round(p.flops() / (us * 1e-6) / 1e12, 2), gbps=gb,
                         pct_peak_bw=round(100 * gb / 1792, 1), pct_copy_bw=round(100 * gb / 1500, 1),
                         reason="verified: rel. Frobenius error 4.00e-03 <= 0.02")
            out.append(r)
    return out


def write_set(folder: Path, rows: list[dict], meta: dict | None = None) -> Path:
    with ResultsWriter(folder) as w:
        for r in rows:
            w.write(r)
    if meta is not None:
        (Path(folder) / "run.json").write_text(json.dumps(meta))
    return Path(folder)


def meta_for(target="rtx-pro-6000", command="tileprobe sweep (synthetic)", tc=TC, shard=None) -> dict:
    return {"command": command, "date": "2026-01-01T00:00:00Z", "family": "sm120-nvfp4",
            "target": profile(target).as_dict(), "devices": [], "configs": 0, "shard": shard,
            "toolchain": dict(tc, cutlass_dir="/x", nvcc="/usr/local/bin/nvcc")}
