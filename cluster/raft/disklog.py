"""The Raft log of one replica on disk: term and vote, entries in segment files, the snapshot.

Owns: files in one directory per replica, group commit (one fdatasync for every entry appended
since the last), recovery after kill -9 (torn tails cut at the first bad record), deleting segments
a snapshot made useless. Implements ``storage.RaftStorage``. Must not know: the core's roles, the
network, the state machine (snapshot data is opaque bytes).

The framing is the message store's (``queues.store.format``: file header, then records of
``length u32, crc32 u32, kind u8, flags u8, id u64, payload``, big-endian, crc over kind..payload),
with this log's own magic, version and record kinds.

Files of a directory::

    00000000000000000001.seg ...   segments, named by a sequence number (20 zero-padded digits),
                                   written in that order; only the newest is appended to
    state                          term and vote (replaced atomically: write state.tmp, fsync,
                                   rename, fsync the directory)
    snapshot                       the newest snapshot (replaced atomically the same way)
    marks                          how far the log was durable, and a copy of term and vote
                                   (``marks``: two slots written in turn after each fdatasync)

Every file starts with the 16-byte header ``magic b"AMQR", version u16 = 1, flags u16 = 0,
base u64`` (the segment's sequence number; 0 in ``state`` and ``snapshot``), then records:

    ENTRY     kind 16  flags: EntryKind (0 command, 1 no-op, 2 config)  id: log index
              payload: term u64, then the entry's data
    TRUNCATE  kind 17  id: first index dropped (every entry >= id written before is void)
    STATE     kind 18  id: term        payload: voted_for (u8 length, utf-8; length 0: none)
    SNAPSHOT  kind 19  id: last index  payload: term u64, member count u16, members (u8 length,
              utf-8 each), then the state machine's data

Replay reads the snapshot, then every segment in sequence order: an ENTRY at or below the snapshot
index is skipped, any other must follow the previous one (index = last + 1); a TRUNCATE drops the
entries at and after its index. A ``lazy`` log (a quorum queue's) maps each segment instead of
reading it, gives back every 8 MiB scanned, and keeps only runs of terms of the entries
(``PersistentState.dry``): a restart holds neither the backlog nor an object per entry. A torn or corrupt record ends a segment; it is cut there
(``os.truncate``; logged as a warning in the newest segment, as an error in an older one, where
synced data was lost). A segment whose entries are all at or below the snapshot index, with every
older one, is deleted once the snapshot is durable.

Losses (``marks.judge``): a cut below the marked durable position, a damaged snapshot or marks
file, a snapshot older than the marked one, two votes for one term. The replica then opens with
what it still holds, logs an error naming the loss, and ``load()`` carries a recovery ``floor``
(kept in ``marks`` until an entry at or above it, appended since, is durable): its node neither
votes nor stands for election until it has caught up from a leader (``RaftNode``). A damaged
``state`` file is replaced by the copy in ``marks``; a damaged ``snapshot`` is renamed
``snapshot.damaged`` and the replica starts from its log alone. A directory without ``marks``
(written before they existed) is trusted as it is and gets them.

Ordering: an InstallSnapshot that disagrees with the log writes (and syncs) TRUNCATE(index + 1)
before replacing the snapshot file, so no crash can pair the new snapshot with the old entries.
Sources: Raft paper figure 2 (persistent state), §7 (snapshots); Kafka ``LogSegment`` (segment
files, recovery cuts at the first invalid record); etcd's WAL (CRC per record, torn tail cut).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from dataclasses import replace
from pathlib import Path

from queues.store import format as fmt
from queues.store.dirs import make_durable_dirs
from queues.store.fds import append_all, take_sync_fds
from queues.store.values import PendingSync

from .dryentries import DryRuns
from .entrypos import EntryPositions
from .marks import TAIL, Mark, MarksFile, judge, tail_crc
from .messages import EMPTY_SNAPSHOT, Entry, EntryKind, PersistentState, Snapshot
from .records import (
    _ENTRY_HEAD,
    _SEGMENT_KINDS,
    _U16,
    _U64,
    FORMAT_VERSION,
    KIND_ENTRY,
    KIND_SNAPSHOT,
    KIND_STATE,
    KIND_TRUNCATE,
    MAGIC,
    _name,
    _read_single,
    _take_name,
    encode_entries,
)

__all__ = ["DiskLog", "MAGIC", "FORMAT_VERSION", "KIND_ENTRY", "KIND_TRUNCATE", "KIND_STATE",
           "KIND_SNAPSHOT"]

log = logging.getLogger(__name__)

_STATE = "state"
_SNAPSHOT = "snapshot"


#: A lazy open scans its segments mapped, giving back each this many bytes once scanned: a
#: restart of a large log holds no more than that of it in memory (a multiple of the page size).
_DROP_BYTES = 8 << 20
_MAX_KIND = int(max(EntryKind))


def _map(path: Path) -> mmap.mmap | None:
    """``path`` mapped read-only; None when it is shorter than a file header (read it
    instead)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < fmt.FILE_HEADER_SIZE:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class _LogSync(PendingSync):
    """The fsync half of a ``DiskLog`` group commit: the log's files, then its marks (``changes``
    to the mark: the durable position and entry, a cleared floor), in that order."""

    __slots__ = ("_marks", "_changes")

    def __init__(self, durable_id: int, fds: list[int], dir_fd: int, fsync: bool,
                 marks: MarksFile, changes: dict[str, int]) -> None:
        super().__init__(durable_id, 0, fds, dir_fd, fsync)
        self._marks = marks
        self._changes = changes

    def run(self) -> None:
        """fdatasync the log, then write the mark (see ``PendingSync.run``). Raises ``OSError``."""
        if self.done:
            return
        super().run()
        if self._changes:
            self._marks.write(**self._changes)


