"""What a sweep prints: a table that fits 120 columns (reasons only with --wide; they are always in the report and
the CSV), and a one-paragraph summary: how many fit, the tightest fit, the fastest verified tile per GEMM."""

from __future__ import annotations

from rich.table import Table

from tileprobe.results.resultset import best_by_point, label, stages_text

WIDTH = 120
VERDICT_STYLE = {"fits": "green", "ok": "bold green", "smem-over-limit": "red", "compile-error": "magenta",
                 "unsupported": "dim", "launch-error": "red", "incorrect": "bold red", "timeout": "yellow",
                 "crashed": "bold red", "not-run": "yellow", "unchecked": "yellow", "not-runnable-here": "cyan"}


def _fmt(v, nd=1):
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _verdict(r: dict) -> str:
    return f"[{VERDICT_STYLE.get(r['verdict'], '')}]{r['verdict']}[/]"


def static_table(rows: list[dict], wide: bool = False) -> Table:
    t = Table(title="static probe", show_lines=False)
    if any(r.get("tactic") for r in rows):
        # An engine's tactics: the tactic names the tile (K in bytes) and fixes the schedule; the dtype pair and the
        # cluster tell variants of one tactic apart. Chosen so that nothing is cut at 120 columns.
        cols = ["tactic", "dtypes", "epilogue", "cluster", "stages", "smem B", "headroom B", "verdict"]
    else:
        cols = ["tile", "K bytes", "schedule", "epilogue", "stages", "SharedStorage B", "headroom B", "verdict"]
    if wide:
        cols += ["evidence", "reason"]
    for c in cols:
        t.add_column(c, overflow="fold", no_wrap=c != "reason")
    for r in rows:
        cells = {"tactic": r.get("tactic") or "", "tile": r["tile"], "K bytes": r["tile_bytes_k"],
                 "schedule": r["schedule"], "epilogue": r["epilogue"] + (" swap" if r["swap_ab"] else ""),
                 "stages": stages_text(r), "SharedStorage B": _fmt(r["smem_bytes"]), "smem B": _fmt(r["smem_bytes"]),
                 "dtypes": r.get("dtypes") or "", "cluster": r.get("cluster") or "",
                 "headroom B": _fmt(r["headroom_bytes"]), "verdict": _verdict(r), "evidence": r.get("evidence") or "",
                 "reason": r.get("reason") or ""}
        t.add_row(*(cells[c] for c in cols))
    return t


def runtime_table(rows: list[dict], wide: bool = False) -> Table:
    t = Table(title="runtime probe")
    cols = ["workload", "gemm", "batch", "tile", "schedule", "verdict", "µs", "µs graph", "GB/s", "% read BW"]
    if wide:
        cols += ["rel_err", "reason"]
    for c in cols:
        t.add_column(c, overflow="fold", no_wrap=c != "reason")
    for r in rows:
        cells = {"workload": r["workload"], "gemm": r["gemm"], "batch": _fmt(r["batch"]), "tile": r["tile"],
                 "schedule": r["schedule"], "verdict": _verdict(r), "µs": _fmt(r["us_median"]),
                 "µs graph": _fmt(r.get("us_graph_median")), "GB/s": _fmt(r["gbps"], 0),
                 "% read BW": _fmt(r.get("pct_read_bw")),
                 "rel_err": _fmt(r["rel_err"], 4) if r.get("rel_err") is not None else "-",
                 "reason": (r.get("reason") or "") if r["verdict"] != "ok" else ""}
        t.add_row(*(cells[c] for c in cols))
    return t


def summary(rows: list[dict]) -> str:
    """One paragraph: fits and over-limit counts, the tightest fit, the fastest verified tile per GEMM."""
    static = [r for r in rows if not r.get("workload")]
    runtime = [r for r in rows if r.get("workload") and r.get("gemm")]
    parts = []
    if static:
        fits = [r for r in static if r["verdict"] == "fits"]
        over = [r for r in static if r["verdict"] == "smem-over-limit"]
        parts.append(f"{len(fits)} of {len(static)} configs fit the {static[0]['smem_limit_bytes']} B opt-in limit"
                     f" on {static[0]['target']}, {len(over)} do not"
                     + (f", {len(static) - len(fits) - len(over)} were not sized (unsupported or failed)"
                        if len(static) > len(fits) + len(over) else "") + ".")
        if fits:
            tight = min(fits, key=lambda r: r["headroom_bytes"])
            parts.append(f"Tightest fit: {tight.get('tactic') or label(tight)} with {tight['headroom_bytes']} B to "
                         f"spare ({tight['smem_bytes']} B).")
        if over:
            worst = min(over, key=lambda r: r["headroom_bytes"] if r["headroom_bytes"] is not None else 0)
            if worst["headroom_bytes"] is not None:
                parts.append(f"Furthest over: {worst.get('tactic') or label(worst)} by {-worst['headroom_bytes']} B.")
    if runtime:
        ok = sum(r["verdict"] == "ok" for r in runtime)
        parts.append(f"{ok} of {len(runtime)} launched points verified.")
        ranked = best_by_point(runtime)
        for gemm in sorted({r["gemm"] for r in runtime}):
            keys = [k for k in ranked if k[2] == gemm]
            if keys:
                k = max(keys, key=lambda k: (k[4] or 0))
                best = ranked[k][0]
                parts.append(f"Fastest verified {gemm} at batch {k[4]}: {label(best)}, {best['us_median']:.1f} µs "
                             f"({_fmt(best.get('gbps'), 0)} GB/s).")
    return " ".join(parts)


def print_rows(rows: list[dict], console, wide: bool = False) -> None:
    static = [r for r in rows if not r.get("workload")]
    runtime = [r for r in rows if r.get("workload") and r.get("gemm")]
    if static:
        console.print(static_table(static, wide))
    if runtime:
        console.print(runtime_table(runtime, wide))
    text = summary(rows)
    if text:
        console.print(text, highlight=False)
