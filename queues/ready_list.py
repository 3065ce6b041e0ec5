"""The ordered collection of a queue's ready (not yet delivered) entries.

Owns: delivery order. ``ReadyList`` is one FIFO ordered by publish sequence (a ``deque``);
``PriorityReadyList`` is one such FIFO per effective priority, served highest priority first. Both
put a requeued entry back at its original place by ``seq``, expose the head(s) for per-message TTL
(which RabbitMQ only enforces at the head of each FIFO), and keep their own length.

Must not know: consumers, byte accounting, dead-lettering, clocks (callers pass ``now``).

Sources: "RabbitMQ: Priority Queue" (higher priority first, FIFO within a priority),
"RabbitMQ: TTL" ("only when expired messages reach the head of a queue will they actually be
discarded"), AMQP 0-9-1 §3.1.3.2 / "RabbitMQ: Consumer Acknowledgements" (requeue position).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from queues.entry import QueueEntry

__all__ = ["ReadyList", "PriorityReadyList", "Removed"]


class Removed(Protocol):
    """What ``clear`` returns: the removed entries, sized and re-iterable, in delivery order (a
    list here; ``queues.paged_list.ClearedEntries`` for a paging queue)."""

    def __len__(self) -> int:
        """How many entries were removed."""
        ...

    def __iter__(self) -> Iterator[QueueEntry]:
        """The removed entries in delivery order."""
        ...


class ReadyList:
    """Ready entries in ascending ``seq`` order (deque; O(1) at both ends).

    ``append`` is for newly published entries (``seq`` larger than any present); ``insert`` puts a
    requeued entry at its ``seq`` position (O(1) when it belongs at either end, the usual case;
    O(n) in the middle). ``popleft``/``peek`` work on the head. Raises ``IndexError`` when popping
    an empty list.
    """

    __slots__ = ("_dq",)

    def __init__(self) -> None:
        self._dq: deque[QueueEntry] = deque()

    def __len__(self) -> int:
        return len(self._dq)

    def __bool__(self) -> bool:
        return bool(self._dq)

    def __iter__(self) -> Iterator[QueueEntry]:
        """Entries in delivery order (do not mutate while iterating)."""
        return iter(self._dq)

    def append(self, entry: QueueEntry) -> None:
        """Add a newly published entry at the tail."""
        self._dq.append(entry)

    def insert(self, entry: QueueEntry) -> None:
        """Put ``entry`` back at its place by ``seq`` (requeue)."""
        dq = self._dq
        seq = entry.seq
        if not dq or seq < dq[0].seq:
            dq.appendleft(entry)
        elif seq > dq[-1].seq:
            dq.append(entry)
        else:
            lo, hi = 0, len(dq)
            while lo < hi:
                mid = (lo + hi) >> 1
                if dq[mid].seq < seq:
                    lo = mid + 1
                else:
                    hi = mid
            dq.insert(lo, entry)

    def peek(self) -> QueueEntry | None:
        """The head entry, ``None`` when empty."""
        dq = self._dq
        return dq[0] if dq else None

    def popleft(self) -> QueueEntry:
        """Remove and return the head; ``IndexError`` when empty."""
        return self._dq.popleft()

    def clear(self) -> Removed:
        """Remove everything; returns the removed entries in delivery order."""
        out = list(self._dq)
        self._dq.clear()
        return out

    def pop_expired(self, now: int) -> list[QueueEntry]:
        """Remove and return the expired entries at the head (``now >= expires_at``), in order."""
        dq = self._dq
        out: list[QueueEntry] = []
        while dq:
            exp = dq[0].expires_at
            if exp is None or now < exp:
                break
            out.append(dq.popleft())
        return out

    def next_expiry(self) -> int | None:
        """The head's ``expires_at`` (ms), ``None`` when empty or the head has no TTL."""
        dq = self._dq
        return dq[0].expires_at if dq else None


class PriorityReadyList:
    """Ready entries of a priority queue: one ``ReadyList`` per effective priority.

    Same interface as ``ReadyList``. The head is the head of the highest non-empty priority;
    ``pop_expired``/``next_expiry`` look at the head of every priority (RabbitMQ's priority queue
    is a set of classic sub-queues, each expiring from its own head). ``entry.priority`` selects
    the sub-list and must not change while the entry is in the list.
    """

    __slots__ = ("_levels", "_order", "_len")

    def __init__(self) -> None:
        self._levels: dict[int, ReadyList] = {}
        self._order: list[int] = []  # non-empty priorities, ascending; the head is the last one
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[QueueEntry]:
        """Entries in delivery order (highest priority first, then by seq)."""
        for p in reversed(self._order):
            yield from self._levels[p]

    def _level(self, priority: int) -> ReadyList:
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = ReadyList()
            insort(self._order, priority)
        return level

    def append(self, entry: QueueEntry) -> None:
        """Add a newly published entry at the tail of its priority."""
        self._level(entry.priority).append(entry)
        self._len += 1

    def insert(self, entry: QueueEntry) -> None:
        """Put a requeued entry back at its place by ``seq`` within its priority."""
        self._level(entry.priority).insert(entry)
        self._len += 1

    def peek(self) -> QueueEntry | None:
        """The next entry to deliver, ``None`` when empty."""
        if not self._len:
            return None
        return self._levels[self._order[-1]].peek()

    def popleft(self) -> QueueEntry:
        """Remove and return the next entry to deliver; ``IndexError`` when empty."""
        if not self._len:
            raise IndexError("pop from an empty PriorityReadyList")
        p = self._order[-1]
        level = self._levels[p]
        entry = level.popleft()
        self._len -= 1
        if not level:
            del self._levels[p]
            self._order.pop()
        return entry

    def clear(self) -> list[QueueEntry]:
        """Remove everything; returns the removed entries in delivery order."""
        out = list(self)
        self._levels.clear()
        self._order.clear()
        self._len = 0
        return out

    def pop_expired(self, now: int) -> list[QueueEntry]:
        """Remove and return the expired entries at the head of every priority."""
        out: list[QueueEntry] = []
        for p in reversed(self._order[:]):
            level = self._levels[p]
            expired = level.pop_expired(now)
            if expired:
                out.extend(expired)
                self._len -= len(expired)
                if not level:
                    del self._levels[p]
                    self._order.remove(p)
        return out

    def next_expiry(self) -> int | None:
        """The earliest ``expires_at`` among the heads of all priorities, ``None`` if none."""
        best: int | None = None
        for level in self._levels.values():
            exp = level.next_expiry()
            if exp is not None and (best is None or exp < best):
                best = exp
        return best
