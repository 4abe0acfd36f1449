"""`tileprobe recommend`: per workload and GEMM, batch-size buckets mapped to the best verified-correct tile and its
runner-up, as JSON a MoE runtime can load (format documented in the README, "Recommendations")."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.families import FAMILIES
from tileprobe.results.resultset import TIE_RULE, ResultSet, best_by_point, legacy_config_key

FORMAT = "tileprobe-recommend/1"


def buckets(batches: list[int]) -> list[tuple[str, int, int | None, int]]:
    """(label, min_batch, max_batch or None, measured_batch): each measured size covers up to the next one; the
    first bucket starts at 1 and the last is open-ended."""
    bs = sorted(set(int(b) for b in batches))
    out = []
    for i, b in enumerate(bs):
        lo = 1 if i == 0 else b
        hi = bs[i + 1] - 1 if i + 1 < len(bs) else None
        name = f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")
        out.append((name, lo, hi, b))
    return out


def tile_entry(row: dict) -> dict:
    """A tile's full identity (stages as configured and as resolved, cluster, the family's extra fields) and its
    timing at the measured point; resultset.config_from_entry(entry) is the config that was measured."""
    configured = row.get("stages_configured")
    if configured in (None, ""):
        try:
            configured = legacy_config_key(row.get("config") or "")["stages"]
        except UsageError:
            configured = row.get("stages")
    return {"config": row.get("config"), "family": row.get("family"), "tile": row.get("tile"),
            "tile_bytes_k": row.get("tile_bytes_k"), "schedule": row.get("schedule"), "stages": configured,
            "stages_resolved": row.get("stages"), "epilogue": row.get("epilogue"), "swap_ab": bool(row.get("swap_ab")),
            "arch": row.get("arch"), "cluster": row.get("cluster") or "1x1x1",
            **{k: row.get(k) for k in _extra_fields(row.get("family"))}, "smem_bytes": row.get("smem_bytes"),
            "us_median": row.get("us_median"), "us_spread": row.get("us_spread"), "gbps": row.get("gbps"),
            "tflops": row.get("tflops"), "evidence": row.get("evidence"), "tie_with": row.get("tie_with") or []}


def _extra_fields(family_name: str | None) -> tuple[str, ...]:
    """The family's identity fields beyond tile/schedule/stages/epilogue/swap/arch/cluster (flashinfer-moe:
    dtypes, tactic): a recommended tile names the exact config that was measured."""
    fam = FAMILIES.get(family_name or "")
    return tuple(fam.extra_fields) if fam else ()


def _pick(values: list, what: str, flag: str, wanted=None):
    if wanted is not None:
        if wanted not in values:
            raise UsageError(f"{flag} {wanted!r}: the runtime rows have {', '.join(map(str, values)) or 'none'}")
        return wanted
    if len(values) > 1:
        raise UsageError(f"the runtime rows cover several {what} ({', '.join(map(str, values))}): pick one with {flag}")
    return values[0]


def recommendations(rs: ResultSet, epilogue: str | None = None, routing: str | None = None,
                    target: str | None = None) -> dict:
    """{workload: {gemm: {bucket: {...best, runner_up...}}}} for one target, epilogue and routing."""
    runtime = rs.runtime
    if not runtime:
        raise UsageError(f"{rs.folder} has no runtime rows: recommend needs a sweep launched on a GPU (static rows say "
                         "what fits, not what is fastest)")
    target = _pick(sorted({r["target"] for r in runtime}), "targets", "--target", target)
    runtime = [r for r in runtime if r["target"] == target]
    epis = [e for e, _ in Counter(r["epilogue"] for r in runtime).most_common()]
    if epilogue is None:
        epilogue = "no-c" if "no-c" in epis else _pick(epis, "epilogues", "--epilogue")
    epilogue = _pick(epis, "epilogues", "--epilogue", epilogue)
    runtime = [r for r in runtime if r["epilogue"] == epilogue]
    routing = _pick(sorted({r["routing"] for r in runtime}), "routings", "--routing", routing)
    runtime = [r for r in runtime if r["routing"] == routing]
    ranked = best_by_point(runtime)
    out: dict = {}
    for wl, gemm in sorted({(r["workload"], r["gemm"]) for r in runtime}):
        batches = [int(r["batch"]) for r in runtime if r["workload"] == wl and r["gemm"] == gemm]
        per: dict = {}
        for name, lo, hi, b in buckets(batches):
            rk = ranked.get((target, wl, gemm, routing, b, epilogue), [])
            per[name] = {"min_batch": lo, "max_batch": hi, "measured_batch": b,
                         "best": tile_entry(rk[0]) if rk else None,
                         "runner_up": tile_entry(rk[1]) if len(rk) > 1 else None}
            if not rk:
                per[name]["note"] = "no verified-correct tile at this batch size"
        out.setdefault(wl, {})[gemm] = per
    return {"target": target, "epilogue": epilogue, "routing": routing, "workloads": out}


def recommend_document(rs: ResultSet, epilogue: str | None = None, routing: str | None = None,
                       target: str | None = None) -> dict:
    rec = recommendations(rs, epilogue, routing, target)
    t = rs.target_info(rec["target"])
    rows = [r for r in rs.runtime if r["target"] == rec["target"]]
    tc = {k: rows[0].get(k) for k in ("cutlass_version", "cutlass_source", "cutlass_hash", "nvcc_version")}
    return {"format": FORMAT, "family": rows[0].get("family"),
            "target": {k: t.get(k) for k in ("name", "device_name", "cc", "arch", "sms", "smem_optin", "driver")},
            "devices": sorted({r.get("device_name") for r in rows if r.get("device_name")}),
            "toolchain": tc, "epilogue": rec["epilogue"], "routing": rec["routing"],
            "selection": "lowest median µs among rows whose verdict is ok (launched and every element verified); "
                         + TIE_RULE,
            "source": {"folder": str(rs.folder), "command": rs.meta.get("command"), "date": rs.meta.get("date")},
            "workloads": rec["workloads"]}


def lookup(doc: dict, workload: str, gemm: str, batch: int) -> dict | None:
    """What a runtime does with the file: the best tile of the bucket holding `batch` (None when there is none)."""
    for b in doc["workloads"][workload][gemm].values():
        if b["min_batch"] <= batch and (b["max_batch"] is None or batch <= b["max_batch"]):
            return b["best"]
    first = next(iter(doc["workloads"][workload][gemm].values()))
    return first["best"] if batch < first["min_batch"] else None


def write_recommendations(rs: ResultSet, out: Path | None, **kw) -> str:
    text = json.dumps(recommend_document(rs, **kw), indent=1) + "\n"
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    return text
