"""`tileprobe diff A B`: two results folders side by side — verdicts that changed, SharedStorage that moved, and
timings that moved beyond their noise (the larger us_spread of the two rows, or 3% when a spread is missing)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tileprobe.results.writer import row_key
from tileprobe.families import SCHEDULE_SHORT
from tileprobe.results.resultset import ResultSet, evidence_statement, kind_of, label, stages_text
from tileprobe.reports.markdown import markdown_table

DEFAULT_NOISE = 0.03


def noise_band(a: dict, b: dict) -> float:
    """µs two timings must differ by to count as moved: the larger spread (max - min over repeats) of the two, or 3%
    of the smaller median when either spread is missing."""
    sa, sb = a.get("us_spread"), b.get("us_spread")
    if sa is None or sb is None:
        return DEFAULT_NOISE * min(float(a["us_median"]), float(b["us_median"]))
    return max(float(sa), float(sb))


@dataclass
class Diff:
    a: ResultSet
    b: ResultSet
    across_targets: str | None = None
    verdicts: list[tuple[dict, dict]] = field(default_factory=list)
    smem: list[tuple[dict, dict]] = field(default_factory=list)
    timing: list[tuple[dict, dict, float]] = field(default_factory=list)
    only_a: list[dict] = field(default_factory=list)
    only_b: list[dict] = field(default_factory=list)
    same: int = 0
    engines: list[tuple[str, list[dict], list[dict]]] = field(default_factory=list)  # tile, A's rows, B's rows

    @property
    def changed(self) -> bool:
        return bool(self.verdicts or self.smem or self.timing or self.only_a or self.only_b)


def diff(a: ResultSet, b: ResultSet) -> Diff:
    ta, tb = a.targets(), b.targets()
    key = row_key
    across = None
    if len(ta) == 1 and len(tb) == 1 and ta != tb:
        # one target each, and not the same one: compare the same configs and points across the two targets
        across = f"{ta[0]} vs {tb[0]}"

        def key(r: dict) -> str:  # noqa: F811 - the same config built for the other target's arch matches too
            return row_key(dict(r, target="", config=re.sub(r"_sm_\d+a$", "", r.get("config") or "")))
    ka = {key(r): r for r in a.rows if kind_of(r) != "foreign"}
    kb = {key(r): r for r in b.rows if kind_of(r) != "foreign"}
    d = Diff(a, b, across)
    d.only_a = [r for k, r in ka.items() if k not in kb]
    d.only_b = [r for k, r in kb.items() if k not in ka]
    for k, ra in ka.items():
        rb = kb.get(k)
        if rb is None:
            continue
        moved = False
        if ra.get("verdict") != rb.get("verdict"):
            d.verdicts.append((ra, rb))
            moved = True
        if kind_of(ra) == "static" and (ra.get("smem_bytes") != rb.get("smem_bytes")
                                        or ra.get("stages") != rb.get("stages")):
            d.smem.append((ra, rb))
            moved = True
        if ra.get("us_median") is not None and rb.get("us_median") is not None:
            band = noise_band(ra, rb)
            if abs(float(rb["us_median"]) - float(ra["us_median"])) > band:
                d.timing.append((ra, rb, band))
                moved = True
        d.same += not moved
    d.engines = across_engines(a, b)
    return d


def _engine(r: dict) -> str:
    return r.get("engine") or r.get("family") or "?"


def across_engines(a: ResultSet, b: ResultSet) -> list[tuple[str, list[dict], list[dict]]]:
    """When A and B hold other families or engines (vllm-moe vs flashinfer-moe), no config matches by name; compare
    what each engine builds for the same tile (in elements) on the same target instead: every sized row of each
    side, per tile both sides have. Empty when both sides are the same family and engine."""
    def static(rs: ResultSet) -> dict[tuple, list[dict]]:
        by: dict[tuple, list[dict]] = {}
        for r in rs.rows:
            if kind_of(r) == "static":
                by.setdefault((r.get("target"), r.get("tile")), []).append(r)
        return by

    if {(r.get("family"), r.get("engine")) for r in a.rows} == {(r.get("family"), r.get("engine")) for r in b.rows}:
        return []
    sa, sb = static(a), static(b)
    return [(f"{k[1]} on {k[0]}", sa[k], sb[k]) for k in sa if k in sb]


def _point(r: dict) -> str:
    if kind_of(r) == "static":
        return "static"
    return f"{r.get('workload')} {r.get('gemm')} b={r.get('batch')}"


def _table(recs: list[dict]) -> str:
    return markdown_table(recs)


def _side(rs: ResultSet) -> dict:
    tcs = rs.toolchains()
    return {"folder": f"`{rs.folder}`", "targets": ", ".join(rs.targets()),
            "CUTLASS": "; ".join(f"{t['cutlass_version']} (tree {t['cutlass_hash']})" for t in tcs),
            "nvcc": ", ".join(sorted({str(t['nvcc_version']) for t in tcs})),
            "engine": ", ".join(sorted({f"{r['engine']} (tree {r.get('engine_hash')})" for r in rs.rows
                                        if r.get("engine")})) or "–",
            "rows": str(len(rs.rows)),
            "command": f"`{rs.meta.get('command')}`" if rs.meta.get("command") else "–",
            "evidence": evidence_statement(rs)}


def _variant(r: dict) -> str:
    """What distinguishes an engine's variants of one tile: tactic, dtypes, schedule, epilogue, swap."""
    parts = [r.get("tactic"), r.get("dtypes"), SCHEDULE_SHORT.get(r.get("schedule") or "", r.get("schedule")),
             r.get("epilogue"), "swap" if r.get("swap_ab") else None]
    return " ".join(str(p) for p in parts if p)


