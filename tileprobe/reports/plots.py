"""PNG charts for the report: SharedStorage against the opt-in limit, and throughput against batch size.

matplotlib draws with the Agg backend (charts are files, never a window); `matplotlib_missing()` says why charts
cannot be drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tileprobe.lazy import LazyModule
from tileprobe.results.resultset import best_by_point, label

# Loaded at first use (charts are drawn by `report` and after a sweep, never for --help), with the Agg backend.
matplotlib = LazyModule("matplotlib", after=lambda m: m.use("Agg", force=True))
plt = LazyModule("matplotlib.pyplot", before=lambda: matplotlib.load())
mlines = LazyModule("matplotlib.lines", before=lambda: matplotlib.load())
mpatches = LazyModule("matplotlib.patches", before=lambda: matplotlib.load())
mticker = LazyModule("matplotlib.ticker", before=lambda: matplotlib.load())

VERDICT_COLOR = {"fits": "#2e8b57", "ok": "#1a7f37", "smem-over-limit": "#c62828", "compile-error": "#8e24aa",
                 "unsupported": "#9e9e9e", "launch-error": "#e65100", "incorrect": "#b71c1c", "timeout": "#f9a825",
                 "crashed": "#6d1b1b", "not-runnable-here": "#00838f",
                 "not-selected": "#9e9e9e", "no-code": "#b71c1c", "refused": "#b71c1c", "unanswered": "#f9a825"}


def matplotlib_missing() -> str | None:
    """None when charts can be drawn, else the reason (matplotlib not installed or broken)."""
    why = matplotlib.missing() or plt.missing()
    return f"matplotlib unavailable ({why})" if why else None


def _plt():
    return plt


# the row fields smem_chart draws (with each bar's name): a chart kept by tileprobe.reports.chart_cache is keyed by
# exactly these, so a field smem_chart starts reading must be added here
CHART_FIELDS = ("verdict", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes", "reason")


def chart_inputs(rows: list[dict], limit: int, title: str, xlabel: str | None = None,
                 names: list[str] | None = None) -> dict:
    """What smem_chart's picture depends on, as plain data (tileprobe.reports.chart_cache's key)."""
    rows = list(rows)
    return {"rows": [[r.get(f) for f in CHART_FIELDS] for r in rows], "limit": limit, "title": title,
            "xlabel": xlabel, "names": names or [label(r) for r in rows], "dpi": DPI}


DPI = 110


def smem_chart(rows: list[dict], limit: int, title: str, path: Path, xlabel: str | None = None,
               names: list[str] | None = None) -> Path:
    """Horizontal bars of SharedStorage per config (mainloop / epilogue / rest stacked), colored by verdict, with the
    opt-in limit as a vertical line and the headroom or overflow written at each bar's end. `xlabel` and `names`
    (the bars' labels) for a family whose bytes are not CUTLASS's SharedStorage (its total only, no parts)."""
    plt = _plt()
    rows = list(rows)
    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.3 * n))
    top = max([limit] + [int(r["smem_bytes"]) for r in rows if r.get("smem_bytes")])
    for i, r in enumerate(rows):
        y = n - 1 - i
        color = VERDICT_COLOR.get(r.get("verdict"), "#607d8b")
        total = r.get("smem_bytes")
        if not total:
            ax.text(0.01 * top, y, f"{r.get('verdict')}: no size ({(r.get('reason') or '')[:70]})", va="center",
                    fontsize=7, color=color)
            continue
        main = r.get("smem_mainloop_bytes") or 0
        epi = r.get("smem_epilogue_bytes") or 0
        rest = max(0, total - main - epi)
        if main or epi:
            ax.barh(y, main, color=color, height=0.72)
            ax.barh(y, epi, left=main, color=color, alpha=0.55, height=0.72)
            ax.barh(y, rest, left=main + epi, color=color, alpha=0.25, height=0.72)
        else:  # only the total is known (e.g. from CUTLASS's static_assert)
            ax.barh(y, total, color=color, alpha=0.8, height=0.72, hatch="//")
        head = limit - total
        note = f"{total} B, headroom {head} B" if head >= 0 else f"{total} B, over by {-head} B"
        ax.text(max(total, limit) + 0.012 * top, y, note, va="center", fontsize=7)
    ax.axvline(limit, color="black", linewidth=1.4, linestyle="--")
    ax.text(limit, n - 0.35, f"opt-in limit {limit} B ", fontsize=8, va="bottom", ha="right", fontweight="bold")
    ax.set_yticks([n - 1 - i for i in range(len(rows))], names or [label(r) for r in rows], fontsize=7)
    ax.set_ylim(-0.7, n + 0.3)
    ax.set_xlim(0, top * 1.32)
    ax.set_xlabel(xlabel or "SharedStorage bytes per CTA (sizeof(GemmKernel::SharedStorage))")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    verdicts = list(dict.fromkeys(r.get("verdict") for r in rows))
    handles = [mpatches.Patch(color=VERDICT_COLOR.get(v, "#607d8b"), label=v) for v in verdicts]
    if xlabel is None:
        handles += [mpatches.Patch(color="#555555", label="mainloop (stages)"),
                    mpatches.Patch(color="#555555", alpha=0.55, label="epilogue"),
                    mpatches.Patch(color="#555555", alpha=0.25, label="pipelines, tensor maps, padding")]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.9 / (1.2 + 0.3 * n)),
              ncol=min(len(handles), 6), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def throughput_chart(rows: list[dict], path: Path, metric: str = "gbps", highlight: int = 10,
                     name: Callable[[dict], str] | None = None) -> Path:
    """One panel per (workload, gemm): `metric` (gbps or us_median) against batch size, one line per config
    (`name`: a config's legend label, default resultset.label).

    Configs that are best or runner-up at some batch size (up to `highlight` of them) get colors and the legend;
    the rest are drawn thin and grey so the panel stays readable."""
    plt = _plt()
    ok = [r for r in rows if r.get("verdict") == "ok" and r.get(metric) is not None and r.get("batch") is not None]
    panels = sorted({(r["workload"], r["gemm"]) for r in ok})
    ranked = best_by_point(ok)
    podium: list[str] = []
    for place in (0, 1):  # every best first, then runner-ups, while colors last
        for key in sorted(ranked, key=lambda k: tuple(str(x) for x in k)):
            if len(ranked[key]) > place and ranked[key][place]["config"] not in podium:
                podium.append(ranked[key][place]["config"])
    podium = podium[:highlight]
    cmap = plt.get_cmap("tab10")
    colors = {c: cmap(i % 10) for i, c in enumerate(podium)}
    cols = min(2, max(1, len(panels)))
    nrows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(6.2 * cols + 2.8, 3.6 * nrows), squeeze=False)
    labels: dict[str, str] = {}
    for ax, (wl, gemm) in zip(axes.flat, panels):
        mine = [r for r in ok if r["workload"] == wl and r["gemm"] == gemm]
        by_cfg: dict[str, list[dict]] = {}
        for r in mine:
            by_cfg.setdefault(r["config"], []).append(r)
        for cfg, rs in sorted(by_cfg.items(), key=lambda kv: kv[0] in colors):
            rs.sort(key=lambda r: int(r["batch"]))
            xs, ys = [int(r["batch"]) for r in rs], [float(r[metric]) for r in rs]
            style = "--" if rs[0].get("epilogue") == "with-c" else "-"
            if cfg in colors:
                ax.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.6, color=colors[cfg], linestyle=style)
                labels[cfg] = (name or label)(rs[0])
            else:
                ax.plot(xs, ys, linewidth=0.7, color="#bdbdbd", zorder=0, linestyle=style)
        for (t, w, g, _routing, b, _epi), rs in ranked.items():
            if (w, g) == (wl, gemm):
                best = rs[0]
                ax.plot([int(b)], [float(best[metric])], marker="*", markersize=11, color=colors.get(best["config"],
                        "black"), markeredgecolor="black", markeredgewidth=0.6, zorder=5)
        ax.set_xscale("log", base=2)
        if metric == "us_median":
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(mticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(mticker.ScalarFormatter())
            ax.yaxis.set_minor_formatter(mticker.NullFormatter())
        ticks = sorted({int(r["batch"]) for r in mine})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{wl} · {gemm}", fontsize=9)
        ax.set_xlabel("decode batch size (tokens)")
        ax.set_ylabel("GB/s (fewest bytes)" if metric == "gbps" else "µs per grouped GEMM (median)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if not panels:
        axes.flat[0].text(0.5, 0.5, "no verified-correct runtime rows", ha="center", va="center")
    handles = [mlines.Line2D([], [], color=colors[c], marker="o", label=labels.get(c, c),
                      linestyle="--" if "with-c" in labels.get(c, "") else "-") for c in podium if c in labels]
    handles += [mlines.Line2D([], [], color="#bdbdbd", label="other tiles"),
                mlines.Line2D([], [], color="black", marker="*", linestyle="", markersize=10, label="best at that batch (per epilogue)")]
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False)
    fig.suptitle("throughput of verified-correct configs (evidence: launched and checked against the reference)",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 2.6 / (6.2 * cols + 2.8), 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
