"""FlashInfer tactics blocklists from static sweeps: the tactics a GPU cannot run, in the engine's own numbering.

FlashInfer's autotuner loads the JSON file named by FLASHINFER_TACTICS_BLOCKLIST (`flashinfer/tactics_blocklist.py`,
`TacticsBlocklist.load`): `_metadata` must match the running environment key by key (`"*"` matches anything; a
mismatch skips the whole file), and `invalid_tactics["<custom_op>::<RunnerClass>"]` lists tactics its `filter()`
removes after `get_valid_tactics`. For the CUTLASS fused MoE the keys are OP_KEYS and a tactic is an integer
(tileprobe.engines.flashinfer_tactic_ids). The integers depend on the dtype pair and on finalize fusion, which the key
does not carry: one file per (GPU name, dtype pair, finalize mode).

A file is made for the flashinfer release a serving engine runs (tileprobe.engines.serving_pins: vLLM and SGLang pin
one each, and decide finalize fusion), with the `flashinfer_version` that release's `_collect_metadata` reports.
Its numbering is compared with the release's own compiled enumeration whenever nvcc is there, and the file says
whether it was (`tileprobe.numbering`). Its evidence word is the weakest of the rows it was judged from.

Everything tileprobe adds lives under the top-level key "tileprobe", which FlashInfer's loader never reads.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe import __version__
from tileprobe.backends.cutlass.toolchain import Nvcc, find_nvcc
from tileprobe.engines import flashinfer as engine
from tileprobe.engines import flashinfer_native_ids as native
from tileprobe.engines import flashinfer_tactic_ids as tid
from tileprobe.engines import locate, manifest, packages
from tileprobe.engines import serving_pins as pins
from tileprobe.errors import ToolchainError, UsageError
from tileprobe.results import resultset
from tileprobe.targets import arch_of_name, device_names, profile
from tileprobe.verdict import Evidence

FAMILY = "flashinfer-moe"
ENV_VAR = "FLASHINFER_TACTICS_BLOCKLIST"
ANY_GPU_RISK = ("gpu '*': FlashInfer loads this file on every GPU, and on a non-SM120 GPU (SM90, SM100) the same "
                "integers name other tactics of another list, so it would block tactics that work and let the "
                "ones that fail through")
_LOADER = Path("tactics_blocklist.py")
_AUTOTUNER = (Path("autotuner") / "autotuner.py", Path("autotuner.py"))
_WEAKEST_FIRST = [str(e) for e in Evidence]
_JUDGED = ("fits", "ok", "smem-over-limit")  # verdicts whose evidence is a size (unsupported rows quote the source)


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
    evidence: str
    numbering: native.Numbering
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


@dataclass(frozen=True)
class Release:
    """The flashinfer a blocklist is for, and the engine that runs it."""

    tree: engine.FlashinferTree
    loader_version: str  # what that release's _collect_metadata reports as flashinfer_version
    pin: pins.EnginePin | None  # None: a flashinfer folder given directly, no engine named
    finalize: pins.Finalize | None  # the engine's own mode (None: plain flashinfer, the user picks)
    banner: str = ""  # --rules-off: the engine release or flashinfer read is not the one tileprobe answers for

    def who(self) -> str:
        """'vllm <release> (flashinfer <its pin>)', or 'flashinfer <release>' for flashinfer itself."""
        if self.pin is None or self.pin.engine == "flashinfer":
            return self.tree.label()
        return f"{self.pin.label()} (flashinfer {self.tree.version})"

    def record(self) -> dict:
        if self.pin is None:
            return {"name": "flashinfer", "version": self.tree.version, "flashinfer": self.tree.version}
        out = {"name": self.pin.engine, "version": self.pin.version, "flashinfer": self.pin.flashinfer,
               "read_from": self.pin.where}
        if self.finalize is not None:
            out.update(finalize_fusion=self.finalize.mode, finalize_read=self.finalize.why,
                       finalize_env_var=self.finalize.env_var)
        return out


# ----------------------------------------------------------------------------------------------------------------
# The engine's loader, its metadata and the release an engine runs
# ----------------------------------------------------------------------------------------------------------------


def _autotuner_text(tree: engine.FlashinferTree) -> str:
    src = next((tree.path(p) for p in _AUTOTUNER if tree.path(p).is_file()), None)
    return src.read_text(errors="replace") if src else ""


def metadata_keys(tree: engine.FlashinferTree) -> list[str]:
    """The keys `_collect_metadata` fills (the loader compares exactly these), read from the autotuner source;
    UsageError when this flashinfer has no blocklist loader."""
    loader = tree.path(_LOADER)
    if not loader.is_file() or "class TacticsBlocklist" not in loader.read_text(errors="replace"):
        raise UsageError(f"flashinfer {tree.version} at {tree.root} cannot read tactics blocklists "
                         f"(no TacticsBlocklist in {loader}); upgrade flashinfer")
    text = _autotuner_text(tree)
    m = re.search(r"def _collect_metadata\(.*?\n(.*?)\n(?:def |\S)", text, re.S)
    keys = list(dict.fromkeys(re.findall(r'meta\["(\w+)"\]\s*=', m.group(1)))) if m else []
    if ENV_VAR not in text or "gpu" not in keys or "flashinfer_version" not in keys:
        raise UsageError(f"flashinfer {tree.version} at {tree.root}: its autotuner does not load "
                         f"{ENV_VAR} with the metadata read here; upgrade flashinfer")
    return keys


def loader_version(tree: engine.FlashinferTree) -> str:
    """The flashinfer_version this release's `_collect_metadata` reports, read where it reads it: the autotuner's
    `_flashinfer_version` is `flashinfer.version.__version__`, which is `_build_meta.__version__` (or
    "0.0.0+unknown" when _build_meta is absent, as version.py falls back)."""
    text = _autotuner_text(tree)
    version_py = tree.path(Path("version.py"))
    vtext = version_py.read_text(errors="replace") if version_py.is_file() else ""
    ok = (re.search(r'meta\["flashinfer_version"\]\s*=\s*_flashinfer_version\b', text)
          and re.search(r"from\s+(?:flashinfer|\.\.?)\.?version\s+import\s+__version__\s+as\s+_flashinfer_version",
                        text)
          and re.search(r"__version__\s*:?\s*(?:str)?\s*=\s*_build_meta\.__version__", vtext))
    if not ok:
        raise UsageError(f"structure not recognized in {tree.root}: _collect_metadata's flashinfer_version no longer "
                         "reads flashinfer.version.__version__ <- _build_meta.__version__")
    meta = tree.path(Path("_build_meta.py"))
    if not meta.is_file():
        fallback = re.search(r"except ImportError:\s*__version__\s*=\s*['\"]([^'\"]+)['\"]", vtext)
        if not fallback:
            raise UsageError(f"{tree.root} has no _build_meta.py and version.py has no fallback read here")
        return fallback.group(1)
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", meta.read_text(errors="replace"), re.M)
    if not m:
        raise UsageError(f"structure not recognized in {meta}: no __version__ = '...'")
    return m.group(1)


def release(engine_spec: str | None, wheel: Path | None, flashinfer_dir: Path | None,
            cache_dir: str | Path | None = None, rules_off: bool = False) -> Release:
    """The flashinfer the engine `engine_spec` (vllm, sglang, flashinfer, NAME==VER; None: plain flashinfer) runs:
    its pinned release from --flashinfer-dir, beside --engine-wheel (`wheel`), the install or the wheel cache
    (locate.find_release, through serving_pins), and the finalize mode it uses. The engine release is held to the
    one release rule (tileprobe.engines.manifest); with `rules_off` a release it does not answer for is read, and
    --flashinfer-dir may name another flashinfer release than the engine's pin (the fallback when the pinned one is
    not served): the Release's banner says so."""
    pin = pins.read_pin(engine_spec, wheel) if engine_spec else None
    if pin is None:
        if wheel is not None and flashinfer_dir is None:
            pin = pins.read_pin("flashinfer", wheel)
        else:
            tree = engine.find_flashinfer(flashinfer_dir or _plain_flashinfer(cache_dir))
            return Release(tree, loader_version(tree), None, None)
    folder = pins.flashinfer_dir(pin, flashinfer_dir, wheel, cache_dir)
    tree = engine.find_flashinfer(folder)
    said = [manifest.check_package(pin.engine, pin.package, rules_off).text] if pin.package is not None else []
    if tree.version != pin.flashinfer:
        if not (rules_off and flashinfer_dir is not None):
            raise UsageError(f"{pin.label()} pins flashinfer-python {pin.flashinfer}, but {tree.root} is "
                             f"{tree.version}; pass that release (--flashinfer-dir, or --engine-wheel with its wheel),"
                             f" or this one with {manifest.RULES_OFF}\n"
                             f"{locate.fetch_help(pins.FLASHINFER_DIST, pin.flashinfer)}")
        said.append(f"RULES OFF: {pin.label()} pins flashinfer-python {pin.flashinfer}; flashinfer {tree.version} "
                    f"({tree.root}) is read in its place: the tactic numbering is {tree.version}'s")
    fin = pins.finalize_mode(pin, tree.root) if pin.engine != "flashinfer" else None
    return Release(tree, loader_version(tree), pin, fin, "; ".join(t for t in said if t))


