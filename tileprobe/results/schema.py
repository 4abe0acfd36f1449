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

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
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


# --- fast row checks -------------------------------------------------------------------------------------------------
# Readers check every row of a results file against the row schema. jsonschema takes milliseconds a row; the row
# schema uses only a handful of keywords, so it is compiled once into plain checks here (tests compare the two on
# committed and corrupted rows). A keyword this compiler does not know raises, so it can never pass a row silently.
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "null": type(None),
               "object": dict, "array": list}


def _type_ok(value, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES[name])


def _compile(node: dict):
    """A function value -> None (valid) or a one-line reason, for one property's schema."""
    known = {"type", "enum", "const", "anyOf", "pattern", "minimum", "minLength", "description", "examples"}
    unknown = set(node) - known
    if unknown:
        raise ValueError(f"row schema keyword(s) {', '.join(sorted(unknown))} not handled by the fast checker")
    checks = []
    if "type" in node:
        names = node["type"] if isinstance(node["type"], list) else [node["type"]]
        checks.append(lambda v, n=names: None if any(_type_ok(v, t) for t in n) else
                      f"{json.dumps(v)} is not of type {' or '.join(n)}")
    if "enum" in node:
        checks.append(lambda v, e=node["enum"]: None if v in e and not isinstance(v, bool) else
                      f"{json.dumps(v)} is not one of {', '.join(map(json.dumps, e))}")
    if "const" in node:
        checks.append(lambda v, c=node["const"]: None if v == c else f"{json.dumps(v)} is not {json.dumps(c)}")
    if "pattern" in node:
        rx = re.compile(node["pattern"])
        checks.append(lambda v, r=rx: None if not isinstance(v, str) or r.search(v) else
                      f"{json.dumps(v)} does not match {r.pattern!r}")
    if "minimum" in node:
        checks.append(lambda v, m=node["minimum"]: None if not _type_ok(v, "number") or v >= m else
                      f"{json.dumps(v)} is less than the minimum of {m}")
    if "minLength" in node:
        checks.append(lambda v, m=node["minLength"]: None if not isinstance(v, str) or len(v) >= m else
                      f"{json.dumps(v)} is shorter than {m} character(s)")
    if "anyOf" in node:
        alts = [_compile(a) for a in node["anyOf"]]

        def any_of(v, alts=alts):
            reasons = [a(v) for a in alts]
            return None if None in reasons else reasons[0]
        checks.append(any_of)

    def check(v):
        for c in checks:
            why = c(v)
            if why:
                return why
        return None
    return check


@lru_cache(maxsize=None)
def _row_checks() -> tuple[tuple[str, ...], dict]:
    s = schema("row")
    if s.get("type") != "object" or s.get("additionalProperties") is not True:
        raise ValueError("the row schema changed shape: update the fast checker")
    return tuple(s.get("required") or ()), {k: _compile(v) for k, v in (s.get("properties") or {}).items()}


def row_problems(row) -> list[str]:
    """Every violation of the row schema by `row`, one line each ("<column>: <why>"); [] when it is a valid row.
    The same answer as errors("row", row) in substance, without jsonschema's cost per row."""
    if not isinstance(row, dict):
        return [f"$: a row is a JSON object, not {type(row).__name__}"]
    required, checks = _row_checks()
    out = [f"{k}: required column missing" for k in required if k not in row]
    for k, v in row.items():
        check = checks.get(k)
        why = check(v) if check else None
        if why:
            out.append(f"{k}: {why}")
    return out
