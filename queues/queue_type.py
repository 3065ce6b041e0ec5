"""The queue-type seam: the one surface the broker core uses on any kind of queue.

In the spirit of RabbitMQ's ``rabbit_queue_type`` behaviour (declare/delete, publish, consume/
cancel, settle, get, purge, capabilities): classic queues (``queues.queue.Queue``), stream queues
(``queues.stream.queue.StreamQueue``) and replicated quorum queues (``cluster.quorum``) implement
``QueueType``; the core asks a queue's ``capabilities`` what it supports instead of testing its
class, and it never calls the message store for a queue (a queue owns its persistence: classic
queues through their ``Journal``, streams through their log, quorum queues through Raft).

"Safe" publishes (DESIGN.md §4a): a publisher confirm means what the queue type says it means --
a classic queue's persistent message is safe once the store's group commit covering it synced, a
stream's once its log synced, a quorum queue's once a majority of replicas hold it. A queue type
that cannot say at once returns a ``SafeWait`` from ``publish_wait`` and later reports progress
through the source's monotonic counter; the core's one confirm path (``ConfirmTracker.wait``)
settles the confirm when every queue the message went to is safe.

Must not know: sockets, channels, frames, threads. Sources: rabbit_queue_type.erl (RabbitMQ
3.10), LavinMQ ``clustering/replicator.cr`` (replication as an injected interface).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from queues.arguments import QueueSettings
    from queues.entry import QueueEntry
    from queues.message import Message
    from queues.protocols import Consumer, PublishResult

__all__ = ["Capabilities", "CLASSIC", "STREAM", "QUORUM", "QueueType", "Journal", "SafeSource",
           "SafeWaiter", "ReplicatedPurge", "ReplicatedGet", "GetAnswer"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a queue type supports (RabbitMQ ``rabbit_queue_type:capabilities/0``).

    * ``type_name`` -- the ``x-queue-type`` value ("classic", "stream", "quorum").
    * ``basic_get`` -- Basic.Get is served (streams: 540 NOT_IMPLEMENTED, a connection error).
    * ``purge`` -- Queue.Purge is served (streams: 540).
    * ``nack`` -- Basic.Nack / Basic.Reject are served (streams: 540).
    * ``no_ack_consumers`` -- Basic.Consume with no-ack is served (streams: 540).
    * ``needs_prefetch`` -- a consumer must have a per-consumer prefetch (streams: 406).
    * ``consume_offset`` -- consumers take ``x-stream-offset`` (streams).
    * ``message_store`` -- persistent messages go to the shared message store (classic only:
      streams keep their own log, quorum queues their Raft log).
    * ``exclusive``, ``auto_delete``, ``transient`` -- the declaration flags it accepts
      (streams and quorum queues: durable, shared and permanent only; 406 otherwise).
    * ``replicated`` -- held by a Raft group across cluster members.
    """

    type_name: str
    basic_get: bool = True
    purge: bool = True
    nack: bool = True
    no_ack_consumers: bool = True
    needs_prefetch: bool = False
    consume_offset: bool = False
    message_store: bool = False
    exclusive: bool = True
    auto_delete: bool = True
    transient: bool = True
    replicated: bool = False


CLASSIC = Capabilities("classic", message_store=True)
STREAM = Capabilities("stream", basic_get=False, purge=False, nack=False, no_ack_consumers=False,
                      needs_prefetch=True, consume_offset=True, exclusive=False,
                      auto_delete=False, transient=False)
QUORUM = Capabilities("quorum", exclusive=False, auto_delete=False, transient=False,
                      replicated=True)


class Journal(Protocol):
    """A classic durable queue's persistence over the shared message store: the queue calls it
    as its entries move, so nobody else does (``amqp_broker.core.durability.QueueJournal``)."""

    def delivered(self, entry: QueueEntry) -> None:
        """``entry`` went to a consumer that must settle it (recorded so a restart marks it
        redelivered)."""
        ...

    def settled(self, entries: Iterable[QueueEntry]) -> None:
        """These entries left the queue for good (acked, no-ack delivery, dropped, dead-lettered,
        expired, purged): one ack record for all of them."""
        ...


class SafeWaiter(Protocol):
    """A publisher waiting for confirms (the core's channel)."""

    def advance_safe(self, source: object, up_to: int, failed: Collection[int] = ()) -> bool:
        """``source`` made every token <= ``up_to`` safe -- except those in ``failed``, which it
        refused (nacked: a quorum queue's x-overflow reject-publish); True when nothing waits on
        it any more (the source may then forget this waiter)."""
        ...


