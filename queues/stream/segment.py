"""One segment file of a stream log as ``queues.stream.log.StreamLog`` knows it: its figures, its
sparse index in memory, and finding records in it by scanning from an indexed position.

Owns: per segment its base offset, record count, size (bytes), first/last timestamp (ms since the
epoch) and a sparse index (offset, file position, timestamp) every ``INDEX_INTERVAL`` bytes,
rebuilt on open by scanning the record headers (``Segment.index_file``; Kafka's ``OffsetIndex``
is sparse the same way; ours is not persisted); reading whole records at a file position
(``scan_at``), however large (a record bigger than the chunk is read whole).
Must not know: the log's other segments, its tail cache, retention, writing.
Source: "RabbitMQ: Streams" (segment files); ``queues.stream.format`` (the bytes).
"""

from __future__ import annotations

import bisect
import os
from array import array
from pathlib import Path

from . import format as fmt

__all__ = ["Segment", "scan_at", "INDEX_INTERVAL", "SCAN_CHUNK"]

INDEX_INTERVAL = 4096  # bytes between sparse index entries
SCAN_CHUNK = 4 << 20   # bytes read at a time when scanning headers only (open, timestamps)


class Segment:
    """The segment file at ``path`` whose first record has offset ``base``, empty until records
    are ``note``-d (or the file is indexed: ``index_file``)."""

    __slots__ = ("base", "path", "size", "count", "first_ts", "last_ts", "idx_off", "idx_pos",
                 "idx_ts", "_last_indexed")

    def __init__(self, base: int, path: Path) -> None:
        self.base = base
        self.path = path
        self.size = fmt.FILE_HEADER_SIZE
        self.count = 0
        self.first_ts = 0
        self.last_ts = 0
        self.idx_off = array("q")
        self.idx_pos = array("q")
        self.idx_ts = array("q")
        self._last_indexed = -INDEX_INTERVAL

    def note(self, offset: int, position: int, timestamp: int, size: int) -> None:
        """Account for a record of ``size`` bytes at file ``position`` (``timestamp``: ms)."""
        if self.count == 0:
            self.first_ts = timestamp
        self.last_ts = timestamp
        self.count += 1
        self.size = position + size
        if position - self._last_indexed >= INDEX_INTERVAL:
            self.idx_off.append(offset)
            self.idx_pos.append(position)
            self.idx_ts.append(timestamp)
            self._last_indexed = position

    @property
    def next_offset(self) -> int:
        """The offset after this segment's last record."""
        return self.base + self.count

    def index_file(self, fd: int, file_size: int, verify: bool) -> None:
        """``note`` every complete record of the open file ``fd`` (``file_size`` bytes) after
        its header, up to the first unreadable one (``verify``: check their crc, else only their
        lengths); ``size`` then ends the readable part. Raises ``OSError``."""
        pos = fmt.FILE_HEADER_SIZE
        while pos < file_size:
            records, stop = scan_at(fd, pos, file_size, self.next_offset, SCAN_CHUNK,
                                    verify=verify, with_payload=False)
            if not records:
                break
            for rec in records:
                self.note(rec.offset, rec.position, rec.timestamp, rec.size)
            pos += stop

    def position_of(self, offset: int) -> tuple[int, int]:
        """(file position, offset) of the indexed record at or before ``offset``."""
        i = bisect.bisect_right(self.idx_off, offset) - 1
        if i < 0:
            return fmt.FILE_HEADER_SIZE, self.base
        return self.idx_pos[i], self.idx_off[i]

    def offset_at_time(self, fd: int, timestamp_ms: int) -> int:
        """The first offset of this segment (open as ``fd``) whose record was appended at or
        after ``timestamp_ms``; ``next_offset`` when none was. Raises ``OSError``."""
        i = max(0, bisect.bisect_left(self.idx_ts, timestamp_ms) - 1)
        pos, at = (self.idx_pos[i], self.idx_off[i]) if len(self.idx_ts) else (
            fmt.FILE_HEADER_SIZE, self.base)
        while pos < self.size:
            records, stop = scan_at(fd, pos, self.size, at, SCAN_CHUNK, verify=False,
                                    with_payload=False)
            if not records:
                break
            for rec in records:
                if rec.timestamp >= timestamp_ms:
                    return rec.offset
            at = records[-1].offset + 1
            pos += stop
        return self.next_offset


def scan_at(fd: int, pos: int, end: int, at: int, chunk: int, *, verify: bool = True,
            with_payload: bool = True) -> tuple[list[fmt.Record], int]:
    """The complete records of the file from ``pos`` (file position of offset ``at``) up to
    ``end``, reading ``chunk`` bytes (more for a record larger than that); (records, bytes
    consumed). Empty when the record at ``pos`` is unreadable. Raises ``OSError``."""
    data = os.pread(fd, min(chunk, end - pos), pos)
    records, stop = fmt.scan_records(data, 0, pos, at, verify=verify, with_payload=with_payload)
    if not records:
        need = _record_size_at(fd, pos, end)
        if need is not None and need > len(data):
            data = os.pread(fd, need, pos)
            records, stop = fmt.scan_records(data, 0, pos, at, verify=verify,
                                             with_payload=with_payload)
    return records, stop


def _record_size_at(fd: int, pos: int, end: int) -> int | None:
    """Total size of the record at ``pos`` per its length field, None when it cannot fit."""
    head = os.pread(fd, 8, pos)
    if len(head) < 8:
        return None
    length = int.from_bytes(head[:4], "big")
    if length < fmt.RECORD_FIXED or length > fmt.MAX_RECORD or pos + 8 + length > end:
        return None
    return 8 + length
