"""A copy of the real CUTLASS tree (flashinfer's bundled one) made of symlinks, with its tools/util folder left out:
the tree a partial checkout or a trimmed package leaves, for tests of how tileprobe names that fault."""

from __future__ import annotations

from pathlib import Path

from tileprobe.backends.cutlass.toolchain import find_cutlass


def cutlass_root() -> Path:
    """The real tree's root (the folder holding include/ and tools/)."""
    return find_cutlass().root.parent


def tree_without_util(dest: Path) -> Path:
    """Symlinks to the real tree's top-level entries in `dest`; its tools/ holds everything but util/."""
    real = cutlass_root()
    dest.mkdir()
    for entry in real.iterdir():
        if entry.name == "tools":
            (dest / "tools").mkdir()
            for sub in entry.iterdir():
                if sub.name != "util":
                    (dest / "tools" / sub.name).symlink_to(sub)
        else:
            (dest / entry.name).symlink_to(entry)
    return dest
