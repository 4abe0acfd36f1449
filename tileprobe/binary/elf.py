"""Device code out of any file: the cubins (and PTX) inside a cubin, fatbin, object file, executable or shared library.

Read directly, with no cuobjdump: an ELF's section headers and symbols (struct unpacking of the ELF64 layout), and the
fatbin containers nvcc embeds (`.nv_fatbin` in objects, executables and shared libraries; a `.fatbin` file is one
container). Each container entry names its kind (cubin or PTX), its SM number and whether the code is arch-specific
(`sm_90a`) or family-specific (`sm_120f`). Entries may be compressed: LZ4 (older toolkits, cuBLAS-style libraries) is
decoded here; zstd (nvcc's default for PTX since 12.8, and for cubins with `-Xfatbin -compress-all`) needs the
`zstandard` package (`tileprobe[inspect]`; or Python 3.14's `compression.zstd`), and without it the entry is listed
with a note instead of read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
KIND_PTX, KIND_CUBIN = 1, 2
# Entry flags (the container's entry header, at byte 40), as nvcc 13.0 writes them: 0x100000 for sm_XYa code,
# 0x200000 for sm_XYf; compression 0x2000 (LZ4) or 0x8000 (zstd).
FLAG_ARCH_SPECIFIC, FLAG_FAMILY_SPECIFIC = 0x100000, 0x200000
FLAG_LZ4, FLAG_ZSTD = 0x2000, 0x8000
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_zstandard = LazyModule("zstandard")
_stdlib_zstd = LazyModule("compression.zstd")


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int

    def data(self, blob: bytes) -> bytes:
        return b"" if self.type == 8 else blob[self.offset:self.offset + self.size]  # SHT_NOBITS holds no bytes


@dataclass(frozen=True)
class Symbol:
    index: int
    name: str
    value: int
    size: int
    type: int  # STT_FUNC = 2, STT_OBJECT = 1
    bind: int
    other: int
    shndx: int


@dataclass
class Elf:
    """The parts of an ELF64 file this package reads."""
    blob: bytes
    machine: int
    flags: int
    sections: list[Section]
    symbols: list[Symbol]

    def section(self, name: str) -> Section | None:
        """The first section of that name (by name: a cubin has thousands, looked up per kernel)."""
        return self._by_name("_sections_by_name", self.sections).get(name)

    def symbol(self, name: str) -> Symbol | None:
        """The first symbol of that name."""
        return self._by_name("_symbols_by_name", self.symbols).get(name)

    def _by_name(self, attr: str, items: list) -> dict:
        index = self.__dict__.get(attr)
        if index is None or index[0] != (id(items), len(items)):  # built once; again if the list changed since
            index = ((id(items), len(items)), {})
            for it in items:
                index[1].setdefault(it.name, it)
            self.__dict__[attr] = index
        return index[1]


def _cstr(blob: bytes, at: int) -> str:
    end = blob.find(b"\0", at)
    return blob[at:end if end >= 0 else len(blob)].decode("utf-8", errors="replace")


def parse_elf(blob: bytes, what: str = "file") -> Elf:
    """Section headers and the symbol table of a little-endian ELF64 file; UsageError for anything else."""
    if blob[:4] != ELF_MAGIC:
        raise UsageError(f"{what} is not an ELF file")
    if blob[4] != 2 or blob[5] != 1:
        raise UsageError(f"{what} is not a little-endian 64-bit ELF file (class {blob[4]}, data {blob[5]})")
    try:
        machine, = struct.unpack_from("<H", blob, 0x12)
        flags, = struct.unpack_from("<I", blob, 0x30)
        shoff, = struct.unpack_from("<Q", blob, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
        strtab_off = raw[shstrndx][4] if shnum else 0
        sections = [Section(_cstr(blob, strtab_off + r[0]), r[1], r[2], r[4], r[5], r[6], r[7]) for r in raw]
    except (struct.error, IndexError):
        raise UsageError(f"{what}: truncated or malformed ELF section headers") from None
    symbols: list[Symbol] = []
    symtab = next((s for s in sections if s.type == 2), None)  # SHT_SYMTAB
    if symtab is not None and symtab.link < len(sections):
        names = sections[symtab.link].offset
        for i in range(symtab.size // 24):
            try:
                st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", blob, symtab.offset + 24 * i)
            except struct.error:
                break
            symbols.append(Symbol(i, _cstr(blob, names + st_name), st_value, st_size, st_info & 0xF, st_info >> 4,
                                  st_other, st_shndx))
    return Elf(blob, machine, flags, sections, symbols)


def _lz4_block(src: bytes, size: int) -> bytes:
    """Decode one LZ4 block (the format fatbinary's LZ4 compression writes) into `size` bytes."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i:i + lit]
        i += lit
        if i >= n or len(out) >= size:
            break
        off = src[i] | (src[i + 1] << 8)
        i += 2
        mlen = token & 15
        if mlen == 15:
            while True:
                b = src[i]
                i += 1
                mlen += b
                if b != 255:
                    break
        mlen += 4
        start = len(out) - off
        if off == 0 or start < 0:
            raise ValueError("bad LZ4 match offset")
        for k in range(mlen):  # byte by byte: matches may overlap what they copy
            out.append(out[start + k])
    return bytes(out[:size])


def _zstd(data: bytes) -> bytes:
    if _stdlib_zstd.missing() is None:
        return _stdlib_zstd.decompress(data)
    why = _zstandard.missing()
    if why:
        raise ValueError("zstd-compressed: pip install 'tileprobe[inspect]' (zstandard) to read it")
    return _zstandard.ZstdDecompressor().decompressobj().decompress(data)


@dataclass
class Image:
    """One entry of device code: a cubin (ELF bytes) or PTX text for one SM, with where it came from."""
    kind: str  # "cubin" or "ptx"
    sm: int  # 90, 120, 121 ...
    suffix: str  # "", "a" (arch-specific) or "f" (family-specific)
    data: bytes | None  # None when it could not be decompressed
    origin: str  # "cubin file", "fatbin container 1 entry 2"
    note: str = ""

    @property
    def arch(self) -> str:
        return f"{'sm' if self.kind == 'cubin' else 'compute'}_{self.sm}{self.suffix}"


def _entries(blob: bytes, start: int, label: str, decode: bool = True) -> tuple[list[Image], int]:
    """The entries of the fatbin container at `start`; returns them and the container's end. `decode=False`: the
    entries' payloads as stored (nothing decompressed; what containers() needs)."""
    _, version, header_size, body = struct.unpack_from("<IHHQ", blob, start)
    end = start + header_size + body
    if version != 1 or header_size != 16 or end > len(blob):
        return [], start + 4
    images, p, k = [], start + header_size, 0
    while p + 64 <= end:
        kind, _, ehs, psize = struct.unpack_from("<HHIQ", blob, p)
        if ehs < 64 or p + ehs + psize > end:
            break
        sm, = struct.unpack_from("<I", blob, p + 28)
        flags, = struct.unpack_from("<I", blob, p + 40)
        full, = struct.unpack_from("<Q", blob, p + 56)
        payload = blob[p + ehs:p + ehs + psize]
        k += 1
        suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
        name = {KIND_PTX: "ptx", KIND_CUBIN: "cubin"}.get(kind)
        if name is not None:
            data, note = payload, ""
            try:
                if not decode:
                    pass
                elif payload[:4] == ZSTD_MAGIC:
                    data = _zstd(payload)
                elif flags & FLAG_LZ4:
                    data = _lz4_block(payload, full)
            except (ValueError, IndexError) as exc:
                data, note = None, str(exc)
            if data is not None and name == "ptx":
                data = data.rstrip(b"\0")
            images.append(Image(name, sm, suffix, data, f"{label} entry {k}", note))
        p += ehs + psize
    return images, end


def fatbin_images(blob: bytes, base: str = "fatbin") -> list[Image]:
    """Every entry of every fatbin container found in `blob` (containers are found by their magic and checked by
    their header: a stray match is skipped)."""
    images: list[Image] = []
    at, n = blob.find(FATBIN_MAGIC), 0
    while at >= 0:
        if at + 16 <= len(blob):
            found, end = _entries(blob, at, f"{base} container {n + 1}")
            if found:
                n += 1
                images += found
        else:
            end = at + 4
        at = blob.find(FATBIN_MAGIC, max(end, at + 4))
    return images


def entries(blob: bytes, start: int, label: str) -> list[Image]:
    """The images of the fatbin container at `start` (one of containers()), decompressed."""
    return _entries(blob, start, label)[0]


def containers(blob: bytes, base: str = "fatbin") -> list[tuple[int, int, str]]:
    """(start, end, label) of each fatbin container fatbin_images reads from `blob`, in its order and with its
    labels, without decompressing anything: the containers' entries are then `_entries(blob, start, label)[0]`."""
    out: list[tuple[int, int, str]] = []
    at = blob.find(FATBIN_MAGIC)
    while at >= 0:
        if at + 16 <= len(blob):
            found, end = _entries(blob, at, f"{base} container {len(out) + 1}", decode=False)
            if found:
                out.append((at, end, f"{base} container {len(out) + 1}"))
        else:
            end = at + 4
        at = blob.find(FATBIN_MAGIC, max(end, at + 4))
    return out


def images_in(path: Path) -> list[Image]:
    """All device code in a file: a cubin is itself; anything else is searched for fatbin containers."""
    try:
        blob = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if blob[:4] == ELF_MAGIC and len(blob) > 0x14 and struct.unpack_from("<H", blob, 0x12)[0] == EM_CUDA:
        elf = parse_elf(blob, str(path))
        sm, suffix = cubin_arch(elf)
        return [Image("cubin", sm, suffix, blob, "cubin file")]
    images = fatbin_images(blob)
    if not images:
        kind = "an ELF file" if blob[:4] == ELF_MAGIC else "a file"
        raise UsageError(f"{path} is {kind} with no CUDA device code (no cubin, no fatbin container)")
    return images


def cubin_arch(elf: Elf) -> tuple[int, str]:
    """(SM number, suffix) of a cubin. The SM is in e_flags (bits 8-15 in ABI version 8 and later, bits 0-7 before);
    whether it is sm_XYa or sm_XYf is not in e_flags, so it is read from the ptxas command line that the
    `.note.nv.tkinfo` note records ('-arch sm_120a')."""
    abi = elf.blob[8]
    sm = (elf.flags >> 8) & 0xFF if abi >= 8 else elf.flags & 0xFF
    suffix = ""
    note = elf.section(".note.nv.tkinfo")
    if note is not None:
        text = note.data(elf.blob)
        at = text.find(b"-arch sm_")
        if at >= 0:
            word = text[at + 9:at + 20].split(b" ")[0].split(b"\0")[0].decode(errors="replace")
            digits = "".join(c for c in word if c.isdigit())
            if digits and int(digits) == sm:
                suffix = word[len(digits):] if word[len(digits):] in ("a", "f") else ""
    return sm, suffix