class DiskLog:
    """``RaftStorage`` in ``directory`` (created if missing). ``segment_bytes``: a segment is
    rolled once it exceeds this size; ``fsync``: False skips fsyncs (tests; survives kill -9 but
    not power loss); ``lazy``: ``load`` gives no entry object: the entries after the snapshot
    come as runs of terms (``PersistentState.dry``), their data left on disk (``read``).
    Raises ``FormatError`` on segment files of another format or a newer version (a header of
    ours with a few flipped bits is rewritten: ``format.header_damage``), ``OSError``
    on I/O errors (after a failed fsync treat the replica as failed: fail-stop, as the message
    store). ``lost``: why this replica lost entries it had acknowledged (None: nothing lost; see
    the module docstring), found when it opened."""

    def __init__(self, directory: Path | str, *, segment_bytes: int = 64 << 20,
                 fsync: bool = True, lazy: bool = False) -> None:
        self.directory = Path(directory)
        #: ``load`` gives command entries without their data (b""): read them with ``read``.
        self.lazy = lazy
        # the directories leading here made durable too (a power cut must not take the log away)
        make_durable_dirs(self.directory, fsync)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._buf = bytearray()
        self._rolled_fds: list[int] = []
        self._wfd = -1
        self._dirty = False
        self._dir_dirty = False
        self._segments: list[tuple[int, int]] = []   # (sequence, highest entry index in it)
        self._active_size = 0
        self._last: tuple[int, int] = (0, 0)          # newest entry written: (index, term)
        self._unreported = False
        self.cuts: list[tuple[str, int, int, str]] = []   # (file, offset, bytes cut, reason)
        self._tail = b""          # the last TAIL bytes of the active segment (its marks' tail)
        self._appended = False    # entries appended since open (they clear a recovery floor)
        self._marks = MarksFile(self.directory, fsync)
        self._abandoned = False
        self.lost: str | None = None
        #: Where each entry still in a segment lies (``read``), and the read fds by segment.
        self._positions = EntryPositions()
        self._rfds: dict[int, int] = {}
        #: A snapshot deletes no segment holding an entry at or above this index (0: none):
        #: the oldest live paged message of a quorum queue (its body is read from the log).
        self.retain_from = 0
        self._state = self._replay()
        self._open_active()
        if self._mark_at_open:
            self._marks.write(**self._position(), snapshot=self._state.snapshot.index,
                              current_term=self._state.term, voted_for=self._state.voted_for,
                              floor=self._state.floor)

    # ------------------------------------------------------------------ recovery
    def _replay(self) -> PersistentState:
        status = self._marks.read()
        mark = self._marks.current
        state: tuple[int, str | None] | None = None
        state_ok = True
        try:
            rec = _read_single(self.directory / _STATE, KIND_STATE)
            if rec is not None:
                name, _ = _take_name(rec[2], 0)
                state = (rec[1], name or None)
        except (fmt.FormatError, UnicodeDecodeError) as exc:
            log.error("raft log: %s is damaged (%s)", self.directory / _STATE, exc)
            state_ok = False
        snapshot = EMPTY_SNAPSHOT
        snapshot_ok = True
        path = self.directory / _SNAPSHOT
        try:
            rec = _read_single(path, KIND_SNAPSHOT)
            if rec is not None:
                snapshot = self._decode_snapshot(rec[1], rec[2])
        except (fmt.FormatError, UnicodeDecodeError) as exc:
            log.error("raft log: %s is damaged (%s); renamed %s.damaged", path, exc, _SNAPSHOT)
            os.replace(path, path.with_name(_SNAPSHOT + ".damaged"))
            snapshot_ok = False
        dry = DryRuns(snapshot.index) if self.lazy else None
        entries, held, has_data = self._replay_segments(snapshot, mark, dry)
        last_index = dry.last if dry is not None else snapshot.index + len(entries)
        verdict = judge(status, mark, state=state, state_ok=state_ok, snapshot_ok=snapshot_ok,
                        snapshot_index=snapshot.index, held=held, last_index=last_index,
                        has_entries=has_data or state is not None or not snapshot_ok)
        if status == "absent" and has_data:
            log.warning("raft log: %s has no marks file (written by an older version): its log "
                        "is trusted as it is", self.directory)
        if verdict.lost:
            self.lost = verdict.lost
            log.error("raft log: %s lost entries it had acknowledged: %s; it will neither vote "
                      "nor stand for election before its log matches a leader's up to index %d",
                      self.directory, verdict.lost, verdict.floor)
        self._mark_at_open = (status != "ok" or verdict.lost is not None
                              or verdict.floor != mark.floor
                              or (verdict.term, verdict.voted_for) !=
                              (mark.current_term, mark.voted_for))
        if not state_ok:
            self._replace(_STATE, fmt.encode_record(KIND_STATE, 0, verdict.term,
                                                    _name(verdict.voted_for or "")))
        if entries:
            self._last = (entries[-1].index, entries[-1].term)
        elif dry is not None and dry.last_term is not None:
            self._last = (dry.last, dry.last_term)
        else:
            self._last = (snapshot.index, snapshot.term)
        return PersistentState(verdict.term, verdict.voted_for, snapshot, tuple(entries),
                               verdict.floor, dry.done() if dry is not None else None)

    def _replay_segments(self, snapshot: Snapshot, mark: Mark, dry: DryRuns | None
                         ) -> tuple[list[Entry], bool, bool]:
        """Replay every segment after ``snapshot`` (cutting bad tails); returns the entries
        (none when ``dry``: they go there as runs of terms, no object each), whether the
        ``mark``'s durable position is still held byte for byte, and whether any segment held
        a record."""
        held = has_data = False
        entries: list[Entry] = []
        base = snapshot.index
        seqs = sorted(s for s in (fmt.parse_segment_name(n) for n in os.listdir(self.directory))
                      if s is not None)
        for i, seq in enumerate(seqs):
            path = self.directory / fmt.segment_name(seq)
            mapped = _map(path) if dry is not None else None
            data: bytes | memoryview = path.read_bytes() if mapped is None else memoryview(mapped)
            dropped = 0
            high = 0
            if len(data) < fmt.FILE_HEADER_SIZE:
                log.warning("raft log: %s has a torn header; rewriting it", path)
                header = fmt.file_header(seq, MAGIC, FORMAT_VERSION)
                path.write_bytes(header)
                self.cuts.append((path.name, 0, len(data), "torn file header"))
                self._segments.append((seq, 0))
                self._active_size = fmt.FILE_HEADER_SIZE
                self._tail = header
                held = held or (seq == mark.segment and mark.offset == len(header)
                                and tail_crc(header, len(header)) == mark.tail)
                continue
            damaged = fmt.header_damage(data, seq, MAGIC, FORMAT_VERSION)
            if damaged is not None:   # a few flipped bits: the records carry their own crc
                log.error("raft log: %s has a damaged header: %s; rewritten, its records "
                          "checked one by one", path, damaged)
                with open(path, "r+b") as f:
                    f.write(fmt.file_header(seq, MAGIC, FORMAT_VERSION))
                self.cuts.append((path.name, 0, 0, f"damaged header: {damaged}"))
            result = fmt.Scan(fmt.FILE_HEADER_SIZE)
            for offset, _total, kind, flags, index, payload in fmt.scan(data, result,
                                                                      kinds=_SEGMENT_KINDS):
                if kind == KIND_TRUNCATE:
                    if dry is not None:
                        dry.truncate(index)
                    del entries[max(0, index - base - 1):]
                    self._positions.truncate(index)
                    continue
                if index <= base:
                    high = index if index > high else high
                    self._positions.add(index, seq, offset)
                    continue
                last = dry.last if dry is not None else base + len(entries)
                if index != last + 1 or flags > _MAX_KIND or len(payload) < 8:
                    result.problem = f"entry {index} out of order after {last}"
                    result.valid_end = offset
                    break
                if dry is not None:   # lazy: a run of terms, the data left on disk
                    dry.add(index, _U64.unpack_from(payload)[0], flags, payload[8:])
                    if mapped is not None and offset - dropped >= _DROP_BYTES:
                        # the pages scanned leave this process's RSS (the page cache keeps them)
                        mapped.madvise(mmap.MADV_DONTNEED, dropped, _DROP_BYTES)
                        dropped += _DROP_BYTES
                else:
                    entries.append(Entry(index, _U64.unpack_from(payload)[0], EntryKind(flags),
                                         bytes(payload[8:])))
                self._positions.add(index, seq, offset)
                high = index if index > high else high
            end = result.valid_end
            has_data = has_data or end > fmt.FILE_HEADER_SIZE
            if seq == mark.segment:
                held = mark.offset <= end and tail_crc(data, mark.offset) == mark.tail
            self._tail = bytes(data[max(0, end - TAIL):end])
            if result.problem is not None:
                cut = len(data) - result.valid_end
                newest = i == len(seqs) - 1
                log.log(logging.WARNING if newest else logging.ERROR,
                        "raft log: cutting %d bytes of %s at offset %d (%s)%s", cut, path,
                        result.valid_end, result.problem, "" if newest else "; synced data lost")
                os.truncate(path, result.valid_end)
                self.cuts.append((path.name, result.valid_end, cut, result.problem))
            self._segments.append((seq, high))
            self._active_size = result.valid_end
        return entries, held, has_data

    @staticmethod
    def _decode_snapshot(index: int, payload: memoryview) -> Snapshot:
        try:
            (term,) = _U64.unpack_from(payload, 0)
            (count,) = _U16.unpack_from(payload, 8)
            pos = 10
            members = []
            for _ in range(count):
                name, pos = _take_name(payload, pos)
                members.append(name)
        except (struct.error, IndexError) as exc:
            raise fmt.FormatError(f"malformed snapshot record: {exc}") from exc
        return Snapshot(index, term, tuple(members), bytes(payload[pos:]))

    def load(self) -> PersistentState:
        """What was durable when this log was opened (see ``RaftStorage.load``)."""
        return self._state

    def release_loaded(self) -> None:
        """Forget the entries ``load`` returned (their data stays readable with ``read``): the
        node that took them holds them now, and a queue's backlog must not stay in memory
        twice."""
        self._state = replace(self._state, entries=())

    # ------------------------------------------------------------------ writing
    def _open_active(self) -> None:
        if self._segments:
            seq = self._segments[-1][0]
            self._wfd = os.open(self.directory / fmt.segment_name(seq), os.O_WRONLY | os.O_APPEND)
        else:
            self._new_segment(1)

    def _new_segment(self, seq: int) -> None:
        path = self.directory / fmt.segment_name(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        header = fmt.file_header(seq, MAGIC, FORMAT_VERSION)
        try:
            append_all(fd, header, 0)
        except OSError:
            os.close(fd)          # no half-made file left behind for the next try's O_EXCL
            os.unlink(path)
            raise
        self._tail = header
        self._wfd = fd
        self._segments.append((seq, 0))
        self._active_size = fmt.FILE_HEADER_SIZE
        self._dir_dirty = self._dirty = True

    def _write_out(self) -> None:
        if not self._buf:
            return
        # all or nothing: a full disk leaves the segment whole and the buffer for a later try
        append_all(self._wfd, self._buf, self._active_size - len(self._buf))
        self._tail = (self._tail + bytes(self._buf[-TAIL:]))[-TAIL:]
        self._buf.clear()
        self._dirty = True

    def _position(self) -> dict[str, int]:
        """The mark of what the OS holds now: the active segment, its size, the crc of its tail,
        and the newest entry (its (index, term); left out while the term is unknown)."""
        out = {"segment": self._segments[-1][0], "offset": self._active_size,
               "tail": tail_crc(self._tail, len(self._tail))}
        if self._last[1] >= 0:
            out["index"], out["term"] = self._last
        return out

    def _put(self, record: bytes, index: int = 0) -> int:
        """Buffer ``record`` (rolling the segment first when it is full); returns the offset
        it starts at in the active segment."""
        if self._active_size > self.segment_bytes:
            try:
                self._write_out()
                old_fd = self._wfd
                self._new_segment(self._segments[-1][0] + 1)
                self._rolled_fds.append(old_fd)
            except OSError as exc:   # a full disk: stay in this segment; flush() raises
                log.warning("Raft log %s: cannot start a new segment: %s", self.directory, exc)
        start = self._active_size
        self._buf += record
        self._active_size += len(record)
        if index:
            seq, high = self._segments[-1]
            self._segments[-1] = (seq, max(high, index))
        return start

    def append(self, first_index: int, entries: tuple[Entry, ...]) -> None:
        """Run ``AppendLog`` (see ``RaftStorage.append``): a TRUNCATE record when ``first_index``
        is not past the newest entry, then one ENTRY record each; buffered until ``sync``."""
        if first_index <= self._last[0]:
            self._put(fmt.encode_record(KIND_TRUNCATE, 0, first_index))
            self._positions.truncate(first_index)
        if entries:   # one record batch (a segment is rolled before it, never inside it)
            self._appended = True
            offset = self._put(b"".join(encode_entries(entries)), entries[-1].index)
            seq = self._segments[-1][0]
            positions = self._positions
            for e in entries:
                positions.add(e.index, seq, offset)
                offset += _ENTRY_HEAD.size + len(e.data)
            self._last = (entries[-1].index, entries[-1].term)
        elif first_index <= self._last[0]:
            self._last = (first_index - 1, -1)   # unknown term: reported only after an append
        self._unreported = True

    def flush(self) -> tuple[PendingSync, tuple[int, int] | None]:
        """Write the buffer to the OS; returns the fsync still to do (``PendingSync.run()``, any
        thread) and the newest entry's (index, term) it makes durable (None: nothing new).
        Raises ``OSError`` when the write fails (ENOSPC: a full disk): the segment is left as it
        was, the buffer and what it would make durable are kept for the next call."""
        self._write_out()
        fds, dir_fd = take_sync_fds(self)
        newest = self._last if self._unreported and self._last[1] >= 0 else None
        self._unreported = False
        changes: dict[str, int] = self._position() if fds else {}
        floor = self._state.floor
        if floor and self._appended and self._last[1] >= 0 and self._last[0] >= floor:
            changes["floor"] = 0          # caught up: durable once this sync has run
            self._state = replace(self._state, floor=0)
        return _LogSync(self._last[0], fds, dir_fd, self.fsync, self._marks, changes), newest

    def sync(self) -> tuple[int, int] | None:
        """``flush`` and fsync in this thread (see ``RaftStorage.sync``). Raises ``OSError``."""
        pending, newest = self.flush()
        pending.run()
        return newest

    def _replace(self, name: str, record: bytes) -> None:
        """Atomically replace file ``name``: write a temporary file, fsync, rename, fsync dir.
        Nothing once ``abandon``-ed (the directory is deleted, or is another log's now)."""
        if self._abandoned:
            return
        tmp = self.directory / (name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(fmt.file_header(0, MAGIC, FORMAT_VERSION))
            f.write(record)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.directory / name)
        if self.fsync:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def save_state(self, term: int, voted_for: str | None) -> None:
        """Run ``PersistState``: durable when this returns (the ``state`` file, then its copy in
        ``marks``)."""
        self._replace(_STATE, fmt.encode_record(KIND_STATE, 0, term, _name(voted_for or "")))
        self._marks.write(current_term=term, voted_for=voted_for)

    def save_snapshot(self, snapshot: Snapshot, discard_log: bool) -> None:
        """Run ``PersistSnapshot``: appends buffered so far, the TRUNCATE of ``discard_log`` and the
        snapshot file are durable when this returns; then useless segments are deleted. Nothing
        once ``abandon``-ed."""
        if self._abandoned:
            return
        if discard_log:   # entries up to the snapshot's may disagree with it: none is read
            self._put(fmt.encode_record(KIND_TRUNCATE, 0, snapshot.index + 1))
            self._positions.reset(snapshot.index + 1)
            self._last = (snapshot.index, snapshot.term)
            self._unreported = True
        pending, newest = self.flush()
        pending.run()
        self._unreported = self._unreported or newest is not None
        members = b"".join(_name(m) for m in snapshot.members)
        self._replace(_SNAPSHOT, fmt.encode_record(
            KIND_SNAPSHOT, 0, snapshot.index, _U64.pack(snapshot.term),
            _U16.pack(len(snapshot.members)), members, snapshot.data))
        floor = self._state.floor
        if floor and snapshot.index >= floor:   # a leader's snapshot, or one of its commits
            self._state = replace(self._state, floor=0)
            self._marks.write(snapshot=snapshot.index, floor=0)
        else:
            self._marks.write(snapshot=snapshot.index)
        if self._last[0] < snapshot.index:
            self._last = (snapshot.index, snapshot.term)
        keep = self.retain_from
        self._delete_before(min(snapshot.index, keep - 1) if keep > 0 else snapshot.index)

    def _delete_before(self, index: int) -> None:
        """Delete the oldest segments while every entry in them is at or below ``index``."""
        deleted = False
        while len(self._segments) > 1 and self._segments[0][1] <= index:
            seq, _ = self._segments.pop(0)
            fd = self._rfds.pop(seq, -1)
            if fd >= 0:
                os.close(fd)
            os.unlink(self.directory / fmt.segment_name(seq))
            self._positions.drop_segments_before(self._segments[0][0])
            deleted = True
        if deleted and self.fsync:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def segment_count(self) -> int:
        """How many segment files exist (tests, metrics)."""
        return len(self._segments)

    def abandon(self) -> None:
        """Its files are being deleted (the queue was): no mark, state or snapshot is written
        from now on, by any thread; ``close`` closes the fds without syncing."""
        self._marks.drop()
        self._abandoned = True

    def close(self) -> None:
        """Sync what is buffered (unless ``abandon``-ed) and close the files. Raises
        ``OSError``."""
        if self._wfd < 0:
            return
        if not self._abandoned:
            self.sync()
        self._marks.close()
        for fd in self._rolled_fds:
            os.close(fd)
        self._rolled_fds = []
        for fd in self._rfds.values():
            os.close(fd)
        self._rfds = {}
        os.close(self._wfd)
        self._wfd = -1

    # ------------------------------------------------------------------ reading back
    @property
    def readable_to(self) -> int:
        """The newest index ``read`` can serve (entries from the oldest kept segment on)."""
        return self._positions.base + len(self._positions) - 1

    def read(self, index: int) -> bytes:
        """The data of entry ``index`` as written (from the write buffer, else the segment:
        one ``pread`` of its record, crc checked). Raises ``LookupError`` when this log holds
        no such entry (compacted away, truncated, never written), ``OSError`` on I/O errors,
        ``FormatError`` when the record is damaged."""
        where = self._positions.get(index)
        if where is None:
            raise LookupError(f"raft log {self.directory}: no entry {index}")
        seq, offset = where
        buffered = self._active_size - len(self._buf)
        if seq == self._segments[-1][0] and offset >= buffered:
            head = bytes(self._buf[offset - buffered:offset - buffered + _ENTRY_HEAD.size])
        else:
            head = b""
        if head:
            length = _ENTRY_HEAD.unpack(head)[0]
            record = bytes(self._buf[offset - buffered:offset - buffered + 8 + length])
        else:
            fd = self._rfds.get(seq)
            if fd is None:
                fd = self._rfds[seq] = os.open(self.directory / fmt.segment_name(seq),
                                               os.O_RDONLY)
            head = os.pread(fd, _ENTRY_HEAD.size, offset)
            if len(head) < _ENTRY_HEAD.size:
                raise fmt.FormatError(f"entry {index}: record cut at offset {offset}")
            length = _ENTRY_HEAD.unpack(head)[0]
            record = head + os.pread(fd, 8 + length - _ENTRY_HEAD.size,
                                     offset + _ENTRY_HEAD.size)
        length, crc, kind, _flags, ident, _term = _ENTRY_HEAD.unpack_from(record)
        if (kind != KIND_ENTRY or ident != index or len(record) != 8 + length
                or zlib.crc32(memoryview(record)[8:]) != crc):
            raise fmt.FormatError(f"entry {index}: damaged record at offset {offset} of "
                                  f"segment {seq}")
        return record[_ENTRY_HEAD.size:]
