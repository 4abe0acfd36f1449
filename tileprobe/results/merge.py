"""`tileprobe merge`: shards (and sweeps from different GPUs) joined into one results folder, without duplicates.

Rows are identified by results.row_key. Sets whose toolchains differ (results.TOOLCHAIN_COLUMNS: CUTLASS version,
CUTLASS header tree, nvcc) are refused unless forced: their sizes and timings are not comparable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.results.writer import TOOLCHAIN_COLUMNS, ResultsWriter, now, row_key
from tileprobe.results.resultset import RUN_JSON, ResultSet, kind_of, load

COMPARED = ("verdict", "smem_bytes", "stages", "us_median")


@dataclass
class MergeResult:
    out: Path
    rows: int
    inputs: int
    duplicates: int = 0
    disagreeing: list[str] = field(default_factory=list)  # keys whose duplicate rows disagree (first one kept)
    toolchains: list[dict] = field(default_factory=list)


def _tc_text(tc: dict) -> str:
    return f"CUTLASS {tc.get('cutlass_version')} (tree {tc.get('cutlass_hash')}), nvcc {tc.get('nvcc_version')}"


def check_toolchains(sets: list[ResultSet], force: bool) -> list[dict]:
    """The distinct toolchains of the inputs; a UsageError naming the first conflict unless `force`."""
    seen: list[tuple[dict, ResultSet]] = []
    for rs in sets:
        for r in rs.rows:
            tc = {k: r.get(k) for k in TOOLCHAIN_COLUMNS}
            if all(tc != t for t, _ in seen):
                seen.append((tc, rs))
    if len(seen) > 1 and not force:
        (a, ra), (b, rb) = seen[0], seen[1]
        raise UsageError(f"refusing to merge: {ra.folder} has {_tc_text(a)} but {rb.folder} has {_tc_text(b)}; "
                         "pass --force to merge anyway")
    return [t for t, _ in seen]


def _order(rs: ResultSet, index: int, count: int) -> list[tuple[tuple, dict]]:
    """Sort keys that put the static rows of shards i/n back in the unsharded sweep's config order (config j of
    shard i was config j*n+i), followed by the runtime rows in input order."""
    shard = rs.meta.get("shard")
    i, n = (shard[0], shard[1]) if isinstance(shard, (list, tuple)) and len(shard) == 2 else (index, count)
    out = []
    j = 0
    for pos, r in enumerate(rs.rows):
        if kind_of(r) == "static":
            out.append(((0, str(r.get("target")), j * n + i if shard else index * 10**9 + j, index), r))
            j += 1
        else:
            out.append(((1, "", index, pos), r))
    return out


def _run_json(sets: list[ResultSet], tcs: list[dict], command: str, configs: int) -> dict:
    targets: dict[str, dict] = {}
    devices: dict[str, dict] = {}
    for rs in sets:
        for t in [rs.meta.get("target")] + list(rs.meta.get("targets") or []):
            if t and t.get("name"):
                targets.setdefault(t["name"], t)
        for d in rs.meta.get("devices") or []:
            devices.setdefault(f"{d.get('device_name')}|{d.get('gpu_index')}|{d.get('name')}", d)
    fams = sorted({f for rs in sets for f in rs.families()})
    first_tc = next((rs.meta.get("toolchain") for rs in sets if rs.meta.get("toolchain")), None)
    return {"command": command, "date": now(), "family": fams[0] if len(fams) == 1 else fams,
            "target": next(iter(targets.values())) if len(targets) == 1 else None,
            "targets": list(targets.values()), "devices": list(devices.values()), "configs": configs, "shard": None,
            "toolchain": first_tc if len(tcs) == 1 else {"mixed": tcs},
            "merged_from": [{"folder": str(rs.folder), "command": rs.meta.get("command"), "date": rs.meta.get("date"),
                             "shard": rs.meta.get("shard")} for rs in sets]}


def merge(folders: list[Path], out: Path, force: bool = False, command: str = "tileprobe merge") -> MergeResult:
    if not folders:
        raise UsageError("merge needs at least one results folder")
    out = Path(out)
    sets = [load(f) for f in folders]
    if len({rs.folder.resolve() for rs in sets}) != len(sets):
        raise UsageError("the same results folder is named twice")
    tcs = check_toolchains(sets, force)
    ordered = []
    for idx, rs in enumerate(sets):
        ordered += _order(rs, idx, len(sets))
    ordered.sort(key=lambda kr: kr[0])
    kept: dict[str, dict] = {}
    res = MergeResult(out, 0, len(sets), toolchains=tcs)
    for _, r in ordered:
        k = row_key(r)
        if k in kept:
            res.duplicates += 1
            if any(kept[k].get(c) != r.get(c) for c in COMPARED + tuple(TOOLCHAIN_COLUMNS)):
                res.disagreeing.append(k)
            continue
        kept[k] = r
    meta = _run_json(sets, tcs, command, len({r["config"] for r in kept.values() if kind_of(r) == "static"}))
    with ResultsWriter(out) as w:  # an earlier merge in `out` is moved aside (results.csv.1 ...), not deleted
        for r in kept.values():
            w.write(r)
    (out / RUN_JSON).write_text(json.dumps(meta, indent=1))
    res.rows = len(kept)
    return res