def _plain_flashinfer(cache_dir: str | Path | None) -> Path | None:
    """No engine, wheel or folder named: the installed flashinfer (None: find_flashinfer's own lookup of it), else
    the newest in the wheel cache, unpacked."""
    pkg = locate.find_release(pins.FLASHINFER_DIST)
    return None if pkg.wheel is None else packages.unpack_flashinfer(pkg, cache_dir)


def find_nvcc_or_none(nvcc: str | None) -> Nvcc | None:
    """nvcc for the numbering check: an explicit --nvcc must exist; otherwise None when there is none."""
    try:
        return find_nvcc(nvcc)
    except ToolchainError:
        if nvcc:
            raise
        return None


def check_numbering(tree: engine.FlashinferTree, nvcc: Nvcc | None, model_only: bool = False,
                    cache_dir: str | Path | None = None) -> native.Numbering:
    """Is tileprobe's numbering of `tree` FlashInfer's own? Compiled and compared when nvcc is there (`nvcc` None:
    looked up on PATH / CUDA_HOME)."""
    if nvcc is None and not model_only:
        nvcc = find_nvcc_or_none(None)
    return native.numbering(tree, lambda d, f, a: tid.tactic_ids(d, f, a, tree.root), nvcc, model_only, cache_dir)


# ----------------------------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------------------------


