"""Engine manifests: per engine release, the sha256 of every engine file each audit entry depends on, checked at the
start of every command that reads an engine (audit, check-configs, export, engines fetch, doctor), so that an answer
tileprobe states for one release is never given for other code.

An entry depends on two sets of files, both listed (the union, each file with its sha256):
- the Python the launcher runs: every module its capture serves from the wheel (AuditKernel.allow, the launcher's
  own module among them);
- `walk`: the files of every @triton.jit function its served modules define and of every @triton.jit helper those
  reach, in any module, as Triton's own dependency walk finds them (tileprobe.audit.dependencies: the callables
  `DependenciesFinder` hashes into each kernel's cache_key; Mamba-2's SSD kernels reach `softplus` in mamba_ssm.py,
  gpt-oss's MoE reaches triton_kernels' modules). The manifest says which files came from the walk.
The files are paths inside the wheel (`a/b/c.py`, or `a/b/c/__init__.py`). Written by `python
tools/engine_manifest.py write ENGINE WHEEL` into tileprobe/engines/manifests/<engine>-<version>.json: adding a
release is one reviewed diff of one file there, and the releases those files name are the releases tileprobe
answers for (`releases`, `entry_releases`).

`check(source, rules_off)`: the release's manifest is read and every listed file hashed in the given wheel (or
install). A release with no manifest, or a file whose hash differs, is one UsageError line naming the release or the
files and the entries that use them (exit 2), unless `rules_off` (`--rules-off`): then every stated rule is off and
the returned Banner says so on what the command writes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tileprobe.engines.locate import version_key
from tileprobe.errors import UsageError

HERE = Path(__file__).resolve().parent / "manifests"


@dataclass(frozen=True)
class Banner:
    text: str  # empty when the release is one tileprobe's rules were checked on, file for file


def path_for(engine: str, version: str) -> Path:
    return HERE / f"{engine}-{version}.json"


def module_file(source, module: str) -> str | None:
    """The file of a dotted module in the engine's files (a module, else a package's __init__.py)."""
    for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
        try:
            source.read_text(rel)
            return rel
        except UsageError:
            continue
    return None


def _sha(source, rel: str) -> str | None:
    try:
        return hashlib.sha256(source.read_text(rel).encode()).hexdigest()
    except UsageError:
        return None


def build(source, entries, walked: dict, pieces: dict | None = None) -> dict:
    """The manifest of `source` for these audit entries (tileprobe.audit.kernels.kernels_for(engine)); `walked`: per
    entry name, the files Triton's dependency walk found (tileprobe.audit.dependencies.walk), or why the entry's
    modules could not be walked in this release (then `walk` is null, `not_walked` says why, its served files are
    still listed, and the entry is not one the release answers for: entry_releases). `pieces`: tileprobe's re-typed
    pieces outside the audit (name -> (files, why)): each piece's files, and why it does not hold for this release
    ('' when it was checked to: then `checked` is true)."""
    out: dict = {"engine": source.engine, "version": source.version, "entries": {}, "pieces": {}}
    for name, (rels, why) in sorted((pieces or {}).items()):
        out["pieces"][name] = {"files": {rel: _sha(source, rel) for rel in sorted(rels)}, "checked": not why,
                               **({"not_checked": why} if why else {})}
    for k in entries:
        files = {}
        for module in sorted(set(k.allow) | {k.module} | set(k.reads)):
            rel = module_file(source, module)
            if rel is not None:
                files[rel] = _sha(source, rel)
        got = walked[k.name]
        if isinstance(got, str):
            out["entries"][k.name] = {"files": dict(sorted(files.items())), "walk": None, "not_walked": got}
            continue
        walk = sorted(got)
        for rel in walk:
            files[rel] = _sha(source, rel)
        out["entries"][k.name] = {"files": dict(sorted(files.items())), "walk": walk}
    return out


def write(source, entries, walked: dict, pieces: dict | None = None) -> Path:
    """build() into the release's manifest, keeping its `rules` (their keys are file sha256s: a row holds for the
    content it names, whichever files the manifest lists now)."""
    p = path_for(source.engine, source.version)
    doc = build(source, entries, walked, pieces)
    if p.is_file():
        doc |= {k: _read(p)[k] for k in ("rules", "rules_made_by") if k in _read(p)}
    _write(p, doc)
    return p


def write_rules(engine: str, version: str, rows: list[dict], made_by: dict | None = None) -> Path:
    """The release's manifest with `rules` set to `rows` (tools/engine_rules_recheck.py: each stated Triton rule
    re-checked on this release's files; tileprobe.predict.recheck reads them) and `rules_made_by` (the command, its
    seed, date and Triton)."""
    p = path_for(engine, version)
    if not p.is_file():
        raise UsageError(f"{engine} {version}: no manifest to add rules to (python tools/engine_manifest.py write "
                         f"{engine} WHEEL first)")
    doc = dict(_read(p))
    doc["rules"] = sorted(rows, key=lambda r: (r["family"], r["kernel"], r["key"], r["triton"]))
    doc["rules_made_by"] = dict(made_by or {})
    _write(p, doc)
    return p


def _write(p: Path, doc: dict) -> None:
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(p)
    _read.cache_clear()
    rule_rows.cache_clear()


@lru_cache(maxsize=1)
def rule_rows() -> tuple[dict, ...]:
    """Every manifest's `rules` rows (tileprobe.predict.recheck: a stated rule re-checked on a release's files),
    each with the release that wrote it as `engine` where the row does not say."""
    out = []
    for p in sorted(HERE.glob("*.json")):
        doc = _read(p)
        out += [{"engine": f"{doc['engine']} {doc['version']}", **r} for r in doc.get("rules", ())]
    return tuple(out)


@lru_cache(maxsize=None)
def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def read(engine: str, version: str) -> dict | None:
    """The manifest of `engine` `version`, or None when tileprobe has none."""
    p = path_for(engine, version)
    return _read(p) if p.is_file() else None


def releases(engine: str) -> list[str]:
    """The releases of `engine` tileprobe has a manifest for (the releases it answers for), oldest first."""
    found = [p.stem.removeprefix(f"{engine}-") for p in HERE.glob(f"{engine}-*.json")]
    return sorted(found, key=version_key)


def entry_releases(engine: str, entry: str) -> str:
    """The releases whose manifest lists the audit entry `entry` as walked, comma-separated ('' when none does)."""
    return ", ".join(v for v in releases(engine)
                     if (read(engine, v)["entries"].get(entry) or {}).get("walk") is not None)


def supported(engine: str, version: str) -> bool:
    return path_for(engine, version).is_file()


def package_source(engine: str, pkg):
    """The EngineSource of a located package (tileprobe.engines.locate.find_release: a wheel or an install)."""
    from tileprobe.engines.triton_configs import EngineSource
    if pkg.wheel is not None:
        return EngineSource(engine, pkg.version, str(pkg.wheel), "wheel")
    return EngineSource(engine, pkg.version, str(Path(pkg.install) / engine), "installed")


def check_package(engine: str, pkg, rules_off: bool = False, needs: str | None = None) -> Banner:
    """check() of a located package (the flashinfer readers locate the engine through serving_pins)."""
    return check(package_source(engine, pkg), rules_off, needs)


RULES_OFF = "--rules-off"
SAID = 8  # the files a refusal names (the rest counted)
WHAT_OFF = "every stated rule off (each launch sized or compiled by Triton)"


def check(source, rules_off: bool = False, needs: str | None = None) -> Banner:
    """Banner('') when `source` is a release tileprobe has a manifest for and every file it lists matches (and, for
    `needs`, a re-typed piece the command runs, that piece was checked on the release); else one UsageError line (or,
    with `rules_off`, a banner saying what differs and that every stated rule is off)."""
    p = path_for(source.engine, source.version)
    flag = f"{RULES_OFF} reads it with {WHAT_OFF}"
    if not p.is_file():
        known = ", ".join(f"{source.engine} {v}" for v in releases(source.engine)) or "none"
        if rules_off:
            return Banner(f"RULES OFF: {source.label()} has no tileprobe manifest (known: {known}); read with "
                          f"{WHAT_OFF}")
        raise UsageError(f"{source.label()} ({source.origin}): tileprobe has no manifest for this release (known: "
                         f"{known}); {flag}")
    want = _read(p)
    piece = want.get("pieces", {}).get(needs) if needs else None
    if needs and not (piece and piece.get("checked")):
        why = piece.get("not_checked") if piece else "the manifest does not list it"
        holds = [f"{source.engine} {v}" for v in releases(source.engine) if _holds(source.engine, v, needs)]
        raise UsageError(f"{source.label()} ({source.origin}): {p.name} records tileprobe's {needs} as not holding "
                         f"for this release ({why}); it holds for {', '.join(holds) or 'no release'} (`tileprobe "
                         f"audit` reads {source.label()} through the engine's own launchers)")
    differ = differing(source, want)
    if not differ:
        return Banner("")
    named = sorted(differ.items())[:SAID]
    said = "; ".join(f"{rel} ({', '.join(v)})" for rel, v in named) + (
        f"; and {len(differ) - SAID} more (python tools/engine_manifest.py check {source.engine} "
        f"{source.origin} lists them)" if len(differ) > SAID else "")
    if rules_off:
        return Banner(f"RULES OFF: {source.label()} differs from tileprobe's manifest in {said}; read with {WHAT_OFF}")
    raise UsageError(f"{source.label()} ({source.origin}) differs from tileprobe's manifest "
                     f"({p.name}) in {len(differ)} file(s): {said}; {flag}")


def differing(source, want: dict) -> dict[str, list[str]]:
    """Each file of the manifest `want` whose sha256 in `source` differs (or that is missing), with the entries and
    pieces that list it."""
    differ: dict[str, list[str]] = {}
    for kind in ("entries", "pieces"):
        for entry, listed in want.get(kind, {}).items():
            for rel, sha in listed["files"].items():
                if _sha(source, rel) != sha:
                    differ.setdefault(rel, []).append(entry)
    return differ


def _holds(engine: str, version: str, piece: str) -> bool:
    return bool(read(engine, version).get("pieces", {}).get(piece, {}).get("checked"))
