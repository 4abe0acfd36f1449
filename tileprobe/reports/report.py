"""Reports people read: the terminal table, the device list, and the markdown/CSV/JSON report of a results folder."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rich.table import Table

from tileprobe.errors import UsageError
from tileprobe.families import report_spec
from tileprobe.reports.markdown import render_report
from tileprobe.results.writer import csv_columns, csv_row
from tileprobe.results.resultset import load

from tileprobe.targets import PROFILES, NoDevice, query_devices

def devices_table() -> Table:
    try:
        devs = query_devices()
        t = Table(title="visible GPUs (cuda-python)")
        rows = devs
    except NoDevice as exc:
        t = Table(title=f"no GPU ({exc}); built-in offline target profiles")
        rows = list(PROFILES.values())
    for col in ("name", "device", "cc", "SMs", "opt-in B", "smem/SM", "regs", "L2 MiB", "GB/s"):
        t.add_column(col, no_wrap=True)
    for d in rows:
        t.add_row(d.name, d.device_name, d.cc, str(d.sms), str(d.smem_optin), str(d.smem_per_sm), str(d.regs_per_sm),
                  f"{d.l2_bytes / 2**20:.0f}", f"{d.peak_gbps:.0f}")
    t.caption = "sources: " + "; ".join(f"{d.name}: {d.source}" for d in rows)
    return t


def write_reports(out: Path, console, chart_cache: Path | None = None) -> None:
    """Write report.md next to the results (the full report lives in tileprobe.reports.markdown). `chart_cache`: a
    build cache root whose kept charts are served (tileprobe.reports.chart_cache)."""
    path = render_report(Path(out), chart_cache=chart_cache)
    console.print(f"results: {Path(out) / 'results.csv'}; report: {path}")


FORMATS = ("md", "csv", "json")


def export(folder: Path, fmt: str, out: Path | None = None) -> str:
    """The rows of a results folder as csv (the family's columns, writer.csv_columns, written as results.csv is:
    booleans off/on) or json (a
    list of row dicts), or the markdown report. A row that breaks the row schema stops it (resultset.load).

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
    if fmt == "csv":  # older rows with the fields their family's columns show, where they follow exactly
        rows = [report_spec(rows).complete(r) for r in rows]
    if fmt == "json":
        text = json.dumps(rows, indent=1) + "\n"
    else:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=csv_columns(rows), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(csv_row(r) for r in rows)
        text = buf.getvalue()
    if out is not None:
        write_text(Path(out), text)
    return text


def write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
