"""The durability marks of one Raft replica: how far its log was durable when it last said so,
and a second copy of its term and vote. With them a replica that opens its files can tell whether
one of them lost data it had acknowledged (a flipped bit, a truncation, an older copy put back):
a torn tail cut after a crash is *above* the mark and harmless; anything missing *below* it was
acknowledged to a leader, which may have counted it toward a commit.

Owns: the file ``marks`` of a replica directory and its two-slot layout, and the pure judgement
``judge`` of what was loaded against it. Must not know: the Raft core, the state machine.

Layout: the 16-byte file header of ``cluster.raft.disklog`` (magic ``b"AMQR"``, version 1, base
0), then two slots of ``SLOT`` bytes at ``16`` and ``16 + SLOT``, written in turn in place
(``pwrite``, then ``fdatasync``): a write torn by a power loss spoils at most the slot it was
writing, and the other, older one still reads. Each slot holds one MARK record in the framing of
``queues.store.format`` (length u32, crc32 u32, kind u8 = 20, flags u8 = 0, id u64 = the write's
sequence number), then zeros; the valid slot with the higher sequence is the current mark.
MARK payload, big-endian::

    segment u64, offset u64, tail u32   the log was durable up to byte ``offset`` of segment file
                                        ``segment``; ``tail`` = crc32 of the TAIL bytes before it
    index u64, term u64                 the newest entry durable then (Raft's (index, term))
    snapshot u64                        the index of the snapshot file at that time
    term u64, floor u64                 the replica's current term; ``floor`` > 0: it is catching
                                        up after a loss and may not vote or stand for election
                                        until its log holds an entry at or above ``floor``
                                        appended since (0: not recovering)
    voted_for                           u8 length, utf-8 (length 0: none)

When marks are written: after every group-commit fdatasync of the log (the log first, so a mark
never claims what the disk does not hold), after the ``state`` file was replaced, after the
``snapshot`` file was replaced, and when a replica opens with a loss (the floor) or without marks.
Cost: one small in-place write and fdatasync per replica per group commit (about 170 us here,
beside the log's own fdatasync).

Sources: Alagappan et al., "Protocol-Aware Recovery for Consensus-Based Storage" (FAST 2018):
a persist record written after an entry tells a corruption from a torn crash; Ongaro's thesis
§4.2.1 (a server that must catch up before it counts as a voter); Jepsen's NATS 2.12.1 analysis
(2025): a node that lost a truncated or corrupted file of its log must not vote as if it had it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from queues.store import format as fmt

__all__ = ["MARKS", "SLOT", "TAIL", "KIND_MARK", "Mark", "MarksFile", "Verdict", "judge",
           "tail_crc"]

log = logging.getLogger(__name__)

MARKS = "marks"
SLOT = 512
TAIL = 64
KIND_MARK = 20
_MAGIC = b"AMQR"
_VERSION = 1
_FIXED = struct.Struct(">QQIQQQQQ")
_fdatasync = getattr(os, "fdatasync", os.fsync)


def tail_crc(data: bytes | memoryview, offset: int) -> int:
    """crc32 of the ``TAIL`` bytes of ``data`` before ``offset`` (fewer at the start)."""
    return zlib.crc32(data[max(0, offset - TAIL):offset])


@dataclass(frozen=True, slots=True)
class Mark:
    """One mark (see the module docstring): the durable position (``segment``, ``offset``,
    ``tail``) and entry (``index``, ``term``) of the log, the ``snapshot`` index, the replica's
    ``current_term`` / ``voted_for`` and its recovery ``floor`` (0: none)."""

    segment: int = 0
    offset: int = 0
    tail: int = 0
    index: int = 0
    term: int = 0
    snapshot: int = 0
    current_term: int = 0
    floor: int = 0
    voted_for: str | None = None

    def encode(self, seq: int) -> bytes:
        """The slot bytes of this mark as write number ``seq`` (record plus zero padding).
        Raises ``ValueError`` for a vote longer than 255 bytes."""
        name = (self.voted_for or "").encode()
        if len(name) > 255:
            raise ValueError(f"node id longer than 255 bytes: {name[:40]!r}")
        record = fmt.encode_record(KIND_MARK, 0, seq, _FIXED.pack(
            self.segment, self.offset, self.tail, self.index, self.term, self.snapshot,
            self.current_term, self.floor), bytes((len(name),)), name)
        return record + bytes(SLOT - len(record))

    @staticmethod
    def decode(slot: bytes) -> tuple[int, Mark] | None:
        """(sequence, mark) of a slot, None when it holds no valid record."""
        result = fmt.Scan(0)
        for _off, _total, _kind, _flags, seq, payload in fmt.scan(
                slot, result, start=0, kinds=frozenset({KIND_MARK})):
            if len(payload) < _FIXED.size + 1:
                return None
            segment, offset, tail, index, term, snap, current, floor = _FIXED.unpack_from(payload)
            n = payload[_FIXED.size]
            name = bytes(payload[_FIXED.size + 1:_FIXED.size + 1 + n]).decode(errors="replace")
            return seq, Mark(segment, offset, tail, index, term, snap, current, floor,
                             name or None)
        return None


class MarksFile:
    """The ``marks`` file of ``directory``. ``read()`` once at open; then ``write`` (any thread:
    calls are serialised, each writes the next slot and fdatasyncs it unless ``fsync`` is
    False). Raises ``OSError`` on I/O errors."""

    def __init__(self, directory: Path, fsync: bool = True) -> None:
        self.path = directory / MARKS
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fd = -1
        self._seq = 0
        self.current = Mark()
        #: Set by ``drop``: the file is being deleted, ``write`` writes nothing.
        self.dropped = False

    def read(self) -> str:
        """Load the current mark into ``current``; returns ``"ok"``, ``"absent"`` (no file) or
        ``"damaged"`` (no valid slot: ``current`` stays empty)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return "absent"
        try:
            fmt.check_file_header(data, 0, _MAGIC, _VERSION)
        except fmt.FormatError:
            return "damaged"
        best: tuple[int, Mark] | None = None
        for k in range(2):
            start = fmt.FILE_HEADER_SIZE + k * SLOT
            got = Mark.decode(data[start:start + SLOT])
            if got is not None and (best is None or got[0] > best[0]):
                best = got
        if best is None:
            return "damaged"
        self._seq, self.current = best
        return "ok"

    def write(self, **changes: object) -> Mark:
        """Make ``current`` with ``changes`` (fields of ``Mark``) the durable mark; returns it.
        A durable position (``segment``, ``offset``) older than the current one is left out with
        the entry that goes with it (syncs of one log may finish out of order: the newer one made
        the older bytes durable too)."""
        with self._lock:
            if self.dropped:
                return self.current
            cur = self.current
            if "segment" in changes and (changes["segment"], changes["offset"]) < \
                    (cur.segment, cur.offset):
                for key in ("segment", "offset", "tail", "index", "term"):
                    changes.pop(key, None)
            mark = replace(cur, **changes)  # type: ignore[arg-type]
            if self._fd < 0:
                self._open()
            self._seq += 1
            os.pwrite(self._fd, mark.encode(self._seq),
                      fmt.FILE_HEADER_SIZE + (self._seq % 2) * SLOT)
            if self.fsync:
                _fdatasync(self._fd)
            self.current = mark
            return mark

    def _open(self) -> None:
        """Open the file for writing; a new (or damaged, or cut short) one is made whole first:
        header, the current mark in its slot and an empty other slot, written to a temporary
        file and renamed (directory fsynced), so that no moment lacks a readable mark."""
        if self.read_header_ok():
            self._fd = os.open(self.path, os.O_WRONLY)
            return
        slots = [bytes(SLOT), bytes(SLOT)]
        if self._seq:
            slots[self._seq % 2] = self.current.encode(self._seq)
        tmp = self.path.with_name(MARKS + ".tmp")
        with open(tmp, "wb") as f:
            f.write(fmt.file_header(0, _MAGIC, _VERSION) + b"".join(slots))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.fsync:
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._fd = os.open(self.path, os.O_WRONLY)

    def read_header_ok(self) -> bool:
        """Whether the file exists with a whole header and both slots' room."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(fmt.FILE_HEADER_SIZE + 2 * SLOT)
            fmt.check_file_header(data, 0, _MAGIC, _VERSION)
        except (OSError, fmt.FormatError):
            return False
        return len(data) == fmt.FILE_HEADER_SIZE + 2 * SLOT

    def drop(self) -> None:
        """The file is being deleted with its log: close it, and let no ``write`` from now on (in
        any thread) write or reopen it -- a group commit still running on another thread must not
        recreate it, nor open the file of a new log made in the same place."""
        with self._lock:
            self.dropped = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``judge`` found: ``lost`` says why the replica may lack entries it acknowledged (None:
    nothing lost); ``term`` / ``voted_for`` are the newest of the two copies; ``floor`` the
    recovery floor to keep (0: none)."""

    lost: str | None
    term: int
    voted_for: str | None
    floor: int


