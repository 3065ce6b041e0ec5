"""One AMQP queue: ready messages, unacked bookkeeping, consumers, TTL, length limits, DLX.

Owns: the life of a message inside one queue, following RabbitMQ classic queues -- enqueue or
hand straight to a consumer on publish, synchronous dispatch (round robin, consumer priorities,
single active consumer), Basic.Get, ack / requeue (back to its original place) / reject, per-queue
and per-message TTL (expired at the head), x-max-length / x-max-length-bytes with the three
overflow behaviours, priorities, and dead-lettering (the queue builds the dead-lettered message;
the core routes it).

Must not know: sockets, channels, frames, timers, exchanges/bindings, threads or event loops.
Time comes from the injected ``clock`` (ms, monotonic) and ``wall_clock`` (s since epoch, only for
x-death ``time``). The core owns delivery tags, prefetch/credit (behind ``Consumer.can_deliver``),
the x-expires timer, exclusivity and auto-delete decisions, and routing of dead letters.

Re-entrancy: consumers' ``deliver`` and the ``dead_letter``/``on_discard`` callbacks may call back
into the queue (ack, publish, requeue, remove_consumer...). The queue's state is consistent before
each callback; a ``dispatch`` requested while one is running is folded into the running one.

Sources: AMQP 0-9-1 §1.8 (basic class); "RabbitMQ: TTL", "RabbitMQ: Dead Letter Exchanges",
"RabbitMQ: Queue Length Limit", "RabbitMQ: Priority Queue", "RabbitMQ: Consumer Priorities",
"RabbitMQ: Consumers (single active consumer)", "RabbitMQ: Queues (exclusive, auto-delete)";
rabbitmq-server ``rabbit_amqqueue_process.erl``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from queues.arguments import (
    OVERFLOW_DROP_HEAD,
    OVERFLOW_REJECT_PUBLISH_DLX,
    QueueSettings,
    message_ttl_or_none,
)
from queues.consumers import ConsumerSet, consumer_no_ack, deliver_to
from queues.dead_letter import REASON_EXPIRED, REASON_MAXLEN, REASON_REJECTED
from queues.dedup import DedupWindow, dedup_key
from queues.discards import Discards
from queues.entry import QueueEntry
from queues.errors import QueueDeleted, UnknownEntry
from queues.message import Message, body_size_of
from queues.paged_list import PagedReadyList
from queues.protocols import (
    REASON_DELETED,
    REASON_PURGED,
    Consumer,
    DeadLetterCallback,
    DiscardCallback,
    PublishResult,
)
from queues.queue_type import CLASSIC, Journal, SafeSource
from queues.queue_view import QueueView
from queues.ready_list import PriorityReadyList, ReadyList, Removed

__all__ = ["Consumer", "DeadLetterCallback", "DiscardCallback", "PublishResult", "Queue"]

_ROUTED: Final = PublishResult.ROUTED   # Final: a C static when compiled, not a globals lookup
_REJECTED: Final = PublishResult.REJECTED


class Queue(QueueView):
    """One queue (see module docstring). All methods are synchronous and do no I/O.

    Construction: ``Queue(name, settings, *, durable=False, exclusive_owner=None,
    auto_delete=False, arguments=None, clock, wall_clock=time.time, dead_letter=None,
    on_discard=None)``. ``settings`` comes from ``parse_arguments(arguments)``; ``arguments`` is
    kept verbatim for Queue.Declare equivalence checks. ``clock()`` returns ms (monotonic).
    ``dead_letter`` (see ``DeadLetterCallback``) is called only when the queue has an
    x-dead-letter-exchange; without it dead letters are dropped. ``exclusive_owner`` and
    ``auto_delete`` are stored for the core, which decides deletion (auto-delete: when
    ``consumer_count`` drops to 0 and ``had_consumers`` is True; "RabbitMQ: Queues").

    Persistence (the queue-type seam): a durable queue over the message store gets a ``journal``
    and calls it itself as stored entries move -- ``delivered`` when handed to a consumer that
    must settle, ``settled`` when they leave for good (ack, no-ack delivery, reject, expiry,
    max-length, purge, dead-lettering, refusal at publish). ``delete`` does not: the core drops
    the queue's whole record. Nobody else calls the store for a queue.

    Paging (issue 4, "Larger than RAM"): with ``page_in`` (``store_id -> Message | None``, the
    message store's read) and ``memory_budget`` (bytes), a non-priority queue keeps at most about
    ``memory_budget`` ready body bytes in RAM; stored messages beyond it are kept as store ids only
    and read back as consumers need them (``queues.paged_list``). Delivered and unacked entries
    always have their bodies.

    Counters and snapshots: ``queues.queue_view.QueueView``, the base class.
    """

    __slots__ = (
        "name", "durable", "exclusive_owner", "auto_delete", "arguments", "settings",
        "_clock", "_discards",
        "_ready", "_bytes", "_unacked", "_consumers", "_next_seq", "_dispatching", "_deleted",
        "_ttl", "_max_length", "_max_bytes", "_limited", "_drop_head", "_max_priority",
        "changes",
        "had_consumers", "dedup", "_journal",
    )

    def __init__(self, name: str, settings: QueueSettings, *, durable: bool = False,
                 exclusive_owner: object | None = None, auto_delete: bool = False,
                 arguments: Mapping[str, object] | None = None, clock: Callable[[], int],
                 wall_clock: Callable[[], float] = time.time,
                 dead_letter: DeadLetterCallback | None = None,
                 on_discard: DiscardCallback | None = None,
                 page_in: Callable[[int], Message | None] | None = None,
                 memory_budget: int | None = None, journal: Journal | None = None) -> None:
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = dict(arguments) if arguments else {}
        self.settings = settings
        self._clock = clock
        #: The queue's persistence (``queues.queue_type.Journal``): told as stored entries are
        #: delivered and leave; None for a queue whose messages are not stored.
        self._journal = journal
        #: Dead-lettering, the journal's settle and ``on_discard`` for leaving entries.
        self._discards = Discards(name, dead_letter=dead_letter, on_discard=on_discard,
                                  journal=journal, wall_clock=wall_clock)
        self._max_priority = settings.max_priority
        self._ready: ReadyList | PriorityReadyList | PagedReadyList
        if settings.max_priority is not None:
            self._ready = PriorityReadyList()
        elif page_in is not None and memory_budget is not None:
            self._ready = PagedReadyList(page_in, memory_budget, self._lost)
        else:
            self._ready = ReadyList()
        self._bytes = 0
        self._unacked: dict[int, QueueEntry] = {}
        self._consumers = ConsumerSet(settings.single_active_consumer)
        self._next_seq = 0
        self._dispatching = False
        self._deleted = False
        #: The set this queue adds itself to whenever its ready messages change (enqueue,
        #: dispatch, get, requeue, expiry, purge, delete, restore) or a consumer comes: the
        #: broker's ``queue_changes``, which keeps its memory total, TTL timers and busy queues
        #: without scanning every queue. None: nobody watches.
        self.changes: set[Queue] | None = None
        self.reconfigure(settings)
        #: True once any consumer was added (RabbitMQ only auto-deletes a queue that had one).
        self.had_consumers = False
        #: The publish dedup window (x-message-deduplication), None when off.
        self.dedup: DedupWindow | None = (
            DedupWindow(settings.dedup_cache_size, settings.dedup_cache_ttl, clock)
            if settings.deduplication else None)

    #: What this queue type supports (the queue-type seam, ``queues.queue_type``).
    capabilities = CLASSIC

    def reconfigure(self, settings: QueueSettings) -> None:
        """Take the TTL, length limits, overflow and dead-lettering of ``settings`` (at creation,
        and when a policy change re-applies: RabbitMQ "Policies"); a lower drop-head limit drops
        (dead-letters "maxlen") at once. Queued messages keep their expiry, as on RabbitMQ."""
        self.settings = settings
        self._ttl = settings.message_ttl
        self._max_length = settings.max_length
        self._max_bytes = settings.max_length_bytes
        self._limited = settings.max_length is not None or settings.max_length_bytes is not None
        self._drop_head = self._limited and settings.overflow == OVERFLOW_DROP_HEAD
        self._discards.configure(settings.dead_letter_exchange, settings.dead_letter_routing_key)
        if self._ready:
            self._after_enqueue(False)

    # --- change reporting -------------------------------------------------------------------

    def _changed(self) -> None:
        """Report a change of the ready messages to ``changes`` (see ``__init__``)."""
        changes = self.changes
        if changes is not None:
            changes.add(self)

    def _lost(self, size: int) -> None:
        """A paged message could not be read back (``page_in`` gave None): it left the queue."""
        self._bytes -= size

    # --- publish ----------------------------------------------------------------------------

    def publish(self, message: Message) -> PublishResult:
        """Accept ``message`` routed to this queue; deliver it at once if a consumer can take it.

        Order of rules (RabbitMQ ``rabbit_amqqueue_process``): (1) with x-overflow reject-publish
        or reject-publish-dlx, refuse when one more ready message would exceed x-max-length or
        x-max-length-bytes -- even if a consumer could take it -- returning ``REJECTED``
        (reject-publish-dlx also dead-letters it, reason "maxlen"); (2) if no message is ready and
        a consumer can deliver, hand it over directly; (3) otherwise enqueue, then with drop-head
        drop (dead-letter "maxlen") from the head until within limits, then drop expired heads
        (a TTL-0 message that could not be delivered at once expires immediately), then dispatch.

        TTL: the lower of x-message-ttl and the message's ``expiration`` (ms; unparsable = none),
        measured from now. Priority: ``min(message.priority, x-max-priority)``.
        Dedup (x-message-deduplication): after (1), a message whose dedup key is in the window is
        dropped and reported ``DUPLICATE`` (its publisher gets an ack); see ``queues.dedup``.
        Raises ``QueueDeleted`` after ``delete()``.
        """
        if self._deleted:
            raise QueueDeleted(self.name)
        if self._limited and not self._drop_head and self._would_overflow(len(message.body)):
            if self.settings.overflow == OVERFLOW_REJECT_PUBLISH_DLX:
                self._discards.dead_letter_message(message, REASON_MAXLEN)
            self._refused(message)
            return _REJECTED
        dedup = self.dedup
        if dedup is not None:
            key = dedup_key(message)
            if key is not None and dedup.check_and_add(key):
                self._refused(message)
                return PublishResult.DUPLICATE  # inside the window: dropped, yet confirmed
        entry = self._new_entry(message)
        ready = self._ready
        if not ready:
            if self._consumers and not self._dispatching:
                consumer = self._consumers.pick()
                if consumer is not None:
                    # Guard so that a publish made from inside deliver() queues up behind this one.
                    self._dispatching = True
                    try:
                        self._deliver(consumer, entry)
                    finally:
                        self._dispatching = False
                    if ready:
                        self.dispatch()
                    return _ROUTED
            ready.append(entry)
            self._bytes += len(message.body)
            self._after_enqueue(entry.expires_at is not None)
            return _ROUTED
        ready.append(entry)
        self._bytes += len(message.body)
        self._after_enqueue(entry.expires_at is not None)
        if self._consumers:
            self.dispatch()
        return _ROUTED

    def _refused(self, message: Message) -> None:
        """A stored message this queue did not take: its hold on the stored copy goes."""
        if self._journal is not None and message.store_id is not None:
            self._journal.settled((QueueEntry(message, -1),))

    def publish_wait(self) -> tuple[SafeSource, int] | None:
        """None: a classic queue's publish is safe at once, or (persistent, durable) once the
        message store syncs, which the core tracks (``queues.queue_type.QueueType``)."""
        return None

    def _new_entry(self, message: Message) -> QueueEntry:
        """The entry for a message entering now: next seq; expiry (ms, clock) from the lower of
        x-message-ttl and the message's ``expiration`` (unparsable: none); priority capped at
        x-max-priority (0 without it)."""
        seq = self._next_seq
        self._next_seq = seq + 1
        ttl = self._ttl
        expiration = message.expiration
        if expiration is not None:
            message_ttl = message_ttl_or_none(expiration)
            if message_ttl is not None and (ttl is None or message_ttl < ttl):
                ttl = message_ttl
        expires_at = None if ttl is None else self._clock() + ttl
        max_priority = self._max_priority
        if max_priority is None:
            return QueueEntry(message, seq, expires_at)
        priority = message.priority
        return QueueEntry(message, seq, expires_at,
                          priority if priority < max_priority else max_priority)

    def _would_overflow(self, body_size: int) -> bool:
        max_length = self._max_length
        if max_length is not None and len(self._ready) + 1 > max_length:
            return True
        max_bytes = self._max_bytes
        return max_bytes is not None and self._bytes + body_size > max_bytes

    def _after_enqueue(self, check_expiry: bool) -> None:
        """Apply drop-head limits, then expire heads when something may have expired."""
        changes = self.changes
        if changes is not None:
            changes.add(self)
        if self._drop_head:
            ready = self._ready
            max_length = self._max_length
            max_bytes = self._max_bytes
            while ready and ((max_length is not None and len(ready) > max_length)
                             or (max_bytes is not None and self._bytes > max_bytes)):
                entry = ready.popleft()
                self._bytes -= len(entry.message.body)
                self._discards.discard(entry, REASON_MAXLEN)
                check_expiry = True
        if check_expiry:
            self.expire()

    # --- delivery ---------------------------------------------------------------------------

    def _deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        entry.delivery_count += 1
        if not consumer_no_ack(consumer):
            self._unacked[entry.seq] = entry
            if self._journal is not None and entry.message.store_id is not None:
                self._journal.delivered(entry)
        elif self._journal is not None and entry.message.store_id is not None:
            self._journal.settled((entry,))
        deliver_to(consumer, self, entry)

    def dispatch(self) -> int:
        """Deliver ready messages to consumers that can take them; returns how many were delivered.

        Loops until the queue is empty or no consumer can deliver: expired heads are dropped /
        dead-lettered ("expired") on the way; the next consumer is chosen by ``ConsumerSet.pick``
        (highest consumer priority first, round robin within a priority, SAC). The core calls this
        whenever a consumer regains credit (Basic.Ack, Basic.Qos, Channel.Flow, socket drained).
        A call made while a dispatch is running (from a callback) returns 0 and the running one
        picks up the new state.
        """
        if self._dispatching or self._deleted:
            return 0
        ready = self._ready
        consumers = self._consumers
        if not ready or not consumers:
            return 0
        changes = self.changes
        if changes is not None:
            changes.add(self)
        self._dispatching = True
        delivered = 0
        try:
            pick = consumers.pick
            clock = self._clock
            while ready:
                head = ready.peek()
                assert head is not None
                if head.expires_at is not None and clock() >= head.expires_at:
                    ready.popleft()
                    self._bytes -= len(head.message.body)
                    self._discards.discard(head, REASON_EXPIRED)
                    continue
                consumer = pick()
                if consumer is None:
                    break
                ready.popleft()
                self._bytes -= len(head.message.body)
                self._deliver(consumer, head)
                delivered += 1
        finally:
            self._dispatching = False
        return delivered

    def get(self, no_ack: bool) -> QueueEntry | None:
        """Basic.Get: remove and return the next ready, non-expired entry, or ``None`` if empty.

        Expired heads met on the way are dropped / dead-lettered ("expired"). With
        ``no_ack=False`` the entry becomes unacked; with ``no_ack=True`` the queue forgets it.
        Increments ``entry.delivery_count``. Raises ``QueueDeleted`` after ``delete()``.
        Source: AMQP 0-9-1 §1.8.3.10 (Basic.Get); "RabbitMQ: TTL".
        """
        if self._deleted:
            raise QueueDeleted(self.name)
        ready = self._ready
        if ready:
            self._changed()
        while ready:
            entry = ready.popleft()
            self._bytes -= len(entry.message.body)
            if entry.expires_at is not None and self._clock() >= entry.expires_at:
                self._discards.discard(entry, REASON_EXPIRED)
                continue
            entry.delivery_count += 1
            if not no_ack:
                self._unacked[entry.seq] = entry
            journal = self._journal
            if journal is not None and entry.message.store_id is not None:
                if no_ack:
                    journal.settled((entry,))
                else:
                    journal.delivered(entry)
            return entry
        return None

    # --- settlement -------------------------------------------------------------------------

    def _take_unacked(self, entry: QueueEntry) -> None:
        if self._unacked.get(entry.seq) is not entry:
            raise UnknownEntry(f"entry seq={entry.seq} is not unacked in queue {self.name!r}")
        del self._unacked[entry.seq]

    def ack(self, entry: QueueEntry) -> None:
        """Settle an unacked entry (Basic.Ack). ``UnknownEntry`` if it is not unacked here.

        After ``delete()`` this is a no-op (RabbitMQ ignores acks for a deleted queue).
        """
        if self._deleted:
            return
        self._take_unacked(entry)
        if self._journal is not None and entry.message.store_id is not None:
            self._journal.settled((entry,))

    def ack_many(self, entries: list[QueueEntry]) -> None:
        """``ack`` for several entries (one Basic.Ack with ``multiple``): one journal record for
        all. ``UnknownEntry`` if one is not unacked here (those before it stay acked)."""
        if self._deleted:
            return
        for entry in entries:
            self._take_unacked(entry)
        if self._journal is not None:
            self._journal.settled(entries)

    def requeue(self, entry: QueueEntry) -> None:
        """Put an unacked entry back (Basic.Reject/Nack requeue=true, cancel/close with unacked).

        Same as ``requeue_many([entry])``.
        """
        self.requeue_many((entry,))

    def deliver_to(self, consumer: Consumer, message: Message,
                   redelivered: bool = False) -> QueueEntry:
        """Hand ``message`` straight to ``consumer`` (a message relayed by another cluster member
        for one of our consumers): it never waits in the ready list; with an ack-mode consumer it
        is unacked here like any delivery (settle it with ``ack``: a relayed message goes back to
        its sender, never into this queue). ``redelivered`` is shown to the consumer. Raises
        ``QueueDeleted``."""
        if self._deleted:
            raise QueueDeleted(self.name)
        seq = self._next_seq
        self._next_seq = seq + 1
        entry = QueueEntry(message, seq)
        entry.redelivered = redelivered
        self._deliver(consumer, entry)
        return entry

    def restore(self, message: Message, redelivered: bool, body_loaded: bool = True) -> QueueEntry:
        """Append a message recovered from the message store at broker start (tail, in publish
        order; no dedup, no length limits, no dispatch: there are no consumers yet). TTL counts
        from now (the original enqueue time is not stored). ``body_loaded=False``: the store left
        the body on disk (``message.body`` is empty; the size comes from the content header), so
        the entry goes straight to the paged tail -- only a paging queue takes that
        (``ValueError`` otherwise). Raises ``QueueDeleted``."""
        if self._deleted:
            raise QueueDeleted(self.name)
        entry = self._new_entry(message)
        entry.redelivered = redelivered
        self._changed()
        ready = self._ready
        if body_loaded:
            ready.append(entry)
            self._bytes += len(message.body)
        elif isinstance(ready, PagedReadyList):
            size = body_size_of(message.header_payload)
            ready.append_unloaded(entry, size)
            self._bytes += size
        else:
            raise ValueError(f"queue {self.name!r} does not page: restore needs the body")
        return entry

    def requeue_many(self, entries: Iterable[QueueEntry]) -> None:
        """Put unacked entries back at their original places (by ``seq``), then dispatch once.

        Each entry gets ``redelivered=True``. Afterwards drop-head limits apply (RabbitMQ
        ``requeue_and_run``), expired heads are dropped / dead-lettered, and ready messages are
        dispatched. All entries are checked first: ``UnknownEntry`` (nothing changed) if any is
        not unacked here or appears twice. No-op after ``delete()``.
        """
        if self._deleted:
            return
        batch = list(entries)
        unacked = self._unacked
        seen: set[int] = set()
        for entry in batch:
            if unacked.get(entry.seq) is not entry or entry.seq in seen:
                raise UnknownEntry(f"entry seq={entry.seq} is not unacked in queue {self.name!r}")
            seen.add(entry.seq)
        if not batch:
            return
        batch.sort(key=_seq_key, reverse=True)  # highest first: lower ones then go in front
        ready = self._ready
        for entry in batch:
            del unacked[entry.seq]
            entry.redelivered = True
            ready.insert(entry)
            self._bytes += len(entry.message.body)
        self._after_enqueue(True)
        self.dispatch()

    def reject(self, entry: QueueEntry) -> None:
        """Basic.Reject/Nack requeue=false: dead-letter ("rejected") if the queue has a DLX, else drop.

        ``UnknownEntry`` if the entry is not unacked here. No-op after ``delete()``.
        Source: "RabbitMQ: Dead Letter Exchanges".
        """
        if self._deleted:
            return
        self._take_unacked(entry)
        self._discards.discard(entry, REASON_REJECTED)

    # --- housekeeping -----------------------------------------------------------------------

    def purge(self) -> int:
        """Queue.Purge: drop all ready messages (not unacked ones); returns how many.

        Purged messages are not dead-lettered (RabbitMQ); ``on_discard`` sees reason "purged".
        """
        self._changed()
        entries = self._ready.clear()
        self._bytes = 0
        if self._journal is not None:
            self._journal.settled(entries)
        for entry in entries:
            self._discards.notify(entry, REASON_PURGED)
        return len(entries)

    def expire(self) -> int:
        """Drop / dead-letter ("expired") the expired messages at the head(s) now; returns how many.

        Only heads are examined (each priority's head in a priority queue), as RabbitMQ does; call
        again at ``next_expiry()``. The core runs the timer.
        """
        ready = self._ready
        if not ready:
            return 0
        self._changed()
        removed = 0
        while True:
            expired = ready.pop_expired(self._clock())
            if not expired:
                return removed
            removed += len(expired)
            for entry in expired:
                self._bytes -= len(entry.message.body)
            for entry in expired:
                self._discards.discard(entry, REASON_EXPIRED)

    def next_expiry(self) -> int | None:
        """When (``clock`` ms) the earliest head expires, ``None`` if no head has a TTL.

        The core schedules a timer for this moment and then calls ``expire()``.
        """
        return self._ready.next_expiry()

    def delete(self) -> Removed:
        """Queue.Delete (or auto-delete / exclusive-owner close): returns the dropped ready entries.

        Ready messages are dropped, not dead-lettered (RabbitMQ); ``on_discard`` sees "deleted".
        Consumers are unregistered (fetch ``consumers()`` first to send Basic.Cancel). Unacked
        entries stay with the core's channels; later ack/requeue/reject of them are no-ops.
        ``len(result)`` is the Queue.DeleteOk message-count. Idempotent. A paging queue returns
        a sized iterable whose paged entries are store-id stubs (``paged_list.ClearedEntries``).
        """
        if self._deleted:
            return []
        self._deleted = True
        self._changed()
        entries = self._ready.clear()
        self._bytes = 0
        self._unacked.clear()
        self._consumers.clear()
        for entry in entries:
            self._discards.notify(entry, REASON_DELETED)
        return entries

    # --- consumers --------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Register a consumer (Basic.Consume), then dispatch.

        With x-single-active-consumer the first consumer becomes active; others wait.
        Raises ``QueueDeleted`` after ``delete()``, ``ValueError`` if already registered.
        """
        if self._deleted:
            raise QueueDeleted(self.name)
        self._consumers.add(consumer)
        self.had_consumers = True
        self._changed()  # the broker's busy queues (``Broker.busy_queues``) include it now
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> bool:
        """Unregister a consumer (Basic.Cancel, channel close); returns False if it was unknown.

        With SAC, if it was active the next consumer (highest priority, then earliest registered)
        becomes active and dispatch continues. The core separately requeues the consumer's unacked
        entries (``requeue_many``) and decides on auto-delete when ``consumer_count`` is 0.
        """
        removed = self._consumers.remove(consumer)
        if removed:
            self.dispatch()
        return removed

    def __repr__(self) -> str:
        return (f"Queue({self.name!r}, ready={len(self._ready)}, unacked={len(self._unacked)}, "
                f"consumers={len(self._consumers)})")


def _seq_key(entry: QueueEntry) -> int:
    return entry.seq
