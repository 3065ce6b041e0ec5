"""A ready list that keeps at most a byte budget of message bodies in RAM (issue 4, "Larger than RAM").

Owns: ``PagedReadyList``, the ``ReadyList`` of a durable queue whose persistent messages are also in
the message store. Its ready entries, in delivery (``seq``) order, form two regions:

  * the *window* -- the head: ordinary ``QueueEntry`` objects with their bodies, normally at most
    ``budget`` body bytes (the deque a plain ``ReadyList`` has);
  * the *paged tail* -- everything after the window. A *stored* entry (its message has a
    ``store_id`` and it was never handed out) costs 28 bytes in chunked arrays and no Python
    object: store id (the redelivered flag in its top bit), ``seq``, ``expires_at`` and body size.
    Body, header and routing facts stay on disk. An entry that cannot be dropped (a transient
    message, or a requeued entry whose ``delivery_count`` must survive) is *held*: kept as its
    object in ``_held`` (store id 0 in the arrays marks its place).

Paging out: when an append, a requeue or recovery takes the window over ``budget``, entries move
from the window's tail (newest first) to the front of the paged tail; once the tail is non-empty,
newly published entries go straight to its end. Paging in: when the head is needed and the window is
empty, a batch is read back with ``load(store_id)`` -- at least one entry, then up to
``min(budget, FILL_BYTES)`` body bytes or ``FILL_COUNT`` entries -- so a consumer of a huge backlog
never waits for more than one small batch of reads. Per-message TTL is still only looked at on the
head (``next_expiry`` reads the paged head's deadline without loading it).

Must not know: the message store, files, consumers, clocks. ``load`` is injected: it returns the
stored ``Message`` with its body, or ``None`` when it cannot be read (the caller logs and releases
it); such an entry leaves the list and ``on_lost(body_size)`` is called so the queue's byte count
stays right. Priority queues are not paged (they keep one ``ReadyList`` per priority).
Source: RabbitMQ "Lazy Queues" and classic queues v2 (messages beyond the in-memory part are kept
on disk only and read back as consumers need them).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator

from queues.entry import QueueEntry
from queues.message import Message
from queues.ready_list import ReadyList

__all__ = ["PagedReadyList", "ClearedEntries", "FILL_BYTES", "FILL_COUNT", "CHUNK"]

#: Body bytes read back per fill at most (the budget caps it further).
FILL_BYTES = 256 * 1024
#: Entries read back per fill at most.
FILL_COUNT = 256
#: Entries per array chunk of the paged tail (a chunk can grow past it by requeues into the tail).
CHUNK = 4096

_REDELIVERED = 1 << 63  # store-id bit: the entry comes back with redelivered=True
_SID_MASK = _REDELIVERED - 1
_HELD = 0  # store id of a held entry (real store ids start at 1)


class _Chunk:
    """Parallel arrays of paged entries; live entries are ``start:`` (the head is consumed by
    advancing ``start``; a chunk made for prepending starts full of zeros with ``start == CHUNK``)."""

    __slots__ = ("sid", "seq", "exp", "size", "start")

    def __init__(self, front: bool = False) -> None:
        n = CHUNK if front else 0
        self.sid = array("Q", bytes(8 * n))
        self.seq = array("Q", bytes(8 * n))
        self.exp = array("q", bytes(8 * n))  # expires_at in ms; -1: no TTL
        self.size = array("I", bytes(4 * n))
        self.start = n


def _stub(store_id: int, seq: int, exp: int, redelivered: bool) -> QueueEntry:
    """An entry for a stored message being dropped unread: its message has only ``store_id``."""
    msg = Message("", "", b"", b"")
    msg.store_id = store_id
    entry = QueueEntry(msg, seq, None if exp < 0 else exp)
    entry.redelivered = redelivered
    return entry


class ClearedEntries:
    """What ``PagedReadyList.clear`` removed, in delivery order: sized and re-iterable.

    Window and held entries come as they were; paged entries are made one at a time while
    iterating, as stubs (``QueueEntry`` whose message has only ``store_id`` set, empty header and
    body), so purging or deleting millions of paged messages never builds millions of objects.
    """

    __slots__ = ("_window", "_chunks", "_held", "_len")

    def __init__(self, window: list[QueueEntry], chunks: deque[_Chunk],
                 held: dict[int, QueueEntry], length: int) -> None:
        self._window = window
        self._chunks = chunks
        self._held = held
        self._len = length

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[QueueEntry]:
        yield from self._window
        held = self._held
        for c in self._chunks:
            sid_a, seq_a, exp_a = c.sid, c.seq, c.exp
            for i in range(c.start, len(seq_a)):
                sid = sid_a[i]
                if sid == _HELD:
                    yield held[seq_a[i]]
                else:
                    yield _stub(sid & _SID_MASK, seq_a[i], exp_a[i], bool(sid & _REDELIVERED))


class PagedReadyList(ReadyList):
    """Ready entries with a RAM window of ``budget`` body bytes and a paged tail (module docstring).

    Same interface as ``ReadyList`` plus ``append_unloaded`` (recovery), ``in_memory()`` and
    ``paged_count``. ``budget`` is in bytes (0: every stored entry beyond the one being delivered
    is paged). ``load(store_id) -> Message | None``; ``on_lost(body_size)`` when it gave None.
    """

    __slots__ = ("_load", "budget", "_on_lost", "_ram", "_chunks", "_paged", "_held",
                 "_held_bytes")

    def __init__(self, load: Callable[[int], Message | None], budget: int,
                 on_lost: Callable[[int], None] | None = None) -> None:
        super().__init__()
        self._load = load
        self.budget = budget
        self._on_lost = on_lost
        self._ram = 0  # body bytes of the window
        self._chunks: deque[_Chunk] = deque()
        self._paged = 0  # entries in the paged tail (stored and held)
        self._held: dict[int, QueueEntry] = {}  # seq -> held entry of the paged tail
        self._held_bytes = 0

    # -- sizes ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._dq) + self._paged

    def __bool__(self) -> bool:
        return bool(self._dq) or self._paged > 0

    @property
    def paged_count(self) -> int:
        """Entries in the paged tail (held ones included)."""
        return self._paged

    def in_memory(self) -> tuple[int, int]:
        """(entries held as objects, their body bytes): the window plus held entries. A paged
        stored entry costs 28 bytes of arrays on top (``paged_count - len(held)`` of them)."""
        return len(self._dq) + len(self._held), self._ram + self._held_bytes

    def __iter__(self) -> Iterator[QueueEntry]:
        """Entries in delivery order; paged ones are read back with ``load`` (tests, diagnostics:
        this reads every paged body; do not mutate while iterating)."""
        yield from self._dq
        for c in list(self._chunks):
            for i in range(c.start, len(c.seq)):
                sid = c.sid[i]
                if sid == _HELD:
                    yield self._held[c.seq[i]]
                    continue
                msg = self._load(sid & _SID_MASK)
                if msg is not None:
                    entry = QueueEntry(msg, c.seq[i], None if c.exp[i] < 0 else c.exp[i])
                    entry.redelivered = bool(sid & _REDELIVERED)
                    yield entry

    # -- adding -----------------------------------------------------------------------------
    def append(self, entry: QueueEntry) -> None:
        """Add a newly published entry at the tail (of the paged tail when there is one)."""
        if self._paged:
            self._push_back(entry, len(entry.message.body))
            return
        self._dq.append(entry)
        self._ram += len(entry.message.body)
        if self._ram > self.budget:
            self._spill()

    def append_unloaded(self, entry: QueueEntry, size: int) -> None:
        """Add a recovered entry whose body was left on disk (``entry.message.store_id`` set,
        ``size`` its body bytes) at the end of the paged tail."""
        if entry.message.store_id is None:
            raise ValueError("an entry without a store id cannot be paged")
        self._push_back(entry, size)

    def insert(self, entry: QueueEntry) -> None:
        """Put a requeued entry back at its place by ``seq``: in the window when it belongs
        before the paged tail (then page out the window's tail if over budget), else held in the
        paged tail."""
        chunks = self._chunks
        if chunks:
            head = chunks[0]
            if entry.seq > head.seq[head.start]:
                self._insert_held(entry)
                return
        super().insert(entry)
        self._ram += len(entry.message.body)
        if self._ram > self.budget:
            self._spill()

    # -- taking -----------------------------------------------------------------------------
    def peek(self) -> QueueEntry | None:
        """The head entry (read back from disk if the window is empty), ``None`` when empty."""
        dq = self._dq
        if not dq and self._paged:
            self._fill()
        return dq[0] if dq else None

    def popleft(self) -> QueueEntry:
        """Remove and return the head; ``IndexError`` when empty."""
        dq = self._dq
        if not dq and self._paged:
            self._fill()
        entry = dq.popleft()
        self._ram -= len(entry.message.body)
        return entry

    def clear(self) -> ClearedEntries:
        """Remove everything; returns a ``ClearedEntries`` (sized, delivery order, paged entries
        as store-id stubs)."""
        out = ClearedEntries(list(self._dq), self._chunks, self._held, len(self))
        self._dq.clear()
        self._ram = 0
        self._chunks = deque()
        self._held = {}
        self._held_bytes = 0
        self._paged = 0
        return out

    def pop_expired(self, now: int) -> list[QueueEntry]:
        """Remove and return the expired entries at the head (``now >= expires_at``), in order,
        reading paged ones back as they reach the head."""
        dq = self._dq
        out: list[QueueEntry] = []
        while True:
            if not dq:
                if not self._paged:
                    break
                head_exp = self._paged_head_exp()
                if head_exp is None or now < head_exp:
                    break
                self._fill()
                if not dq:
                    break
            exp = dq[0].expires_at
            if exp is None or now < exp:
                break
            entry = dq.popleft()
            self._ram -= len(entry.message.body)
            out.append(entry)
        return out

    def next_expiry(self) -> int | None:
        """The head's ``expires_at`` (ms; the paged head's when the window is empty), ``None``
        when empty or the head has no TTL."""
        dq = self._dq
        if dq:
            return dq[0].expires_at
        return self._paged_head_exp() if self._paged else None

    # -- internals --------------------------------------------------------------------------
    def _paged_head_exp(self) -> int | None:
        c = self._chunks[0]
        exp = c.exp[c.start]
        return None if exp < 0 else exp

    def _spill(self) -> None:
        """Move entries from the window's tail to the paged tail's front until within budget."""
        dq = self._dq
        budget = self.budget
        while self._ram > budget and dq:
            entry = dq.pop()
            size = len(entry.message.body)
            self._ram -= size
            chunks = self._chunks
            c = chunks[0] if chunks else None
            if c is None or c.start == 0:
                c = _Chunk(front=True)
                chunks.appendleft(c)
            i = c.start - 1
            c.start = i
            c.sid[i], c.seq[i], c.exp[i], c.size[i] = self._encode(entry, size)
            self._paged += 1

    def _encode(self, entry: QueueEntry, size: int) -> tuple[int, int, int, int]:
        """Array fields of ``entry``; holds it when it cannot be dropped."""
        sid = entry.message.store_id
        if sid is None or entry.delivery_count:
            self._held[entry.seq] = entry
            self._held_bytes += size
            sid = _HELD
        elif entry.redelivered:
            sid |= _REDELIVERED
        exp = entry.expires_at
        return sid, entry.seq, -1 if exp is None else exp, size

    def _push_back(self, entry: QueueEntry, size: int) -> None:
        chunks = self._chunks
        if chunks and len(chunks[-1].seq) < CHUNK:
            c = chunks[-1]
        else:
            c = _Chunk()
            chunks.append(c)
        sid, seq, exp, size = self._encode(entry, size)
        c.sid.append(sid)
        c.seq.append(seq)
        c.exp.append(exp)
        c.size.append(size)
        self._paged += 1

    def _insert_held(self, entry: QueueEntry) -> None:
        """Hold a requeued entry at its ``seq`` place inside the paged tail (rare: O(CHUNK))."""
        seq = entry.seq
        for c in self._chunks:
            if c.seq[-1] > seq:
                i = bisect_left(c.seq, seq, c.start)
                break
        else:
            c = self._chunks[-1]
            i = len(c.seq)
        size = len(entry.message.body)
        self._held[seq] = entry
        self._held_bytes += size
        exp = entry.expires_at
        c.sid.insert(i, _HELD)
        c.seq.insert(i, seq)
        c.exp.insert(i, -1 if exp is None else exp)
        c.size.insert(i, size)
        self._paged += 1

    def _fill(self) -> None:
        """Read a batch from the paged tail's head into the window (at least one entry)."""
        dq = self._dq
        chunks = self._chunks
        load = self._load
        limit = min(self.budget, FILL_BYTES)
        loaded = n = 0
        while chunks and (n == 0 or (loaded < limit and n < FILL_COUNT)):
            c = chunks[0]
            i = c.start
            sid, seq, exp, size = c.sid[i], c.seq[i], c.exp[i], c.size[i]
            i += 1
            if i == len(c.seq):
                chunks.popleft()
            else:
                c.start = i
            self._paged -= 1
            if sid == _HELD:
                entry = self._held.pop(seq)
                self._held_bytes -= size
            else:
                msg = load(sid & _SID_MASK)
                if msg is None:
                    if self._on_lost is not None:
                        self._on_lost(size)
                    continue
                entry = QueueEntry(msg, seq, None if exp < 0 else exp)
                if sid & _REDELIVERED:
                    entry.redelivered = True
            dq.append(entry)
            loaded += size
            n += 1
        self._ram += loaded
