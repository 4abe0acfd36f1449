"""The engine binaries' index (tileprobe.audit.path.binaries.library): a large binary read in two processes (its
fatbin containers split, the halves joined in container order) gives the index one read of the whole file gives."""

from __future__ import annotations

from tileprobe.audit.path import binaries
from tileprobe.binary import elf
from tileprobe.engines import wheel_zip

MEMBERS = ("vllm/_moe_C_stable_libtorch.abi3.so", "vllm/_moe_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so",
           "vllm/_C.abi3.so")


def _serial(path) -> binaries.Library:
    images = elf.images_in(path)
    notes = tuple(sorted({im.note for im in images if im.data is None and im.note}))
    bare = {im.origin: im.__class__(im.kind, im.sm, im.suffix, None, im.origin, im.note) for im in images}
    found = tuple((bare[im.origin], k) for im in images for k in binaries.kernels(im))
    return binaries.Library(path, tuple(bare.values()), found, frozenset(binaries.ptx_entries(images)), notes)


def test_a_binary_read_in_two_halves_is_the_binary_read_whole(vllm_wheel, tmp_path, monkeypatch):
    names = wheel_zip.names(str(vllm_wheel.origin))
    rel = next(m for m in MEMBERS if m in names)
    path = binaries.member(str(vllm_wheel.origin), vllm_wheel.kind, rel, tmp_path)
    assert len(elf.containers(path.read_bytes())) > 1
    monkeypatch.setattr(binaries, "SPLIT_BYTES", 0)
    split = binaries._read(path)
    assert binaries._POOL, "the first half was not given to a worker process"
    assert split == _serial(path) and len(split.kernels) > 0
    part = elf.containers(path.read_bytes())[:2]  # the worker answers (not the in-process fallback)
    future = binaries._other_half(path, part)
    assert future is not None and future.result(timeout=300) == binaries._index_part(str(path), part)
