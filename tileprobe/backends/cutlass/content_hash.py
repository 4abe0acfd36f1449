"""Content hashes of header folders, for the build-cache key.

Every regular file under a folder counts (libcudacxx's headers have no suffix), by its path relative to the folder
and its bytes; where the folder sits does not. Each file's digest is memoized by (path, size, mtime_ns, ctime_ns,
inode), so re-keying the ~2,700 headers of a FlashInfer install costs a stat per file, while an in-place change
(same path, new bytes, as a `pip install -U` leaves) is read again and changes the hash. A file changed in the last
two seconds is always read (file times are coarser than a rewrite of the same size can be: git's "racy" rule).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

_MEMO: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_LOCK = threading.Lock()
_RACY_NS = 2_000_000_000


def _file_digest(path: str) -> str:
    st = os.stat(path)
    stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    hit = _MEMO.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
        with _LOCK:
            _MEMO[path] = (stamp, digest)
    return digest


def _files(root: str) -> list[tuple[str, str]]:
    """(relative path, absolute path) of every regular file under root, in a stable order."""
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for n in names:
            full = os.path.join(d, n)
            if os.path.isfile(full):
                out.append((os.path.relpath(full, root), full))
    return sorted(out)


def folder_hash(folder: str | os.PathLike) -> str:
    """sha256 (16 hex digits) over every file's relative path and bytes; a missing folder hashes as 'missing'."""
    root = str(Path(folder).resolve())
    if not os.path.isdir(root):
        return "missing"
    h = hashlib.sha256()
    for rel, full in _files(root):
        h.update(rel.encode())
        h.update(b"\0")
        h.update(_file_digest(full).encode())
    return h.hexdigest()[:16]