class SafeSource(Protocol):
    """Something whose progress makes publishes safe, as a counter that only grows: the message
    store's synced id, a Raft group's count of committed publishes. A replicated queue type
    gives ``(source, token)`` for its last publish (``QueueType.publish_wait``); the core holds
    the confirm (``ConfirmTracker.wait``) and calls ``watch`` so the source reports progress."""

    def watch(self, waiter: SafeWaiter) -> None:
        """Call ``waiter.advance_safe(self, up_to)`` as tokens become safe, until it returns
        True (or the waiter is gone)."""
        ...


class QueueType(Protocol):
    """What the core calls on a queue, whatever its type (see the module docstring). Errors:
    ``queues.errors.QueueDeleted`` after ``delete()``; ``UnknownEntry`` for a settle of an entry
    the queue did not hand out."""

    name: str
    durable: bool
    exclusive_owner: object | None

    def __hash__(self) -> int:
        """Queues are kept in sets and as dict keys (by identity)."""
        ...

    auto_delete: bool
    arguments: dict
    settings: QueueSettings
    had_consumers: bool

    @property
    def capabilities(self) -> Capabilities:
        """What this queue supports."""
        ...

    @property
    def message_count(self) -> int:
        """Ready messages (Declare-Ok / Get-Ok message-count)."""
        ...

    @property
    def message_bytes(self) -> int:
        """Body bytes of ready messages held in RAM (what the memory alarm counts)."""
        ...

    @property
    def unacked_count(self) -> int:
        """Deliveries not settled yet."""
        ...

    @property
    def consumer_count(self) -> int:
        """Registered consumers (Declare-Ok consumer-count)."""
        ...

    def publish(self, message: Message) -> PublishResult:
        """Take a routed message (deliver at once when a consumer can)."""
        ...

    def publish_wait(self) -> tuple[SafeSource, int] | None:
        """For the publish just made: the ``(source, token)`` its confirm must wait for, None
        when it is safe already (classic queues: the message store is handled by the core;
        streams: their log sync). Replicated types return their group and the publish's token."""
        ...

    def dispatch(self) -> int:
        """Deliver ready messages to consumers with credit; how many were delivered."""
        ...

    def get(self, no_ack: bool) -> QueueEntry | None:
        """Basic.Get: the next ready message, or None."""
        ...

    def ack(self, entry: QueueEntry) -> None:
        """Settle a delivered entry for good."""
        ...

    def ack_many(self, entries: list[QueueEntry]) -> None:
        """``ack`` for the entries of one Basic.Ack with ``multiple`` (one journal record)."""
        ...

    def requeue_many(self, entries: Iterable[QueueEntry]) -> None:
        """Put delivered entries back in their places, redelivered."""
        ...

    def reject(self, entry: QueueEntry) -> None:
        """Settle a delivered entry as rejected (dead-letter or drop)."""
        ...

    def purge(self) -> int:
        """Drop the ready messages; how many."""
        ...

    def delete(self) -> Iterable[QueueEntry]:
        """Queue.Delete: drop everything, unregister consumers."""
        ...

    def add_consumer(self, consumer: Consumer) -> None:
        """Basic.Consume."""
        ...

    def remove_consumer(self, consumer: Consumer) -> bool:
        """Basic.Cancel / channel close; False when unknown."""
        ...

    def consumers(self) -> tuple[Consumer, ...]:
        """The registered consumers."""
        ...

    def expire(self) -> int:
        """Drop expired heads now; how many."""
        ...

    def next_expiry(self) -> int | None:
        """When (ms, the queue's clock) the next head expires, None without TTL."""
        ...


class ReplicatedPurge(Protocol):
    """Queue.Purge of a queue whose ``capabilities.replicated`` is set: the purge is one command
    in the queue's log, answered once it is applied (RabbitMQ ``rabbit_quorum_queue:purge/1``)."""

    def purge_then(self, done: Callable[[int], None]) -> None:
        """Propose the purge; ``done(count of messages purged)`` once it is applied here."""
        ...


#: ``done(entry, remaining)`` of a replicated Basic.Get: the message checked out (None: Get-Empty)
#: and the ready messages left (Get-Ok's message_count).
GetAnswer = Callable[["QueueEntry | None", int], None]


class ReplicatedGet(Protocol):
    """Basic.Get of a queue whose ``capabilities.replicated`` is set: one command in the queue's
    log, answered once it is applied, so that a message reaches one client only (RabbitMQ
    ``rabbit_quorum_queue:dequeue/4``)."""

    def get_then(self, no_ack: bool, done: GetAnswer) -> None:
        """Propose the get; ``done(entry or None, remaining)`` once it is applied here. Raises
        ``NotServed`` (406) where the queue cannot answer (no replica on this broker)."""
        ...