def judge(status: str, mark: Mark, *, state: tuple[int, str | None] | None, state_ok: bool,
          snapshot_ok: bool, snapshot_index: int, held: bool, last_index: int,
          has_entries: bool) -> Verdict:
    """Judge a replica's files at open against its marks (pure).

    ``status``: ``MarksFile.read``'s answer; ``state``: (term, vote) of the ``state`` file (None
    when absent or damaged; ``state_ok`` False when damaged); ``snapshot_ok``: False when the
    snapshot file was damaged; ``snapshot_index``: of the snapshot loaded; ``held``: the log still
    holds the marked durable position byte for byte (the segment, its valid length and ``tail``);
    ``last_index``: the log's newest index; ``has_entries``: the replica holds anything at all.

    A loss: a damaged snapshot; a damaged marks file on a replica with data; a snapshot older
    than the mark's; the durable position gone (truncated, cut after a flipped bit, an older copy)
    unless the loaded snapshot covers the marked entry; two copies of the vote that disagree in
    one term. The floor after a loss is the marked durable index (what was acknowledged), or one
    past the log's end when that is unknown, and never below an earlier floor.
    """
    reasons: list[str] = []
    copies = []
    if state is not None:
        copies.append(state)
    if status == "ok":
        copies.append((mark.current_term, mark.voted_for))
    elif status == "damaged" and has_entries:
        reasons.append("the marks file is damaged: what was durable is unknown")
    if not state_ok and status != "ok":
        reasons.append("the state file is damaged and has no copy: the vote is unknown")
    term, voted_for = max(copies, key=lambda c: (c[0], c[1] is not None), default=(0, None))
    if len({c for c in copies if c[0] == term and c[1] is not None}) > 1:
        reasons.append(f"two different votes recorded for term {term}")
    if not snapshot_ok:
        reasons.append("the snapshot file is damaged")
    if status == "ok":
        if snapshot_index < mark.snapshot:
            reasons.append(f"the snapshot is at index {snapshot_index}, older than the "
                           f"{mark.snapshot} it was")
        elif not held and mark.index > snapshot_index:
            reasons.append(f"the log no longer holds what was durable (entry {mark.index} of "
                           f"term {mark.term}, {mark.offset} bytes of segment {mark.segment}); "
                           f"it ends at index {last_index}")
    floor = mark.floor if status == "ok" else 0
    if reasons:
        known = mark.index if status == "ok" else last_index + 1
        floor = max(floor, known, last_index + 1 if status != "ok" else 0, 1)
    return Verdict("; ".join(reasons) or None, term, voted_for, floor)
