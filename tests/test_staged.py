"""tileprobe.staged: a set of files put into a user's folder in one step. A failure at any move of the commit
(injected: os.replace raising at a random call) puts back what was there and removes what was added; the user's
other files are never touched; a folder that did not exist appears whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tileprobe import staged
from tileprobe.errors import UsageError


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _user_folder(tmp_path: Path, rng) -> Path:
    out = tmp_path / "out"
    (out / "configs" / "triton_3_8_0").mkdir(parents=True)
    (out / "mine.txt").write_text(f"user {rng.random()}")
    (out / "tileprobe-provenance.json").write_text("old provenance")
    (out / "configs" / "triton_3_8_0" / "a.json").write_text("old a")
    return out


def _stage(st: staged.Staged, rng) -> dict[str, str]:
    new = {"tileprobe-provenance.json": f"new {rng.random()}", "configs/triton_3_8_0/a.json": "new a",
           "configs/triton_3_8_0/b.json": "new b", "configs/triton_3_9_0/c.json": "new c", "d.json": "new d"}
    for rel, text in new.items():
        st.write_text(rel, text)
    return new


@pytest.mark.parametrize("fail_at", range(1, 9))  # 5 files, 2 of them replacing old ones: 7 moves; 8: none fails
def test_a_failure_at_any_move_leaves_the_folder_as_it_was(tmp_path, rng, monkeypatch, fail_at):
    out = _user_folder(tmp_path, rng)
    before = _tree(out)
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append((src, dst))
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    with staged.Staged(out) as st:
        new = _stage(st, rng)
        monkeypatch.setattr(staged.os, "replace", flaky)
        if fail_at <= 7:
            with pytest.raises(OSError):
                st.commit(first=["tileprobe-provenance.json"])
        else:
            st.commit(first=["tileprobe-provenance.json"])
        monkeypatch.setattr(staged.os, "replace", real)
    got = _tree(out)
    if fail_at <= 7:
        assert got == before, (fail_at, got)
        assert sorted(p.name for p in out.rglob("*") if p.is_dir()) == ["configs", "triton_3_8_0"]
    else:
        assert len(calls) == 7 and got == before | new and got["mine.txt"] == before["mine.txt"]
        assert Path(calls[1][1]).name == "tileprobe-provenance.json"  # first, after the old one is put aside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it


def test_a_new_folder_appears_whole_and_a_failure_before_commit_writes_nothing(tmp_path, rng):
    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError):
        with staged.Staged(out) as st:
            _stage(st, rng)
            raise RuntimeError("the export failed before its commit")
    assert not out.exists() and list((tmp_path / "new").iterdir()) == []
    with staged.Staged(out) as st:
        new = _stage(st, rng)
        st.commit(first=["tileprobe-provenance.json"])
    assert _tree(out) == new and list((tmp_path / "new").iterdir()) == [out]


def test_a_folder_in_the_way_is_refused_before_anything_moves(tmp_path, rng):
    out = _user_folder(tmp_path, rng)
    (out / "d.json").mkdir()  # a folder where a file goes
    before = _tree(out)
    with staged.Staged(out) as st:
        _stage(st, rng)
        with pytest.raises(UsageError, match="in the way"):
            st.commit()
    assert _tree(out) == before
