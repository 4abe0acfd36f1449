"""A results folder read back: its rows and run.json, split by kind, with the config identity rebuilt from a row.

Shared by the report, known-good files, diff, recommend and merge, so they all read a sweep the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.errors import UnsupportedConfig, UsageError
from tileprobe.families import EPILOGUES, FAMILIES, SCHEDULE_SHORT, Config, parse_cluster, parse_tile
from tileprobe.families.columns import CUTLASS_EVIDENCE, CUTLASS_TIE_RULE, evidence_text
from tileprobe.results.writer import JSONL_NAME, TOOLCHAIN_COLUMNS, check_csv, jsonl_path, read_rows, settled
from tileprobe.targets import PROFILES, Target

RUN_JSON = "run.json"
_SCHEDULE_LONG = {v: k for k, v in SCHEDULE_SHORT.items()}
_EPILOGUE_SHORT = {e.replace("-", ""): e for e in EPILOGUES}
_KEY_RE = re.compile(r"^(?P<family>.+?)_(?P<tile>\d+x\d+x\d+)_(?P<schedule>[a-z]+)_s(?P<stages>auto|\d+)_"
                     r"(?P<epilogue>[a-z]+)_(?P<swap>swap|noswap)_(?P<arch>sm_\d+a)$")


@dataclass
class ResultSet:
    folder: Path
    rows: list[dict]  # one row per key (results.settled): a re-run that settled a crashed point replaces it
    meta: dict = field(default_factory=dict)  # run.json ({} when missing)
    all_rows: list[dict] = field(default_factory=list)  # every line of the file, in order
    notes: list[str] = field(default_factory=list)  # what reading skipped (a torn last line), said in reports

    @property
    def static(self) -> list[dict]:
        return [r for r in self.rows if kind_of(r) == "static"]

    @property
    def runtime(self) -> list[dict]:
        return [r for r in self.rows if kind_of(r) == "runtime"]

    @property
    def foreign(self) -> list[dict]:
        return [r for r in self.rows if kind_of(r) == "foreign"]

    def targets(self) -> list[str]:
        return sorted({r["target"] for r in self.rows if r.get("target")})

    def families(self) -> list[str]:
        return sorted({r["family"] for r in self.rows if r.get("family")})

    def toolchains(self) -> list[dict]:
        """The distinct (CUTLASS version, tree hash, nvcc) combinations of the rows, in first-seen order."""
        seen: list[dict] = []
        for r in self.rows:
            tc = {k: r.get(k) for k in TOOLCHAIN_COLUMNS}
            if tc not in seen:
                seen.append(tc)
        return seen

    def target_info(self, name: str | None = None) -> dict:
        """The target's numbers: run.json's when it names this target, else the built-in profile, else the rows'."""
        t = self.meta.get("target") or {}
        name = name or t.get("name") or (self.targets() or [None])[0]
        for rec in [t, *(self.meta.get("targets") or [])]:
            if rec and rec.get("name") == name:
                return dict(rec)
        if name in PROFILES:
            return PROFILES[name].as_dict()
        row = next((r for r in self.rows if r.get("target") == name), {})
        return {"name": name, "device_name": row.get("device_name"), "cc": row.get("cc"),
                "smem_optin": row.get("smem_limit_bytes"), "arch": row.get("arch"), "driver": row.get("driver")}


def kind_of(row: dict) -> str:
    """'static' (no workload; or a check-configs row: compiled, not launched), 'foreign' (a not-runnable-here row for a
    GPU of another arch) or 'runtime'."""
    workload = row.get("workload")
    if not workload or row.get("routing") == "config-file":  # check-configs names the file it read in `workload`
        return "static"
    if row.get("verdict") == "not-runnable-here" and not row.get("gemm"):
        return "foreign"
    return "runtime"


