"""On-disk format of a stream log, the ``x-stream-offset`` header splice, and ``x-max-age`` values.

Owns: the byte layout of stream segment files and the pure functions that encode and decode them;
adding the ``x-stream-offset`` header to a content header payload without decoding it; parsing
RabbitMQ's age strings. Must not know: directories, fsync, consumers, the broker. No I/O.

Segment files
-------------
A stream's directory holds segment files named by their zero-padded (20 digits) *base offset*,
``00000000000000000000.seg`` (Kafka's ``LogFileUtils`` naming: lexical order == offset order). A
segment holds the records with offsets ``base, base+1, ...`` contiguously; the next segment starts
where the previous one ends.

File header (16 bytes, big-endian, like every integer here)::

    magic    4 bytes  b"AMQL"
    version  u8       1 (FORMAT_VERSION); an unknown version is refused (StreamFormatError)
    reserved 3 bytes  zero
    base     u64      the base offset; must equal the file name

Then records, back to back, until end of file::

    length     u32  number of bytes after the crc field (>= RECORD_FIXED)
    crc32      u32  zlib.crc32 of those ``length`` bytes
    offset     u64  the record's stream offset (base + index in segment)
    timestamp  i64  publish time, ms since the Unix epoch (non-decreasing within a stream)
    routing    u16  length of the routing bytes that follow
    header     u32  length of the content header payload that follows
    routing bytes   exchange and routing key as two AMQP short strings (as in Basic.Deliver)
    header payload  the AMQP content header payload (0-9-1 section 4.2.6.1), already carrying the
                    ``x-stream-offset`` header (long-long, type 'l') with this record's offset
    body            the rest: ``length - RECORD_FIXED - routing - header`` bytes

A torn or corrupt tail (short header, length out of range, crc mismatch, offset out of sequence)
ends the valid part of the active segment: the log cuts the file there when it opens.
Sources: Kafka ``LogSegment`` (segments by base offset, recovery truncates at the first invalid
batch); "RabbitMQ: Streams" (retention by whole segments, ``x-stream-offset`` delivery header).
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

__all__ = [
    "FILE_HEADER_SIZE", "FORMAT_VERSION", "MAGIC", "MAX_RECORD", "RECORD_FIXED", "Record",
    "StreamFormatError", "decode_routing", "encode_file_header", "encode_record",
    "parse_file_header", "parse_max_age", "scan_records", "segment_name", "with_offset_header",
]

MAGIC = b"AMQL"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct(">4sB3xQ")
FILE_HEADER_SIZE = FILE_HEADER.size  # 16
LEN_CRC = struct.Struct(">II")
FIXED = struct.Struct(">QqHI")
RECORD_FIXED = FIXED.size  # 22: offset, timestamp, routing len, header len
MAX_RECORD = 1 << 30  # a record (after length+crc) larger than 1 GiB is refused / treated as torn

_FLAG_HEADERS = 0x2000
_FLAG_CONTENT_TYPE = 0x8000
_FLAG_CONTENT_ENCODING = 0x4000
_OFFSET_KEY = b"\x0fx-stream-offset"
_OFFSET_ENTRY = struct.Struct(">16scq")  # key shortstr (16 bytes), type 'l', value i64
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


class StreamFormatError(Exception):
    """A segment file is not a stream segment of a version we read (wrong magic, newer version,
    base offset different from its name)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: ``offset``, ``timestamp`` (ms since epoch), ``routing`` (two AMQP short
    strings: exchange, routing key), ``header`` (content header payload), ``body``; ``position``
    is the byte position of the record's length field in its segment file, ``size`` its total
    size on disk (8 + length)."""

    offset: int
    timestamp: int
    routing: bytes
    header: bytes
    body: bytes
    position: int
    size: int


def segment_name(base: int) -> str:
    """File name of the segment whose first offset is ``base``: 20 digits + ".seg"."""
    return f"{base:020d}.seg"


def encode_file_header(base: int) -> bytes:
    """The 16-byte header of a new segment whose first offset is ``base``."""
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION, base)


def parse_file_header(data: bytes, expected_base: int) -> None:
    """Check a segment file header; raises ``StreamFormatError`` (short file, wrong magic, unknown
    version, base offset not ``expected_base``)."""
    if len(data) < FILE_HEADER_SIZE:
        raise StreamFormatError("short segment header")
    magic, version, base = FILE_HEADER.unpack_from(data)
    if magic != MAGIC:
        raise StreamFormatError(f"not a stream segment (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise StreamFormatError(f"stream segment version {version} is not supported")
    if base != expected_base:
        raise StreamFormatError(f"segment base {base} does not match its name {expected_base}")


def encode_record(offset: int, timestamp: int, routing: bytes, header: bytes,
                  body: bytes) -> bytes:
    """One record (length, crc, fixed part, routing, header, body) as bytes; see module doc."""
    payload = b"".join((FIXED.pack(offset, timestamp, len(routing), len(header)), routing,
                        header, body))
    return LEN_CRC.pack(len(payload), zlib.crc32(payload)) + payload


def scan_records(data: bytes | memoryview, start: int, base_position: int, next_offset: int,
                 *, verify: bool = True, with_payload: bool = True
                 ) -> tuple[list[Record], int]:
    """Decode the complete records in ``data[start:]``.

    ``base_position`` is the file position of ``data[0]``; ``next_offset`` the offset the first
    record must carry (records must be contiguous). Stops at the end of data, at a partial record,
    or at the first invalid one (crc mismatch when ``verify``, length out of range, offset out of
    sequence). Returns (records, index in ``data`` where decoding stopped). With
    ``with_payload=False`` records carry empty routing/header/body (index rebuild: cheap).
    """
    out: list[Record] = []
    end = len(data)
    pos = start
    mv = memoryview(data)
    while pos + 8 + RECORD_FIXED <= end:
        length, crc = LEN_CRC.unpack_from(mv, pos)
        if length < RECORD_FIXED or length > MAX_RECORD or pos + 8 + length > end:
            break
        payload = mv[pos + 8:pos + 8 + length]
        if verify and zlib.crc32(payload) != crc:
            break
        offset, timestamp, rlen, hlen = FIXED.unpack_from(payload)
        if offset != next_offset or RECORD_FIXED + rlen + hlen > length:
            break
        if with_payload:
            a = RECORD_FIXED + rlen
            b = a + hlen
            rec = Record(offset, timestamp, bytes(payload[RECORD_FIXED:a]), bytes(payload[a:b]),
                         bytes(payload[b:]), base_position + pos, 8 + length)
        else:
            rec = Record(offset, timestamp, b"", b"", b"", base_position + pos, 8 + length)
        out.append(rec)
        next_offset += 1
        pos += 8 + length
    return out, pos


def decode_routing(routing: bytes) -> tuple[str, str]:
    """(exchange, routing key) from two AMQP short strings; ``ValueError`` when malformed."""
    if not routing:
        raise ValueError("empty routing bytes")
    n = routing[0]
    exchange = routing[1:1 + n].decode("utf-8", "surrogateescape")
    m = routing[1 + n]
    key = routing[2 + n:2 + n + m].decode("utf-8", "surrogateescape")
    return exchange, key


def with_offset_header(header: bytes, offset: int) -> bytes:
    """``header`` (a content header payload) with ``x-stream-offset = offset`` (type 'l', signed
    64-bit, as RabbitMQ sends it) in its headers table, added or replaced.

    Cheap path (no decode): splice the 25-byte table entry at the end of the headers table, or
    insert a one-entry table and set the headers flag. A table that already holds the key (a
    re-published stream message) is decoded with pamqp, the key dropped, and re-encoded.
    Raises ``ValueError`` for a header payload too short to hold the property flags.
    Source: AMQP 0-9-1 section 4.2.6.1 (property flags and list order), 4.2.5.5 (field tables).
    """
    if len(header) < 14:
        raise ValueError("content header payload too short")
    flags = _U16.unpack_from(header, 12)[0]
    if flags & 1:  # a second flags word: never for basic, but do not guess
        raise ValueError("content header with continued property flags")
    pos = 14
    if flags & _FLAG_CONTENT_TYPE:
        pos += 1 + header[pos]
    if flags & _FLAG_CONTENT_ENCODING:
        pos += 1 + header[pos]
    entry = _OFFSET_ENTRY.pack(_OFFSET_KEY, b"l", offset)
    if flags & _FLAG_HEADERS:
        tlen = _U32.unpack_from(header, pos)[0]
        table = header[pos + 4:pos + 4 + tlen]
        if _OFFSET_KEY in table:
            _, decoded = pamqp_decode.field_table(header[pos:pos + 4 + tlen])
            decoded.pop("x-stream-offset", None)
            table = pamqp_encode.field_table(decoded)[4:]
        return b"".join((header[:pos], _U32.pack(len(table) + len(entry)), table, entry,
                         header[pos + 4 + tlen:]))
    return b"".join((header[:12], _U16.pack(flags | _FLAG_HEADERS), header[14:pos],
                     _U32.pack(len(entry)), entry, header[pos:]))


_MAX_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")
_AGE_UNIT_MS = {"Y": 365 * 86_400_000, "M": 30 * 86_400_000, "D": 86_400_000,
                "h": 3_600_000, "m": 60_000, "s": 1000}


def parse_max_age(value: str) -> int:
    """An age such as "7D", "1h", "30s" in milliseconds; units Y (365 days), M (30 days), D, h, m,
    s as RabbitMQ's ``x-max-age`` (and interval ``x-stream-offset``). ``ValueError`` when not of
    that form or not positive. Source: "RabbitMQ: Streams" (retention), rabbit_amqqueue
    ``check_max_age``."""
    m = _MAX_AGE.fullmatch(value)
    if m is None or int(m.group(1)) <= 0:
        raise ValueError(f"invalid age {value!r}")
    return int(m.group(1)) * _AGE_UNIT_MS[m.group(2)]
