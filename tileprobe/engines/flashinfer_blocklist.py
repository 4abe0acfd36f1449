"""FlashInfer tactics blocklists from static sweeps: the tactics a GPU cannot run, in the engine's own numbering.

FlashInfer's autotuner loads the JSON file named by FLASHINFER_TACTICS_BLOCKLIST (`flashinfer/tactics_blocklist.py`,
`TacticsBlocklist.load`): `_metadata` must match the running environment key by key (`"*"` matches anything; a
mismatch skips the whole file), and `invalid_tactics["<custom_op>::<RunnerClass>"]` lists tactics its `filter()`
removes after `get_valid_tactics`. For the CUTLASS fused MoE the keys are OP_KEYS and a tactic is an integer
(tileprobe.engines.flashinfer_tactic_ids). The integers depend on the dtype pair and on finalize fusion, which the key does not
carry: one file per (GPU name, dtype pair, finalize mode).

Everything tileprobe adds lives under the top-level key "tileprobe", which FlashInfer's loader never reads.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe import __version__
from tileprobe.results import resultset
from tileprobe.engines import flashinfer as engine
from tileprobe.engines import flashinfer_native_ids as native
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.errors import CompileError, UsageError
from tileprobe.targets import device_names, profile

FAMILY = "flashinfer-moe"
ENV_VAR = "FLASHINFER_TACTICS_BLOCKLIST"
# cutlass_fused_moe(use_fused_finalize=None) resolves to `not torch.are_deterministic_algorithms_enabled()`
# (flashinfer/fused_moe/core.py): finalize fusion is on unless deterministic algorithms are.
DEFAULT_FINALIZE = "on"
ANY_GPU_RISK = ("gpu '*': FlashInfer loads this file on every GPU, and on a non-SM120 GPU (SM90, SM100) the same "
                "integers name other tactics of another list, so it would block tactics that work and let the "
                "ones that fail through")
_LOADER = Path("tactics_blocklist.py")
_AUTOTUNER = (Path("autotuner") / "autotuner.py", Path("autotuner.py"))
_SIZED = ("sized", "compiled", "launched", "verified")


@dataclass
class Blocked:
    tactic: tid.TacticId
    row: dict
    why: str

    def record(self) -> dict:
        r, t = self.row, self.tactic
        head = r.get("headroom_bytes")
        return {"id": t.id, "gemm": t.gemm, "tactic": t.tactic, "tile_elements": r.get("tile"),
                "epilogue": t.epilogue, "swap_ab": t.swap_ab, "dtypes": t.dtypes, "verdict": r.get("verdict"),
                "smem_bytes": r.get("smem_bytes"), "smem_limit_bytes": r.get("smem_limit_bytes"),
                "over_by_bytes": -head if isinstance(head, int) and head < 0 else None,
                "stages": r.get("stages"), "evidence": r.get("evidence"), "reason": self.why}


@dataclass
class Export:
    path: Path
    gpu: str
    dtypes: str
    finalize: str
    ids: list[tid.TacticId]
    blocked: list[Blocked]
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: the file, and each blocked ID with its variant and how far over the limit it is."""
        parts = []
        for b in self.blocked:
            over = b.record()["over_by_bytes"]
            t = b.tactic
            parts.append(f"{t.id} ({t.gemm} {t.tactic} {t.epilogue}{' swap' if t.swap_ab else ''}, "
                         + (f"{over} B over)" if over else f"{b.why[:60]})"))
        return (f"{self.path}: gpu {self.gpu!r}, {self.dtypes}, finalize {self.finalize}: {len(self.blocked)} of "
                f"{len(self.ids)} tactics blocked" + (": " + ", ".join(parts) if parts else ""))


# ----------------------------------------------------------------------------------------------------------------
# The engine's loader and its metadata keys
# ----------------------------------------------------------------------------------------------------------------


