"""Known-good tile sets: results/known_good/<target>__<family>.json, made from a sweep, guarded by `tileprobe check`.

A file holds the target's numbers, the toolchain it was made with, every config that worked (with its full
identity, evidence level, SharedStorage and headroom) and, when the sweep was launched, the recommended tile per
workload and batch-size bucket. `check` re-probes the tiles statically against the file's target on any machine;
a family that mirrors an engine (flashinfer-moe) is re-probed against that engine's own bundled CUTLASS (the tree its
kernels compile with), never a --cutlass-dir.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import tempfile

from rich.console import Console

from tileprobe.errors import UsageError
from tileprobe.families import family as family_named
from tileprobe.reports.recommend import recommendations
from tileprobe.results.writer import TOOLCHAIN_COLUMNS, ResultsWriter, now
from tileprobe.results.resultset import ResultSet, config_from_entry, config_from_row, target_from_dict
from tileprobe import preflight, progress
from tileprobe.triton import sweep as triton_sweep
from tileprobe.backends.triton.compile import compile_many
from tileprobe.backends.triton.toolchain import require_triton
from tileprobe.families import triton_moe
from tileprobe.backends.cutlass.runtime import RuntimeJob, runtime_rows
from tileprobe.backends.cutlass.static_probe import probe_static
from tileprobe.targets import NoDevice, query_devices
from tileprobe.backends.cutlass.toolchain import family_cutlass
from tileprobe.verdict import Evidence, Verdict, evidence_for
from tileprobe.workloads import points_for

FORMAT = "tileprobe-known-good/1"
DEFAULT_DIR = Path("results") / "known_good"
GOOD = ("fits", "ok")
RUNTIME_FAIL = ("launch-error", "incorrect", "timeout", "crashed")


def default_path(target: str, family: str, folder: Path = DEFAULT_DIR) -> Path:
    return Path(folder) / f"{target}__{family}.json"


def _config_verdicts(rs: ResultSet, target: str, family: str) -> list[dict]:
    """One record per config: the static row, with the runtime verdicts (if any) folded in.

    A config launched on a GPU is working only when every point that ran is `ok` (launched and verified): any
    failure gives that failure's verdict; an `unchecked` point among them (launched, no element-wise check) makes
    the config `unchecked`, not verified; points that never started (`not-run`) prove nothing and are counted as
    such; a config none of whose points ran is `not-run`. `runtime` says what ran, verdict by verdict."""
    static = [r for r in rs.static if r["target"] == target and r["family"] == family]
    runtime: dict[str, list[dict]] = {}
    for r in rs.runtime:
        if r["target"] == target and r["family"] == family and r["verdict"] != "not-runnable-here":
            runtime.setdefault(r["config"], []).append(r)
    out = []
    for r in static:
        rec = dict(r)
        rt = runtime.get(r["config"], [])
        if rt:
            counts = Counter(x["verdict"] for x in rt)
            ran = [x for x in rt if x["verdict"] != Verdict.NOT_RUN.value]
            not_run = len(rt) - len(ran)
            fails = [x for x in rt if x["verdict"] in RUNTIME_FAIL]
            unrun = f"; {not_run} point(s) not run (the harness ended before starting them)" if not_run else ""
            if fails:
                rec.update(verdict=fails[0]["verdict"], evidence=fails[0]["evidence"],
                           reason=fails[0].get("launch_reason") or fails[0].get("reason"))
            elif not ran:
                rec.update(verdict=Verdict.NOT_RUN.value, evidence=Evidence.NONE.value,
                           reason=f"none of its {len(rt)} workload point(s) ran (the harness ended before starting "
                                  f"them); static: {r.get('reason')}")
            elif counts.get(Verdict.OK.value) == len(ran):
                rec.update(verdict=Verdict.OK.value, evidence=Evidence.VERIFIED.value,
                           reason=f"launched at {len(ran)} workload point(s), every one verified correct{unrun}")
            else:
                rec.update(verdict=Verdict.UNCHECKED.value, evidence=Evidence.LAUNCHED.value,
                           reason=f"launched at {len(ran)} workload point(s), verified at {counts.get('ok', 0)}, "
                                  f"{counts.get('unchecked', 0)} unchecked (no element-wise check){unrun}: not "
                                  "verified at every point")
            rec["runtime"] = ", ".join(f"{v} {n}" for v, n in counts.items()) + f" of {len(rt)}"
            rec["devices"] = sorted({x.get("device_name") for x in rt if x.get("device_name")})
        out.append(rec)
    return out


def _one_per_config(recs: list[dict]) -> list[dict]:
    """One record per config. A Triton family has a static row per (device name, GEMM, batch M) of one config: the
    config works only when every one of them does (else its first failing row stands for it); the batch sizes it was
    compiled at travel with it (`batches`), so `check` compiles the same launches again. Other families have one
    static row per config already."""
    by: dict[str, list[dict]] = {}
    for r in recs:
        by.setdefault(r["config"], []).append(r)
    out = []
    for rows in by.values():
        bad = [r for r in rows if r["verdict"] not in GOOD]
        rec = dict(bad[0] if bad else rows[0])
        if any(r.get("batch") is not None and r.get("routing") == "engine-pick" for r in rows):
            rec["batches"] = sorted({int(r["batch"]) for r in rows})
            rec["device_names"] = sorted({r["device_name"] for r in rows if r.get("device_name")})
        out.append(rec)
    return out


def counts(recs: list[dict], runtime: list[dict], tiles: list[dict]) -> dict:
    """What the file holds and what its sweep ran: tiles by evidence; the sweep's configs by verdict (working =
    fits statically, or ok at every launched point); its runtime points by verdict."""
    good = [r for r in recs if r["verdict"] in GOOD]
    return {"tiles": len(tiles), "tiles_by_evidence": dict(Counter(str(e.get("evidence")) for e in tiles)),
            "sweep_configs": len(recs), "sweep_working": len(good),
            "sweep_not_good_by_verdict": dict(Counter(r["verdict"] for r in recs if r["verdict"] not in GOOD)),
            "sweep_runtime_points": len(runtime),
            "sweep_runtime_points_by_verdict": dict(Counter(r["verdict"] for r in runtime))}


def entry(rec: dict) -> dict:
    """A known-good tile: its full identity (stages as configured; the resolved count beside it) and evidence."""
    cfg = config_from_row(rec)
    e = {"config": cfg.key, **cfg.fields(), "tile_bytes_k": rec.get("tile_bytes_k"),
         "stages": cfg.stages_label if cfg.stages == 0 else cfg.stages,
         "stages_resolved": rec.get("stages"), "evidence": rec.get("evidence"), "verdict": rec.get("verdict"),
         "smem_bytes": rec.get("smem_bytes"), "smem_mainloop_bytes": rec.get("smem_mainloop_bytes"),
         "smem_epilogue_bytes": rec.get("smem_epilogue_bytes"), "smem_limit_bytes": rec.get("smem_limit_bytes"),
         "headroom_bytes": rec.get("headroom_bytes")}
    e.pop("stages_configured", None)
    for k in ("runtime", "devices", "engine", "engine_hash", "batches", "device_names", "triton_version"):
        if rec.get(k):
            e[k] = rec[k]
    return e


def _toolchain(rows: list[dict], where: str) -> dict:
    tcs = []
    for r in rows:
        tc = {k: r.get(k) for k in TOOLCHAIN_COLUMNS}
        if tc not in tcs:
            tcs.append(tc)
    if len(tcs) > 1:
        raise UsageError(f"{where} mixes {len(tcs)} toolchains: a known-good file records one")
    src = next((r.get("cutlass_source") for r in rows if r.get("cutlass_source")), None)
    return (tcs[0] if tcs else {}) | {"cutlass_source": src}


def build(rs: ResultSet, target: str, family: str) -> dict:
    """The known-good document for one (target, family) of a results set."""
    recs = _one_per_config(_config_verdicts(rs, target, family))
    runtime = [r for r in rs.runtime if r["target"] == target and r["family"] == family
               and r["verdict"] != "not-runnable-here"]
    if not recs:
        raise UsageError(f"{rs.folder} has no static rows for {family} on {target}")
    t = rs.target_info(target)
    doc = {"format": FORMAT, "target": {k: v for k, v in t.items()}, "family": family,
           "toolchain": _toolchain([r for r in rs.rows if r.get("target") == target], str(rs.folder)),
           "date": now(), "sweep_date": rs.meta.get("date"), "command": rs.meta.get("command"),
           "source": str(rs.folder), "counts": {},
           "tiles": [entry(r) for r in recs if r["verdict"] in GOOD],
           "not_good": [{"config": r["config"], "verdict": r["verdict"], "reason": r.get("reason")}
                        for r in recs if r["verdict"] not in GOOD]}
    doc["counts"] = counts(recs, runtime, doc["tiles"])
    if any(r["target"] == target and r["family"] == family for r in rs.runtime):
        routing = Counter(r["routing"] for r in rs.runtime if r["target"] == target).most_common(1)[0][0]
        try:
            doc["recommended"] = recommendations(rs, target=target, routing=routing)
        except UsageError as exc:
            doc["recommended"] = {"note": str(exc)}
    return doc


def load_file(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"known-good file {path} does not exist") from None
    except (json.JSONDecodeError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"known-good file {path} is not readable JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("tiles"), list):
        raise UsageError(f"{path} is not a tileprobe known-good file (format {FORMAT})")
    return doc


def version_mismatches(old: dict, new: dict) -> list[str]:
    """'CUTLASS version 4.5.0 -> 4.2.0'-style lines for every toolchain field that differs."""
    names = {"cutlass_version": "CUTLASS version", "cutlass_hash": "CUTLASS header tree", "nvcc_version": "nvcc"}
    a, b = old.get("toolchain") or {}, new.get("toolchain") or {}
    return [f"{names[k]} {a.get(k)} -> {b.get(k)}" for k in TOOLCHAIN_COLUMNS if a.get(k) != b.get(k)]


def _merge(old: dict, new: dict) -> tuple[dict, list[str]]:
    """Update `old` with `new`: tiles in the new sweep replace their old entries, tiles that stopped working are
    dropped (and said so). Tiles the new sweep did not cover are kept only when the toolchain is unchanged; under
    another toolchain they were never re-verified, so they are dropped and listed, not carried under the new
    header."""
    notes = []
    same_toolchain = not version_mismatches(old, new)
    bad = {x["config"]: x for x in new["not_good"]}
    fresh = {e["config"]: e for e in new["tiles"]}
    tiles = []
    for e in old["tiles"]:
        k = e.get("config")
        if k in bad:
            notes.append(f"dropped {k}: was {e.get('verdict')} ({e.get('smem_bytes')} B), now {bad[k]['verdict']}: "
                         f"{bad[k]['reason']}")
        elif k in fresh:
            n = fresh.pop(k)
            if n.get("smem_bytes") != e.get("smem_bytes") or n.get("verdict") != e.get("verdict"):
                notes.append(f"changed {k}: {e.get('verdict')} {e.get('smem_bytes')} B -> {n.get('verdict')} "
                             f"{n.get('smem_bytes')} B")
            tiles.append(n)
        elif same_toolchain:
            tiles.append(e)
        else:
            notes.append(f"dropped {k}: not re-probed by this sweep under the new toolchain (was {e.get('verdict')}, "
                         f"{e.get('evidence')}, {e.get('smem_bytes')} B under the old one)")
    for k, n in fresh.items():
        notes.append(f"added {k}: {n.get('verdict')} {n.get('smem_bytes')} B, headroom {n.get('headroom_bytes')} B")
        tiles.append(n)
    doc = dict(new, tiles=tiles)
    doc["counts"] = dict(new.get("counts") or {}, tiles=len(tiles),
                         tiles_by_evidence=dict(Counter(str(e.get("evidence")) for e in tiles)))
    doc["history"] = (old.get("history") or []) + [{k: old.get(k) for k in ("date", "command", "toolchain")}]
    return doc, notes


def write(rs: ResultSet, out: Path | None = None, folder: Path = DEFAULT_DIR,
          accept_versions: bool = False) -> list[tuple[Path, list[str]]]:
    """Make or update one known-good file per (target, family) of the set; returns (path, notes) for each.

    On update, a different CUTLASS version, header tree or nvcc is refused (UsageError naming them) unless
    accept_versions; then the mismatches are among the notes."""
    pairs = sorted({(r["target"], r["family"]) for r in rs.static})
    if not pairs:
        raise UsageError(f"{rs.folder} has no static rows to make a known-good file from")
    if out is not None and len(pairs) > 1:
        raise UsageError(f"{rs.folder} covers {len(pairs)} target/family pairs; --out names one file: leave it out "
                         f"to write {', '.join(f'{t}__{f}.json' for t, f in pairs)}")
    plans = []
    for target, family in pairs:
        path = Path(out) if out is not None else default_path(target, family, folder)
        new = build(rs, target, family)
        notes: list[str] = []
        if path.exists():
            old = load_file(path)
            if (old.get("target") or {}).get("name") != target or old.get("family") != family:
                raise UsageError(f"{path} is for {old.get('family')} on {(old.get('target') or {}).get('name')}, "
                                 f"not {family} on {target}")
            mism = version_mismatches(old, new)
            if mism and not accept_versions:
                raise UsageError(f"{path} was made with another toolchain ({'; '.join(mism)}): re-run with "
                                 "--accept-versions to update it")
            notes += [f"toolchain changed (accepted): {m}" for m in mism]
            new, more = _merge(old, new)
            notes += more
        plans.append((path, new, notes))
    written = []
    for path, doc, notes in plans:  # write only once every file passed its checks
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append((path, notes))
    return written


@dataclass
class CheckResult:
    path: Path
    checked: int = 0
    regressions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tree: str = ""  # the CUTLASS tree the tiles were compiled against, in words


def files_in(paths: list[str | Path] | None, default: Path = DEFAULT_DIR) -> list[Path]:
    """The known-good files named, folders expanded to their *.json; with none named, every file in `default`."""
    items = [Path(p) for p in paths] if paths else [Path(default)]
    out: list[Path] = []
    for p in items:
        if p.is_dir():
            out += sorted(p.glob("*.json"))
        elif p.is_file():
            out.append(p)
        else:
            raise UsageError(f"no known-good file or folder at {p}")
    if not out:
        raise UsageError(f"no known-good files in {', '.join(map(str, items))}")
    return out


@dataclass
class Prepared:
    """A known-good file ready to re-probe: its document, target, toolchain and (entry, config) pairs."""
    path: Path
    doc: dict
    target: object
    tc: object
    configs: list
    res: CheckResult


def prepare(path: Path, tc) -> Prepared:
    """Read a file and pick the toolchain its tiles are re-probed with (notes on the file's CheckResult). `tc` is a
    toolchain, or a no-argument callable making one: then nvcc and CUTLASS are looked for only when a file of a
    CUTLASS family needs them (a Triton-only check needs neither)."""
    doc = load_file(path)
    target = target_from_dict(doc["target"])
    res = CheckResult(Path(path))
    tc = _file_toolchain(doc, tc() if callable(tc) else tc, res)
    configs = []
    for e in doc["tiles"]:
        cfg = config_from_entry(e)
        if e.get("config") and e["config"] != cfg.key:
            res.notes.append(f"{e['config']}: entry fields say {cfg.key}; checked as {cfg.key}")
        configs.append((e, cfg))
    mism = version_mismatches(doc, {"toolchain": {"cutlass_version": tc.cutlass.version,
                                                  "cutlass_hash": tc.cutlass.tree_hash,
                                                  "nvcc_version": tc.nvcc.version_text}})
    if mism:
        res.notes.append(f"re-probed with another toolchain than the file's: {'; '.join(mism)}")
    return Prepared(Path(path), doc, target, tc, configs, res)


def tile_label(name: str, target, cfg) -> str:
    return f"{name}: {target.name} {cfg.tile} {cfg.schedule} stages={cfg.stages_label} {cfg.epilogue}" + \
        (" swap-ab" if cfg.swap_ab else "") + f" [{cfg.key}]"


def static_finding(name: str, target, e: dict, cfg, o) -> tuple[str | None, str | None]:
    """(regression line, note) for one re-probed tile: a regression when it no longer works, a note when it still
    fits with other bytes or stages."""
    was = (f"was {e.get('verdict')} ({e.get('evidence')}: SharedStorage {e.get('smem_bytes')} B, headroom "
           f"{e.get('headroom_bytes')} B)")
    what = tile_label(name, target, cfg)
    if o.verdict.value not in GOOD:
        now = evidence_for(o.verdict, compiled=o.info.compiled, predicted=o.info.predicted)
        return f"{what}: {was}; now {o.verdict.value} ({now.value}): {o.reason}", None
    if o.info.smem_bytes != e.get("smem_bytes") or o.info.stages != e.get("stages_resolved"):
        return None, (f"{what}: still fits; SharedStorage {e.get('smem_bytes')} -> {o.info.smem_bytes} B, "
                      f"stages {e.get('stages_resolved')} -> {o.info.stages}")
    return None, None


def check_file(path: Path, tc, jobs: int = 1, timeout_s: float = 1200, cache_dir=None) -> CheckResult:
    """Re-probe a file's tiles statically against its target; every tile that no longer works is a regression.
    When a GPU of the file's arch is present, the verified-correct tiles are also launched again (runtime re-probe).
    A Triton family's tiles are compiled again with Triton instead (into `cache_dir`: the build cache `tc` uses)."""
    doc = load_file(path)
    if backend_of(doc) == "triton":
        return _check_triton(doc, target_from_dict(doc["target"]), CheckResult(Path(path)), jobs, cache_dir)
    prep = prepare(path, tc)
    res, target, configs = prep.res, prep.target, prep.configs
    preflight.check_cutlass(prep.tc.cutlass, prep.tc.nvcc, prep.tc.cache, [c for _, c in configs])
    with progress.track(len(configs), f"check {res.path.name}") as bar:
        outcomes = probe_static([c for _, c in configs], target, prep.tc.cutlass, prep.tc.nvcc, prep.tc.cache, jobs,
                                timeout_s, progress=False, on_outcome=bar.outcomes())
    res.checked = len(outcomes)
    for (e, cfg), o in zip(configs, outcomes):
        line, note = static_finding(res.path.name, target, e, cfg, o)
        res.regressions += [line] if line else []
        res.notes += [note] if note else []
    # Every tile recorded as working is launched where a GPU of the file's arch is present: verified tiles and
    # static (sized/compiled) ones alike, so an SM120 file is tested by an SM120 GPU, not only re-sized.
    working = [(e, cfg, o) for (e, cfg), o in zip(configs, outcomes) if o.verdict.value in GOOD]
    if working:
        found, note = launch_findings(prep.doc, target, working, prep.tc, jobs, res.path.name)
        res.regressions += [line for lines in found.values() for line in lines]
        res.notes.append(note)
    return res


def backend_of(doc: dict) -> str:
    """'triton' or 'cutlass': how a known-good file's family is built."""
    try:
        return family_named(str(doc.get("family"))).backend
    except UsageError:
        return "cutlass"  # an unknown family fails where its tiles are read, with its own line


def triton_findings(doc: dict, target, res: CheckResult, jobs: int, keys: set[str] | None = None,
                    cache_dir=None) -> dict:
    """Compile a Triton family's tiles (all, or those in `keys`) again, with the installed Triton and the engine's
    kernel as installed or cached, at every batch size each was recorded at: {config key: (regression lines, notes)}.
    A tile that no longer fits, or no longer compiles, is a regression."""
    triton = require_triton(bool(doc.get("any_triton")))
    preflight.check_triton(triton, target.cc_int)
    res.tree = triton.label()
    was = (doc.get("toolchain") or {}).get("triton_version") or next(
        (e.get("triton_version") for e in doc["tiles"] if e.get("triton_version")), None)
    if was and was != triton.version:
        res.notes.append(f"the file's tiles were compiled with triton {was}; re-compiled with {triton.label()}")
    sources: dict[str, object] = {}
    planned = []
    found: dict[str, tuple[list[str], list[str]]] = {}
    for e in doc["tiles"]:
        cfg = config_from_entry(e)
        if keys is not None and cfg.key not in keys:
            continue
        found[cfg.key] = ([], [])
        engine = str(cfg.get("engine")).split()[0]
        if engine not in sources:
            sources[engine] = triton_sweep.engine_kernel_source(engine, None)[1]
        for m in e.get("batches") or [1]:
            planned.append((e, cfg, m, triton_moe.job_of(cfg, sources[engine], m)))
    with progress.track(len(planned), f"check {res.path.name}") as bar:
        builds = compile_many([p[3] for p in planned], jobs, cache_dir, on_result=bar.each(
            [progress.unit(p[1], p[2]) for p in planned], lambda i, b: triton_sweep.outcome(planned[i][1], b, target,
                                                                                            triton)))
    for (e, cfg, m, _), b in zip(planned, builds):
        o = triton_sweep.outcome(cfg, b, target, triton)
        what = f"{res.path.name}: {target.name} {cfg.tile} s{cfg.stages} M={m} [{cfg.key}]"
        if o.verdict.value not in GOOD:
            found[cfg.key][0].append(f"{what}: was {e.get('verdict')} ({e.get('evidence')}, {e.get('smem_bytes')} "
                                     f"B); now {o.verdict.value}: {o.reason}")
        elif o.info.smem_bytes != e.get("smem_bytes"):
            found[cfg.key][1].append(f"{what}: still fits; metadata.shared {e.get('smem_bytes')} -> "
                                     f"{o.info.smem_bytes} B")
    return found


def _check_triton(doc: dict, target, res: CheckResult, jobs: int, cache_dir=None) -> CheckResult:
    found = triton_findings(doc, target, res, jobs, cache_dir=cache_dir)
    res.checked = len(doc["tiles"])
    for lines, notes in found.values():
        res.regressions += lines
        res.notes += notes
    return res


def _file_toolchain(doc: dict, tc, res: CheckResult):
    """The toolchain a file's tiles are re-probed with: `tc`, except that a family mirroring an engine compiles (and
    is named) with that engine's own bundled CUTLASS. A --cutlass-dir / TILEPROBE_CUTLASS_DIR that does not apply,
    and an engine release other than the file's, are noted."""
    try:
        fam = family_named(str(doc.get("family")))
    except UsageError:
        fam = None  # an unknown family fails where its tiles are read, with its own line
    if fam is not None and fam.cutlass_root is not None:
        own = family_cutlass(fam)
        if tc.cutlass.source in ("flag", "env") and tc.cutlass.tree_hash != own.tree_hash:
            res.notes.append(f"--cutlass-dir / TILEPROBE_CUTLASS_DIR (CUTLASS {tc.cutlass.version}, tree "
                             f"{tc.cutlass.tree_hash}) does not apply to {fam.name}: its kernels compile against "
                             f"{own.source}")
        label = fam.engine()[0]
        was = sorted({str(e["engine"]) for e in doc["tiles"] if e.get("engine")})
        if was and was != [label]:
            res.notes.append(f"the file's tiles were measured with {', '.join(was)}; re-probed with {label}")
        tc = replace(tc, cutlass=own)
    res.tree = f"CUTLASS {tc.cutlass.version} ({tc.cutlass.source}, tree {tc.cutlass.tree_hash})"
    return tc


def devices_for(target) -> list:
    """The GPUs here of the target's arch (none without a driver)."""
    try:
        return [d for d in query_devices() if d.arch == target.arch]
    except NoDevice:
        return []


def launch_findings(doc: dict, target, ok: list, tc, jobs: int, name: str) -> tuple[dict[str, list[str]], str]:
    """Launch the working tiles (verified or static) on a GPU of the file's arch, on one decode point of the file's
    first recommended workload (batch 8): {config key: regression lines (one per failing point)} for anything but
    `ok`, and a note saying what the launches showed. Without such a GPU, no launches and a note saying so."""
    devices = devices_for(target)
    if not devices:
        return {}, f"{len(ok)} working tile(s) re-checked statically only (sized): no {target.arch} GPU here"
    workloads = list(((doc.get("recommended") or {}).get("workloads") or {}).keys()) or ["deepseek-v3"]
    points = points_for(workloads[:1], None, [8], "uniform", 1, 1, 1)
    job = RuntimeJob(points, 1, devices, [o for _, _, o in ok], tc, jobs, 1200, 120)
    with tempfile.TemporaryDirectory(prefix="tileprobe-check-") as tmp, ResultsWriter(Path(tmp)) as writer:
        rows = runtime_rows(job, writer, Console(quiet=True))
    by_cfg = {cfg.key: (e, cfg) for e, cfg, _ in ok}
    found: dict[str, list[str]] = {}
    for r in rows:
        if r["verdict"] != "ok" and r["config"] in by_cfg:
            e, cfg = by_cfg[r["config"]]
            found.setdefault(r["config"], []).append(
                f"{name}: {target.name} {cfg.tile} {cfg.schedule} [{cfg.key}]: was {e.get('verdict')} "
                f"({e.get('evidence')}); now {r['verdict']} on GPU {r['gpu_index']} ({r['device_name']}) at "
                f"{r['workload']} {r['gemm']} batch {r['batch']}: {r['reason']}")
    shown = sum(1 for r in rows if r["verdict"] == "ok")
    return found, (f"{len(ok)} working tile(s) launched on {devices[0].device_name}: {shown} of {len(rows)} "
                   f"point(s) verified")


def check(paths: list[str | Path] | None, tc, jobs: int = 1, timeout_s: float = 1200,
          cache_dir=None) -> list[CheckResult]:
    return [check_file(p, tc, jobs, timeout_s, cache_dir) for p in files_in(paths)]
