"""On-disk format of the message store: segment file header, record framing, record payloads.

Owns: the byte layout of segment files and the pure functions that encode, decode and scan them.
Must not know: directories, fsync policy, queues as objects, the broker. No I/O except reading a
file's bytes handed in by the caller.

Segment files
-------------
A store directory holds segment files named by their zero-padded (20 digits) *base store id*, e.g.
``00000000000000000001.seg`` (Kafka's ``LogFileUtils`` naming: lexical order == numeric order ==
creation order). Every store id first assigned while a segment was the active one is ``>= base``
and ``<`` the next segment's base; within one segment such *native* ids are contiguous
(``base, base+1, ...``). Records copied forward by compaction (flag ``RELOCATED``) keep their old,
smaller id.

File header (16 bytes, big-endian, like all integers here)::

    magic    4 bytes  b"AMQS"
    version  u16      1 (FORMAT_VERSION); an unknown version is refused (FormatError)
    flags    u16      0 (reserved)
    base     u64      the base store id; must equal the file name

Then records, back to back, until end of file::

    length   u32   number of bytes after the crc field (kind .. end of payload), >= 10
    crc32    u32   zlib.crc32 of those ``length`` bytes
    kind     u8    PUBLISH=1, ACK=2, DROP_QUEUE=4, OPEN=5, CLEAN=6 (3 is unused)
    flags    u8    PUBLISH: bit0 RELOCATED; others 0
    store_id u64   PUBLISH: the message; ACK: the first id acked; others: 0
    payload  length - 10 bytes, by kind:

    PUBLISH    [native_base u64, native_count u32]   only when RELOCATED
               queue_count u16, queue_count x (u8 len, utf-8 name)   the queues holding it
               exchange (u8 len, utf-8), routing_key (u8 len, utf-8)
               header_len u32, header_payload (AMQP content header payload, 0-9-1 section 4.2.6.1)
               body (the rest: ``length - 10 - prefix`` bytes)
    ACK        queue (u8 len, utf-8), then n x u64 store ids (n >= 1) that queue no longer holds
    DROP_QUEUE queue (u8 len, utf-8): the queue holds none of the messages published before it
    OPEN       empty: written (and synced) each time a store is opened
    CLEAN      n x u64: written (and synced) by ``close()``: the live messages that had been
               delivered at least once. When the newest record of the log is CLEAN, recovery marks
               exactly those redelivered; otherwise (a crash) every recovered message is redelivered.
               Deliveries are therefore never logged one by one.

Names are AMQP short strings (at most 255 bytes encoded; utf-8 with ``surrogateescape`` so that
any bytes round-trip). A record larger than ``MAX_RECORD`` is refused.

A torn or corrupt tail (short header, length out of range, crc mismatch, unknown kind) ends the
valid part of a segment: ``scan`` stops there and reports the offset, the caller cuts the file.
Sources: Kafka ``LogSegment``/``OffsetIndex`` (segments by base offset, recovery truncates at the
first invalid batch), RabbitMQ "Persistence Configuration" (message store + queue index).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "MAGIC", "FORMAT_VERSION", "FILE_HEADER_SIZE", "RECORD_HEADER_SIZE", "MAX_RECORD",
    "KIND_PUBLISH", "KIND_ACK", "KIND_DROP_QUEUE", "KIND_OPEN", "KIND_CLEAN",
    "FLAG_RELOCATED", "FormatError", "Publish", "segment_name", "parse_segment_name",
    "file_header", "check_file_header", "header_damage", "HEADER_DAMAGE_BITS",
    "publish_prefix", "encode_record", "encode_ack",
    "encode_name_record", "encode_clean", "decode_publish", "decode_holders", "decode_ack", "decode_name",
    "decode_ids", "scan", "Scan",
]

MAGIC = b"AMQS"
#: A newer format must differ from this in at least two bits (2, 4, 6, 7, ...): a version one
#: bit away from ours is read as a flipped bit (``header_damage``), not as a newer format.
FORMAT_VERSION = 1
_FILE_HEADER = struct.Struct(">4sHHQ")
FILE_HEADER_SIZE = _FILE_HEADER.size  # 16
_RECORD_HEADER = struct.Struct(">IIBBQ")  # length, crc, kind, flags, store_id
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 18
_CRC_FROM = 8  # the crc covers everything after length and crc
_MIN_LENGTH = RECORD_HEADER_SIZE - _CRC_FROM  # 10
_KIND_FLAGS_ID = struct.Struct(">BBQ")
MAX_RECORD = (1 << 31) - 1  # bytes after the length field

KIND_PUBLISH = 1
KIND_ACK = 2
KIND_DROP_QUEUE = 4
KIND_OPEN = 5
KIND_CLEAN = 6
_KINDS = frozenset({KIND_PUBLISH, KIND_ACK, KIND_DROP_QUEUE, KIND_OPEN, KIND_CLEAN})

FLAG_RELOCATED = 0x01

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_RELOC = struct.Struct(">QI")
_SUFFIX = ".seg"


class FormatError(ValueError):
    """A segment file or record does not follow this format (bad magic/version, bad name, ...)."""


def segment_name(base: int) -> str:
    """File name of the segment whose base store id is ``base`` (20 zero-padded digits + .seg)."""
    return f"{base:020d}{_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base store id encoded in a segment file name, None when ``name`` is not one."""
    if len(name) != 20 + len(_SUFFIX) or not name.endswith(_SUFFIX) or not name[:20].isdigit():
        return None
    return int(name[:20])


