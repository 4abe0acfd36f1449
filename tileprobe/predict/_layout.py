"""C++ struct layout, the way nvcc's host compiler lays out CUTLASS's SharedStorage structs.

A member goes at the next multiple of its alignment; a struct's size is its end rounded up to its alignment, which is
the largest alignment of any member (or an explicit alignas / cute::aligned_struct<N>). Every rule module builds its
structs from these two pieces so that padding is never guessed but follows from the members.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def up(x: int, a: int) -> int:
    """Round x up to a multiple of a."""
    return -(-x // a) * a


@dataclass
class Struct:
    """A struct under construction: add members in declaration order, then close() for its size."""

    name: str
    align: int = 1  # at least this (alignas / aligned_struct)
    end: int = 0
    parts: dict[str, int] = field(default_factory=dict)  # member -> bytes, padding included as '<pad>' entries

    def add(self, member: str, size: int, align: int, parts: dict[str, int] | None = None) -> int:
        """Place a member (size bytes, alignment align); returns its offset. `parts` breaks the member down."""
        off = up(self.end, align)
        self._pad(off - self.end)
        if parts:
            for k, v in parts.items():
                self.parts[f"{member}.{k}"] = self.parts.get(f"{member}.{k}", 0) + v
        else:
            self.parts[member] = self.parts.get(member, 0) + size
        self.end = off + size
        self.align = max(self.align, align)
        return off

    def add_struct(self, member: str, s: "Struct") -> int:
        return self.add(member, s.size, s.align, s.parts)

    def _pad(self, n: int) -> None:
        if n:
            self.parts["<pad>"] = self.parts.get("<pad>", 0) + n

    @property
    def size(self) -> int:
        return up(self.end, self.align)

    def close(self) -> "Struct":
        self._pad(self.size - self.end)
        self.end = self.size
        return self
