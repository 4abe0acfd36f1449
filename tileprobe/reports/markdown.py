"""The markdown report of a results folder: header, verdict table, throughput tables and charts (PNG, embedded).

Every statement carries its evidence level in the rows' own words (`predicted`, `sized`, `compiled`, `launched`,
`verified`; resultset.EVIDENCE_MEANING says what each means).
"""

from __future__ import annotations

from pathlib import Path

from tileprobe.families import report_spec
from tileprobe.families.columns import Column, ReportSpec, evidence_text, visible
from tileprobe.reports import chart_cache as chart_cache_mod
from tileprobe.reports import plots
from tileprobe.lazy import LazyModule
from tileprobe.reports.tactics_report import tactics_section
from tileprobe.reports.terminal import OTHER_WORDS, autotune_dropped
from tileprobe.results.resultset import (ResultSet, best_by_point, evidence_statement, evidence_words, label, load,
                                stages_text)

# tabulate draws the markdown tables (pandas' to_markdown is tabulate behind a DataFrame, and pandas alone takes half
# a second to import: every sweep writes a report); loaded at first use: --help and bad-input errors never wait for it
tabulate = LazyModule("tabulate")

REPORT_NAME = "report.md"
CHART_GLOBS = ("smem__*.png", "throughput__*.png")


def _cell(v, nd: int | None = None) -> str:
    if v is None or v == "" or (isinstance(v, float) and v != v):
        return "–"
    if nd is not None and isinstance(v, (int, float)):
        return f"{float(v):.{nd}f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


class MarkdownCells:
    """How report.md writes a cell ('–' for none, pipes escaped), for families.columns readers."""

    @staticmethod
    def fmt(value, nd: int | None = None) -> str:
        return _cell(value, nd)

    @staticmethod
    def stages(row: dict) -> str:
        return stages_text(row)

    @staticmethod
    def label(row: dict) -> str:
        return label(row)


CELLS = MarkdownCells()


def _records(columns: tuple[Column, ...], rows: list[dict]) -> list[dict]:
    cols = visible(columns, rows, CELLS)
    return [{c.header: c.read(r, CELLS) for c in cols} for r in rows]


def _spec(rs: ResultSet) -> ReportSpec:
    return report_spec(rs.rows)


def markdown_table(records: list[dict]) -> str:
    """A pipe table of the records (keys as headers, values as written: no number parsing), or "_(none)_"."""
    if not records:
        return "_(none)_"
    return tabulate.tabulate(records, headers="keys", tablefmt="pipe", disable_numparse=True)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in str(text))


def header(rs: ResultSet) -> list[str]:
    meta = rs.meta
    targets = rs.targets() or [None]
    fams = rs.families()
    title = f"# tileprobe report: {', '.join(fams) or '?'} on {', '.join(t or '?' for t in targets)}"
    lines = [title, "", f"**{evidence_statement(rs)}.**", ""]
    if not meta:
        lines += ["_run.json is missing: the header below is read from the rows._", ""]
    lines += [f"_Read with a note: {n}._" for n in rs.notes] + ([""] if rs.notes else [])
    items: list[tuple[str, str]] = []
    devices = [d for d in meta.get("devices") or [] if d.get("gpu_index") is not None]
    launched = bool(rs.runtime)
    for name in targets:
        t = rs.target_info(name)
        if t.get("gpu_index") is not None:
            what = "GPU"
        else:
            what = "target (offline profile)" if devices or launched else "target (offline profile; no GPU)"
        drivers = sorted({str(r["driver"]) for r in rs.rows if r.get("target") == name and r.get("driver")})
        driver = t.get("driver") or ", ".join(drivers) or (
            "– (see the GPUs below)" if devices else "– (no GPU, nothing launched)")
        items += [(what, f"{_cell(t.get('name'))} — {_cell(t.get('device_name'))}"),
                  ("compute capability", f"{_cell(t.get('cc'))} ({_cell(t.get('arch'))})"),
                  ("SMs", _cell(t.get("sms"))),
                  ("opt-in shared memory per block", f"{_cell(t.get('smem_optin'))} B"),
                  ("driver", _cell(driver))]
        if t.get("source"):
            items.append(("numbers from", _cell(t.get("source"))))
    for d in devices:
        items.append((f"GPU {d.get('gpu_index')}", f"{_cell(d.get('device_name'))}, sm_{_cell(d.get('cc'))}, "
                                                   f"opt-in {_cell(d.get('smem_optin'))} B, driver "
                                                   f"{_cell(d.get('driver'))}"))
    spec = _spec(rs)
    if "cutlass" in spec.header:
        items += _cutlass_items(rs)
    if "triton" in spec.header:
        items += _triton_items(rs)
    if meta.get("command"):
        items.append(("command", f"`{meta['command']}`"))
    if meta.get("seed") is not None and rs.runtime:
        items.append(("seed (routing and data)", _cell(meta["seed"])))
    for src in meta.get("merged_from") or []:
        items.append(("merged from", f"`{_cell(src.get('folder'))}`: `{_cell(src.get('command'))}`"))
    items.append(("date", _cell(meta.get("date") or max((r.get("timestamp") or "" for r in rs.rows), default=""))))
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in items] + [""]
    return lines


