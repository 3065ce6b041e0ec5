"""The records of a Raft replica's files (``cluster.raft.disklog``): the file magic and record
kinds, ENTRY records (``encode_entry``, ``encode_entries``: length, crc32, kind, flags, log index,
term, data, in ``queues.store.format``'s framing), node names inside records, and the read of a
one-record file (``state``, ``snapshot``). Must not know: segments, marks, recovery.
Source: Raft paper §5.3 (what a log entry holds); DESIGN.md §4."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from queues.store import format as fmt

from .messages import Entry

__all__ = ["MAGIC", "FORMAT_VERSION", "KIND_ENTRY", "KIND_TRUNCATE", "KIND_STATE",
           "KIND_SNAPSHOT", "encode_entry", "encode_entries"]

MAGIC = b"AMQR"
FORMAT_VERSION = 1
KIND_ENTRY = 16
KIND_TRUNCATE = 17
KIND_STATE = 18
KIND_SNAPSHOT = 19
_SEGMENT_KINDS = frozenset({KIND_ENTRY, KIND_TRUNCATE})
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")


def _name(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"node id longer than 255 bytes: {text[:40]!r}")
    return bytes((len(raw),)) + raw


def _take_name(data: memoryview, pos: int) -> tuple[str, int]:
    end = pos + 1 + data[pos]
    if end > len(data):
        raise fmt.FormatError("name runs past the record")
    return bytes(data[pos + 1:end]).decode(), end


def encode_entry(e: Entry) -> bytes:
    """The ENTRY record of ``e``."""
    return fmt.encode_record(KIND_ENTRY, int(e.kind), e.index, _U64.pack(e.term), e.data)


#: An ENTRY record up to its data: length u32, crc32 u32 (``queues.store.format``'s framing),
#: then kind, flags, id (the log index) and the term.
_ENTRY_HEAD = struct.Struct(">IIBBQQ")
_ENTRY_FIXED = _ENTRY_HEAD.size - 8   # the bytes the length counts besides the data
_ENTRY_CRC = struct.Struct(">BBQQ")


def encode_entries(entries: tuple[Entry, ...]) -> list[bytes]:
    """The ENTRY records of ``entries`` (as ``encode_entry``, byte for byte), as parts to join:
    the appends of a batch without a call per record. Raises ``ValueError`` for a record over
    ``queues.store.format.MAX_RECORD``."""
    parts: list[bytes] = []
    crc32 = zlib.crc32
    for e in entries:
        kind = int(e.kind)
        data = e.data
        length = _ENTRY_FIXED + len(data)
        if length > fmt.MAX_RECORD:
            raise ValueError(f"record of {length} bytes exceeds {fmt.MAX_RECORD}")
        crc = crc32(data, crc32(_ENTRY_CRC.pack(KIND_ENTRY, kind, e.index, e.term)))
        parts.append(_ENTRY_HEAD.pack(length, crc, KIND_ENTRY, kind, e.index, e.term))
        parts.append(data)
    return parts


def _read_single(path: Path, kind: int) -> tuple[int, int, memoryview] | None:
    """(flags, id, payload) of the one record of a ``state``/``snapshot`` file, None when the file
    does not exist. Raises ``FormatError`` when it is damaged (it was replaced atomically)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    fmt.check_file_header(data, 0, MAGIC, FORMAT_VERSION)
    result = fmt.Scan(fmt.FILE_HEADER_SIZE)
    for _off, _total, _kind, flags, ident, payload in fmt.scan(data, result,
                                                               kinds=frozenset({kind})):
        return flags, ident, payload
    raise fmt.FormatError(f"{path.name}: {result.problem or 'no record'}")
