"""Where tileprobe names a serving-engine release: only in the engine manifests (tileprobe/engines/manifests/, which
releases it answers for, file for file) and the engines' pin table (tileprobe/engines/pins.py). Every other file of
the package (code, docstrings, its READMEs) reads a release from those, so a new release is one manifest and, when
the stated rules move, one pin-table line. The check is `grep -rn "0\\.33\\.0\\|0\\.5\\.23" tileprobe/`, run over the
package's files here."""

from __future__ import annotations

import re
from pathlib import Path

from tileprobe.engines import pins

PACKAGE = Path(__file__).resolve().parents[1] / "tileprobe"
ALLOWED = ("engines/manifests/", "engines/pins.py")
# Files another change is rewording right now (their owner removes the releases from them); each must still name one,
# so an entry here cannot outlive its reason.
PENDING: set = set()


GREP = r"0\.33\.0|0\.5\.23"  # the releases tileprobe was first written against (issue #44's grep)


def _releases() -> re.Pattern:
    """The grep's releases and every release the pin table names now."""
    versions = set(pins.READ_FROM.values()) | set(pins.PINNED.values())
    return re.compile("|".join([GREP, *(re.escape(v) for v in sorted(versions))]))


def _files():
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path.relative_to(PACKAGE).as_posix(), path


def test_releases_are_named_only_in_the_manifests_and_the_pin_table():
    pattern = _releases()
    found: dict[str, list[str]] = {}
    for rel, path in _files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits = [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
        if hits:
            found[rel] = hits
    outside = {rel: hits for rel, hits in found.items() if not rel.startswith(ALLOWED)}
    assert not outside, "\n".join(h for hits in outside.values() for h in hits)
    assert any(rel.startswith("engines/manifests/") for rel in found) and "engines/pins.py" in found