def _cutlass_items(rs: ResultSet) -> list[tuple[str, str]]:
    """nvcc and CUTLASS (version, where from, header tree) of the rows."""
    items = []
    tcs = rs.toolchains()
    mtc = rs.meta.get("toolchain") or {}
    sources = sorted({str(r.get("cutlass_source")) for r in rs.rows if r.get("cutlass_source")})
    for tc in tcs:
        src = mtc.get("cutlass_source") if mtc.get("cutlass_hash") == tc["cutlass_hash"] else ", ".join(sources)
        items += [("nvcc", _cell(tc.get("nvcc_version"))),
                  ("CUTLASS", f"{_cell(tc.get('cutlass_version'))} (from {_cell(src)}, header tree "
                              f"{_cell(tc.get('cutlass_hash'))})")]
    if len(tcs) > 1:
        items.append(("warning", f"{len(tcs)} different toolchains in one set (merged with --force)"))
    if mtc.get("cutlass_dir"):
        items.append(("CUTLASS include dir", f"`{mtc['cutlass_dir']}`"))
    return items


def _joined(rows: list[dict], key: str) -> str:
    return ", ".join(sorted({str(r[key]) for r in rows if r.get(key) not in (None, "")})) or "–"


def _triton_items(rs: ResultSet) -> list[tuple[str, str]]:
    """The Triton release, the engine and its version (where read from), and the kernel (function, file, hash)."""
    meta, spec = rs.meta, _spec(rs)
    rows = [spec.complete(r) for r in rs.rows]
    triton = _joined(rows, "triton_version")
    predicted = meta.get("predict_only") or (rows and all(r.get("evidence") == "predicted" for r in rows))
    items = [("Triton", f"{triton} (the predictor's release; nothing compiled)" if predicted else triton)]
    engine = meta.get("engine") or _joined(rows, "engine")
    origin = meta.get("engine_origin")
    items.append(("engine", f"{_cell(engine)}" + (f" (read from `{origin}`)" if origin else "")))
    kernel = f"`{_joined(rows, 'kernel')}`"
    files = _joined(rows, "kernel_file")
    sha = meta.get("kernel_sha256") or _joined(rows, "engine_hash")
    items.append(("kernel", f"{kernel}{f' in `{files}`' if files != '–' else ''}, sha256 `{sha}`"))
    if meta.get("config_dir"):
        items.append(("user config folder", f"`{meta['config_dir']}`"))
    if meta.get("checked"):
        items.append(("config files checked", f"`{meta['checked']}`"))
    return items


def _runtime_summary(rs: ResultSet) -> dict[tuple, str]:
    """Per (target, config): the verdicts of its runtime rows, e.g. 'ok 10/10' or 'ok 8, incorrect 2 of 10'."""
    counts: dict[tuple, dict[str, int]] = {}
    for r in rs.runtime:
        c = counts.setdefault((r.get("target"), r.get("config")), {})
        c[r["verdict"]] = c.get(r["verdict"], 0) + 1
    out = {}
    for k, c in counts.items():
        n = sum(c.values())
        out[k] = f"{next(iter(c))} {n}/{n}" if len(c) == 1 else ", ".join(f"{v} {m}" for v, m in c.items()) + \
            f" of {n}"
    return out


