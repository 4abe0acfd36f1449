"""Reports people read: the terminal table, the device list, and the markdown/CSV/JSON report of a results folder."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rich.table import Table

from tileprobe.errors import UsageError
from tileprobe.markdown import render_report
from tileprobe.results import COLUMNS
from tileprobe.resultset import load

from tileprobe.targets import PROFILES, NoDevice, query_devices

VERDICT_STYLE = {"fits": "green", "ok": "bold green", "smem-over-limit": "red", "compile-error": "magenta",
                 "unsupported": "dim", "launch-error": "red", "incorrect": "bold red", "timeout": "yellow",
                 "crashed": "bold red", "not-runnable-here": "cyan"}


def _fmt(v, nd=1):
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def print_table(rows: list[dict], console) -> None:
    static = [r for r in rows if not r.get("workload")]
    runtime = [r for r in rows if r.get("workload")]
    if static:
        t = Table(title="static probe", show_lines=False)
        for col in ("tile", "K bytes", "schedule", "epilogue", "stages", "SharedStorage B", "limit B", "headroom B",
                    "regs", "CTAs/SM", "verdict", "reason"):
            t.add_column(col, overflow="fold")
        for r in static:
            style = VERDICT_STYLE.get(r["verdict"], "")
            t.add_row(r["tile"], r["tile_bytes_k"], r["schedule"], r["epilogue"] + (" swap" if r["swap_ab"] else ""),
                      _fmt(r["stages"]), _fmt(r["smem_bytes"]), _fmt(r["smem_limit_bytes"]), _fmt(r["headroom_bytes"]),
                      _fmt(r["regs_per_thread"]), _fmt(r["ctas_per_sm"]), f"[{style}]{r['verdict']}[/]",
                      r["reason"] or "")
        console.print(t)
    if runtime:
        t = Table(title="runtime probe")
        for col in ("workload", "gemm", "batch", "tile", "schedule", "verdict", "rel_err", "µs", "TFLOP/s", "GB/s",
                    "% copy BW", "reason"):
            t.add_column(col, overflow="fold")
        for r in runtime:
            style = VERDICT_STYLE.get(r["verdict"], "")
            t.add_row(r["workload"], r["gemm"], _fmt(r["batch"]), r["tile"], r["schedule"],
                      f"[{style}]{r['verdict']}[/]", _fmt(r["rel_err"], 4) if r["rel_err"] is not None else "-",
                      _fmt(r["us_median"]), _fmt(r["tflops"]), _fmt(r["gbps"], 0), _fmt(r["pct_copy_bw"]),
                      (r["launch_reason"] or "") if r["verdict"] != "ok" else "")
        console.print(t)


def devices_table() -> Table:
    try:
        devs = query_devices()
        t = Table(title="visible GPUs (cuda-python)")
        rows = devs
    except NoDevice as exc:
        t = Table(title=f"no GPU ({exc}); built-in offline target profiles")
        rows = list(PROFILES.values())
    for col in ("name", "device", "cc", "SMs", "opt-in smem/block B", "smem/SM B", "regs/SM", "L2 MiB", "peak GB/s",
                "source"):
        t.add_column(col, overflow="fold")
    for d in rows:
        t.add_row(d.name, d.device_name, d.cc, str(d.sms), str(d.smem_optin), str(d.smem_per_sm), str(d.regs_per_sm),
                  f"{d.l2_bytes / 2**20:.0f}", f"{d.peak_gbps:.0f}", d.source)
    return t


def write_reports(out: Path, console) -> None:
    """Write report.md next to the results (the full report lives in tileprobe.markdown)."""
    path = render_report(Path(out))
    console.print(f"results: {Path(out) / 'results.csv'}; report: {path}")


FORMATS = ("md", "csv", "json")


def export(folder: Path, fmt: str, out: Path | None = None) -> str:
    """The rows of a results folder as csv (results.COLUMNS) or json (a list of row dicts), or the markdown report.

    md writes report.md and its charts into the folder and returns the report's path; csv and json return the text,
    also written to `out` when given."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    folder = Path(folder)
    if fmt == "md":
        if out is not None:
            raise UsageError("--out is for csv and json: the markdown report is written into the results folder, "
                             "next to the charts it embeds")
        return str(render_report(folder))
    rows = load(folder).rows
    if fmt == "json":
        text = json.dumps(rows, indent=1) + "\n"
    else:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        text = buf.getvalue()
    if out is not None:
        _write(Path(out), text)
    return text


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