def _rows(rs: resultset.ResultSet, target: str, tree: engine.FlashinferTree) -> tuple[dict[str, dict], str]:
    """(config -> row, the target the rows were sized for). Rows of another target serve only when it has the same
    arch and opt-in limit: static sizes depend on nothing else (an RTX 5080 file from rtx-pro-6000 rows)."""
    mine = [r for r in rs.static if r.get("family") == FAMILY]
    rows = [r for r in mine if r.get("target") == target]
    prof = profile(target)
    if not rows:
        same = sorted({r.get("target") for r in mine if r.get("arch") == prof.arch
                       and r.get("smem_limit_bytes") == prof.smem_optin and r.get("target")})
        rows = [r for r in mine if same and r.get("target") == same[0]]
    if not rows:
        raise UsageError(f"{rs.folder} has no {FAMILY} rows for target {target} (nor for another {prof.arch} target "
                         f"with its {prof.smem_optin} B limit); run "
                         f"`tileprobe sweep --family {FAMILY} --target {target} --static-only` first")
    engines = {(r.get("engine"), r.get("engine_hash")) for r in rows}
    if engines != {(tree.label(), tree.tree_hash)}:
        got = ", ".join(sorted(f"{e} ({h})" for e, h in engines))
        raise UsageError(f"{rs.folder} was sized against {got}, but the IDs are numbered for {tree.label()} "
                         f"({tree.tree_hash}); re-run the sweep with this flashinfer")
    return {r["config"]: r for r in rows}, rows[0]["target"]


def judge(ids: list[tid.TacticId], rows: dict[str, dict], allow_predicted: bool = False) -> list[Blocked]:
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
            if row.get("evidence") not in _WEAKEST_FIRST[_WEAKEST_FIRST.index("sized"):] and not \
                    (allow_predicted and row.get("evidence") == "predicted"):
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


