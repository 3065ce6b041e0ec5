"""The queue model of amqp-broker: pure, synchronous AMQP 0-9-1 queues with RabbitMQ semantics.

Owns: queue arguments (``parse_arguments`` -> ``QueueSettings``), the ``Queue`` itself (ready list,
unacked bookkeeping, consumers, TTL, length limits, priorities, single active consumer) and
dead-letter message construction (``make_dead_letter``, ``is_death_cycle``). ``Message`` is the
shared message value (``queues.message``).

Must not know: sockets, asyncio/anyio, threads, ``amqp_broker``, ``routing``. Time is injected.
Sources: AMQP 0-9-1 §1.7 (queue class), §1.8 (basic class); the RabbitMQ guides cited per module.
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)

from queues.arguments import QueueSettings, parse_arguments, parse_expiration
from queues.dead_letter import (
    REASON_EXPIRED,
    REASON_MAXLEN,
    REASON_REJECTED,
    is_death_cycle,
    make_dead_letter,
)
from queues.entry import QueueEntry
from queues.errors import InvalidArgument, QueueDeleted, QueueError, UnknownEntry
from queues.message import Message
from queues.queue import Consumer, PublishResult, Queue

__all__ = [
    "REASON_EXPIRED",
    "REASON_MAXLEN",
    "REASON_REJECTED",
    "Consumer",
    "InvalidArgument",
    "Message",
    "PublishResult",
    "Queue",
    "QueueDeleted",
    "QueueEntry",
    "QueueError",
    "QueueSettings",
    "UnknownEntry",
    "is_death_cycle",
    "make_dead_letter",
    "parse_arguments",
    "parse_expiration",
]