def metadata_keys(tree: engine.FlashinferTree) -> list[str]:
    """The keys `_collect_metadata` fills (the loader compares exactly these), read from the autotuner source;
    UsageError when this flashinfer has no blocklist loader."""
    loader = tree.path(_LOADER)
    if not loader.is_file() or "class TacticsBlocklist" not in loader.read_text(errors="replace"):
        raise UsageError(f"flashinfer {tree.version} at {tree.root} cannot read tactics blocklists "
                         f"(no TacticsBlocklist in {loader}); upgrade flashinfer")
    src = next((tree.path(p) for p in _AUTOTUNER if tree.path(p).is_file()), None)
    text = src.read_text(errors="replace") if src else ""
    m = re.search(r"def _collect_metadata\(.*?\n(.*?)\n(?:def |\S)", text, re.S)
    keys = list(dict.fromkeys(re.findall(r'meta\["(\w+)"\]\s*=', m.group(1)))) if m else []
    if ENV_VAR not in text or "gpu" not in keys or "flashinfer_version" not in keys:
        raise UsageError(f"flashinfer {tree.version} at {tree.root}: its autotuner does not load "
                         f"{ENV_VAR} with the metadata read here; upgrade flashinfer")
    return keys


def verify_numbering(nvcc: str, flashinfer_dir: str | Path | None = None) -> int:
    """Compile the engine's own tactic enumeration (tileprobe.engines.flashinfer_native_ids) and compare it whole with
    tileprobe's numbering; returns how many IDs were compared. UsageError when they differ anywhere: tileprobe
    then cannot number this flashinfer and writes nothing."""
    tree = engine.find_flashinfer(flashinfer_dir)
    with tempfile.TemporaryDirectory(prefix="tileprobe-fi-ids-") as work:
        try:
            lines = native.native_tactics(tree, nvcc, Path(work))
        except CompileError as exc:
            last = next((ln for ln in reversed(exc.log.splitlines()) if "error" in ln), "")
            raise UsageError(f"cannot verify: {exc} {last.strip()[:200]}".rstrip()) from None
    bad = native.mismatches(lines, lambda d, f, a: tid.tactic_ids(d, f, a, flashinfer_dir))
    if bad:
        raise UsageError(f"tileprobe numbers {tree.label()}'s tactics differently from its own getTactics at "
                         f"{len(bad)} ID(s), first: {bad[0]}; not writing a blocklist")
    return len(lines)


# ----------------------------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------------------------


def _rows(rs: resultset.ResultSet, target: str, tree: engine.FlashinferTree) -> dict[str, dict]:
    rows = [r for r in rs.static if r.get("family") == FAMILY and r.get("target") == target]
    if not rows:
        raise UsageError(f"{rs.folder} has no {FAMILY} rows for target {target}; run "
                         f"`tileprobe sweep --family {FAMILY} --target {target} --static-only` first")
    engines = {(r.get("engine"), r.get("engine_hash")) for r in rows}
    if engines != {(tree.label(), tree.tree_hash)}:
        got = ", ".join(sorted(f"{e} ({h})" for e, h in engines))
        raise UsageError(f"{rs.folder} was sized against {got}, but the IDs are numbered for {tree.label()} "
                         f"({tree.tree_hash}); re-run the sweep with this flashinfer")
    return {r["config"]: r for r in rows}


def judge(ids: list[tid.TacticId], rows: dict[str, dict]) -> list[Blocked]:
    """The IDs whose config does not fit or cannot be dispatched, from the sweep's rows."""
    out = []
    for t in ids:
        row = rows.get(t.config.name)
        if row is None:
            raise UsageError(f"the sweep has no row for tactic {t.id} ({t.label()}); re-run it without filters")
        verdict = row.get("verdict")
        if verdict in ("fits", "ok"):
            continue
        if verdict == "smem-over-limit":
            if row.get("evidence") not in _SIZED:
                raise UsageError(f"tactic {t.id} ({t.label()}) is over the limit by evidence "
                                 f"{row.get('evidence')!r} only; re-run the sweep without --predict-only")
            out.append(Blocked(t, row, f"SharedStorage {row.get('smem_bytes')} B > opt-in "
                                       f"{row.get('smem_limit_bytes')} B ({row.get('stages')} stages): "
                                       f"initialize() fails"))
        elif verdict == "unsupported":
            out.append(Blocked(t, row, row.get("reason") or "the engine cannot dispatch it"))
        else:
            raise UsageError(f"tactic {t.id} ({t.label()}): row verdict {verdict!r} says neither fits nor fails; "
                             "re-run the sweep")
    return out


