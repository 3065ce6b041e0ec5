"""A heap of next deadlines, one per key: what the broker's timers use instead of scanning.

``TimerHeap(fire)`` keeps, for each key (a connection id, a queue), the moment it is next due
(seconds, ``broker.clock``). ``run_due(now)`` calls ``fire(key, now)`` for every key due by ``now``
and costs O(due keys · log n): an idle broker with 100,000 queues does no work per tick
(DESIGN.md §5, "Idle costs nothing").

Lazy: ``schedule(key, when)`` only ever moves a key's deadline earlier; a deadline that moved later
(a connection heard from its peer, a queue was used) is found out when it fires: ``fire``
re-checks the real state and schedules the key again. A re-scheduled or cancelled key leaves a
stale heap entry behind, skipped when popped; the heap is rebuilt when stale entries outnumber
live ones, so its size stays O(live keys). Must not know: what the keys are, clocks, I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["TIMER_SLACK", "TimerHeap"]

K = TypeVar("K", bound=Hashable)

#: Seconds a timer is scheduled early: its ``fire`` re-checks the real condition with the
#: caller's own comparison, so float rounding can only make it fire early, never late.
TIMER_SLACK = 0.001
#: Stale entries tolerated before a rebuild, on top of the live ones.
_SLACK = 256


class TimerHeap(Generic[K]):
    """Next deadlines (seconds) per key; ``fire(key, now)`` runs for each due key."""

    __slots__ = ("_fire", "_heap", "_due", "_seq")

    def __init__(self, fire: Callable[[K, float], None]) -> None:
        self._fire = fire
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, tuple[float, int]] = {}  # key -> (when, seq) of its live entry
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Keys scheduled."""
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def when(self, key: K) -> float | None:
        """When ``key`` is due (seconds), None when it is not scheduled."""
        entry = self._due.get(key)
        return None if entry is None else entry[0]

    def next_deadline(self) -> float | None:
        """The earliest live deadline, None when nothing is scheduled (drops stale tops)."""
        heap, due = self._heap, self._due
        while heap:
            when, seq, key = heap[0]
            entry = due.get(key)
            if entry is not None and entry[1] == seq:
                return when
            heapq.heappop(heap)
        return None

    def schedule(self, key: K, when: float) -> None:
        """Make ``key`` due at ``when`` at the latest: an earlier deadline it has is kept."""
        entry = self._due.get(key)
        if entry is not None and entry[0] <= when:
            return
        seq = next(self._seq)
        self._due[key] = (when, seq)
        heapq.heappush(self._heap, (when, seq, key))
        if len(self._heap) > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def cancel(self, key: K) -> None:
        """Forget ``key`` (no error when it is not scheduled)."""
        if self._due.pop(key, None) is not None and len(self._heap) > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def run_due(self, now: float) -> int:
        """Call ``fire(key, now)`` for each key due at ``now`` or earlier, in deadline order; a
        key (re)scheduled at or before ``now`` by a ``fire`` runs at the next call, not in this
        one. Returns how many fired."""
        heap = self._heap
        if not heap or heap[0][0] > now:
            return 0
        due = self._due
        popped = []
        while heap and heap[0][0] <= now:
            popped.append(heapq.heappop(heap))
        fired = 0
        for _when, seq, key in popped:
            entry = due.get(key)
            if entry is None or entry[1] != seq:
                continue  # stale: cancelled, or re-scheduled (by an earlier fire, too)
            del due[key]
            self._fire(key, now)
            fired += 1
        return fired

    def _rebuild(self) -> None:
        due = self._due
        self._heap = [(when, seq, key) for key, (when, seq) in due.items()]
        heapq.heapify(self._heap)
