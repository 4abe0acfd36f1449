"""Folder content hashes for the build-cache key: bytes count, places do not, and the per-file memo never hides an
in-place change."""

import os
import shutil

from tileprobe.backends.cutlass import content_hash


def _tree(root, rng):
    files = {"cutlass/gemm.hpp": rng.getrandbits(128), "cuda/std/atomic": rng.getrandbits(128),
             "a/b/c.inl": rng.getrandbits(128)}
    for rel, v in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"// {v:032x}\n")
    return root


def _age(root, seconds=3600):
    """Files older than the racy window, so that their digests are memoized."""
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            os.utime(p, ns=(st.st_atime_ns - seconds * 10**9, st.st_mtime_ns - seconds * 10**9))


def test_contents_count_places_do_not(tmp_path, rng):
    a = _tree(tmp_path / "a", rng)
    h = content_hash.folder_hash(a)
    shutil.copytree(a, tmp_path / "b")
    assert content_hash.folder_hash(tmp_path / "b") == h
    (tmp_path / "b" / "cuda" / "std" / "atomic").rename(tmp_path / "b" / "cuda" / "std" / "atomic2")
    assert content_hash.folder_hash(tmp_path / "b") != h  # a renamed header is another tree
    assert content_hash.folder_hash(tmp_path / "missing") == "missing"


def test_memo_sees_an_in_place_change_of_the_same_size_and_mtime(tmp_path, rng):
    a = _tree(tmp_path / "a", rng)
    _age(a)
    h = content_hash.folder_hash(a)
    assert content_hash.folder_hash(a) == h  # served from the memo
    f = a / "cutlass" / "gemm.hpp"
    st = f.stat()
    old = f.read_text()
    f.write_text(old[::-1])  # same size, other bytes; then the old mtime put back, as an archive extractor does
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    h2 = content_hash.folder_hash(a)
    assert h2 != h
    f.write_text(old)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_hash.folder_hash(a) == h