def render(d: Diff) -> str:
    sa, sb = _side(d.a), _side(d.b)
    lines = ["# tileprobe diff", "", "| | A | B |", "|---|---|---|"]
    lines += [f"| {k} | {sa[k]} | {sb[k]} |" for k in sa]
    if d.across_targets:
        lines += ["", f"Compared across targets ({d.across_targets}): rows matched by config (whatever its arch) and "
                      "workload point."]
    both = d.same + len({id(x[0]) for x in d.verdicts} | {id(x[0]) for x in d.smem} | {id(x[0]) for x in d.timing})
    lines += ["", f"**{both} rows in both: {len(d.verdicts)} verdict(s) changed, {len(d.smem)} SharedStorage "
                  f"size(s) moved, {len(d.timing)} timing(s) moved beyond noise, {d.same} unchanged; {len(d.only_a)} "
                  f"only in A, {len(d.only_b)} only in B.**", ""]
    lines += ["## Verdict changed", "", _table([
        {"tile": a.get("tile"), "schedule": a.get("schedule"), "epilogue": a.get("epilogue"),
         "swap": "on" if a.get("swap_ab") else "off", "stages A": stages_text(a), "stages B": stages_text(b),
         "point": _point(a), "A": a.get("verdict"), "B": b.get("verdict"),
         "evidence B": b.get("evidence"), "reason B": (b.get("reason") or b.get("launch_reason") or "")}
        for a, b in d.verdicts]), ""]
    lines += ["## SharedStorage moved", "", _table([
        {"tile": a.get("tile"), "schedule": a.get("schedule"), "epilogue": a.get("epilogue"),
         "stages A": stages_text(a), "stages B": stages_text(b), "SharedStorage A (bytes)": a.get("smem_bytes"),
         "SharedStorage B (bytes)": b.get("smem_bytes"),
         "Δ bytes": (b["smem_bytes"] - a["smem_bytes"]) if a.get("smem_bytes") is not None and
                b.get("smem_bytes") is not None else "–",
         "headroom A (bytes)": a.get("headroom_bytes"), "headroom B (bytes)": b.get("headroom_bytes")} for a, b in d.smem]), ""]
    lines += ["## Throughput moved beyond noise", "",
              "Noise band: the larger `us_spread` of the two rows, or 3% of the smaller median when one is missing.",
              "", _table([
                  {"config": label(a), "point": _point(a), "µs A": a["us_median"], "± A": a.get("us_spread"),
                   "µs B": b["us_median"], "± B": b.get("us_spread"), "band µs": round(band, 3),
                   "Δ %": f"{100 * (float(b['us_median']) / float(a['us_median']) - 1):+.1f}",
                   "GB/s A": a.get("gbps"), "GB/s B": b.get("gbps")} for a, b, band in d.timing]), ""]
    if d.engines:
        lines += ["## Across engines: the same tile, what each side builds", "",
                  "A and B hold other families or engines, so configs do not match by name; per tile (in elements) and "
                  "target that both sides size, each side's variants.", "", _table([
                      {"tile": tile, "side": side, "engine": _engine(r), "variant": _variant(r),
                       "stages": stages_text(r), "SharedStorage (bytes)": r.get("smem_bytes"),
                       "headroom (bytes)": r.get("headroom_bytes"), "verdict": r.get("verdict"),
                       "evidence": r.get("evidence")}
                      for tile, ra, rb in d.engines for side, rows in (("A", ra), ("B", rb)) for r in rows]), ""]
    for name, rows in (("Only in A", d.only_a), ("Only in B", d.only_b)):
        if rows:
            lines += [f"## {name}", "", _table([{"engine": _engine(r), "config": label(r), "point": _point(r),
                                                 "verdict": r.get("verdict"),
                                                 "SharedStorage (bytes)": r.get("smem_bytes")} for r in rows]), ""]
    return "\n".join(lines).rstrip() + "\n"