def document(ids: list[tid.TacticId], blocked: list[Blocked], *, tree: engine.FlashinferTree, keys: list[str],
             gpu: str, target: str, arch: str, dtypes: str, finalize: str, source: str) -> dict:
    meta = {k: "*" for k in keys}
    meta.update(flashinfer_version=tree.version, gpu=gpu, generator_version=f"tileprobe {__version__}")
    lim = next((b.row.get("smem_limit_bytes") for b in blocked), profile(target).smem_optin)
    return {
        "_metadata": meta,
        "invalid_tactics": {key: [b.tactic.id for b in blocked if b.tactic.gemm == g]
                            for g, key in tid.OP_KEYS.items()},
        "tileprobe": {
            "version": __version__, "evidence": "sized",
            "evidence_note": "every ID is judged from SharedStorage sizes of the engine's own kernel types, "
                             "instantiated on the host (nvcc); nothing SM120 was launched",
            "use": f"export {ENV_VAR}=<this file>, on a GPU named {gpu!r}, with flashinfer {tree.version}, for "
                   f"{dtypes} MoE layers with gemm2 finalize fusion {finalize}",
            "finalize_note": "cutlass_fused_moe fuses finalize unless torch.are_deterministic_algorithms_enabled() "
                             "or use_fused_finalize=False; the tactic numbering differs between the two modes",
            "target": target, "arch": arch, "smem_limit_bytes": lim, "dtypes": dtypes, "finalize_fusion": finalize,
            "flashinfer": {"version": tree.version, "tree_hash": tree.tree_hash},
            "rows": source, "counts": tid.counts(ids),
            "blocked": [b.record() for b in blocked],
            "tactics": [[t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab] for t in ids],
        },
    }


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "any-gpu"


def _write(path: Path, doc: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def export(rs: resultset.ResultSet, target: str, out: Path, dtypes: list[str] | None = None,
           finalize: list[str] | None = None, gpu_names: list[str] | None = None, any_gpu: bool = False,
           flashinfer_dir: str | Path | None = None) -> list[Export]:
    """Write one blocklist per (GPU name, dtype pair, finalize mode). `out` is a file when exactly one is written,
    else a folder."""
    prof = profile(target)
    if prof.arch not in tid.SM120_ARCHS:
        raise UsageError(f"target {target} is {prof.arch}; tileprobe numbers FlashInfer tactics for SM120/SM121")
    for f in finalize or ():
        if f not in tid.FINALIZE_MODES:
            raise UsageError(f"--finalize {f!r}: expected on or off")
    for d in dtypes or ():
        if d not in tid.PAIRS:
            raise UsageError(f"unknown dtype pair {d!r}; known on SM120: {', '.join(tid.PAIRS)}")
    tree = engine.find_flashinfer(flashinfer_dir)
    keys = metadata_keys(tree)
    rows = _rows(rs, target, tree)
    gpus = ["*"] if any_gpu else list(gpu_names or device_names(target))
    combos = [(g, d, f) for g in gpus for d in (dtypes or tid.PAIRS) for f in (finalize or [DEFAULT_FINALIZE])]
    single = out.suffix == ".json"
    if single and len(combos) > 1:
        raise UsageError(f"--out {out} is one file, but {len(combos)} blocklists are due (GPU names x dtype pairs x "
                         "finalize modes); pass a folder, or narrow with --gpu-name/--dtypes/--finalize")
    results = []
    for gpu, dt, fin in combos:
        ids = tid.tactic_ids(dt, tid.FINALIZE_MODES[fin], prof.arch, flashinfer_dir)
        blocked = judge(ids, rows)
        path = out if single else out / f"{_slug(gpu)}__{dt}__finalize-{fin}.json"
        _write(path, document(ids, blocked, tree=tree, keys=keys, gpu=gpu, target=target, arch=prof.arch, dtypes=dt,
                              finalize=fin, source=str(rs.folder)))
        results.append(Export(path, gpu, dt, fin, ids, blocked, [ANY_GPU_RISK] if gpu == "*" else []))
    return results


# ----------------------------------------------------------------------------------------------------------------
# Check and diff
# ----------------------------------------------------------------------------------------------------------------


def _load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"no such blocklist file: {path}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not a JSON blocklist: {exc}") from None
    prov = doc.get("tileprobe") if isinstance(doc, dict) else None
    if not isinstance(prov, dict) or not isinstance(prov.get("tactics"), list):
        raise UsageError(f"{path} was not written by `tileprobe export flashinfer-blocklist` (no 'tileprobe' "
                         "record of the numbering it used); cannot check it")
    ok = (prov.get("dtypes") in tid.PAIRS and prov.get("finalize_fusion") in tid.FINALIZE_MODES
          and prov.get("arch") in tid.SM120_ARCHS
          and all(isinstance(e, list) and len(e) == 5 and isinstance(e[0], int) for e in prov["tactics"]))
    if not ok:
        raise UsageError(f"{path}: its 'tileprobe' record (dtypes, finalize_fusion, arch, tactics) is malformed")
    return doc


