"""The arch answer for a kernel in a compiled library the engine ships: read the `.so` from the wheel, list its
device code (tileprobe.binary: fatbin containers, cubins, PTX), and say what the driver would load on the target.

- `member(reader, rel, cache)`: the wheel member extracted once into the cache, under a content-keyed name (the zip
  entry's CRC and size), written to a temporary name and renamed, so concurrent audits never see half a file.
- `library(path)`: the binary's images and kernels, read once per process.
- `arch_part(lib, target, pattern)`: SASS for the target (the cubin the driver picks: tileprobe.binary.inspect's
  rule, sm_120a apart from sm_121a), else PTX it JIT-compiles (said so), else no code; with the matching kernels'
  mangled names, static shared memory and registers from the cubin that is read.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import pickle
import re
import struct
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from tileprobe.audit.path.call import Part
from tileprobe.binary.cubin import Kernel, kernels
from tileprobe.binary import elf
from tileprobe.binary.elf import Image, images_in
from tileprobe.binary.inspect import ptx_entries, runs_on
from tileprobe.engines import wheel_zip
from tileprobe.errors import UsageError
from tileprobe.targets import Target


def member(origin: str, kind: str, rel: str, cache: Path) -> Path:
    """The file `rel` of an engine's files (a wheel: extracted into `cache`; an install: its path)."""
    if kind != "wheel":
        path = Path(origin).parent / rel
        if not path.is_file():
            raise UsageError(f"{origin} has no {rel}")
        return path
    z = wheel_zip.open_zip(str(origin))  # the process's one reader of the wheel: its central directory read once
    try:
        info = z.getinfo(rel)
    except KeyError:
        raise UsageError(f"{origin} has no {rel}") from None
    out = Path(cache) / "binaries" / f"{Path(rel).name}-{info.CRC:08x}-{info.file_size}"
    if out.is_file() and out.stat().st_size == info.file_size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out):  # another process extracting it (tileprobe.audit.path.ahead): wait for it, not twice
        if not (out.is_file() and out.stat().st_size == info.file_size):
            with z.open(info) as src:
                _write_whole(out, lambda f: _copy(src, f))
    return out


@contextlib.contextmanager
def _locked(path: Path):
    """The lock of a cache entry `path` (a file beside it), held while the entry is made; given up after 15 minutes
    (then the entry is made here as well: every writer writes it whole)."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path) + ".lock", timeout=900)
    try:
        lock.acquire()
    except Timeout:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def _copy(src, dst) -> None:
    while chunk := src.read(1 << 22):
        dst.write(chunk)


def _write_whole(out: Path, write) -> None:
    """`write(file)` into a unique temporary file beside `out`, renamed to `out` only once it is whole."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@dataclass(frozen=True)
class Library:
    path: Path
    images: tuple[Image, ...]  # without their bytes (what was read of them is in kernels and ptx_names)
    kernels: tuple[tuple[Image, Kernel], ...]
    ptx_names: frozenset[str]
    notes: tuple[str, ...] = ()  # why some images could not be read (zstd missing, ...)

    def archs(self) -> list[str]:
        return sorted({im.arch for im in self.images}, key=lambda a: (a.startswith("compute"), a))

    def unreadable(self) -> list[str]:
        return list(self.notes)


INDEX_VERSION = 1  # bump when Library, Image or Kernel change shape


SPLIT_BYTES = 32 << 20  # a binary this large has its fatbin containers read by two processes (_read)


def _index(images: list[Image]) -> tuple[list, list, set, set]:
    """Images without their bytes, (image, kernel) pairs, PTX entry names and unreadable notes of `images`."""
    bare = {im.origin: replace(im, data=None) for im in images}
    found = [(bare[im.origin], k) for im in images for k in kernels(im)]
    return list(bare.values()), found, ptx_entries(images), {im.note for im in images if im.data is None and im.note}


def _index_part(path: str, part: list[tuple[int, int, str]]) -> tuple[list, list, set, set]:
    """_index of these fatbin containers of the file (a worker process's half of _read)."""
    blob = Path(path).read_bytes()
    return _index([im for at, _, label in part for im in elf.entries(blob, at, label)])


_POOL: list = []  # one spawned worker for the process, started at the first large binary


