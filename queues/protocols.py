"""The contracts between a queue and the broker core: the consumer protocol, publish outcome,
and the callback shapes a ``Queue`` is constructed with.

Owns: the names the core implements or receives -- ``Consumer`` (what the core's channel-side
consumer must provide), ``PublishResult``, ``DeadLetterCallback``, ``DiscardCallback`` -- and the
discard reasons. ``queues.queue`` re-exports them.

Must not know: how a queue stores or dispatches messages; sockets, channels, frames.

Sources: AMQP 0-9-1 §1.8.3.3 (Basic.Consume), §1.8.3.9 (Basic.Deliver); "RabbitMQ: Consumer
Priorities"; "RabbitMQ: Queue Length Limit"; "RabbitMQ: Dead Letter Exchanges".
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from queues.entry import QueueEntry
from queues.message import Message

if TYPE_CHECKING:
    from queues.queue import Queue

__all__ = ["Consumer", "DeadLetterCallback", "DiscardCallback", "PublishResult",
           "REASON_DELETED", "REASON_PURGED"]

#: ``dead_letter(message, exchange, routing_keys)``: route the already-built dead-lettered
#: ``message`` (x-death added, expiration removed, ``message.exchange == exchange``) through
#: ``exchange`` with exactly ``routing_keys`` (do not re-read CC/BCC headers).
DeadLetterCallback = Callable[[Message, str, list[str]], None]
#: ``on_discard(entry, reason)``: ``entry`` left the queue without being delivered/acked; reason is
#: "expired", "maxlen", "rejected", "purged" or "deleted". Called after any dead-lettering.
DiscardCallback = Callable[[QueueEntry, str], None]

REASON_PURGED = "purged"
REASON_DELETED = "deleted"


class Consumer(Protocol):
    """A Basic.Consume subscription, implemented by the core (channel side).

    * ``tag`` -- consumer tag (str). ``no_ack`` -- Basic.Consume no-ack: the queue forgets an
      entry as soon as it is delivered to such a consumer (it never becomes unacked).
    * ``priority`` -- x-priority consumer argument (int, default 0); higher is served first while
      it can deliver ("RabbitMQ: Consumer Priorities"). Read once, when the consumer is added.
    * ``can_deliver()`` -- True when the consumer has credit now (prefetch, channel flow,
      connection output buffer). Called on the hot path; must be cheap and side-effect free.
    * ``deliver(queue, entry)`` -- send Basic.Deliver now (``entry.redelivered`` is the flag). For
      an ack-mode consumer the entry is already counted as unacked when this is called and stays so
      until the core calls ``ack``/``requeue``/``reject``. Must not raise.
    """

    tag: str
    no_ack: bool
    priority: int

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Queue, entry: QueueEntry) -> None: ...


class PublishResult(enum.Enum):
    """Outcome of ``Queue.publish``.

    ``ROUTED``: the queue took the message (enqueued, delivered, or immediately expired/dropped by
    its own rules -- RabbitMQ still confirms those). ``REJECTED``: refused by x-overflow
    reject-publish / reject-publish-dlx; the core nacks a confirm-mode publisher. ``DUPLICATE``:
    dropped by the dedup window (x-message-deduplication); confirmed with an ack, not enqueued.
    Source: "RabbitMQ: Queue Length Limit" (Overflow Behaviour).
    """

    ROUTED = "routed"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"
