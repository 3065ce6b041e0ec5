"""The read-only side of a classic queue: its counters and snapshots (what Queue.Declare-Ok,
Basic.Get-Ok, the management API and the memory alarm read), apart from the operations in
``queues.queue``.

Must not know: anything ``queues.queue`` must not (sockets, channels, frames, I/O).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from queues.paged_list import PagedReadyList

if TYPE_CHECKING:
    from queues.consumers import ConsumerSet
    from queues.entry import QueueEntry
    from queues.protocols import Consumer
    from queues.ready_list import PriorityReadyList, ReadyList

__all__ = ["QueueView"]


class QueueView:
    """Counters and snapshots of ``queues.queue.Queue`` (its base class; the state lives in the
    subclass's slots: ``_ready``, ``_bytes``, ``_unacked``, ``_consumers``, ``_deleted``).

    Counters: ``message_count`` (ready), ``message_bytes`` (body bytes of ready),
    ``unacked_count`` (delivered to ack-mode consumers or fetched with Basic.Get no_ack=False, not
    settled), ``consumer_count``. Every published, accepted entry is at any time exactly one of:
    ready, unacked, or gone (delivered no-ack, acked, dead-lettered/dropped, purged, deleted)."""

    __slots__ = ()

    _ready: ReadyList | PriorityReadyList | PagedReadyList
    _bytes: int
    _unacked: dict[int, QueueEntry]
    _consumers: ConsumerSet
    _deleted: bool

    @property
    def message_count(self) -> int:
        """Ready messages (Queue.DeclareOk / Basic.GetOk message-count)."""
        return len(self._ready)

    @property
    def message_bytes(self) -> int:
        """Body bytes of ready messages (what x-max-length-bytes limits)."""
        return self._bytes

    @property
    def paging(self) -> bool:
        """True when this queue pages stored bodies out beyond its memory budget."""
        return isinstance(self._ready, PagedReadyList)

    def in_memory(self) -> tuple[int, int]:
        """(ready entries held in RAM as objects, their body bytes); the rest of
        ``message_count`` is paged out (a few dozen bytes each, no body)."""
        ready = self._ready
        if isinstance(ready, PagedReadyList):
            return ready.in_memory()
        return len(ready), self._bytes

    @property
    def unacked_count(self) -> int:
        """Entries handed to ack-mode consumers / Basic.Get and not yet settled."""
        return len(self._unacked)

    @property
    def consumer_count(self) -> int:
        """Registered consumers (Queue.DeclareOk consumer-count)."""
        return len(self._consumers)

    @property
    def active_consumer(self) -> Consumer | None:
        """The single active consumer of an x-single-active-consumer queue, else ``None``."""
        return self._consumers.active

    @property
    def deleted(self) -> bool:
        """True once ``delete()`` has been called."""
        return self._deleted

    def consumers(self) -> tuple[Consumer, ...]:
        """The registered consumers in registration order."""
        return tuple(self._consumers)

    @property
    def consumers_version(self) -> int:
        """Changes whenever a consumer is added or removed (to cache views of ``consumers()``)."""
        return self._consumers.version

    def ready_entries(self) -> list[QueueEntry]:
        """A snapshot of the ready entries in delivery order (diagnostics, tests). A paging
        queue reads every paged body back for it: for big queues use ``iter_ready``."""
        return list(self._ready)

    def iter_ready(self) -> Iterator[QueueEntry]:
        """The ready entries in delivery order, one at a time (paged ones read back as they
        come, so memory stays flat). Do not change the queue while iterating."""
        return iter(self._ready)

    def unacked_entries(self) -> list[QueueEntry]:
        """A snapshot of the unacked entries in delivery order."""
        return list(self._unacked.values())
