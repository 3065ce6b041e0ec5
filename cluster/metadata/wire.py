"""The primitive encodings of the metadata log's commands and snapshots, and its one error type.

Owns: ``Writer`` / ``Reader`` of big-endian values (strings, booleans, integers of any size,
string lists, AMQP field tables) and ``MalformedMetadata``, the only exception ``Reader`` raises,
whatever the bytes. Must not know: which command or record holds the values.

Encodings::

    str    := u32 length + UTF-8 (surrogatepass: any Python str round-trips)
    bool   := u8, 0 or 1 (any other byte is malformed)
    int    := u8 length + that many bytes, big-endian two's complement (0: no bytes); any size
              up to 255 bytes
    strs   := u32 count + count x str
    table  := u32 length + ``amqp_broker.definitions.codec.encode_table`` bytes (lossless,
              canonical: keys sorted, so equal tables give equal bytes)

Sources: AMQP 0-9-1 §4.2.5.5 (field tables, for what a table holds); the definitions store's
table codec, reused so that arguments keep every value's type.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from amqp_broker.definitions.codec import decode_table, encode_table

__all__ = ["MalformedMetadata", "Writer", "Reader"]

_U32 = struct.Struct(">I")


class MalformedMetadata(ValueError):
    """Bytes that are not a metadata command or snapshot of ours: truncated, trailing bytes, an
    unknown kind or version, a bad boolean, invalid UTF-8, a malformed field table, nesting too
    deep. The only error ``Reader`` (and so ``codec.decode`` and ``MetadataMachine.restore``)
    raises for bad input."""


class Writer:
    """Appends encoded values; ``bytes()`` joins them. Raises ``ValueError`` for an integer over
    255 bytes and ``TypeError`` for a table value the table codec does not take."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def raw(self, data: bytes) -> None:
        """Append ``data`` as it is."""
        self.parts.append(data)

    def str_(self, value: str) -> None:
        """Append a str."""
        raw = value.encode("utf-8", "surrogatepass")
        self.parts.append(_U32.pack(len(raw)) + raw)

    def bool_(self, value: bool) -> None:
        """Append a bool."""
        self.parts.append(b"\x01" if value else b"\x00")

    def int_(self, value: int) -> None:
        """Append an int of any sign and size up to 255 bytes."""
        size = (value.bit_length() + 8) // 8 if value else 0
        if size > 255:
            raise ValueError(f"integer too large to encode: {size} bytes")
        self.parts.append(bytes((size,)) + value.to_bytes(size, "big", signed=True))

    def strs(self, values: Iterable[str]) -> None:
        """Append a list of str."""
        items = list(values)
        self.parts.append(_U32.pack(len(items)))
        for v in items:
            self.str_(v)

    def table(self, value: Mapping[str, Any]) -> None:
        """Append a field table."""
        blob = encode_table(dict(value))
        self.parts.append(_U32.pack(len(blob)) + blob)

    def bytes(self) -> bytes:
        """Everything appended, joined."""
        return b"".join(self.parts)


class Reader:
    """Reads what ``Writer`` wrote from ``data``; every method raises ``MalformedMetadata`` when
    the bytes do not hold the value asked for."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise MalformedMetadata(f"truncated at byte {self.pos} (wanted {n} more)")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def u8(self) -> int:
        """One unsigned byte."""
        return self.take(1)[0]

    def u32(self) -> int:
        """An unsigned 32-bit integer."""
        return int(_U32.unpack(self.take(4))[0])

    def str_(self) -> str:
        """A str."""
        raw = self.take(self.u32())
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise MalformedMetadata(f"invalid UTF-8: {exc}") from None

    def bool_(self) -> bool:
        """A bool (0 or 1)."""
        b = self.u8()
        if b > 1:
            raise MalformedMetadata(f"not a boolean: {b}")
        return b == 1

    def int_(self) -> int:
        """An int."""
        return int.from_bytes(self.take(self.u8()), "big", signed=True)

    def strs(self) -> tuple[str, ...]:
        """A list of str, as a tuple."""
        count = self.u32()
        if count > len(self.data) - self.pos:   # each str takes 4 bytes at least
            raise MalformedMetadata(f"{count} strings cannot fit")
        return tuple(self.str_() for _ in range(count))

    def table(self) -> dict[str, Any]:
        """A field table."""
        blob = self.take(self.u32())
        try:
            return decode_table(blob)
        except (ValueError, RecursionError) as exc:
            raise MalformedMetadata(f"malformed field table: {exc}") from None

    def end(self) -> None:
        """Raise unless every byte was read."""
        if self.pos != len(self.data):
            raise MalformedMetadata(f"{len(self.data) - self.pos} trailing bytes")