def verdict_section(rs: ResultSet, target: str | None) -> list[str]:
    spec = _spec(rs)
    rows = [spec.complete(r) for r in rs.static if r.get("target") == target or target is None]
    if not rows:
        return []
    if spec.order:
        rows.sort(key=spec.order)
    runtime = _runtime_summary(rs)
    recs = _records(spec.table, rows)
    if runtime:
        for rec, r in zip(recs, rows):
            rec["runtime"] = runtime.get((r.get("target"), r.get("config")), "–")
    dropped = [r for r in rows if autotune_dropped(r)]  # an autotune config the autotuner skips: no failure
    fits = [r for r in rows if r.get("verdict") in ("fits", "ok")]
    over = [r for r in rows if r.get("verdict") == "smem-over-limit" and not autotune_dropped(r)]
    other: dict[str, int] = {}
    for r in rows:
        if r.get("verdict") not in ("fits", "ok", "smem-over-limit") and not autotune_dropped(r):
            other[str(r.get("verdict"))] = other.get(str(r.get("verdict")), 0) + 1
    heads = [int(r["headroom_bytes"]) for r in fits if r.get("headroom_bytes") is not None]
    summary = f"{len(rows)} configs: {len(fits)} fit"
    if heads:
        summary += f" (headroom {min(heads)}–{max(heads)} B)"
    summary += f", {len(over)} over the opt-in limit"
    if over:
        worst = max(over, key=lambda r: -(r.get("headroom_bytes") or 0))
        summary += f" (worst: {spec.label(worst, CELLS)}, {worst.get('reason')})"
    if dropped:
        summary += (f", {len(dropped)} dropped by the autotuner (autotune configs over the limit or failing with an "
                    "error it catches; it runs a config that fits, column `autotune dropped`)")
    summary += "".join(f", {n} {OTHER_WORDS.get(v, v)}" for v, n in other.items()) + "."
    limit = rows[0].get("smem_limit_bytes")
    return [f"## Verdicts{f' on {target}' if target else ''} (opt-in limit {limit} B)", "",
            f"{summary} Evidence of `fits`/`smem-over-limit`: "
            f"{evidence_text([r for r in rows if r.get('verdict') in ('fits', 'smem-over-limit')], spec.evidence)}"
            f"{spec.not_launched}{spec.verdict_after}", "", markdown_table(recs), ""]


def throughput_section(rs: ResultSet) -> list[str]:
    runtime = rs.runtime
    if not runtime:
        return []
    spec = _spec(rs)
    runtime = [spec.complete(r) for r in runtime]

    def lab(r: dict) -> str:
        return spec.label(r, CELLS)
    ranked = best_by_point(runtime)
    lines = ["## Throughput", "", spec.throughput_intro.format(tie_rule=spec.tie_rule), ""]
    if spec.runtime_evidence:
        lines += [f"Evidence of these rows: {evidence_text(runtime, spec.evidence)}.", ""]
    groups: dict[tuple, list[dict]] = {}
    for r in runtime:
        groups.setdefault((r.get("target"), r.get("workload"), r.get("gemm"), r.get("routing")), []).append(r)
    for (tgt, wl, gemm, routing), rows in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        lines += [f"### {wl} · {gemm} on {tgt} ({routing} routing)", ""]
        batches = sorted({int(r["batch"]) for r in rows if r.get("batch") is not None})
        epis = sorted({r.get("epilogue") for r in rows if r.get("epilogue")})
        best_recs = []
        for b in batches:
            problem = next((r.get("problem") for r in rows if r.get("batch") == b), None)
            for e in epis:
                rk = ranked.get((tgt, wl, gemm, routing, b, e), [])
                rec = {spec.best_batch: b, "epilogue": e, "problem": _cell(problem)}
                if not spec.best_epilogue:
                    del rec["epilogue"]
                for tag, r in (("best", rk[0] if rk else None), ("runner-up", rk[1] if len(rk) > 1 else None)):
                    rec[tag] = lab(r) if r else f"– (no verified-correct {spec.unit})" if tag == "best" else "–"
                    rec[f"{tag} µs"] = _cell(r.get("us_median") if r else None, 2)
                rec["tie"] = ("tied with " + ", ".join(lab(x) for x in rk[1:1 + len(rk[0].get("tie_with") or [])])
                              if rk and rk[0].get("tie_with") else "")
                rec["best µs (graph)"] = _cell(rk[0].get("us_graph_median") if rk else None, 2)
                rec["best GB/s"] = _cell(rk[0].get("gbps") if rk else None, 0)
                rec["best % copy"] = _cell(rk[0].get("pct_copy_bw") if rk else None, 1)
                best_recs.append(rec)
        lines += [spec.best_caption, "", markdown_table(best_recs), ""]
        marked = []
        best_cfg = {(b, e): (ranked.get((tgt, wl, gemm, routing, b, e)) or [{}])[0].get("config")
                    for b in batches for e in epis}
        for r in sorted(rows, key=lambda r: (int(r.get("batch") or 0), r.get("epilogue") or "",
                                             r.get("verdict") != "ok", float(r.get("us_median") or 1e30))):
            mark = "**★ best**" if r.get("verdict") == "ok" and \
                best_cfg.get((r.get("batch"), r.get("epilogue"))) == r.get("config") else ""
            marked.append(dict(r, _best=mark))
        recs = _records(spec.runtime_table, marked)
        lines += ["<details><summary>all rows</summary>", "", markdown_table(recs), "", "</details>", ""]
    return lines


def foreign_section(rs: ResultSet) -> list[str]:
    rows = rs.foreign
    if not rows:
        return []
    devs = sorted({r.get("workload", "").removeprefix("on-") for r in rows})
    return ["## Not runnable here", "",
            f"{len({r['config'] for r in rows})} configs were not launched on {', '.join(devs)}: they are "
            f"{', '.join(sorted({r['arch'] for r in rows}))} configs and these GPUs are another arch (evidence: "
            f"{evidence_words(rows, with_meaning=False)}).", ""]


