"""In-memory index of the message store: where each live message is and which queues hold it.

Owns: per segment, compact arrays over its *native* records (ids ``base .. base+count-1``, see
``format``): holder queue, holding file, offset and length; per file, live counts (to know when it can
be deleted) and the set of other files its ACK/DROP records refer to (to know when deleting it would
resurrect acked messages); queue-name numbering; fan-out holder sets.
Must not know: file descriptors, fsync, record bytes. The same code runs when the store writes a
record and when recovery replays one, so the two cannot drift apart.

Memory: 20 bytes per native record (``qref`` u32, ``where`` u64, ``offset`` u32, ``length`` u32), so
2 million messages cost ~40 MB; a message held by several queues adds a set in ``multi``. A segment's
arrays are freed once its file is deleted and none of its native messages is live any more.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

__all__ = ["DEAD", "MULTI", "DELIVERED", "QMASK", "Segment", "StoreIndex"]

DELIVERED = 0x80000000  # qref bit: the message was delivered at least once
QMASK = 0x7FFFFFFF
DEAD = 0x7FFFFFFF  # qref (masked): no queue holds it
MULTI = 0x7FFFFFFE  # qref (masked): several queues hold it; see StoreIndex.multi


class Segment:
    """One segment: the index of its native records and, while ``file_alive``, its file's state.

    A *ghost* (``file_alive`` False) keeps the index of native messages whose records were
    relocated to later files. Sizes are bytes; ``size`` counts buffered (not yet written) bytes too.
    """

    __slots__ = ("base", "file_alive", "size", "written", "qref", "where", "offset", "length",
                 "native_live", "live", "live_bytes", "refs", "guests", "delete_after_lsn", "rfd")

    def __init__(self, base: int, *, file_alive: bool = True) -> None:
        self.base = base
        self.file_alive = file_alive
        self.size = 0  # file bytes including the write buffer (active segment)
        self.written = 0  # bytes handed to the OS
        self.qref = array("I")  # per native record: queue number | DELIVERED, or DEAD / MULTI
        self.where = array("Q")  # per native record: base of the file holding its current copy
        self.offset = array("I")
        self.length = array("I")
        self.native_live = 0  # native messages still held by some queue (wherever their copy is)
        self.live = 0  # live records physically in this file (natives here + guests here)
        self.live_bytes = 0
        self.refs: set[int] = set()  # bases of other existing files our ACK/DROP records refer to
        self.guests = array("Q")  # ids relocated into this file (may since be dead or moved on)
        self.delete_after_lsn = -1  # relocated away: delete once the store's durable LSN passes it
        self.rfd = -1  # cached read-only descriptor (owned by the store)

    @property
    def count(self) -> int:
        """Number of native records (ids ``base .. base + count - 1``)."""
        return len(self.qref)

    def pad_to(self, count: int) -> None:
        """Grow the arrays to ``count`` entries, new ones DEAD (ghosts, gaps after corruption)."""
        missing = count - len(self.qref)
        if missing > 0:
            self.qref.extend([DEAD] * missing)
            self.where.extend([self.base] * missing)
            self.offset.extend([0] * missing)
            self.length.extend([0] * missing)

    def __repr__(self) -> str:
        return (f"Segment(base={self.base}, file_alive={self.file_alive}, size={self.size}, "
                f"count={self.count}, live={self.live}, native_live={self.native_live})")


class StoreIndex:
    """All segments by base, queue numbering, and the holder bookkeeping of every live message."""

    def __init__(self) -> None:
        self.segs: dict[int, Segment] = {}
        self.bases: list[int] = []  # sorted keys of segs
        self.qnum: dict[str, int] = {}
        self.qname: dict[int, str] = {}
        self.qlive: dict[int, int] = {}  # queue number -> messages it holds
        self.multi: dict[int, set[int]] = {}  # store id -> queue numbers, when more than one
        self._next_qnum = 0

    # -- segments ------------------------------------------------------------------------------
    def add_segment(self, seg: Segment) -> None:
        """Register ``seg`` (bases are unique)."""
        if seg.base in self.segs:
            raise ValueError(f"segment {seg.base} already exists")
        self.segs[seg.base] = seg
        bisect.insort(self.bases, seg.base)

    def forget_if_unused(self, seg: Segment) -> None:
        """Drop ``seg`` from the index once its file is gone and no native message is live."""
        if not seg.file_alive and seg.native_live == 0 and self.segs.get(seg.base) is seg:
            del self.segs[seg.base]
            del self.bases[bisect.bisect_left(self.bases, seg.base)]

    def files(self) -> list[Segment]:
        """Segments whose file exists, oldest first."""
        return [s for s in (self.segs[b] for b in self.bases) if s.file_alive]

    def locate(self, store_id: int) -> tuple[Segment, int] | None:
        """(native segment, index) of ``store_id``, None when unknown (never stored, or gone)."""
        i = bisect.bisect_right(self.bases, store_id) - 1
        if i < 0:
            return None
        seg = self.segs[self.bases[i]]
        idx = store_id - seg.base
        return (seg, idx) if idx < len(seg.qref) else None

    # -- queues --------------------------------------------------------------------------------
    def queue_number(self, name: str) -> int:
        """The number of queue ``name``, allocating one on first use."""
        n = self.qnum.get(name)
        if n is None:
            n = self.qnum[name] = self._next_qnum
            self.qname[n] = name
            self.qlive[n] = 0
            self._next_qnum += 1
        return n

    def holders(self, seg: Segment, idx: int) -> list[int]:
        """Queue numbers holding native record ``idx`` of ``seg`` (empty when dead)."""
        q = seg.qref[idx] & QMASK
        if q == DEAD:
            return []
        if q == MULTI:
            return sorted(self.multi[seg.base + idx])
        return [q]

    def _set_holders(self, seg: Segment, idx: int, qnums: list[int], delivered: int) -> None:
        store_id = seg.base + idx
        for q in qnums:
            self.qlive[q] += 1
        if len(qnums) == 1:
            seg.qref[idx] = qnums[0] | delivered
            self.multi.pop(store_id, None)
        else:
            seg.qref[idx] = MULTI | delivered
            self.multi[store_id] = set(qnums)

    # -- mutations (shared by the writer and by recovery) ----------------------------------------
    def add_native(self, seg: Segment, store_id: int, offset: int, length: int,
                   qnums: list[int]) -> None:
        """Index a new PUBLISH record of ``seg`` (its file) for ``store_id`` held by ``qnums``."""
        idx = store_id - seg.base
        count = len(seg.qref)
        if idx != count:
            if idx < count:
                raise ValueError(f"store id {store_id} already indexed in segment {seg.base}")
            seg.pad_to(idx)
        seg.where.append(seg.base)
        seg.offset.append(offset)
        seg.length.append(length)
        if len(qnums) == 1:  # the common case, kept short
            q = qnums[0]
            seg.qref.append(q)
            self.qlive[q] += 1
        else:
            seg.qref.append(DEAD)
            qnums = sorted(set(qnums))
            if qnums:
                self._set_holders(seg, idx, qnums, 0)
        if qnums:
            seg.native_live += 1
            seg.live += 1
            seg.live_bytes += length

    def relocate(self, store_id: int, native: tuple[int, int], file: Segment, offset: int,
                 length: int, qnums: list[int]) -> None:
        """Index a RELOCATED copy of ``store_id`` in ``file``; it replaces earlier copies and holders.

        ``native`` is (native segment base, native record count) as written in the copy; a ghost
        segment is made when that segment is gone.
        """
        base, count = native
        seg = self.segs.get(base)
        if seg is None:
            seg = Segment(base, file_alive=False)
            self.add_segment(seg)
        seg.pad_to(count)
        idx = store_id - base
        if not 0 <= idx < len(seg.qref):
            raise ValueError(f"relocated id {store_id} outside segment {base}+{count}")
        old = seg.qref[idx]
        delivered = old & DELIVERED
        if old & QMASK != DEAD:
            self._release(seg, idx)
        else:
            seg.native_live += 1
        seg.where[idx] = file.base
        seg.offset[idx] = offset
        seg.length[idx] = length
        self._set_holders(seg, idx, sorted(set(qnums)), delivered)
        file.live += 1
        file.live_bytes += length
        file.guests.append(store_id)

    def _release(self, seg: Segment, idx: int) -> None:
        """Take a live record out of its file's and queues' counts (it stays native-live)."""
        holder = self.segs[seg.where[idx]]
        holder.live -= 1
        holder.live_bytes -= seg.length[idx]
        for q in self.holders(seg, idx):
            self.qlive[q] -= 1
        self.multi.pop(seg.base + idx, None)

    def drop(self, qnum: int, store_id: int, acting: Segment) -> bool:
        """Queue ``qnum`` no longer holds ``store_id``; the record saying so is in file ``acting``.

        Returns False (and changes nothing) when the queue did not hold it.
        """
        loc = self.locate(store_id)
        if loc is None:
            return False
        seg, idx = loc
        ref = seg.qref[idx]
        q = ref & QMASK
        if q == MULTI:
            holders = self.multi[store_id]
            if qnum not in holders:
                return False
            holders.discard(qnum)
            self.qlive[qnum] -= 1
            if len(holders) == 1:
                seg.qref[idx] = holders.pop() | (ref & DELIVERED)
                del self.multi[store_id]
            file_base = seg.where[idx]
            if file_base != acting.base:
                acting.refs.add(file_base)
            return True
        if q != qnum:
            return False
        file_base = seg.where[idx]
        self._release(seg, idx)
        seg.qref[idx] = DEAD
        seg.native_live -= 1
        if file_base != acting.base:
            acting.refs.add(file_base)
        self.forget_if_unused(seg)
        return True

    def drop_queue(self, qnum: int, acting: Segment) -> int:
        """Queue ``qnum`` holds nothing any more; returns how many messages it held. O(messages)."""
        if not self.qlive.get(qnum):
            return 0
        dropped = 0
        for seg in [self.segs[b] for b in self.bases]:
            qref = seg.qref
            for idx in range(len(qref)):
                q = qref[idx] & QMASK
                if q == qnum or (q == MULTI and qnum in self.multi[seg.base + idx]):
                    dropped += self.drop(qnum, seg.base + idx, acting)
        return dropped

    def forget_queue(self, qnum: int) -> None:
        """Release the number of a queue that holds nothing."""
        if self.qlive.get(qnum) == 0:
            del self.qlive[qnum]
            del self.qnum[self.qname.pop(qnum)]

    def mark_delivered(self, qnum: int, store_id: int) -> bool:
        """Set the delivered bit of a message ``qnum`` holds; False when it does not hold it."""
        loc = self.locate(store_id)
        if loc is None:
            return False
        seg, idx = loc
        ref = seg.qref[idx]
        q = ref & QMASK
        if q == qnum or (q == MULTI and qnum in self.multi[store_id]):
            seg.qref[idx] = ref | DELIVERED
            return True
        return False

    def live_records(self) -> Iterator[tuple[int, Segment, int]]:
        """(store id, native segment, index) of every live message, ascending store id."""
        for base in list(self.bases):
            seg = self.segs.get(base)
            if seg is None or seg.native_live == 0:
                continue
            qref = seg.qref
            for idx in range(len(qref)):
                if qref[idx] & QMASK != DEAD:
                    yield base + idx, seg, idx

    def live_in_file(self, file: Segment) -> list[int]:
        """Ids of the live records physically in ``file``, ascending."""
        ids = []
        qref, where = file.qref, file.where
        for idx in range(len(qref)):
            if qref[idx] & QMASK != DEAD and where[idx] == file.base:
                ids.append(file.base + idx)
        for store_id in set(file.guests):
            loc = self.locate(store_id)
            if loc is not None:
                seg, idx = loc
                if seg.qref[idx] & QMASK != DEAD and seg.where[idx] == file.base:
                    ids.append(store_id)
        ids.sort()
        return ids

    def file_deleted(self, file: Segment) -> None:
        """``file`` was unlinked: nobody depends on it any more."""
        file.file_alive = False
        file.guests = array("Q")
        for seg in self.segs.values():
            seg.refs.discard(file.base)
        self.forget_if_unused(file)
