"""C++ struct layout, the way nvcc's host compiler lays out CUTLASS's SharedStorage structs.

A member goes at the next multiple of its alignment; a struct's size is its end rounded up to its alignment, which is
the largest alignment of any member (or an explicit alignas / cute::aligned_struct<N>). Every rule module builds its
structs from these two pieces so that padding is never guessed but follows from the members. Members are recorded
cheaply; the named breakdown (parts) is only flattened when asked for.
"""

from __future__ import annotations


def up(x: int, a: int) -> int:
    """Round x up to a multiple of a."""
    return -(-x // a) * a


class Struct:
    """A struct under construction: add members in declaration order; size is the padded size."""

    __slots__ = ("name", "align", "end", "members")

    def __init__(self, name: str, align: int = 1):
        self.name = name
        self.align = align  # at least this (alignas / aligned_struct)
        self.end = 0
        self.members: list[tuple[str, int, int, Struct | None]] = []  # (name, offset, size, nested struct)

    def add(self, member: str, size: int, align: int, child: "Struct | None" = None) -> int:
        """Place a member of `size` bytes and alignment `align`; returns its offset."""
        off = -(-self.end // align) * align
        self.members.append((member, off, size, child))
        self.end = off + size
        if align > self.align:
            self.align = align
        return off

    def add_struct(self, member: str, s: "Struct", align: int | None = None) -> int:
        """A nested struct member; `align` for an alignas() on the member stronger than the struct's own."""
        a = s.align if align is None or align < s.align else align
        return self.add(member, -(-s.end // a) * a, a, s)

    @property
    def size(self) -> int:
        return -(-self.end // self.align) * self.align

    def parts(self, prefix: str = "") -> dict[str, int]:
        """Bytes by member path ('tensors.mainloop.A'); padding as '<pad>' entries. Sums to size."""
        out: dict[str, int] = {}
        pos = 0
        for name, off, size, child in self.members:
            if off > pos:
                out[prefix + "<pad>"] = out.get(prefix + "<pad>", 0) + off - pos
            if child is None:
                out[prefix + name] = out.get(prefix + name, 0) + size
            else:
                for k, v in child.parts(f"{prefix}{name}.").items():
                    out[k] = out.get(k, 0) + v
                tail = size - child.size  # a stronger alignas on the member
                if tail:
                    out[f"{prefix}{name}.<pad>"] = out.get(f"{prefix}{name}.<pad>", 0) + tail
            pos = off + size
        if self.size > pos:
            out[prefix + "<pad>"] = out.get(prefix + "<pad>", 0) + self.size - pos
        return out

    def member_size(self, name: str) -> int:
        for n, _, size, _ in self.members:
            if n == name:
                return size
        raise KeyError(name)