def evidence_of(ids: list[tid.TacticId], rows: dict[str, dict]) -> str:
    """The weakest evidence among the size-judged rows behind `ids` (what the file may claim)."""
    seen = {rows[t.config.name].get("evidence") for t in ids if rows[t.config.name].get("verdict") in _JUDGED}
    known = [e for e in _WEAKEST_FIRST if e in seen]
    if not known or seen - set(_WEAKEST_FIRST):
        raise UsageError(f"the rows carry no evidence word tileprobe knows ({', '.join(map(str, sorted(seen, key=str)))})")
    return known[0]


_EVIDENCE_NOTES = {
    "predicted": "every ID is judged from tileprobe's model of the CUTLASS builders (--predict-only rows): nothing "
                 "was compiled or sized; nothing SM120 was launched",
    "sized": "every ID is judged from SharedStorage sizes of the engine's own kernel types, instantiated on the "
             "host (nvcc); nothing SM120 was launched",
    "compiled": "every ID is judged from SharedStorage sizes of the engine's own kernel types, compiled for the "
                "arch by ptxas; nothing SM120 was launched",
}


def document(ids: list[tid.TacticId], blocked: list[Blocked], *, rel: Release, keys: list[str], gpu: str,
             target: str, arch: str, dtypes: str, finalize: str, source: str, evidence: str,
             numbering: native.Numbering, rows_target: str | None = None) -> dict:
    meta = {k: "*" for k in keys}
    meta.update(flashinfer_version=rel.loader_version, gpu=gpu, generator_version=f"tileprobe {__version__}")
    lim = next((b.row.get("smem_limit_bytes") for b in blocked), profile(target).smem_optin)
    who = rel.who()
    return {
        "_metadata": meta,
        "invalid_tactics": {key: [b.tactic.id for b in blocked if b.tactic.gemm == g]
                            for g, key in tid.OP_KEYS.items()},
        "tileprobe": {
            "version": __version__, "evidence": evidence, **({"rules_off": rel.banner} if rel.banner else {}),
            "evidence_note": _EVIDENCE_NOTES.get(evidence, f"the weakest evidence of the rows is {evidence!r}"),
            "use": f"export {ENV_VAR}=<this file>, on a GPU named {gpu!r}, with {who}, for {dtypes} MoE layers with "
                   f"gemm2 finalize fusion {finalize}",
            "finalize_note": (rel.finalize.why if rel.finalize else
                              "cutlass_fused_moe's use_fused_finalize decides; the tactic numbering differs between "
                              "the two modes"),
            "engine": rel.record(), "numbering": numbering.record(),
            "target": target, "arch": arch, "smem_limit_bytes": lim, "dtypes": dtypes, "finalize_fusion": finalize,
            "flashinfer": {"version": rel.tree.version, "tree_hash": rel.tree.tree_hash,
                           "metadata_version": rel.loader_version},
            "rows": source, "rows_target": rows_target or target,
            **({"rows_note": f"rows sized for {rows_target}: the same {arch} and {lim} B opt-in limit as {target}, "
                             "so the same sizes and verdicts"} if rows_target and rows_target != target else {}),
            "counts": tid.counts(ids),
            "blocked": [b.record() for b in blocked],
            "tactics": [[t.id, t.gemm, t.tactic, t.epilogue, t.swap_ab] for t in ids],
        },
    }


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "any-gpu"