def load(folder: Path | str) -> ResultSet:
    """Rows and run.json of a results folder; a UsageError (one line) when it holds no results, when a row of
    results.jsonl breaks the row schema, or when results.csv does not mirror results.jsonl (results.read_rows,
    results.check_csv)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a results folder (no such directory)")
    if jsonl_path(folder) is None:
        raise UsageError(f"{folder} is not a results folder (no {JSONL_NAME})")
    all_rows, notes = read_rows(folder)
    check_csv(folder, all_rows)
    rows = settled(all_rows)
    meta: dict = {}
    path = folder / RUN_JSON
    if path.is_file():
        try:
            meta = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            meta = {}
    return ResultSet(folder, rows, meta if isinstance(meta, dict) else {}, all_rows, notes)


def legacy_config_key(key: str) -> dict:
    """Older files (before rows carried `stages_configured`) hold the configured stage count only in the config
    key, e.g. sm120_nvfp4_128x128x128_coop_sauto_noc_noswap_sm_120a. Used only to load such files."""
    m = _KEY_RE.match(key or "")
    if not m:
        raise UsageError(f"not a tileprobe config key: {key!r}")
    fam = m.group("family").replace("_", "-")
    if fam not in FAMILIES:
        raise UsageError(f"config key {key!r}: unknown family {fam!r}")
    if m.group("schedule") not in _SCHEDULE_LONG or m.group("epilogue") not in _EPILOGUE_SHORT:
        raise UsageError(f"config key {key!r}: unknown schedule or epilogue")
    st = m.group("stages")
    return {"family": fam, "tile": m.group("tile"), "schedule": _SCHEDULE_LONG[m.group("schedule")],
            "stages": "auto" if st == "auto" else int(st), "epilogue": _EPILOGUE_SHORT[m.group("epilogue")],
            "swap_ab": m.group("swap") == "swap", "arch": m.group("arch")}


def make_config(family: str, tile: str, schedule: str, stages, epilogue: str, swap_ab: bool, arch: str,
                cluster: str | tuple = (1, 1, 1), extra: dict | None = None, cutlass_version: str | None = None) -> Config:
    """A families.Config from its identity fields; `stages` is as configured: 'auto' (or 0) or a count."""
    if family not in FAMILIES:
        raise UsageError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    fam = FAMILIES[family]
    schedule = str(schedule).split("->")[0]  # rows show 'auto->cooperative' where the builder resolves auto
    if schedule not in SCHEDULE_SHORT:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULE_SHORT)}")
    if epilogue not in fam.epilogues:
        raise UsageError(f"unknown epilogue {epilogue!r}; known: {', '.join(fam.epilogues)}")
    if arch not in fam.archs:
        raise UsageError(f"{family} builds for {', '.join(fam.archs)}, not {arch}")
    if stages in ("auto", 0, "0", None):
        n = 0
    else:
        try:
            n = int(stages)
        except (TypeError, ValueError):
            raise UsageError(f"stages {stages!r}: expected 'auto' or a whole number") from None
        if not 1 <= n <= 32:
            raise UsageError(f"stage count {n} out of range: 'auto' or 1..32")
    t = parse_tile(str(tile), fam.ab_bits)
    cl = parse_cluster(cluster) if isinstance(cluster, str) else tuple(cluster)
    ex = tuple((k, str((extra or {})[k])) for k in fam.extra_fields if (extra or {}).get(k) is not None)
    reason = None
    try:
        fam.check(t, schedule, cl, cutlass_version)
    except UnsupportedConfig as exc:
        reason = str(exc)
    return Config(family, t, schedule, n, epilogue, bool(swap_ab), arch, cl, ex, reason)  # type: ignore[arg-type]


def config_from_row(row: dict) -> Config:
    """The configured config behind a row, from its explicit fields. The row's `stages` column is the count CUTLASS
    resolved; the configured one is `stages_configured` (older files: read from the config key)."""
    stages = row.get("stages_configured")
    if stages in (None, ""):
        stages = legacy_config_key(row.get("config") or "")["stages"]
    return make_config(row.get("family") or "", row.get("tile") or "", row.get("schedule") or "", stages,
                       row.get("epilogue") or "", bool(row.get("swap_ab")), row.get("arch") or "",
                       row.get("cluster") or (1, 1, 1), row, row.get("cutlass_version"))


def config_from_entry(entry: dict) -> Config:
    """The config of a known-good entry, from its identity fields (the entry's `config` key is informational)."""
    missing = [k for k in ("family", "tile", "schedule", "stages", "epilogue", "swap_ab", "arch") if k not in entry]
    if missing:
        raise UsageError(f"known-good entry {entry.get('config') or entry.get('tile')!r} lacks {', '.join(missing)}")
    return make_config(entry["family"], entry["tile"], entry["schedule"], entry["stages"], entry["epilogue"],
                       entry["swap_ab"], entry["arch"], entry.get("cluster") or (1, 1, 1), entry)


def target_from_dict(d: dict) -> Target:
    """A Target from run.json's / a known-good file's target record (unknown keys ignored)."""
    names = Target.__dataclass_fields__
    try:
        return Target(**{k: v for k, v in d.items() if k in names})
    except TypeError as exc:
        raise UsageError(f"incomplete target record {d.get('name')!r}: {exc}") from None


def label(row: dict) -> str:
    """Short readable config label: '128x256x128 coop s=auto→3 no-c' (' swap' when on)."""
    sched = SCHEDULE_SHORT.get(row.get("schedule") or "", row.get("schedule") or "?")
    swap = " swap" if row.get("swap_ab") else ""
    return f"{row.get('tile')} {sched} s={stages_text(row)} {row.get('epilogue')}{swap}"


def stages_text(row: dict) -> str:
    """'auto→4' for a carveout-resolved count, '4' for an explicit one."""
    st = row.get("stages_configured")
    if st in (None, ""):
        try:
            st = legacy_config_key(row.get("config") or "")["stages"]
        except UsageError:
            st = None
    resolved = row.get("stages")
    if st == "auto":
        return f"auto→{resolved}" if resolved not in (None, "", "auto") else "auto"
    return str(resolved if resolved not in (None, "") else st)


TIE_RULE = CUTLASS_TIE_RULE


def tied(a: dict, b: dict) -> bool:
    """Medians within each other's spread: the measurements cannot tell the two apart."""
    spread = max(float(a.get("us_spread") or 0), float(b.get("us_spread") or 0))
    return abs(float(a["us_median"]) - float(b["us_median"])) <= spread


def rank(rows: list[dict]) -> list[dict]:
    """Fastest first, ties with the fastest broken by TIE_RULE, so two sweeps that measure the same tiles within
    their noise give the same order at the top. Each row of the leading tie group gets `tie_with` (the others)."""
    by_speed = sorted(rows, key=lambda r: (float(r["us_median"]), r.get("config") or ""))
    if not by_speed:
        return []
    group = [r for r in by_speed if tied(by_speed[0], r)]
    group.sort(key=lambda r: (r.get("smem_bytes") if r.get("smem_bytes") is not None else 1 << 40, r.get("config") or ""))
    rest = [r for r in by_speed if r not in group]
    out = [dict(r, tie_with=[x.get("config") for x in group if x is not r]) if len(group) > 1 else r for r in group]
    return out + rest


def best_by_point(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Per (target, workload, gemm, routing, batch, epilogue): the `ok` rows, best first (see rank and TIE_RULE)."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if kind_of(r) != "runtime" or r.get("verdict") != "ok" or r.get("us_median") is None:
            continue
        out.setdefault(point_key(r), []).append(r)
    return {k: rank(v) for k, v in out.items()}


def point_key(r: dict) -> tuple:
    """Where timings compete: the same target, workload point and epilogue (with-c does more work than no-c)."""
    return (r.get("target"), r.get("workload"), r.get("gemm"), r.get("routing"), r.get("batch"), r.get("epilogue"))


EVIDENCE_MEANING = CUTLASS_EVIDENCE


def evidence_words(rows: list[dict], with_meaning: bool = True) -> str:
    """The evidence words of `rows` as the rows say them, weakest first: '`sized` (kernel types instantiated ...)'
    ("none" when there are no rows). Reports and chart titles use this, never a word the rows do not hold."""
    return evidence_text(rows, EVIDENCE_MEANING, with_meaning)


def evidence_statement(rs: ResultSet) -> str:
    """One sentence on how strong the set's claims are: static / launched / verified correct."""
    arches = sorted({r["arch"] for r in rs.rows if r.get("arch")}) or ["?"]
    runtime = rs.runtime
    ok = [r for r in runtime if r.get("verdict") == "ok"]
    launched = [r for r in runtime if r.get("evidence") in ("launched", "verified", "launch-attempted",
                                                            "verified-correct")]
    how = {"sized": "types instantiated", "compiled": "device code compiled", "predicted": "predicted by the model",
           "static": "types instantiated"}  # 'static': older files' word for sized
    words = sorted({r.get("evidence") for r in rs.static if r.get("evidence") in how})
    read = ", sizes read" if {"sized", "compiled", "static"} & set(words) else "; nothing compiled" if words else ""
    compiled = (f"{'/'.join(words)} ({', '.join(how[w] for w in words)} for {', '.join(arches)}{read})" if words
                else "no config sized")
    if ok:
        devices = sorted({r.get("device_name") or r.get("target") for r in ok})
        cfgs = len({r["config"] for r in ok})
        return (f"Evidence: verified correct — {cfgs} config(s) launched on {', '.join(devices)} and checked against "
                f"the reference ({len(ok)} of {len(runtime)} runtime rows ok); the rest static: {compiled}")
    if launched:
        return (f"Evidence: launched, none verified correct — {len(launched)} runtime row(s), none ok; otherwise "
                f"static: {compiled}")
    return f"Evidence: static only — {compiled}; nothing launched"
