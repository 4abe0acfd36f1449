"""What a sweep prints: a table that fits 120 columns (reasons only with --wide; they are always in the report and
the CSV), and a one-paragraph summary: how many fit, the tightest fit, the fastest verified tile per GEMM."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from tileprobe.families import report_spec
from tileprobe.families.columns import ReportSpec, visible
from tileprobe.results.resultset import best_by_point, kind_of, label, stages_text

WIDTH = 120
# A static verdict other than fits / smem-over-limit, in the summaries' words
OTHER_WORDS = {"compile-error": "failed to compile", "unsupported": "were not sized (unsupported)",
               "not-selected": "not selected (the engine runs another kernel there)",
               "not-runnable-here": "not runnable here (another arch)"}
VERDICT_STYLE = {"fits": "green", "ok": "bold green", "smem-over-limit": "red", "compile-error": "magenta",
                 "unsupported": "dim", "launch-error": "red", "incorrect": "bold red", "timeout": "yellow",
                 "crashed": "bold red", "not-run": "yellow", "unchecked": "yellow", "not-runnable-here": "cyan",
                 "not-selected": "dim", "no-code": "bold red", "refused": "bold red", "unanswered": "yellow"}


def _fmt(v, nd=1):
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def autotune_dropped(r: dict) -> bool:
    """A config of an @triton.autotune launch that Triton's autotuner drops (over the limit, or a compile error it
    catches): the launch runs another config, so it is no failure (tileprobe.audit.tuned)."""
    return bool(r.get("autotune_dropped")) and r.get("verdict") not in ("fits", "ok")


def _verdict(r: dict) -> str:
    style = VERDICT_STYLE.get(r["verdict"])
    text = f"[{style}]{r['verdict']}[/]" if style else escape(str(r["verdict"]))
    return f"{text}\n[dim]autotuner drops[/]" if autotune_dropped(r) else text


class TerminalCells:
    """How the terminal writes a cell ('-' for none, one decimal unless told), for families.columns readers."""

    def __init__(self, spec: ReportSpec) -> None:
        self.spec = spec

    def fmt(self, value, nd: int | None = None) -> str:
        return _fmt(value) if nd is None else _fmt(value, nd)

    def stages(self, row: dict) -> str:
        return stages_text(row)

    def label(self, row: dict) -> str:
        return label(row)


def _table(title: str, columns, rows: list[dict], cells: TerminalCells, **kw) -> Table:
    t = Table(title=title, **kw)
    cols = visible(tuple(columns), rows, cells)
    for c in cols:
        t.add_column(c.header, overflow="fold", no_wrap=not c.wrap, max_width=c.width, min_width=c.min_width)
    for r in rows:
        t.add_row(*(_verdict(r) if c.key == "verdict" else c.read(r, cells) for c in cols))
    caption = cells.spec.terminal_caption(rows) if cells.spec.terminal_caption else None
    if caption:
        t.caption = caption
    return t


def static_table(rows: list[dict], wide: bool = False, title: str | None = None) -> Table:
    spec = report_spec(rows)
    title = spec.terminal_title if title is None else title
    rows = [spec.complete(r) for r in rows]
    if spec.order:
        rows = sorted(rows, key=spec.order)
    cols = spec.terminal_tactic if spec.terminal_tactic and any(r.get("tactic") for r in rows) else spec.terminal
    return _table(title, cols + (spec.terminal_wide if wide else ()), rows, TerminalCells(spec), show_lines=False)


def static_tables(rows: list[dict], wide: bool = False) -> list[Table]:
    """The static table; one per value of the family's terminal_split field where the rows hold several (a Triton
    sweep answers per GPU name the engine keys its files by)."""
    spec = report_spec(rows)
    split = spec.terminal_split
    values = list(dict.fromkeys(r.get(split) for r in rows)) if split else []
    if len(values) < 2:
        return [static_table(rows, wide)]
    return [static_table([r for r in rows if r.get(split) == v], wide, f"{spec.terminal_title}: {v}")
            for v in values]


def runtime_table(rows: list[dict], wide: bool = False) -> Table:
    spec = report_spec(rows)
    rows = [spec.complete(r) for r in rows]
    if spec.order:
        rows = sorted(rows, key=spec.order)
    return _table("runtime probe", spec.terminal_runtime + (spec.terminal_runtime_wide if wide else ()), rows,
                  TerminalCells(spec))


def summary(rows: list[dict]) -> str:
    """One paragraph: fits and over-limit counts, the tightest fit, the fastest verified tile per GEMM."""
    spec = report_spec(rows)
    cells = TerminalCells(spec)
    rows = [spec.complete(r) for r in rows]

    def name(r: dict) -> str:  # an engine's tactic by its name, else the family's label
        return r.get("tactic") or spec.label(r, cells)

    elsewhere = [r for r in rows if r.get("verdict") == "not-selected"]  # the engine runs another kernel there
    static = [r for r in rows if kind_of(r) == "static" and r not in elsewhere]
    runtime = [r for r in rows if kind_of(r) == "runtime" and r.get("gemm")]
    parts = []
    if static:
        dropped = [r for r in static if autotune_dropped(r)]
        judged = [r for r in static if not autotune_dropped(r)]
        fits = [r for r in judged if r["verdict"] == "fits"]
        over = [r for r in judged if r["verdict"] == "smem-over-limit"]
        rest: dict[str, int] = {}
        for r in judged:
            if r["verdict"] not in ("fits", "smem-over-limit"):
                rest[r["verdict"]] = rest.get(r["verdict"], 0) + 1
        parts.append(f"{len(fits)} of {len(judged)} configs fit the {static[0]['smem_limit_bytes']} B opt-in limit"
                     f" on {static[0]['target']}, {len(over)} do not"
                     + "".join(f", {n} {OTHER_WORDS.get(v, v)}" for v, n in rest.items())
                     + (f"; {len(dropped)} more autotune configs are dropped by the autotuner (over the limit, or "
                        "a compile error it catches): the launch runs a config that fits" if dropped else "") + ".")
        if fits:
            tight = min(fits, key=lambda r: r["headroom_bytes"])
            parts.append(f"Tightest fit: {name(tight)} with {tight['headroom_bytes']} B to "
                         f"spare ({tight['smem_bytes']} B).")
        if over:
            worst = min(over, key=lambda r: r["headroom_bytes"] if r["headroom_bytes"] is not None else 0)
            if worst["headroom_bytes"] is not None:
                parts.append(f"Furthest over: {name(worst)} by {-worst['headroom_bytes']} B.")
    if elsewhere:
        parts.append(f"{len(elsewhere)} launcher(s) not run here: the engine picks another kernel (the reason "
                     "names it and the engine line).")
    if runtime:
        ok = sum(r["verdict"] == "ok" for r in runtime)
        parts.append(f"{ok} of {len(runtime)} launched points verified.")
        ranked = best_by_point(runtime)
        for gemm in sorted({r["gemm"] for r in runtime}):
            keys = [k for k in ranked if k[2] == gemm]
            if keys:
                k = max(keys, key=lambda k: (k[4] or 0))
                best = ranked[k][0]
                parts.append(f"Fastest verified {gemm} at batch {k[4]}: {spec.label(best, cells)}, "
                             f"{best['us_median']:.1f} µs "
                             f"({_fmt(best.get('gbps'), 0)} GB/s).")
    return " ".join(parts)


def print_rows(rows: list[dict], console, wide: bool = False) -> None:
    elsewhere = [r for r in rows if r.get("verdict") == "not-selected"]  # the engine runs another kernel there
    static = [r for r in rows if kind_of(r) == "static" and r not in elsewhere]
    runtime = [r for r in rows if kind_of(r) == "runtime" and r.get("gemm")]
    for table in static_tables(static, wide) if static else ():
        console.print(table)
    if runtime:
        console.print(runtime_table(runtime, wide))
    text = summary(rows)
    if text:
        console.print(text, highlight=False)