def _other_half(path: Path, part: list):
    """A future of _index_part in a worker process, or None when no worker can be started here."""
    try:
        if not _POOL:
            _POOL.append(ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")))
        return _POOL[0].submit(_index_part, str(path), part)
    except (OSError, RuntimeError, ValueError):
        return None


def _read(path: Path) -> Library:
    """The binary's index. A binary of at least SPLIT_BYTES with several fatbin containers (the engines' `.so`
    files: hundreds of zstd-compressed cubins) is read in two halves, the first by a worker process while this one
    reads the second; the halves are joined in container order, so the index is the one a single read makes."""
    path = Path(path)
    parts = None
    if (os.cpu_count() or 1) > 1 and path.stat().st_size >= SPLIT_BYTES:
        blob = path.read_bytes()
        found = elf.containers(blob) if blob[:4] != elf.ELF_MAGIC or len(blob) <= 0x14 or \
            struct.unpack_from("<H", blob, 0x12)[0] != elf.EM_CUDA else []
        if len(found) > 1:
            total, acc, cut = sum(end - at for at, end, _ in found), 0, 1
            for i, (at, end, _) in enumerate(found):  # the cut nearest half the containers' bytes
                acc += end - at
                if acc * 2 >= total:
                    cut = max(1, min(i + 1, len(found) - 1))
                    break
            future = _other_half(path, found[:cut])
            second = _index([im for at, _, label in found[cut:] for im in elf.entries(blob, at, label)])
            del blob
            try:
                first = future.result() if future is not None else None
            except Exception:  # noqa: BLE001 - a worker that died: that half is read here
                first = None
            if first is None:
                first = _index_part(str(path), found[:cut])
            parts = (first, second)
    if parts is None:
        images = images_in(path)
        parts = (_index(images),)
    images = tuple(im for p in parts for im in p[0])
    found = tuple(pair for p in parts for pair in p[1])
    ptx = frozenset(n for p in parts for n in p[2])
    notes = tuple(sorted({n for p in parts for n in p[3]}))
    return Library(path, images, found, ptx, notes)


@functools.lru_cache(maxsize=16)
def library(path: Path) -> Library:
    """The binary's device code, read once: a binary extracted into tileprobe's cache (content-keyed name) keeps its
    index beside it (pickled, written whole then renamed), so the next audit reads that instead of every fatbin."""
    path = Path(path)
    if path.parent.name != "binaries":
        return _read(path)
    index = path.with_name(path.name + f".index{INDEX_VERSION}.pickle")
    with _locked(index):  # read by another process right now (tileprobe.audit.path.ahead): wait for its index
        if index.is_file():
            try:
                lib = pickle.loads(index.read_bytes())
                if isinstance(lib, Library):
                    return replace(lib, path=path)
            except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
                pass  # a broken index is read again from the binary
        lib = _read(path)
        _write_whole(index, lambda f: pickle.dump(lib, f, protocol=pickle.HIGHEST_PROTOCOL))
    return lib


def engine_library(ctx, rel: str):
    """(path, Library) of the engine's binary `rel` for this audit (read once: ctx.memo), or (None, why)."""
    from tileprobe.errors import TileprobeError

    key = ("lib", ctx.engine_source.origin, rel)
    if key not in ctx.memo:
        try:
            path = member(ctx.engine_source.origin, ctx.engine_source.kind, rel, ctx.cache_dir)
            ctx.memo[key] = (path, library(path))
        except (TileprobeError, OSError) as exc:
            ctx.memo[key] = (None, str(exc))
    return ctx.memo[key]


@dataclass(frozen=True)
class ArchAnswer:
    part: Part
    kernel: Kernel | None  # the cubin kernel read (for the target's SASS, or the newest cubin when JIT from PTX)
    matched: tuple[str, ...]  # demangled names matching the pattern


def arch_part(lib: Library, target: Target, pattern: str, where: str) -> ArchAnswer:
    """Whether the kernels whose demangled (or mangled) name matches `pattern` run on `target`. `where`: the member's
    name in the wheel, for the answer's words."""
    rx = re.compile(pattern)
    cands = [(im, k) for im, k in lib.kernels if rx.search(k.demangled) or rx.search(k.name)]
    ptx_named = sorted(n for n in lib.ptx_names if rx.search(n))
    matched = tuple(sorted({k.demangled for _, k in cands}))
    if not cands and not ptx_named:
        bad = lib.unreadable()
        if bad:
            return ArchAnswer(Part(f"{where}: its device code could not be read ({'; '.join(bad)})", None, "none"),
                              None, ())
        return ArchAnswer(Part(f"{where} holds no kernel matching {pattern!r} (archs {', '.join(lib.archs())})",
                               False, "read"), None, ())
    runs = [(im, k) for im, k in cands if runs_on("cubin", im.sm, im.suffix, target.cc_int)]
    if runs:
        im, k = max(runs, key=lambda c: (c[0].sm, {"a": 2, "f": 1}.get(c[0].suffix, 0)))
        return ArchAnswer(Part(f"{im.arch} SASS in {where} ({im.origin}) runs on {target.arch[:-1]}", True, "read"),
                          k, matched)
    have = sorted({im.arch for im, _ in cands})
    ptx = sorted({im.arch for im in lib.images if im.kind == "ptx" and runs_on("ptx", im.sm, im.suffix, target.cc_int)})
    newest = max(cands, key=lambda c: c[0].sm) if cands else (None, None)
    if ptx and (ptx_named or any(im.kind == "ptx" for im in lib.images)):
        return ArchAnswer(Part(f"no SASS for {target.arch[:-1]} in {where} (cubins: {', '.join(have) or 'none'}); "
                               f"{ptx[-1]} PTX: the driver JIT-compiles it at first load", True, "read"),
                          newest[1], matched)
    return ArchAnswer(Part(f"no code for {target.arch[:-1]} (cc {target.cc}) in {where}: cubins "
                           f"{', '.join(have) or 'none'} do not run there and no PTX can be compiled for it",
                           False, "read"), newest[1], matched)