def file_header(base: int, magic: bytes = MAGIC, version: int = FORMAT_VERSION) -> bytes:
    """The 16-byte header of a segment whose base store id is ``base``. Other logs that share this
    framing (``cluster.raft.disklog``) pass their own ``magic`` and ``version``."""
    return _FILE_HEADER.pack(magic, version, 0, base)


def check_file_header(data: bytes | memoryview, base: int, magic: bytes = MAGIC,
                      version: int = FORMAT_VERSION) -> None:
    """Raise ``FormatError`` unless ``data`` starts with a valid header for base ``base`` (with
    ``magic`` and ``version``, the store's by default)."""
    if len(data) < FILE_HEADER_SIZE:
        raise FormatError(f"segment header torn: {len(data)} of {FILE_HEADER_SIZE} bytes")
    found_magic, found_version, _flags, found = _FILE_HEADER.unpack_from(data, 0)
    if found_magic != magic:
        raise FormatError(f"bad segment magic {bytes(found_magic)!r}")
    if found_version != version:
        raise FormatError(f"unsupported segment format version {found_version}")
    if found != base:
        raise FormatError(f"segment header says base {found}, file name says {base}")


#: A header that differs from the expected one in at most this many bits is taken for ours with
#: flipped bits (``header_damage``), not for a file of another format.
HEADER_DAMAGE_BITS = 8


def header_damage(data: bytes | memoryview, base: int, magic: bytes = MAGIC,
                  version: int = FORMAT_VERSION) -> str | None:
    """Why ``data``'s file header is not the valid one for ``base`` though it is ours with a few
    flipped bits (at most ``HEADER_DAMAGE_BITS`` differ from ``file_header(base, magic,
    version)``): the caller rewrites it and checks the records one by one (each has its crc);
    None when the header is valid. Raises ``FormatError`` for what is not ours to repair: a torn
    header (fewer than 16 bytes), a newer version of this format (refused: a downgrade; a
    version one bit away from ours is a flipped bit, not a newer format: the corrupt nemesis
    turned version 1 into 65 and the broker never started), or a header of another format (too
    many bits differ)."""
    try:
        check_file_header(data, base, magic, version)
        return None
    except FormatError as exc:
        problem = str(exc)
    if len(data) < FILE_HEADER_SIZE:
        raise FormatError(problem)
    found_magic, found_version = _FILE_HEADER.unpack_from(data, 0)[:2]
    if found_magic == magic and version < found_version < 256 and \
            bin(found_version ^ version).count("1") > 1:
        raise FormatError(problem)
    expected = file_header(base, magic, version)
    flipped = sum(bin(a ^ b).count("1") for a, b in zip(bytes(data[:FILE_HEADER_SIZE]), expected,
                                                        strict=True))
    if flipped > HEADER_DAMAGE_BITS:
        raise FormatError(problem)
    return f"{problem} ({flipped} bits differ from the valid header)"


