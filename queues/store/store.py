"""The message store: an append-only, segmented log of persistent messages with group commit.

Owns: the store directory (segment files, see ``format`` for the byte layout), the write buffer,
fsync policy, segment roll-over, deletion of segments nobody needs, compaction, reading bodies back
(paging) and recovery. Must not know: sockets, event loops, channels, confirms, queue semantics beyond
"queue Q holds message N". Single-threaded: call every method from one thread, except
``PendingSync.run()`` which may run in a worker thread (see ``flush``).

Life of a persistent message (the broker core's side of the contract):
  1. ``append(queues, message) -> store_id`` when a persistent message is routed to durable queues
     (one call for all of them). Buffered in memory: NOT durable yet.
  2. ``sync() -> durable_id`` once per event-loop iteration (group commit: one write() and one
     fdatasync for everything appended since the last call). Send publisher confirms for every
     message with ``store_id <= durable_id``. With ``flush()``/``PendingSync.run()``/``synced()``
     the fsync can run in a worker thread while the loop keeps going.
  3. ``mark_delivered(queue, id)`` when delivered (memory only; see ``format``: CLEAN record).
  4. ``ack(queue, id)`` / ``ack_many`` once the queue lets go of it (consumer ack, reject without
     requeue, dead-lettered, expired, dropped by max-length, purged). Durable at the next sync.
  5. ``delete_queue(queue)`` when a durable queue is deleted.
  6. On start: ``MessageStore(dir)`` replays the log; ``recover()`` gives each queue's messages.

Guarantees: after a crash (kill -9 or power loss) at any moment, every message whose store id was
returned by a completed ``sync()`` comes back, per queue in publish order, unless an ack for it was
covered by a completed ``sync()``; an ack not yet synced may be lost, so that message comes back
(at-least-once, as in RabbitMQ's "Reliability Guide"). After a crash every recovered message is
marked redelivered; after ``close()`` only those that had been delivered.

I/O errors: an ``OSError`` from an fsync leaves the store in an unknown state (after a failed
fsync the kernel may have dropped the dirty pages: retrying can falsely succeed). Treat it as
fatal: stop confirming, ``abandon()`` the store and reopen it (recovery cuts any partial record).
A failed ``write`` (ENOSPC: the disk is full) is not: the file is cut back to its last whole record
(``fds.append_all``), the buffer is kept, and ``flush()`` raises the ``OSError``; call it again
later (nothing it would have made durable is confirmed meanwhile). Appends and acks only buffer
then (a roll-over that cannot create its file waits: the active file grows past
``segment_bytes``).

Sync policies (RabbitMQ "Persistence Configuration" discusses the same trade-off):
  ``"batch"`` (default, safe): fdatasync in ``sync()``; confirms wait for it.
  ``"always"``: write + fdatasync inside every append/ack; slow, for comparison.
  ``"none"``: ``sync()`` writes to the OS but never fsyncs: survives kill -9, not power loss.
  Tests and benchmarks only.

Disk space: a segment file is deleted once no record in it is live and no other file still needs its
ACK/DROP records (those only matter while the file holding the acked message exists). A non-active
file with little live data left (<= ``compact_ratio`` of its size and <= ``compact_max_bytes``) is
compacted: its live records are copied forward and it is deleted after the copies are synced.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..message import Message
from . import format as fmt
from .dirs import make_durable_dirs
from .fds import append_all, take_sync_fds
from .index import DEAD, DELIVERED, MULTI, QMASK, Segment, StoreIndex
from .recovery import replay
from .values import PendingSync, RecoveredMessage, StoreError, StoreStats

__all__ = ["MessageStore", "RecoveredMessage", "PendingSync", "StoreStats", "StoreError",
           "SYNC_POLICIES"]  # the last four are defined in ``values``

log = logging.getLogger(__name__)

SYNC_POLICIES = ("batch", "always", "none")
_LEN_CRC = struct.Struct(">II")
_KIND_FLAGS_ID = struct.Struct(">BBQ")


class MessageStore:
    """Append-only segmented message log with group commit; see the module docstring.

    ``directory`` is created if missing. ``segment_bytes``: roll to a new file beyond this size
    (a bigger record gets a file of its own). ``write_buffer_bytes``: hand buffered records to the
    OS when the buffer grows past this, without fsync. Opening replays the log (cutting torn tails)
    and writes an OPEN record; raises ``FormatError`` for a foreign or newer file, ``OSError``.
    """

    def __init__(self, directory: Path | str, *, segment_bytes: int = 64 << 20,
                 sync: str = "batch", write_buffer_bytes: int = 1 << 20,
                 compact_ratio: float = 0.5, compact_max_bytes: int = 8 << 20) -> None:
        if sync not in SYNC_POLICIES:
            raise ValueError(f"sync must be one of {SYNC_POLICIES}, not {sync!r}")
        if not 4096 <= segment_bytes <= (1 << 32) - 1:
            raise ValueError("segment_bytes must be between 4096 and 2**32-1")
        self.directory = Path(directory)
        # the directories leading here made durable too (a power cut must not take the store away)
        make_durable_dirs(self.directory, fsync=sync != "none")
        self.segment_bytes = segment_bytes
        self.policy = sync
        self.write_buffer_bytes = write_buffer_bytes
        self.compact_ratio = compact_ratio
        self.compact_max_bytes = compact_max_bytes
        self._index = StoreIndex()
        self._buf = bytearray()
        self._rolled_fds: list[int] = []  # writers of rolled files awaiting their fsync
        self._dir_dirty = False
        self._dirty = False  # bytes written to the OS since the last fsync
        self._lsn = 0  # bytes appended this session
        self._durable_lsn = 0
        self._closed = False
        self._roll_failed = False   # a roll-over failed (a full disk); logged once
        self._prefix_cache: dict[tuple[str, str, str], bytes] = {}
        state = replay(self.directory, self._index)
        #: True when the previous session ended with ``close()`` (no crash).
        self.recovered_clean = state.clean
        #: (file, offset, bytes cut, reason) for every torn or corrupt tail cut while opening.
        self.cuts = state.cuts
        if state.files:
            self._active = state.files[-1]
            self._next_id = self._active.base + self._active.count
            self._wfd = os.open(self._path(self._active), os.O_WRONLY | os.O_APPEND)
            if self._active.size >= segment_bytes:
                self._roll()
        else:
            self._next_id = 1
            self._active = self._new_segment(1)
        self._durable_id = self._next_id - 1
        self._mark_recovered_delivered(state.clean, state.delivered)
        for qnum in [q for q, n in self._index.qlive.items() if n == 0]:
            self._index.forget_queue(qnum)
        self._put(fmt.encode_name_record(fmt.KIND_OPEN))
        self.sync()

    # -- helpers ---------------------------------------------------------------------------------
    def _path(self, seg: Segment) -> Path:
        return self.directory / fmt.segment_name(seg.base)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("message store is closed")

    def _mark_recovered_delivered(self, clean: bool, delivered: list[int]) -> None:
        if clean:
            for sid in delivered:
                loc = self._index.locate(sid)
                if loc is not None and loc[0].qref[loc[1]] & QMASK != DEAD:
                    loc[0].qref[loc[1]] |= DELIVERED
        else:
            for _sid, seg, idx in self._index.live_records():
                seg.qref[idx] |= DELIVERED

    def _new_segment(self, base: int) -> Segment:
        seg = Segment(base)
        path = self.directory / fmt.segment_name(base)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            append_all(fd, fmt.file_header(base), 0)
        except OSError:
            os.close(fd)         # no half-made file left behind for the next try's O_EXCL
            os.unlink(path)
            raise
        self._wfd = fd
        seg.size = seg.written = fmt.FILE_HEADER_SIZE
        self._index.add_segment(seg)
        self._dir_dirty = True
        self._dirty = True
        return seg

    def _roll(self) -> None:
        """Close the active file for writing and start the next one. Raises ``OSError`` (the
        active file stays the active one: a full disk)."""
        self._write_out()
        old_fd = self._wfd
        if self._next_id <= self._active.base:  # no native record: keep bases strictly increasing
            self._next_id = self._active.base + 1
        self._active = self._new_segment(self._next_id)
        self._rolled_fds.append(old_fd)

    def _write_out(self) -> None:
        """Hand the write buffer to the OS (one write() call unless the kernel writes less)."""
        buf = self._buf
        if not buf:
            return
        append_all(self._wfd, buf, self._active.written)   # all or nothing (see the docstring)
        self._active.written += len(buf)
        buf.clear()
        self._dirty = True

    def _room(self, n: int) -> None:
        active = self._active
        if active.size + n > self.segment_bytes and active.size > fmt.FILE_HEADER_SIZE:
            try:
                self._roll()
                self._roll_failed = False
            except OSError as exc:    # a full disk: keep writing to this file, flush() tells
                if not self._roll_failed:
                    log.warning("message store: cannot start a new segment: %s", exc)
                self._roll_failed = True

    def _put(self, record: bytes) -> int:
        """Append an encoded non-publish record to the active file; returns its offset."""
        self._room(len(record))
        offset = self._active.size
        self._buf += record
        self._active.size += len(record)
        self._lsn += len(record)
        return offset

    def _after_write(self) -> None:
        if self.policy == "always":
            self._sync_now(collect=False)
        elif len(self._buf) >= self.write_buffer_bytes:
            try:
                self._write_out()
            except OSError:
                pass          # kept in the buffer; flush() writes it or raises (a full disk)

    # -- writing ---------------------------------------------------------------------------------
    def append(self, queues: str | Sequence[str], message: Message) -> int:
        """Log a publish of ``message`` to ``queues`` (one name or several); returns its store id.

        Store ids grow strictly (gaps possible); after a crash, ids that never became durable may
        be handed out again (never an id that was recovered). Sets ``message.store_id``. Not durable until a
        ``sync()`` returns an id ``>=`` it. Raises ``ValueError`` for an empty queue list or a
        name over 255 bytes, ``StoreError`` when closed, ``OSError`` from the file system.
        """
        self._check_open()
        if isinstance(queues, str):
            queues = (queues,)
        elif not queues:
            raise ValueError("append needs at least one queue")
        key = (queues[0], message.exchange, message.routing_key) if len(queues) == 1 else None
        prefix = self._prefix_cache.get(key) if key is not None else None
        if prefix is None:
            prefix = fmt.publish_prefix(queues, message.exchange, message.routing_key, b"")[:-4]
            if key is not None:
                if len(self._prefix_cache) > 4096:
                    self._prefix_cache.clear()
                self._prefix_cache[key] = prefix
        header = message.header_payload
        body = message.body
        length = 10 + len(prefix) + 4 + len(header) + len(body)
        if length > fmt.MAX_RECORD:
            raise ValueError(f"message of {len(body)} bytes is too large for the store")
        total = 8 + length
        self._room(total)
        sid = self._next_id
        self._next_id = sid + 1
        head = _KIND_FLAGS_ID.pack(fmt.KIND_PUBLISH, 0, sid)
        hlen = len(header).to_bytes(4, "big")
        crc = zlib.crc32(body, zlib.crc32(header, zlib.crc32(hlen, zlib.crc32(prefix,
                                                                              zlib.crc32(head)))))
        buf = self._buf
        active = self._active
        offset = active.size
        buf += _LEN_CRC.pack(length, crc)
        buf += head
        buf += prefix
        buf += hlen
        buf += header
        buf += body
        active.size = offset + total
        self._lsn += total
        index = self._index
        index.add_native(active, sid, offset, total, [index.queue_number(q) for q in queues])
        message.store_id = sid
        self._after_write()
        return sid

    def ack(self, queue: str, store_id: int) -> bool:
        """Record that ``queue`` no longer holds ``store_id`` (acked, rejected, dead-lettered,
        expired, dropped, purged). Returns False, writing nothing, when it did not hold it."""
        return self.ack_many(queue, (store_id,)) == 1

    def ack_many(self, queue: str, store_ids: Iterable[int]) -> int:
        """``ack`` for several ids in one record; returns how many the queue did hold."""
        self._check_open()
        index = self._index
        qnum = index.qnum.get(queue)
        if qnum is None:
            return 0
        ids = [sid for sid in dict.fromkeys(store_ids) if _holds(index, qnum, sid)]
        if not ids:
            return 0
        self._put(fmt.encode_ack(queue, ids))
        for sid in ids:
            index.drop(qnum, sid, self._active)
        self._after_write()
        return len(ids)

    def mark_delivered(self, queue: str, store_id: int) -> bool:
        """Note that ``store_id`` has been delivered from ``queue`` (memory only; written by
        ``close()``). Returns False when the queue does not hold it."""
        qnum = self._index.qnum.get(queue)
        return qnum is not None and self._index.mark_delivered(qnum, store_id)

    def delete_queue(self, queue: str) -> int:
        """Forget every message ``queue`` holds (queue deleted); returns how many. O(live msgs)."""
        self._check_open()
        index = self._index
        qnum = index.qnum.get(queue)
        if qnum is None:
            return 0
        self._put(fmt.encode_name_record(fmt.KIND_DROP_QUEUE, queue))
        dropped = index.drop_queue(qnum, self._active)
        index.forget_queue(qnum)
        self._after_write()
        return dropped

    # -- group commit ----------------------------------------------------------------------------
    def flush(self) -> PendingSync:
        """Write the buffer to the OS and return the fsync still to do (see ``PendingSync``).
        Raises ``OSError`` when the write fails (a full disk), the buffer kept for a later try."""
        self._check_open()
        self._write_out()
        fds, dir_fd = take_sync_fds(self)
        return PendingSync(self._next_id - 1, self._lsn, fds, dir_fd, self.policy != "none")

    def synced(self, pending: PendingSync) -> int:
        """Take note that ``pending.run()`` finished; deletes/compacts segments; returns the
        highest durable store id (confirm every persistent message up to it)."""
        if not pending.done:
            raise StoreError("synced() before PendingSync.run() finished")
        self._durable_id = max(self._durable_id, pending.durable_id)
        self._durable_lsn = max(self._durable_lsn, pending.lsn)
        if not self._closed:
            self._collect()
        return self._durable_id

    def sync(self) -> int:
        """``flush()``, fsync in this thread, ``synced()``: one call per event-loop iteration."""
        return self._sync_now(collect=True)

    def _sync_now(self, collect: bool) -> int:
        pending = self.flush()
        pending.run()
        if not collect:
            self._durable_id = max(self._durable_id, pending.durable_id)
            self._durable_lsn = max(self._durable_lsn, pending.lsn)
            return self._durable_id
        return self.synced(pending)

    @property
    def durable_id(self) -> int:
        """Highest store id covered by a completed sync."""
        return self._durable_id

    # -- reading ---------------------------------------------------------------------------------
    def _record(self, store_id: int) -> tuple[memoryview, int] | None:
        loc = self._index.locate(store_id)
        if loc is None:
            return None
        seg, idx = loc
        if seg.qref[idx] & QMASK == DEAD:
            return None
        file = self._index.segs[seg.where[idx]]
        offset, length = seg.offset[idx], seg.length[idx]
        if file is self._active and offset >= file.written:
            start = offset - file.written
            data = bytes(self._buf[start:start + length])
        else:
            if file.rfd < 0:
                file.rfd = os.open(self._path(file), os.O_RDONLY)
            data = os.pread(file.rfd, length, offset)
        view = memoryview(data)
        if len(data) != length or zlib.crc32(view[8:]) != _LEN_CRC.unpack_from(view)[1]:
            raise StoreError(f"record of message {store_id} in {fmt.segment_name(file.base)} "
                             f"at offset {offset} failed its checksum")
        return view[fmt.RECORD_HEADER_SIZE:], view[9]

    def read_message(self, store_id: int) -> Message:
        """The stored message ``store_id`` with its body (``store_id`` set). Raises ``KeyError``
        when no queue holds it, ``StoreError`` on a checksum failure."""
        self._check_open()
        found = self._record(store_id)
        if found is None:
            raise KeyError(store_id)
        payload, flags = found
        pub = fmt.decode_publish(payload, flags)
        msg = Message(pub.exchange, pub.routing_key, pub.header_payload,
                      bytes(payload[pub.body_at:]))
        msg.store_id = store_id
        return msg

    def read_body(self, store_id: int) -> bytes:
        """The body of ``store_id`` read back from disk (paging in). Errors as ``read_message``."""
        return self.read_message(store_id).body

    def holds(self, queue: str, store_id: int) -> bool:
        """True when ``queue`` holds ``store_id``."""
        qnum = self._index.qnum.get(queue)
        return qnum is not None and _holds(self._index, qnum, store_id)

    def recover(self, body_budget: int | None = None) -> dict[str, list[RecoveredMessage]]:
        """Every queue's messages, in publish order, with their redelivered flag.

        ``body_budget``: per queue, load bodies (bytes) from the head of the queue until this many
        bytes are loaded; later messages come with ``body_loaded=False`` (None: load all). Messages
        held by several queues are one shared ``Message``. Raises ``StoreError`` on a checksum error.
        """
        out: dict[str, list[RecoveredMessage]] = {}
        for queue, rec in self.iter_recovered(body_budget):
            out.setdefault(queue, []).append(rec)
        return out

    def iter_recovered(self, body_budget: int | None = None
                       ) -> Iterator[tuple[str, RecoveredMessage]]:
        """``recover()`` as a stream of (queue, message), ascending store id (so each queue's
        messages come in publish order): for large backlogs, build queue entries as they come.
        Do not modify the store while iterating."""
        self._check_open()
        index = self._index
        loaded: dict[int, int] = {}
        strings: dict[object, object] = {}
        for sid, seg, idx in index.live_records():
            holders = index.holders(seg, idx)
            found = self._record(sid)
            assert found is not None
            payload, flags = found
            pub = fmt.decode_publish(payload, flags)
            size = len(payload) - pub.body_at
            want = body_budget is None or any(loaded.get(q, 0) + size <= body_budget
                                              for q in holders)
            if len(strings) > 65536:
                strings.clear()
            msg = Message(strings.setdefault(pub.exchange, pub.exchange),  # type: ignore[arg-type]
                          strings.setdefault(pub.routing_key, pub.routing_key),  # type: ignore[arg-type]
                          strings.setdefault(pub.header_payload, pub.header_payload),  # type: ignore[arg-type]
                          bytes(payload[pub.body_at:]) if want else b"")
            msg.store_id = sid
            rec = RecoveredMessage(sid, msg, bool(seg.qref[idx] & DELIVERED), want)
            for q in holders:
                if want:
                    loaded[q] = loaded.get(q, 0) + size
                yield index.qname[q], rec

    def queue_length(self, queue: str) -> int:
        """How many messages ``queue`` holds in the store."""
        qnum = self._index.qnum.get(queue)
        return 0 if qnum is None else self._index.qlive[qnum]

    def stats(self) -> StoreStats:
        """Current figures (cheap: O(files))."""
        files = self._index.files()
        return StoreStats(len(files), sum(f.size for f in files) - len(self._buf), len(self._buf),
                          sum(self._index.qlive.values()), sum(f.live_bytes for f in files),
                          len(self._index.qnum), self._next_id, self._durable_id)

    # -- space reclamation -------------------------------------------------------------------------
    def _collect(self, relocate: bool = True) -> None:
        """Delete files nothing needs; compact at most one sparse file (bounded work per sync)."""
        active = self._active
        candidate = None
        for file in self._index.files():
            if file is active or file.refs:
                continue
            if file.live == 0:
                if file.delete_after_lsn <= self._durable_lsn:
                    self._delete_file(file)
            elif (candidate is None and file.delete_after_lsn < 0
                  and file.live_bytes <= self.compact_max_bytes
                  and file.live_bytes <= self.compact_ratio * (file.size - fmt.FILE_HEADER_SIZE)):
                candidate = file
        if relocate and candidate is not None:
            self._relocate(candidate)

    def _delete_file(self, file: Segment) -> None:
        if file.rfd >= 0:
            os.close(file.rfd)
            file.rfd = -1
        os.unlink(self._path(file))
        if self.policy != "none":
            # Durable before any later unlink: a file resurrected by a crash while a newer file
            # holding acks for its messages is gone would resurrect acked messages.
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._index.file_deleted(file)

    def _relocate(self, file: Segment) -> None:
        """Copy ``file``'s live records forward; it is deleted once the copies are durable."""
        index = self._index
        for sid in index.live_in_file(file):
            found = self._record(sid)
            assert found is not None
            payload, flags = found
            pub = fmt.decode_publish(payload, flags)
            seg, idx = index.locate(sid)  # type: ignore[misc]
            queues = [index.qname[q] for q in index.holders(seg, idx)]
            prefix = fmt.publish_prefix(queues, pub.exchange, pub.routing_key, pub.header_payload,
                                        (seg.base, seg.count))
            record = fmt.encode_record(fmt.KIND_PUBLISH, fmt.FLAG_RELOCATED, sid, prefix,
                                       payload[pub.body_at:])
            offset = self._put(record)
            index.relocate(sid, (seg.base, seg.count), self._active, offset, len(record),
                           index.holders(seg, idx))
        file.delete_after_lsn = self._lsn
        self._after_write()

    def compact(self) -> None:
        """Reclaim all the space possible now (sync, delete, compact, repeat). For idle time/tests."""
        self._check_open()
        for _ in range(len(self._index.files()) + 2):
            before = [(f.base, f.live) for f in self._index.files()]
            self.sync()
            self._sync_now(collect=False)
            self._collect(relocate=False)
            if before == [(f.base, f.live) for f in self._index.files()]:
                break

    # -- closing -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Sync, write the CLEAN record (delivered ids) and close. Idempotent."""
        if self._closed:
            return
        self.sync()
        delivered = [sid for sid, seg, idx in self._index.live_records()
                     if seg.qref[idx] & DELIVERED]
        self._put(fmt.encode_clean(delivered))
        self._sync_now(collect=False)
        self._release_fds()

    def abandon(self) -> None:
        """Close without writing the buffer, as a killed process would (tests, crash drills)."""
        if not self._closed:
            self._buf.clear()
            self._release_fds()

    def _release_fds(self) -> None:
        self._closed = True
        for fd in self._rolled_fds:
            os.close(fd)
        self._rolled_fds = []
        os.close(self._wfd)
        for file in self._index.files():
            if file.rfd >= 0:
                os.close(file.rfd)
                file.rfd = -1

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _holds(index: StoreIndex, qnum: int, store_id: int) -> bool:
    loc = index.locate(store_id)
    if loc is None:
        return False
    seg, idx = loc
    q = seg.qref[idx] & QMASK
    return q == qnum or (q == MULTI and qnum in index.multi[store_id])
