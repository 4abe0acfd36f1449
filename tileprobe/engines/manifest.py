"""Engine manifests: per engine release, the sha256 of every engine file each audit entry depends on, checked at the
start of every audit, so that an answer tileprobe states for one release is never given for other code.

An entry depends on every module its capture serves from the wheel (AuditKernel.allow, the launcher's own module
among them): the kernel's file, the @triton.jit helpers it imports from other modules (Mamba-2's SSD kernels import
`softplus` from mamba_ssm.py; the launchers' triton_helpers), and the Python the launcher runs. The files are those
modules as the wheel holds them (`a/b/c.py`, or `a/b/c/__init__.py`). Written by `python tools/engine_manifest.py
write ENGINE WHEEL` into tileprobe/engines/manifests/<engine>-<version>.json: adding a release is one reviewed diff of
one file there.

`check(source, rules_off)`: the release's manifest is read and every listed file hashed in the given wheel (or
install). A release with no manifest, or a file whose hash differs, is one UsageError line naming the release or the
files (exit 2), unless `rules_off` (`--rules-off`): then the audit runs with every stated rule off (each launch
compiled, `--compile-all`) and the returned Banner says so on the table, report.md and run.json.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

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


def build(source, entries) -> dict:
    """The manifest of `source` for these audit entries (tileprobe.audit.kernels.kernels_for(engine))."""
    out: dict = {"engine": source.engine, "version": source.version, "entries": {}}
    for k in entries:
        files = {}
        for module in sorted(set(k.allow) | {k.module}):
            rel = module_file(source, module)
            if rel is not None:
                files[rel] = _sha(source, rel)
        out["entries"][k.name] = files
    return out


def write(source, entries) -> Path:
    p = path_for(source.engine, source.version)
    p.write_text(json.dumps(build(source, entries), indent=1, sort_keys=True) + "\n")
    return p


def check(source, rules_off: bool = False) -> Banner:
    p = path_for(source.engine, source.version)
    flag = "--rules-off audits it with every stated rule off (each launch compiled)"
    if not p.is_file():
        known = sorted(f.stem for f in HERE.glob(f"{source.engine}-*.json"))
        if rules_off:
            return Banner(f"RULES OFF: {source.label()} has no tileprobe manifest (known: {', '.join(known)}); every "
                          "stated rule is off and every launch compiled")
        raise UsageError(f"{source.label()} ({source.origin}): tileprobe has no manifest for this release (known: "
                         f"{', '.join(known)}); {flag}")
    want = json.loads(p.read_text())
    differ: dict[str, list[str]] = {}
    for entry, files in want["entries"].items():
        for rel, sha in files.items():
            if _sha(source, rel) != sha:
                differ.setdefault(rel, []).append(entry)
    if not differ:
        return Banner("")
    said = "; ".join(f"{rel} ({', '.join(v)})" for rel, v in sorted(differ.items()))
    if rules_off:
        return Banner(f"RULES OFF: {source.label()} differs from tileprobe's manifest in {said}; every stated rule is "
                      "off and every launch compiled")
    raise UsageError(f"{source.label()} ({source.origin}) differs from tileprobe's manifest "
                     f"({p.name}) in {len(differ)} file(s): {said}; {flag}")
