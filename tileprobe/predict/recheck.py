"""Stated Triton rules moved to another Triton release by data, not code (issue #44 item 3).

Each triton-* rule table (tileprobe.predict.triton_{moe,ssd,conv,attention,ogs}.CHECKED) is keyed by the Triton
release its rules were checked on and the engine kernel's sha256. A release the table does not name answers only
through a reviewed recheck file, tileprobe/predict/rechecked/<release>.json, written by tools/triton_rules_recheck.py
with that release installed: per (family, kernel, key) it says which release's table entry was re-checked
(`from`), how many random launches were compared with Triton's own bytes (`checked`, `compiled` of them by a full
compile) and how many differed (`differ`). A rule answers under the file's release when its row says checked > 0 and
differ 0; any other rule of that release declines (the row: "cannot predict: not re-checked on triton <release>"), and its
launches are sized or compiled.

An engine release moves the other way: the tables hold the kernel files of the release they were checked on
(tileprobe.engines.pins.READ_FROM); another release's files answer through that release's manifest
(tileprobe/engines/manifests/<engine>-<version>.json, `rules`), written by tools/engine_rules_recheck.py with the
release's wheel: per (family, kernel, key of the release's file) the table key it was re-checked `from`, under which
Triton, on how many of the release's own captured launches (and random variations of them) against Triton's own
bytes, and how many differed. A row with checked > 0 and differ 0 makes its key answer as its `from` key; a row that
differed makes its key decline, even where the table holds it (a file that stayed byte-identical while a helper it
imports changed). The rows are keyed by content (file sha256), so no release context is needed to read them.
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

from tileprobe.engines import manifest
from tileprobe.predict._common import CannotPredict, release_checked

FOLDER = Path(__file__).resolve().parent / "rechecked"


def load(release: str) -> dict | None:
    """The recheck file of `release` in FOLDER (None: there is none)."""
    path = Path(FOLDER) / f"{release}.json"
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _read(str(path), release, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=None)
def _read(path: str, release: str, mtime_ns: int, size: int) -> dict:
    path = Path(path)
    doc = json.loads(path.read_text())
    if doc.get("triton") != release:
        raise ValueError(f"{path}: names Triton {doc.get('triton')!r}, not {release}")
    return doc


def row(doc: dict, family: str, kernel: str, key: tuple) -> dict | None:
    """The file's row for one rule: (family, kernel, key without the release)."""
    for r in doc.get("rules", ()):
        if r["family"] == family and r["kernel"] == kernel and tuple(r["key"]) == tuple(key):
            return r
    return None


def not_rechecked(release: str, family: str, kernel: str, why: str) -> CannotPredict:
    return CannotPredict(f"not re-checked on triton {release} ({family} {kernel}: {why}; "
                         "tools/triton_rules_recheck.py); size it")


_PROVISIONAL: list[dict] = []  # engine rows being re-checked (tools/engine_rules_recheck.py), not yet reviewed


@contextlib.contextmanager
def provisionally(rows: list[dict]):
    """Within: `rows` (engine rule rows, as tools/engine_rules_recheck.py writes them, counted 1 checked 0 differ)
    answer as if reviewed, so the tool can ask each rule of a new release's file for the bytes it states and compare
    them with Triton's. Never used by a command."""
    _PROVISIONAL.extend(rows)
    try:
        yield
    finally:
        del _PROVISIONAL[len(_PROVISIONAL) - len(rows):]


def engine_rows(family: str, kernel: str, key: tuple, triton_version: str) -> list[dict]:
    """Every engine manifest's re-check row for (family, kernel, key) under `triton_version`, and the provisional
    ones."""
    want = (family, kernel, tuple(key), triton_version)
    return [r for r in (*manifest.rule_rows(), *_PROVISIONAL)
            if (r["family"], r["kernel"], tuple(r["key"]), r["triton"]) == want]


def engine_note(release: str, kernel: str, file: str) -> str:
    """What the manifest of `release` ('vllm <version>') says of its re-check of the rule for `kernel` in `file` (its
    row, when the release is not the one the rule tables were checked on), for a predicted row's reason; '' where
    it has no such row."""
    for r in manifest.rule_rows():
        if (r["engine"], r["kernel"], r.get("file")) == (release, kernel, file):
            same = " (the file unchanged)" if r["key"] == r["from"] else ""
            return (f"rule re-checked on {release}'s {file.rsplit('/', 1)[-1]}{same}: {r['checked']} launches, "
                    f"{r['differ']} differ (its manifest's rules)")
    return ""


def engine_lookup(family: str, table: dict, triton_version: str, kernel: str, key: tuple):
    """table[(triton_version, *key)], or through an engine manifest's re-check rows (the module docstring): the
    `from` key's entry where every row for this key says 0 of >= 1 differ; CannotPredict where one differed; None
    where neither the table nor a row holds the key."""
    rows = engine_rows(family, kernel, key, triton_version)
    bad = [r for r in rows if int(r.get("differ", 1)) != 0 or int(r.get("checked", 0)) < 1]
    if bad:
        r = bad[0]
        raise CannotPredict(f"{kernel}'s engine source {str(key[-1])[:16]}: its rule differed from Triton "
                            f"{triton_version}'s bytes on {r.get('differ')} of {r.get('checked')} launches of "
                            f"{r.get('engine', 'an engine release')} (its manifest's rules); size it")
    got = table.get((triton_version, *key))
    if got is not None:
        return got
    for r in rows:
        got = table.get((triton_version, *r["from"]))
        if got is not None:
            return got
    return None


def lookup(family: str, table: dict, releases: tuple[str, ...], triton_version: str, kernel: str, key: tuple):
    """table[(triton_version, *key)] for a release the table names, or an engine release's re-checked key for it
    (engine_lookup; None where neither holds the key); for another Triton release, table[(from, *key)] when that
    release's recheck file lists (family, kernel, key) as checked with 0 differ, else CannotPredict. Without a recheck
    file, the table's own releases only (release_checked)."""
    if triton_version in releases:
        return engine_lookup(family, table, triton_version, kernel, key)
    doc = load(triton_version)
    if doc is None:
        release_checked(family, releases, triton_version)
    r = row(doc, family, kernel, key)
    if r is None:
        raise not_rechecked(triton_version, family, kernel, f"key {str(key[-1])[:16]} not in rechecked/"
                            f"{triton_version}.json")
    if r["from"] not in releases or (r["from"], *key) not in table:
        raise not_rechecked(triton_version, family, kernel, f"re-checked from Triton {r['from']}, whose table has "
                            "no such key")
    if int(r.get("checked", 0)) < 1 or int(r.get("differ", 1)) != 0:
        raise not_rechecked(triton_version, family, kernel, f"{r.get('differ')} of {r.get('checked')} launches "
                            "differed")
    return table[(r["from"], *key)]
