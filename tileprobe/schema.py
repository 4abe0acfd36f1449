"""JSON Schemas (draft 2020-12) of tileprobe's files, so other tools can read and check them.

tileprobe/schemas/<name>.v<N>.json, installed with the package: `row` (a line of results.jsonl), `run` (run.json),
`known-good` (results/known_good/*.json) and `recommend` (`tileprobe recommend`). Each file is self-contained. A
format change that breaks readers gets a new version file; columns added to rows do not (extra properties are
allowed).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule

# A dependency (pyproject), loaded at the first validation: reading a schema never needs it, --help never waits for it
jsonschema = LazyModule("jsonschema")

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
_FILE = re.compile(r"^(?P<name>[a-z][a-z0-9-]*)\.v(?P<version>\d+)\.json$")


class SchemaError(ValueError):
    """A document does not match its schema; `errors` holds one line per violation."""

    def __init__(self, name: str, errors: list[str]) -> None:
        self.name, self.errors = name, errors
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"not a valid {name}: " + "; ".join(errors[:3]) + more)


def _files() -> dict[str, dict[int, Path]]:
    out: dict[str, dict[int, Path]] = {}
    for p in SCHEMA_DIR.glob("*.json"):
        m = _FILE.match(p.name)
        if m:
            out.setdefault(m["name"], {})[int(m["version"])] = p
    return out


def names() -> list[str]:
    """The schema names: known-good, recommend, row, run."""
    return sorted(_files())


def versions(name: str) -> list[int]:
    return sorted(_files().get(name, {}))


@lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def schema(name: str, version: int | None = None) -> dict:
    """The schema `name` (latest version unless `version`), as a dict (a copy: change it freely)."""
    by_version = _files().get(name)
    if not by_version:
        raise UsageError(f"unknown schema {name!r}: one of {', '.join(names())}")
    v = max(by_version) if version is None else version
    if v not in by_version:
        raise UsageError(f"schema {name!r} has no version {v}: {', '.join(map(str, sorted(by_version)))}")
    return json.loads(json.dumps(_load(by_version[v])))


def errors(name: str, obj, version: int | None = None) -> list[str]:
    """Every violation of schema `name` by `obj`, one line each ("<json path>: <message>"); [] when valid."""
    if jsonschema.missing():
        raise UsageError("validating needs the jsonschema package (pip install 'jsonschema>=4.18')")
    out = []
    for e in jsonschema.Draft202012Validator(schema(name, version)).iter_errors(obj):
        while e.context:  # anyOf/oneOf: the alternative that got furthest says more than "not valid under any"
            e = min(e.context, key=lambda c: (-len(c.absolute_path), c.validator == "type"))
        msg = e.message if len(e.message) <= 200 else e.message[:200] + "..."
        out.append(f"{_path(e.absolute_path)}: {msg}")
    return sorted(out)


def validate(name: str, obj, version: int | None = None) -> None:
    """Raise SchemaError (a ValueError naming the first violations) unless `obj` matches schema `name`."""
    errs = errors(name, obj, version)
    if errs:
        raise SchemaError(name, errs)


def _path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out