def chart_section(rs: ResultSet, folder: Path, chart_cache: Path | None = None) -> list[str]:
    """The charts' section, their PNGs drawn into `folder`. `chart_cache`: a build cache root whose kept
    SharedStorage charts (tileprobe.reports.chart_cache, by content key) are copied instead of drawn when every
    chart of the report is kept there (then matplotlib is not imported)."""
    for pattern in CHART_GLOBS:
        for old in folder.glob(pattern):
            old.unlink()
    spec = _spec(rs)
    charts = []  # (args of plots.smem_chart, its keyword args, the file's name, its section lines)
    for target in rs.targets():
        rows = [spec.complete(r) for r in rs.static if r.get("target") == target]
        if spec.order:
            rows.sort(key=spec.order)
        if not rows:
            continue
        limit = int(rs.target_info(target).get("smem_optin") or rows[0]["smem_limit_bytes"])
        name = f"smem__{_slug(target)}.png"
        tool = ", ".join(sorted({spec.chart_tool(r) for r in rows})) if spec.chart_tool else ""
        words = evidence_words([r for r in rows if r.get("smem_bytes") is not None], with_meaning=False)
        title = spec.chart_title.format(target=target, tool=tool, words=words)
        kw = {} if spec.chart_xlabel is None else \
            {"xlabel": spec.chart_xlabel, "names": [spec.label(r, CELLS) for r in rows]}
        charts.append(((rows, limit, title), kw, name,
                       [spec.chart_caption.format(target=target, limit=limit, words=words), "",
                        f"![{spec.smem} vs limit on {target}]({name})", ""]))
    runtime = any(r.get("verdict") == "ok" for r in rs.runtime)
    keys = [chart_cache_mod.key("smem", plots.chart_inputs(*a, **kw)) if chart_cache is not None else None
            for a, kw, _, _ in charts]
    if chart_cache is not None and charts and not runtime and all(chart_cache_mod.has(chart_cache, k) for k in keys) \
            and all(chart_cache_mod.fetch(chart_cache, k, folder / c[2]) for k, c in zip(keys, charts)):
        return ["## Charts", ""] + [ln for c in charts for ln in c[3]]
    why = plots.matplotlib_missing()
    if why:
        for c in charts:  # a chart copied before one could not be read: none is left without its section
            (folder / c[2]).unlink(missing_ok=True)
        return ["## Charts", "", f"_Charts skipped: {why}. Install matplotlib and run `tileprobe report "
                                 f"{folder}` to draw them._", ""]
    lines = ["## Charts", ""]
    for (a, kw, name, section), k in zip(charts, keys):
        plots.smem_chart(*a, folder / name, **kw)
        chart_cache_mod.store(chart_cache, k, folder / name)
        lines += section
    if runtime:
        for metric, what in (("gbps", "GB/s"), ("us_median", "µs")):
            name = f"throughput__{metric}.png"
            plots.throughput_chart(rs.runtime, folder / name, metric, **({} if spec.chart_xlabel is None else
                                   {"name": lambda r: spec.label(spec.complete(r), CELLS)}))
            lines += [f"{what} against batch size per workload and GEMM (verified-correct rows only; ★ = best at "
                      "that batch).", "", f"![{what} vs batch size]({name})", ""]
    return lines


def render_markdown(rs: ResultSet, folder: Path, charts: bool = True, chart_cache: Path | None = None) -> str:
    lines = header(rs)
    lines += tactics_section(rs)
    errors = [r for r in rs.static if str(r.get("prediction") or "").startswith("MODEL ERROR")]
    if errors:
        lines += [f"**Model errors: {len(errors)} config(s) whose predicted stages/SharedStorage differ from the "
                  f"measured ones** (column `prediction`): " + "; ".join(f"{r['config']}: {r['prediction']}"
                                                                        for r in errors[:5]), ""]
    for target in rs.targets() or [None]:
        lines += verdict_section(rs, target)
    lines += throughput_section(rs)
    lines += foreign_section(rs)
    if charts:
        lines += chart_section(rs, folder, chart_cache)
    return "\n".join(lines).rstrip() + "\n"


def render_report(folder: Path, charts: bool = True, chart_cache: Path | None = None) -> Path:
    """Write report.md (and its PNG charts) into `folder`; return the report's path. `chart_cache`: a build cache
    root to keep and serve the SharedStorage charts (chart_section)."""
    folder = Path(folder)
    rs = load(folder)
    path = folder / REPORT_NAME
    path.write_text(render_markdown(rs, folder, charts, chart_cache))
    return path
