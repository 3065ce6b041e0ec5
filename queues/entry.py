"""One message as held by one queue: the unit that is ready, delivered, unacked and settled.

Owns: the per-queue facts about a message -- its publish sequence in this queue (which fixes its
place for requeue), redelivered flag, expiry deadline, effective priority and delivery count. The
``Message`` itself is shared between all queues it was routed to and never mutated.

Must not know: channels, delivery tags (the core maps its delivery tags to entries), I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from queues.message import Message

__all__ = ["Origin", "QueueEntry"]


class Origin(Protocol):
    """Where an entry relayed by another cluster member came from (set by the core): settling
    the entry is reported there. ``outcome`` is "ack", "requeue" or "reject"."""

    def settle(self, outcome: str) -> None:
        """Report ``outcome`` to the owner (once; nothing when it cannot be reached)."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # cluster.quorum's QuorumEntry extends it
class QueueEntry:
    """A message's membership in one queue (slotted; created once per (message, queue)).

    Attributes:
      * ``message`` -- the shared ``Message`` (never mutated by the queue).
      * ``seq`` -- per-queue publish sequence, strictly increasing from 0; a requeued entry goes
        back to its original place by ``seq`` ("RabbitMQ: Consumer Acknowledgements": requeued
        messages keep their position where possible).
      * ``redelivered`` -- True once the entry has been requeued (AMQP 0-9-1 §1.8.3.9
        Basic.Deliver ``redelivered``).
      * ``expires_at`` -- deadline in ms on the queue's injected clock, ``None`` = no TTL. The
        message is expired when ``clock() >= expires_at`` ("RabbitMQ: TTL").
      * ``priority`` -- effective priority, ``min(message priority, x-max-priority)``; 0 in a
        non-priority queue ("RabbitMQ: Priority Queue").
      * ``delivery_count`` -- number of times handed out (Basic.Deliver or Basic.GetOk).
      * ``origin`` -- opaque to the queue: set by the core on an entry that another cluster
        member relayed here and still owns (``amqp_broker.core.relay_inbox.RelayOrigin``), so
        settling it is reported back; ``None`` for every ordinary entry.
    """

    __slots__ = ("message", "seq", "redelivered", "expires_at", "priority", "delivery_count",
                 "origin")

    def __init__(self, message: Message, seq: int, expires_at: int | None = None,
                 priority: int = 0) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.expires_at = expires_at
        self.priority = priority
        self.delivery_count = 0
        self.origin: Origin | None = None

    def __repr__(self) -> str:
        return (f"QueueEntry(seq={self.seq}, priority={self.priority}, "
                f"redelivered={self.redelivered}, expires_at={self.expires_at}, "
                f"delivery_count={self.delivery_count})")
