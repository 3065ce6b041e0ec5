"""Lossless binary encoding of AMQP field tables (arguments) for the definitions database.

Owns: turning an ``arguments`` dict, as the protocol layer decoded it from the wire (pamqp), into
bytes for a BLOB column and back, such that every value comes back with the same Python type and
value. Must not know: SQLite, the broker.

Why not the wire format: AMQP field tables (0-9-1 section 4.2.5.5) as pamqp encodes them lose
information for us: floats are written as 32-bit ``f``, timestamps are whole seconds, ``bytes`` is
not accepted and a long string decodes to ``str`` or ``bytes`` depending on its content. So this is
a private, versioned format modeled on field tables (one tag byte, then the value; big-endian)::

    blob   := VERSION(u8 = 1) table
    table  := count u32, count x (key (u32 len, utf-8), value)   keys sorted (canonical form)
    value  := 't' u8 (bool) | 'l' i64 (int) | 'N' u32 len + ascii (int beyond i64)
            | 'd' f64 (float) | 'E' u32 len + ascii (decimal.Decimal, str() form)
            | 'S' u32 len + utf-8 (str) | 'x' u32 len + bytes (bytes) | 'X' u32 len (bytearray)
            | 'T' u32 len + ascii (datetime.datetime, isoformat; naive or with a UTC offset)
            | 'V' (None) | 'F' table (dict) | 'A' count u32 + values (list; tuples become lists)

Keys are sorted when encoding, so equal tables give equal bytes (bindings are compared by their
arguments as sorted tables, as in RabbitMQ's ``rabbit_misc:sort_field_table``). A tz-aware datetime
keeps its UTC offset but not a zone name. Strings use ``surrogatepass`` so any ``str`` round-trips.
Raises ``TypeError`` for a value of another type, ``ValueError`` for malformed bytes.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

__all__ = ["encode_table", "decode_table", "CODEC_VERSION"]

CODEC_VERSION = 1
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


def _text(tag: bytes, raw: bytes) -> bytes:
    return tag + _U32.pack(len(raw)) + raw


def _value(value: Any, out: list[bytes]) -> None:
    if isinstance(value, bool):
        out.append(b"t\x01" if value else b"t\x00")
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            out.append(b"l" + _I64.pack(value))
        else:
            out.append(_text(b"N", str(value).encode()))
    elif isinstance(value, float):
        out.append(b"d" + _F64.pack(value))
    elif isinstance(value, decimal.Decimal):
        out.append(_text(b"E", str(value).encode()))
    elif isinstance(value, str):
        out.append(_text(b"S", value.encode("utf-8", "surrogatepass")))
    elif isinstance(value, bytes):
        out.append(_text(b"x", value))
    elif isinstance(value, bytearray):
        out.append(_text(b"X", bytes(value)))
    elif isinstance(value, datetime.datetime):
        out.append(_text(b"T", value.isoformat().encode()))
    elif value is None:
        out.append(b"V")
    elif isinstance(value, dict):
        out.append(b"F")
        _table(value, out)
    elif isinstance(value, (list, tuple)):
        out.append(b"A" + _U32.pack(len(value)))
        for item in value:
            _value(item, out)
    else:
        raise TypeError(f"cannot store a field value of type {type(value).__name__}: {value!r}")


def _table(table: dict[str, Any], out: list[bytes]) -> None:
    out.append(_U32.pack(len(table)))
    for key in sorted(table):
        if not isinstance(key, str):
            raise TypeError(f"field table keys must be str, not {type(key).__name__}")
        raw = key.encode("utf-8", "surrogatepass")
        out.append(_U32.pack(len(raw)) + raw)
        _value(table[key], out)


def encode_table(table: dict[str, Any] | None) -> bytes:
    """The canonical bytes of ``table`` (None is the empty table)."""
    out = [bytes((CODEC_VERSION,))]
    _table(table or {}, out)
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ValueError("field table blob is truncated")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def sized(self) -> bytes:
        return self.take(self.u32())

    def value(self) -> Any:
        tag = self.take(1)
        if tag == b"t":
            return self.take(1) != b"\x00"
        if tag == b"l":
            return _I64.unpack(self.take(8))[0]
        if tag == b"N":
            return int(self.sized())
        if tag == b"d":
            return _F64.unpack(self.take(8))[0]
        if tag == b"E":
            return decimal.Decimal(self.sized().decode())
        if tag == b"S":
            return self.sized().decode("utf-8", "surrogatepass")
        if tag == b"x":
            return self.sized()
        if tag == b"X":
            return bytearray(self.sized())
        if tag == b"T":
            return datetime.datetime.fromisoformat(self.sized().decode())
        if tag == b"V":
            return None
        if tag == b"F":
            return self.table()
        if tag == b"A":
            return [self.value() for _ in range(self.u32())]
        raise ValueError(f"unknown field value tag {tag!r}")

    def table(self) -> dict[str, Any]:
        result = {}
        for _ in range(self.u32()):
            key = self.sized().decode("utf-8", "surrogatepass")
            result[key] = self.value()
        return result


def decode_table(blob: bytes) -> dict[str, Any]:
    """The table encoded in ``blob``. Raises ``ValueError`` when malformed or of another version."""
    if not blob or blob[0] != CODEC_VERSION:
        raise ValueError(f"field table blob of unknown version {blob[:1]!r}")
    reader = _Reader(bytes(blob))
    reader.pos = 1
    try:
        table = reader.table()
    except (struct.error, decimal.InvalidOperation) as exc:
        raise ValueError(f"malformed field table blob: {exc}") from exc
    if reader.pos != len(reader.data):
        raise ValueError("trailing bytes after field table")
    return table
