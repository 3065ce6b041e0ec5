"""The append-only log of one stream queue: segment files, an in-memory sparse index, a tail cache,
retention, and the write half of group commit.

Owns: one stream directory (``format`` documents the bytes), the offsets (0, 1, ... for the life of
the stream; retention removes whole segments from the head, offsets never restart), reading records
back from any offset (``Cursor``), and finding the first record at or after a timestamp.
Must not know: consumers, credit, channels, event loops. Single-threaded: call every method from one
thread; only the descriptors handed out by ``flush()`` may be fsynced elsewhere (see ``flush``).

* Index: per segment its base offset, record count, size, first/last timestamp and a sparse index
  (offset, file position, timestamp), rebuilt on open by scanning the record headers
  (``queues.stream.segment``).
* Tail cache: the most recent records (up to ``cache_bytes`` of bodies) stay in memory as
  ``Message`` objects, so consumers at the tail never touch the disk; lagging consumers read
  256 KiB chunks with ``os.pread``.
* Crash safety: the active segment's torn tail (partial record, crc mismatch) is cut on open.
  Appended records are buffered (``append``); ``flush()`` writes them to the OS and returns the
  descriptors to fsync. A record is durable once an fsync of a flush that followed it finished.
* Retention ("RabbitMQ: Streams", retention): whole non-active segments are deleted from the head
  while the log is larger than ``max_bytes`` or while the head segment's newest record is older than
  ``max_age_ms``. Evaluated when a segment rolls over and by ``apply_retention()`` (the queue calls
  it from the core's timer for age retention). The active segment is never deleted.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..message import Message
from ..store.fds import take_sync_fds
from . import format as fmt
from .segment import Segment, scan_at

__all__ = ["Cursor", "StreamLog", "DEFAULT_SEGMENT_BYTES", "short_string"]

log = logging.getLogger(__name__)

#: Default segment size (RabbitMQ's default x-stream-max-segment-size-bytes is 500 MB; smaller
#: segments make retention finer at the cost of more files).
DEFAULT_SEGMENT_BYTES = 64 << 20
READ_CHUNK = 256 << 10
MAX_READ_FDS = 8


class Cursor:
    """A reader's place in a log: the next ``offset`` to read, and where it is on disk when known
    (``segment_base``, ``position``: file position of that record; ``None`` when unknown)."""

    __slots__ = ("offset", "segment_base", "position")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.segment_base: int | None = None
        self.position = 0


class StreamLog:
    """The log of one stream (see module doc). Construction opens or creates ``directory``.

    ``max_segment_bytes``: roll to a new segment when a record would take the active one past this
    (a bigger record gets a segment of its own). ``max_bytes`` / ``max_age_ms``: retention (None:
    keep). ``wall_clock()``: seconds since the epoch (record timestamps). ``cache_bytes``: bodies
    kept in the tail cache. ``on_dirty()``: called after the first append since the last
    ``flush()`` (the group-commit syncer's wake-up). Raises ``StreamFormatError`` for a foreign or
    newer segment file, ``OSError`` from the file system.
    """

    def __init__(self, directory: Path | str, *, max_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 max_bytes: int | None = None, max_age_ms: int | None = None,
                 wall_clock: Callable[[], float] = time.time, cache_bytes: int = 4 << 20,
                 write_buffer_bytes: int = 1 << 20,
                 on_dirty: Callable[[], None] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max(4096, max_segment_bytes)
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.wall_clock = wall_clock
        self.cache_bytes = cache_bytes
        self.write_buffer_bytes = write_buffer_bytes
        self.on_dirty = on_dirty
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._buf = bytearray()
        self._dirty = False  # bytes handed to the OS since the last flush() took an fd
        self._pending = False  # appended since the last flush() (on_dirty already called)
        self._rolled_fds: list[int] = []
        self._dir_dirty = False
        self._read_fds: dict[int, int] = {}
        self._cache: deque[Message] = deque()
        self._cache_start = 0
        self._cache_size = 0
        self._last_ts = 0
        self._closed = False
        #: (segment file, position, bytes cut) for every torn tail cut while opening.
        self.cuts: list[tuple[str, int, int]] = []
        self._open()
        active = self._segments[-1]
        self._wfd = os.open(active.path, os.O_WRONLY | os.O_APPEND)
        self._cache_start = active.next_offset

    # -- opening ---------------------------------------------------------------------------------
    def _open(self) -> None:
        files = sorted(p for p in self.directory.iterdir() if p.suffix == ".seg")
        expected: int | None = None
        for i, path in enumerate(files):
            base = int(path.stem)
            if expected is not None and base != expected:
                log.error("stream %s: segment %s does not follow offset %d: dropped with the rest",
                          self.directory, path.name, expected)
                for extra in files[i:]:
                    extra.unlink()
                break
            cuts = len(self.cuts)
            seg = self._scan_segment(path, base, last=i == len(files) - 1)
            self._segments.append(seg)
            self._bases.append(base)
            expected = seg.next_offset
            if len(self.cuts) > cuts:  # a cut in a sealed segment: drop what follows
                for extra in files[i + 1:]:
                    extra.unlink()
                break
        if not self._segments:
            self._new_segment(0)
        else:
            self._last_ts = self._segments[-1].last_ts

    def _scan_segment(self, path: Path, base: int, last: bool) -> Segment:
        seg = Segment(base, path)
        with open(path, "r+b") as f:
            fd = f.fileno()
            file_size = os.fstat(fd).st_size
            fmt.parse_file_header(os.pread(fd, fmt.FILE_HEADER_SIZE, 0), base)
            seg.index_file(fd, file_size, verify=last)
            if seg.size < file_size:
                self.cuts.append((path.name, seg.size, file_size - seg.size))
                log.warning("stream %s: cut %d bytes of torn tail at %d in %s", self.directory,
                            file_size - seg.size, seg.size, path.name)
                f.truncate(seg.size)
        return seg

    def _new_segment(self, base: int) -> Segment:
        path = self.directory / fmt.segment_name(base)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, fmt.encode_file_header(base))
        finally:
            os.close(fd)
        seg = Segment(base, path)
        self._segments.append(seg)
        self._bases.append(base)
        self._dir_dirty = True
        return seg

    # -- figures ---------------------------------------------------------------------------------
    @property
    def first_offset(self) -> int:
        """The oldest offset still in the log (== ``next_offset`` when empty)."""
        return self._segments[0].base

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def length(self) -> int:
        """Records currently in the log."""
        return self.next_offset - self.first_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments (file headers included; buffered bytes counted)."""
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        """Number of segment files."""
        return len(self._segments)

    # -- appending -------------------------------------------------------------------------------
    def append(self, message: Message, timestamp_ms: int | None = None) -> tuple[int, Message]:
        """Append ``message``; returns (offset, the stored message: same routing and body, content
        header carrying ``x-stream-offset``). ``timestamp_ms``: the record's time (ms since the
        epoch; default ``wall_clock()``; a replicated stream's comes from its log). Buffered:
        durable only after a ``flush()`` and its fsync. Raises ``OSError`` (segment roll-over,
        buffer write-out)."""
        if self._closed:
            raise ValueError("stream log is closed")
        offset = self._segments[-1].next_offset
        ts = int(self.wall_clock() * 1000) if timestamp_ms is None else timestamp_ms
        if ts < self._last_ts:
            ts = self._last_ts  # timestamps never go back within a stream
        header = fmt.with_offset_header(message.header_payload, offset)
        routing = message.routing_raw
        if routing is None:
            routing = short_string(message.exchange) + short_string(message.routing_key)
        stored = Message(message.exchange, message.routing_key, header, message.body)
        stored.routing_raw = routing
        self._add(stored, offset, ts)
        return offset, stored

    def append_record(self, record: fmt.Record) -> Message:
        """Append a record read from another replica of this stream (``read_records``): same
        offset, timestamp, routing, header and body. Raises ``ValueError`` when its offset is not
        ``next_offset``, ``OSError``."""
        if self._closed:
            raise ValueError("stream log is closed")
        if record.offset != self.next_offset:
            raise ValueError(f"record {record.offset} does not follow {self.next_offset}")
        exchange, key = fmt.decode_routing(record.routing)
        stored = Message(exchange, key, record.header, record.body)
        stored.routing_raw = record.routing
        self._add(stored, record.offset, max(record.timestamp, self._last_ts))
        return stored

    def _add(self, stored: Message, offset: int, ts: int) -> None:
        self._last_ts = ts
        header = stored.header_payload
        routing = stored.routing_raw
        assert routing is not None
        record = fmt.encode_record(offset, ts, routing, header, stored.body)
        active = self._segments[-1]
        if active.count and active.size + len(record) > self.max_segment_bytes:
            active = self._roll(offset)
        active.note(offset, active.size, ts, len(record))
        self._buf += record
        cache = self._cache
        cache.append(stored)
        self._cache_size += len(stored.body) + len(header)
        while self._cache_size > self.cache_bytes and len(cache) > 1:
            old = cache.popleft()
            self._cache_size -= len(old.body) + len(old.header_payload)
            self._cache_start += 1
        if len(self._buf) >= self.write_buffer_bytes:
            try:
                self._write_out()
            except OSError:   # a full disk: kept in the buffer; the next flush tries again
                pass
        if not self._pending:
            self._pending = True
            if self.on_dirty is not None:
                self.on_dirty()

    def _write_out(self) -> None:
        """Write the buffer to the active segment, whole or not at all: when a write fails
        (ENOSPC, EDQUOT, EIO) after part of it went out, the file is cut back and the buffer
        kept, so a later call writes each record once (``write(2)``: a write that runs out of
        space writes less, then fails). Raises that ``OSError``."""
        buf = self._buf
        if not buf:
            return
        done = 0
        with memoryview(buf) as view:
            try:
                while done < len(view):
                    done += os.write(self._wfd, view[done:])
            except OSError:
                if done:
                    os.ftruncate(self._wfd, os.fstat(self._wfd).st_size - done)
                raise
        self._buf = bytearray()
        self._dirty = True

    def _write_for_read(self) -> None:
        """Before a read of the active segment from disk: its buffer to the OS, so that the
        read sees it. On a full disk (ENOSPC) what is on disk is read; the rest once the syncer
        could write it (a read never fails for want of space)."""
        try:
            self._write_out()
        except OSError:
            pass

    def _roll(self, base: int) -> Segment:
        self._write_out()
        if self._dirty:
            self._rolled_fds.append(self._wfd)  # fsynced (and closed) by the next flush's sync
            self._dirty = False
        else:
            os.close(self._wfd)
        seg = self._new_segment(base)
        self._wfd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self.apply_retention()
        return seg

    def flush(self) -> tuple[list[int], int]:
        """Hand buffered records to the OS; returns (descriptors to fdatasync, directory descriptor
        to fsync or -1). The caller owns them (fsync, then close; any thread) and a record
        appended before this call is durable once that is done."""
        if self._closed:
            return [], -1
        self._write_out()
        self._pending = False
        return take_sync_fds(self)

    def write_out(self) -> None:
        """Hand buffered records to the OS, whole or not at all (``StreamManager.flush`` does
        this for every log before it takes any descriptor). Raises ``OSError`` (ENOSPC)."""
        if not self._closed:
            self._write_out()

    # -- retention -------------------------------------------------------------------------------
    def apply_retention(self, now: float | None = None) -> int:
        """Delete head segments beyond ``max_bytes`` / older than ``max_age_ms`` (never the active
        one); returns how many went. ``now``: seconds since the epoch (default ``wall_clock()``)."""
        if self.max_bytes is None and self.max_age_ms is None:
            return 0
        when = self.wall_clock() if now is None else now
        return self.truncate_head(self.retention_point(self.max_bytes, self.max_age_ms, when))

    def retention_point(self, max_bytes: int | None, max_age_ms: int | None, now: float) -> int:
        """The first offset retention keeps: whole head segments go while the log is larger than
        ``max_bytes`` (bytes) or while the head segment's newest record is older than
        ``max_age_ms`` before ``now`` (seconds since the epoch); never the active segment."""
        segs = self._segments
        i = 0
        if max_bytes is not None:
            total = sum(s.size for s in segs)
            while i < len(segs) - 1 and total > max_bytes:
                total -= segs[i].size
                i += 1
        if max_age_ms is not None:
            cutoff = int(now * 1000) - max_age_ms
            while i < len(segs) - 1 and segs[i].last_ts < cutoff:
                i += 1
        return segs[i].base

    def truncate_head(self, offset: int) -> int:
        """Delete the head segments whose records are all before ``offset`` (never the active
        one); returns how many went."""
        segs = self._segments
        removed = 0
        while len(segs) > 1 and segs[1].base <= offset:
            self._drop_head()
            removed += 1
        return removed

    def reset(self, base: int) -> None:
        """Drop every segment and start empty at offset ``base`` (a replica so far behind that
        the others no longer have the records it lacks). Raises ``OSError``."""
        self._write_out()
        if self._dirty:
            self._rolled_fds.append(self._wfd)
            self._dirty = False
        else:
            os.close(self._wfd)
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        for seg in self._segments:
            seg.path.unlink(missing_ok=True)
        self._segments.clear()
        self._bases.clear()
        seg = self._new_segment(base)
        self._wfd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self._cache.clear()
        self._cache_size = 0
        self._cache_start = base
        log.warning("stream %s: reset to offset %d", self.directory, base)

    def age_deadline(self) -> float | None:
        """When (seconds since the epoch) the head segment falls out of ``max_age_ms``; None when
        there is no age limit or only the active segment."""
        if self.max_age_ms is None or len(self._segments) < 2:
            return None
        return (self._segments[0].last_ts + self.max_age_ms) / 1000

    def _drop_head(self) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        fd = self._read_fds.pop(seg.base, None)
        if fd is not None:
            os.close(fd)
        try:
            seg.path.unlink()
        except FileNotFoundError:
            pass
        self._dir_dirty = True
        first = self._segments[0].base
        while self._cache_start < first and self._cache:
            old = self._cache.popleft()
            self._cache_size -= len(old.body) + len(old.header_payload)
            self._cache_start += 1
        if self._cache_start < first:
            self._cache_start = first
        log.info("stream %s: retention removed segment %s", self.directory, seg.path.name)

    # -- reading ---------------------------------------------------------------------------------
    def read(self, cursor: Cursor, max_count: int) -> list[Message]:
        """Up to ``max_count`` messages from ``cursor.offset`` on, advancing the cursor (message i
        has offset ``start + i``, ``start`` being ``cursor.offset`` after this call's clamping:
        a cursor behind the head jumps to ``first_offset``). Empty at the tail. The messages carry
        ``x-stream-offset``. Raises ``OSError``."""
        first = self._segments[0].base
        if cursor.offset < first:
            cursor.offset = first
            cursor.segment_base = None
        offset = cursor.offset
        if offset >= self.next_offset or max_count <= 0:
            return []
        if offset >= self._cache_start:
            i = offset - self._cache_start
            cache = self._cache
            out = [cache[j] for j in range(i, min(len(cache), i + max_count))]
            cursor.offset += len(out)
            cursor.segment_base = None
            return out
        return self._read_disk(cursor, max_count)

    def _segment_of(self, offset: int) -> Segment:
        return self._segments[bisect.bisect_right(self._bases, offset) - 1]

    def _read_fd(self, seg: Segment) -> int:
        fd = self._read_fds.get(seg.base)
        if fd is None:
            if len(self._read_fds) >= MAX_READ_FDS:
                old = next(iter(self._read_fds))
                os.close(self._read_fds.pop(old))
            fd = self._read_fds[seg.base] = os.open(seg.path, os.O_RDONLY)
        return fd

    def _read_disk(self, cursor: Cursor, max_count: int) -> list[Message]:
        offset = cursor.offset
        seg = self._segment_of(offset)
        if seg is self._segments[-1] and self._buf:
            self._write_for_read()
        if cursor.segment_base == seg.base:
            pos, at = cursor.position, offset
        else:
            pos, at = seg.position_of(offset)
        fd = self._read_fd(seg)
        out: list[Message] = []
        end = seg.size
        while len(out) < max_count and pos < end:
            records, _stop = scan_at(fd, pos, end, at, READ_CHUNK)
            if not records:
                log.error("stream %s: unreadable record at %d in %s; skipping the segment",
                          self.directory, pos, seg.path.name)
                cursor.offset = seg.next_offset
                cursor.segment_base = None
                return out
            for rec in records:
                if len(out) >= max_count:
                    break
                pos = rec.position + rec.size
                at = rec.offset + 1
                if rec.offset >= offset:
                    exchange, key = fmt.decode_routing(rec.routing)
                    msg = Message(exchange, key, rec.header, rec.body)
                    msg.routing_raw = rec.routing
                    out.append(msg)
        cursor.offset = offset + len(out)
        if pos >= end:
            cursor.segment_base = None
        else:
            cursor.segment_base, cursor.position = seg.base, pos
        return out

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset whose record was appended at or after ``timestamp_ms`` (ms since the
        epoch); ``next_offset`` when every record is older. Raises ``OSError``."""
        segs = self._segments
        for seg in segs:
            if seg.count and seg.last_ts >= timestamp_ms:
                break
        else:
            return self.next_offset
        if seg.first_ts >= timestamp_ms:
            return seg.base
        if seg is segs[-1] and self._buf:
            self._write_for_read()
        return seg.offset_at_time(self._read_fd(seg), timestamp_ms)

    def read_records(self, offset: int, max_bytes: int) -> list[fmt.Record]:
        """The records from ``offset`` on as stored (offset, timestamp, routing, header, body),
        at least one and then while they add up to less than ``max_bytes``, within one segment:
        what another replica of the stream appends with ``append_record`` to catch up. Empty
        when ``offset`` is not in the log. Raises ``OSError``."""
        if offset < self.first_offset or offset >= self.next_offset:
            return []
        seg = self._segment_of(offset)
        if seg is self._segments[-1] and self._buf:
            self._write_for_read()
        pos, at = seg.position_of(offset)
        fd = self._read_fd(seg)
        out: list[fmt.Record] = []
        size = 0
        while pos < seg.size and (not out or size < max_bytes):
            records, stop = scan_at(fd, pos, seg.size, at, READ_CHUNK)
            if not records:
                break
            for rec in records:
                if rec.offset >= offset and (not out or size < max_bytes):
                    out.append(rec)
                    size += rec.size
            at = records[-1].offset + 1
            pos += stop
        return out

    # -- closing ---------------------------------------------------------------------------------
    def close(self, fsync: bool = True) -> None:
        """Write out, fsync (unless ``fsync`` is False) and close every descriptor. Idempotent."""
        if self._closed:
            return
        self._write_out()
        fds = [*self._rolled_fds, self._wfd]
        self._rolled_fds = []
        try:
            if fsync:
                for fd in fds:
                    os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            self._closed = True

    def delete(self) -> None:
        """Close without syncing and remove the stream's directory (Queue.Delete)."""
        self.close(fsync=False)
        self._cache.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def short_string(text: str) -> bytes:
    """``text`` as an AMQP short string (length octet, utf-8, cut at 255 bytes)."""
    raw = text.encode("utf-8", "surrogateescape")[:255]
    return bytes((len(raw),)) + raw

