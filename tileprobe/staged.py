"""Write a set of files into a user's folder as one step: all or nothing, the user's other files untouched.

Everything is written first into a fresh folder beside the target (`.<name>.tileprobe-XXXX`, the same filesystem, so
every move below is a rename). `commit()` then puts it in place: a target folder that does not exist yet is the
staged folder renamed (one atomic step); into an existing one, each file is moved over its destination with
os.replace, the files named `first` (the provenance) before the others, and a file it replaces is kept aside until
the end. Any failure before or during the commit puts back what was there and removes what was added, so the user's
folder is left as it was; files in it that are not written here are never touched.

    with Staged(out) as st:
        st.write_text("tileprobe-provenance.json", ...)
        st.write_text("E=..,N=..,device_name=....json", ...)
        st.commit(first=["tileprobe-provenance.json"])
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tileprobe.errors import UsageError


class Staged:
    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.tileprobe-", dir=self.out.parent))
        except OSError as exc:
            raise UsageError(f"cannot write beside {self.out}: {exc.strerror}") from None
        if self.out.exists() and not self.out.is_dir():
            self.discard()
            raise UsageError(f"--out {self.out}: exists and is not a folder")
        self.new = self.root / "new"
        self.new.mkdir()
        self.done = False

    def __enter__(self) -> "Staged":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()  # after commit: the replaced files kept aside; after a failure: everything staged

    def path(self, rel: str | Path) -> Path:
        """Where to write `rel` (relative to the target folder) now; its folder is made."""
        p = self.new / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, rel: str | Path, text: str) -> Path:
        p = self.path(rel)
        p.write_text(text)
        return p

    def seed(self, rel: str | Path) -> Path:
        """A copy of the target's folder `rel` (if any) to add to: what is appended there is committed with the
        rest (e.g. a results folder written with resume)."""
        src, dst = self.out / rel, self.new / rel
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.mkdir(parents=True, exist_ok=True)
        return dst

    def files(self) -> list[Path]:
        return sorted(p.relative_to(self.new) for p in self.new.rglob("*") if not p.is_dir())

    def commit(self, first: list[str] = ()) -> None:
        """Put every staged file in place (the module docstring's rule); on failure the target is as it was."""
        if not self.out.exists():
            os.rename(self.new, self.out)
            self.done = True
            return
        rels = self.files()
        order = [Path(r) for r in first if Path(r) in rels] + [r for r in rels if str(r) not in set(map(str, first))]
        for rel in order:  # refuse before anything moves: a folder where a file goes, a file where a folder goes
            dest = self.out / rel
            if dest.is_dir() or any(p.exists() and not p.is_dir() for p in list(dest.parents)[:len(rel.parts) - 1]):
                raise UsageError(f"{dest}: in the way of a file tileprobe writes (a folder where a file goes, or a "
                                 "file where a folder goes); nothing was written")
        old = self.root / "old"
        journal: list[tuple[Path, Path | None]] = []  # (destination, where its previous file was put aside)
        made: list[Path] = []
        try:
            for rel in order:
                dest = self.out / rel
                for d in reversed(list(dest.parents)[:len(rel.parts) - 1]):
                    if not d.exists():
                        d.mkdir()
                        made.append(d)
                aside = None
                if dest.exists():
                    aside = old / rel
                    aside.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(dest, aside)
                journal.append((dest, aside))
                os.replace(self.new / rel, dest)
        except BaseException:
            self._undo(journal, made)
            raise
        self.done = True

    @staticmethod
    def _undo(journal: list[tuple[Path, Path | None]], made: list[Path]) -> None:
        for dest, aside in reversed(journal):
            if aside is not None and aside.exists():
                os.replace(aside, dest)
            elif aside is None:
                dest.unlink(missing_ok=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