def _meaning(entry: list) -> str:
    _, gemm, tactic, epi, swap = entry
    return f"{gemm} {tactic} {epi} epilogue swap-AB {'on' if swap else 'off'}"


def check(path: Path, flashinfer_dir: str | Path | None = None) -> tuple[list[str], list[str], str]:
    """(problems, notes, engine label): each problem one line naming a changed ID; none when the file is still
    exact for that flashinfer."""
    doc = _load(path)
    prov = doc["tileprobe"]
    tree = engine.find_flashinfer(flashinfer_dir)
    metadata_keys(tree)
    now = tid.tactic_ids(prov["dtypes"], tid.FINALIZE_MODES[prov["finalize_fusion"]], prov["arch"], flashinfer_dir)
    now_map = {t.id: [t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab] for t in now}
    then_map = {e[0]: e for e in prov["tactics"]}
    where_now = {tuple(v[1:]): k for k, v in now_map.items()}
    problems, notes = [], []
    blocked = {b["id"] for b in prov.get("blocked", [])}
    for i in sorted(set(then_map) | set(now_map)):
        a, b = then_map.get(i), now_map.get(i)
        if a is not None and b is not None and list(a[1:]) == list(b[1:]):
            continue
        was = _meaning(a) if a else "absent"
        moved = f"; that variant is now ID {where_now[tuple(a[1:])]}" if a and tuple(a[1:]) in where_now else ""
        tag = "blocked ID" if i in blocked else "ID"
        problems.append(f"{tag} {i}: was {was}, now {_meaning(b) if b else 'absent'}{moved}")
    listed = {(k, i) for k, ids in (doc.get("invalid_tactics") or {}).items() for i in ids}
    recorded = {(tid.OP_KEYS.get(b.get("gemm")), b.get("id")) for b in prov.get("blocked", [])}
    for k, i in sorted(listed ^ recorded, key=str):
        why = "listed without a tileprobe record" if (k, i) in listed else "recorded but not listed"
        problems.append(f"ID {i} under {k}: {why}")
    meta_v = doc.get("_metadata", {}).get("flashinfer_version")
    if meta_v not in (tree.version, "*"):
        problems.append(f"flashinfer_version {meta_v} in _metadata, {tree.version} installed: FlashInfer's loader "
                        "skips this file")
    if prov.get("flashinfer", {}).get("tree_hash") != tree.tree_hash:
        notes.append(f"flashinfer's MoE kernel sources differ from those the rows were sized with "
                     f"({prov.get('flashinfer', {}).get('tree_hash')} vs {tree.tree_hash}): re-run the sweep and "
                     "export again")
    return problems, notes, tree.label()


def diff_installs(old: str | Path, new: str | Path, dtypes: list[str] | None = None,
                  finalize: list[str] | None = None, arch: str = "sm_120a") -> list[str]:
    """One line per tactic variant whose ID differs between two flashinfer installs (or that one lacks)."""
    lines = []
    trees = [engine.find_flashinfer(d) for d in (old, new)]
    labels = [f"{t.label()} [{t.tree_hash[:8]}]" for t in trees]  # the hash tells two builds of one version apart
    for dt in dtypes or tid.PAIRS:
        for fin in finalize or list(tid.FINALIZE_MODES):
            a = {t.key(): t for t in tid.tactic_ids(dt, tid.FINALIZE_MODES[fin], arch, old)}
            b = {t.key(): t for t in tid.tactic_ids(dt, tid.FINALIZE_MODES[fin], arch, new)}
            for key in list(a) + [k for k in b if k not in a]:
                ia, ib = a.get(key), b.get(key)
                if ia and ib and ia.id == ib.id:
                    continue
                what = (ia or ib).label()
                lines.append(f"{dt} finalize {fin}: {what}: ID {ia.id if ia else '-'} in {labels[0]} -> "
                             f"{ib.id if ib else '-'} in {labels[1]}")
    return lines