def _name(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) > 255:
        raise ValueError(f"name longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(raw),)) + raw


def publish_prefix(queues: Sequence[str], exchange: str, routing_key: str, header_payload: bytes,
                   relocated_from: tuple[int, int] | None = None) -> bytes:
    """The PUBLISH payload up to (not including) the body. Raises ``ValueError`` on a long name."""
    parts = [_RELOC.pack(*relocated_from)] if relocated_from is not None else []
    parts.append(_U16.pack(len(queues)))
    parts.extend(_name(q) for q in queues)
    parts.append(_name(exchange))
    parts.append(_name(routing_key))
    parts.append(_U32.pack(len(header_payload)))
    parts.append(header_payload)
    return b"".join(parts)


def encode_record(kind: int, flags: int, store_id: int, *payload: bytes | memoryview) -> bytes:
    """One framed record: length, crc32, kind, flags, store_id, then the payload parts joined.

    Raises ``ValueError`` when the record would exceed ``MAX_RECORD``.
    """
    body = _KIND_FLAGS_ID.pack(kind, flags, store_id)
    crc = zlib.crc32(body)
    length = len(body)
    for part in payload:
        crc = zlib.crc32(part, crc)
        length += len(part)
    if length > MAX_RECORD:
        raise ValueError(f"record of {length} bytes exceeds {MAX_RECORD}")
    return b"".join((struct.pack(">II", length, crc), body, *payload))


def encode_ack(queue: str, ids: Sequence[int]) -> bytes:
    """An ACK record: ``queue`` no longer holds the messages ``ids`` (at least one)."""
    return encode_record(KIND_ACK, 0, ids[0], _name(queue), struct.pack(f">{len(ids)}Q", *ids))


def encode_name_record(kind: int, name: str = "") -> bytes:
    """A DROP_QUEUE record for queue ``name``, or an empty OPEN record (``name`` unused)."""
    return encode_record(kind, 0, 0, _name(name)) if kind == KIND_DROP_QUEUE else \
        encode_record(kind, 0, 0)


def encode_clean(delivered: Sequence[int]) -> bytes:
    """A CLEAN record listing the live messages delivered at least once."""
    return encode_record(KIND_CLEAN, 0, 0, struct.pack(f">{len(delivered)}Q", *delivered))


def decode_ids(payload: memoryview) -> list[int]:
    """The u64 id list of a CLEAN payload. Raises ``FormatError`` when not a multiple of 8."""
    if len(payload) % 8:
        raise FormatError("id list is not a multiple of 8 bytes")
    return list(struct.unpack_from(f">{len(payload) // 8}Q", payload, 0))


def _take_name(data: memoryview, pos: int) -> tuple[str, int]:
    n = data[pos]
    end = pos + 1 + n
    if end > len(data):
        raise FormatError("name runs past the record")
    return bytes(data[pos + 1:end]).decode("utf-8", "surrogateescape"), end


def decode_name(payload: memoryview) -> str:
    """The queue name of a DROP_QUEUE payload."""
    return _take_name(payload, 0)[0]


def decode_ack(payload: memoryview) -> tuple[str, list[int]]:
    """(queue, ids) of an ACK payload. Raises ``FormatError`` when malformed."""
    queue, pos = _take_name(payload, 0)
    rest = len(payload) - pos
    if rest <= 0 or rest % 8:
        raise FormatError("ACK id list is not a positive multiple of 8 bytes")
    return queue, list(struct.unpack_from(f">{rest // 8}Q", payload, pos))


def decode_holders(payload: memoryview, flags: int,
                   names: dict[bytes, str]) -> tuple[list[str], tuple[int, int] | None]:
    """(queues, relocated_from) of a PUBLISH payload without decoding the rest (replay's fast
    path). ``names`` caches decoded names by their bytes. Raises ``FormatError`` when malformed."""
    try:
        pos = 0
        relocated = None
        if flags & FLAG_RELOCATED:
            relocated = _RELOC.unpack_from(payload, 0)
            pos = _RELOC.size
        count = (payload[pos] << 8) | payload[pos + 1]
        pos += 2
        queues = []
        for _ in range(count):
            end = pos + 1 + payload[pos]
            raw = bytes(payload[pos + 1:end])
            if end > len(payload):
                raise FormatError("queue name runs past the record")
            name = names.get(raw)
            if name is None:
                name = names[raw] = raw.decode("utf-8", "surrogateescape")
            queues.append(name)
            pos = end
    except (struct.error, IndexError) as exc:
        raise FormatError(f"malformed PUBLISH payload: {exc}") from exc
    return queues, relocated


@dataclass(frozen=True, slots=True)
class Publish:
    """A decoded PUBLISH payload. ``body_at`` is the body's offset inside the payload."""

    queues: tuple[str, ...]
    exchange: str
    routing_key: str
    header_payload: bytes
    body_at: int
    relocated_from: tuple[int, int] | None  # (native segment base, native record count)


def decode_publish(payload: memoryview, flags: int) -> Publish:
    """Decode a PUBLISH payload (everything but copying the body). Raises ``FormatError``."""
    try:
        pos = 0
        relocated = None
        if flags & FLAG_RELOCATED:
            relocated = _RELOC.unpack_from(payload, 0)
            pos = _RELOC.size
        (count,) = _U16.unpack_from(payload, pos)
        pos += 2
        queues = []
        for _ in range(count):
            name, pos = _take_name(payload, pos)
            queues.append(name)
        exchange, pos = _take_name(payload, pos)
        routing_key, pos = _take_name(payload, pos)
        (hlen,) = _U32.unpack_from(payload, pos)
        pos += 4
        if pos + hlen > len(payload):
            raise FormatError("header payload runs past the record")
        header = bytes(payload[pos:pos + hlen])
    except (struct.error, IndexError) as exc:
        raise FormatError(f"malformed PUBLISH payload: {exc}") from exc
    return Publish(tuple(queues), exchange, routing_key, header, pos + hlen, relocated)


@dataclass(slots=True)
class Scan:
    """Result of ``scan``: ``valid_end`` is the offset just after the last valid record;
    ``problem`` says why scanning stopped early (None: the data ended on a record boundary)."""

    valid_end: int
    problem: str | None = None


def scan(data: bytes | memoryview, result: Scan, start: int = FILE_HEADER_SIZE,
         kinds: frozenset[int] = _KINDS) -> Iterator[tuple[int, int, int, int, int, memoryview]]:
    """Yield ``(offset, total_length, kind, flags, store_id, payload)`` for each valid record.
    ``kinds``: the record kinds that are valid (the store's by default; another log sharing this
    framing passes its own).

    ``offset`` is where the record starts in ``data``, ``total_length`` its size in bytes including
    the 8-byte length+crc prefix. Stops at the first torn or corrupt record and sets
    ``result.valid_end`` / ``result.problem``; never raises on bad data.
    """
    view = memoryview(data)
    size = len(view)
    pos = start
    result.valid_end = pos
    unpack = _RECORD_HEADER.unpack_from
    crc32 = zlib.crc32
    while pos < size:
        if size - pos < RECORD_HEADER_SIZE:
            result.problem = f"torn record header at offset {pos} ({size - pos} bytes)"
            return
        length, crc, kind, flags, store_id = unpack(view, pos)
        end = pos + _CRC_FROM + length
        if length < _MIN_LENGTH or length > MAX_RECORD:
            result.problem = f"bad record length {length} at offset {pos}"
            return
        if end > size:
            result.problem = f"torn record at offset {pos}: needs {end - size} more bytes"
            return
        if crc32(view[pos + _CRC_FROM:end]) != crc:
            result.problem = f"checksum mismatch in record at offset {pos}"
            return
        if kind not in kinds:
            result.problem = f"unknown record kind {kind} at offset {pos}"
            return
        yield pos, end - pos, kind, flags, store_id, view[pos + RECORD_HEADER_SIZE:end]
        pos = end
        result.valid_end = pos
