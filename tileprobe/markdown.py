"""The markdown report of a results folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tileprobe.results import load_rows


def render_report(folder: Path) -> Path:
    rows = load_rows(folder)
    meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    df = pd.DataFrame(rows)
    lines = ["# tileprobe report", ""]
    if meta:
        t = meta.get("target", {})
        tcm = meta.get("toolchain", {})
        lines += [f"- target: {t.get('name')} ({t.get('device_name')}), cc {t.get('cc')}, {t.get('sms')} SMs, "
                  f"opt-in limit {t.get('smem_optin')} B",
                  f"- CUTLASS {tcm.get('cutlass_version')} ({tcm.get('cutlass_source')}, tree {tcm.get('cutlass_hash')}), "
                  f"nvcc {tcm.get('nvcc_version')}",
                  f"- command: `{meta.get('command')}`", f"- date: {meta.get('date')}", ""]
    static = df[df["workload"].isna() | (df["workload"] == "")] if "workload" in df else df
    if len(static):
        cols = ["tile", "tile_bytes_k", "schedule", "epilogue", "swap_ab", "stages", "smem_bytes", "smem_limit_bytes",
                "headroom_bytes", "regs_per_thread", "ctas_per_sm", "verdict", "evidence", "reason"]
        lines += ["## Verdicts", "", static[cols].to_markdown(index=False), ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
