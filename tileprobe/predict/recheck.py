"""Stated Triton rules moved to another Triton release by data, not code (issue #44 item 3).

Each triton-* rule table (tileprobe.predict.triton_{moe,ssd,conv,attention,ogs}.CHECKED) is keyed by the Triton
release its rules were checked on and the engine kernel's sha256. A release the table does not name answers only
through a reviewed recheck file, tileprobe/predict/rechecked/<release>.json, written by tools/triton_rules_recheck.py
with that release installed: per (family, kernel, key) it says which release's table entry was re-checked
(`from`), how many random launches were compared with Triton's own bytes (`checked`, `compiled` of them by a full
compile) and how many differed (`differ`). A rule answers under the file's release when its row says checked > 0 and
differ 0; any other rule of that release declines (the row: "cannot predict: not re-checked on triton <release>"), and its
launches are sized or compiled.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

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


def lookup(family: str, table: dict, releases: tuple[str, ...], triton_version: str, kernel: str, key: tuple):
    """table[(triton_version, *key)] for a release the table names (None where the key is not there); for another
    release, table[(from, *key)] when that release's recheck file lists (family, kernel, key) as checked with 0
    differ, else CannotPredict. Without a recheck file, the table's own releases only (release_checked)."""
    if triton_version in releases:
        return table.get((triton_version, *key))
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