def write_atomic(path: Path, doc: dict) -> None:
    """Write through a temporary file in the same folder, then rename: the engine reads the file at start-up with
    no guard, so it must never see half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _unique(values: list[str] | None, option: str, known) -> list[str] | None:
    if values is None:
        return None
    for v in values:
        if v not in known:
            raise UsageError(f"{option} {v!r}: expected {' or '.join(known)}")
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise UsageError(f"{option} names {', '.join(dup)} twice: each file would be written twice")
    return values


def check_gpu_names(names: list[str], target: str) -> list[str]:
    """Refuse a name tileprobe knows to be another arch than `target`'s (its numbering would block other tactics);
    notes for names it does not know."""
    arch = profile(target).arch
    notes = []
    for n in names:
        known = arch_of_name(n)
        if known and known[1] != arch:
            raise UsageError(f"--gpu-name {n!r} is a {known[0]} ({known[1]}), not {target} ({arch}): its tactic "
                             "list is another, so this file would block tactics that work there")
        if known is None:
            notes.append(f"gpu {n!r} is not a device name tileprobe knows for {target}: FlashInfer loads the file "
                         "only on a GPU that reports exactly this name")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"--gpu-name names {dup[0]!r} twice")
    return notes


def export(rs: resultset.ResultSet, target: str, out: Path, dtypes: list[str] | None = None,
           finalize: list[str] | None = None, gpu_names: list[str] | None = None, any_gpu: bool = False,
           flashinfer_dir: str | Path | None = None, *, rel: Release | None = None, nvcc: Nvcc | None = None,
           model_only: bool = False, allow_predicted: bool = False, cache_dir: str | Path | None = None,
           numbering: native.Numbering | None = None) -> list[Export]:
    """Write one blocklist per (GPU name, dtype pair, finalize mode). `out` is a file when exactly one is written,
    else a folder. `rel` is the release (default: the flashinfer at `flashinfer_dir` or installed); its engine's
    finalize mode is the only one written unless `finalize` is given for plain flashinfer."""
    prof = profile(target)
    if prof.arch not in tid.SM120_ARCHS:
        raise UsageError(f"target {target} is {prof.arch}; tileprobe numbers FlashInfer tactics for SM120/SM121")
    finalize = _unique(finalize, "--finalize", tuple(tid.FINALIZE_MODES))
    dtypes = _unique(dtypes, "--dtypes", tid.PAIRS)
    rel = rel or release(None, None, Path(flashinfer_dir) if flashinfer_dir else None, cache_dir)
    if rel.finalize is not None:
        if finalize and finalize != [rel.finalize.mode]:
            env = (f"; set {rel.finalize.env_var}=1 to write its finalize-on file" if rel.finalize.env_var
                   and rel.finalize.mode == "off" else "")
            raise UsageError(f"--finalize {','.join(finalize)}: {rel.pin.label()} runs finalize fusion "
                             f"{rel.finalize.mode} ({rel.finalize.why}){env}")
        finalize = [rel.finalize.mode]
    tree = rel.tree
    keys = metadata_keys(tree)
    rows, rows_target = _rows(rs, target, tree)
    gpus = ["*"] if any_gpu else list(gpu_names or device_names(target))
    name_notes = check_gpu_names(gpus, target) if not any_gpu else []
    combos = [(g, d, f) for g in gpus for d in (dtypes or tid.PAIRS) for f in (finalize or ["on"])]
    single = out.suffix == ".json"
    if single and len(combos) > 1:
        raise UsageError(f"--out {out} is one file, but {len(combos)} blocklists are due (GPU names x dtype pairs x "
                         "finalize modes); pass a folder, or narrow with --gpu-name/--dtypes/--finalize")
    plans = []
    for gpu, dt, fin in combos:
        ids = tid.tactic_ids(dt, tid.FINALIZE_MODES[fin], prof.arch, tree.root)
        ev = evidence_of(ids, rows)
        if ev == "predicted" and not allow_predicted:
            raise UsageError(f"{rs.folder}: the rows for {dt} are predicted (tileprobe's model, nothing compiled); "
                             "re-run the sweep without --predict-only, or pass --allow-predicted to write a "
                             "blocklist that says 'predicted'")
        plans.append((gpu, dt, fin, ids, judge(ids, rows, allow_predicted), ev))
    numbering = numbering or check_numbering(tree, nvcc, model_only, cache_dir)  # before anything is written
    results = []
    for gpu, dt, fin, ids, blocked, ev in plans:
        path = out if single else out / f"{_slug(gpu)}__{dt}__finalize-{fin}.json"
        write_atomic(path, document(ids, blocked, rel=rel, keys=keys, gpu=gpu, target=target, arch=prof.arch,
                                    dtypes=dt, finalize=fin, source=str(rs.folder), evidence=ev, numbering=numbering,
                                    rows_target=rows_target))
        notes = [ANY_GPU_RISK] if gpu == "*" else [n for n in name_notes if repr(gpu) in n]
        results.append(Export(path, gpu, dt, fin, ids, blocked, ev, numbering, notes))
    return results
