"""A heap of next deadlines, one per key: what the broker's timers use instead of scanning.

``TimerHeap(fire)`` keeps, for each key (a connection id, a queue), the moment it is next due
(seconds, ``broker.clock``). ``run_due(now)`` calls ``fire(key, now)`` for every key due by ``now``
and costs O(due keys + distinct deadlines due · log n): an idle broker with 100,000 queues does no
work per tick (DESIGN.md §5, "Idle costs nothing").

The heap holds distinct deadlines (floats, cheap to compare), each with the keys due then: keys
that share a deadline (idle connections' heartbeats, which ``Connection`` puts on whole seconds)
cost the heap one entry. ``on_earlier(when)``, when given, is told of every new deadline, so a
caller sleeping until the next one can wake sooner (``Broker.tick_delay``).

Lazy: ``schedule(key, when)`` only ever moves a key's deadline earlier; a deadline that moved later
(a connection heard from its peer, a queue was used) is found out when it fires: ``fire``
re-checks the real state and schedules the key again. A re-scheduled or cancelled key leaves a
stale entry behind, skipped when its deadline comes; everything is rebuilt when stale entries
outnumber live ones, so the size stays O(live keys). Must not know: what the keys are, clocks, I/O.
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
    """Next deadlines (seconds) per key; ``fire(key, now)`` runs for each due key;
    ``on_earlier(when)`` (optional) hears of each deadline not already in the heap."""

    __slots__ = ("_fire", "_heap", "_at", "_due", "_entries", "_seq", "on_earlier")

    def __init__(self, fire: Callable[[K, float], None],
                 on_earlier: Callable[[float], None] | None = None) -> None:
        self._fire = fire
        self.on_earlier = on_earlier
        self._heap: list[float] = []  # distinct deadlines
        self._at: dict[float, list[tuple[K, int]]] = {}  # deadline -> (key, seq), stale too
        self._due: dict[K, tuple[float, int]] = {}  # key -> (when, seq) of its live entry
        self._entries = 0  # entries in ``_at``, stale ones included
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
        heap, at, due = self._heap, self._at, self._due
        while heap:
            when = heap[0]
            for key, seq in at[when]:
                entry = due.get(key)
                if entry is not None and entry[1] == seq:
                    return when
            heapq.heappop(heap)
            self._entries -= len(at.pop(when))
        return None

    def schedule(self, key: K, when: float) -> None:
        """Make ``key`` due at ``when`` at the latest: an earlier deadline it has is kept."""
        entry = self._due.get(key)
        if entry is not None and entry[0] <= when:
            return
        seq = next(self._seq)
        self._due[key] = (when, seq)
        keys = self._at.get(when)
        if keys is None:
            self._at[when] = [(key, seq)]
            heapq.heappush(self._heap, when)
            if self.on_earlier is not None:
                self.on_earlier(when)
        else:
            keys.append((key, seq))
        self._entries += 1
        if self._entries > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def cancel(self, key: K) -> None:
        """Forget ``key`` (no error when it is not scheduled)."""
        if self._due.pop(key, None) is not None and self._entries > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def run_due(self, now: float) -> int:
        """Call ``fire(key, now)`` for each key due at ``now`` or earlier, in deadline order (keys
        of one deadline in the order they were scheduled); a key (re)scheduled at or before
        ``now`` by a ``fire`` runs at the next call, not in this one. Returns how many fired."""
        heap = self._heap
        if not heap or heap[0] > now:
            return 0
        at, due = self._at, self._due
        popped: list[tuple[K, int]] = []
        while heap and heap[0] <= now:
            popped.extend(at.pop(heapq.heappop(heap)))
        self._entries -= len(popped)
        fired = 0
        for key, seq in popped:
            entry = due.get(key)
            if entry is None or entry[1] != seq:
                continue  # stale: cancelled, or re-scheduled (by an earlier fire, too)
            del due[key]
            self._fire(key, now)
            fired += 1
        return fired

    def _rebuild(self) -> None:
        at: dict[float, list[tuple[K, int]]] = {}
        for key, (when, seq) in self._due.items():
            keys = at.get(when)
            if keys is None:
                at[when] = [(key, seq)]
            else:
                keys.append((key, seq))
        self._at = at
        self._heap = list(at)
        heapq.heapify(self._heap)
        self._entries = len(self._due)
