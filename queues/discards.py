"""Where the messages leaving a classic queue for good go: dead-lettering, the journal, and the
``on_discard`` callback.

Owns one queue's discard path. A message that leaves with a reason (expired, maxlen, rejected) is
dead-lettered when the queue has an x-dead-letter-exchange: the queue builds the dead-lettered
copy (``queues.dead_letter.make_dead_letter``: x-death, the dead-letter routing key) and hands it
to the ``DeadLetterCallback``, which the core routes. A stored message's hold on the message store
is settled through the queue's ``Journal``; ``on_discard`` sees every leaving entry with its reason
(also purged and deleted ones, which are never dead-lettered, as RabbitMQ).

Must not know: routing, the store's records, channels. Sources: "RabbitMQ: Dead Letter
Exchanges"; rabbitmq-server ``rabbit_amqqueue_process:dead_letter_msgs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from queues.dead_letter import make_dead_letter
from queues.entry import QueueEntry
from queues.message import Message
from queues.protocols import DeadLetterCallback, DiscardCallback
from queues.queue_type import Journal

__all__ = ["Discards"]


class Discards:
    """The discard path of the queue named ``queue``.

    ``dead_letter``: called with (dead-lettered message, exchange, routing keys) when the queue
    has a dead-letter exchange (``exchange``, None: no dead-lettering; ``routing_key``: its
    x-dead-letter-routing-key or None), else nothing is dead-lettered. ``on_discard``: called with
    (entry, reason) for every entry that left. ``journal``: the queue's persistence, told
    ``settled`` for stored entries that were discarded. ``wall_clock``: seconds since the epoch,
    for x-death ``time``. Raises nothing itself; the callbacks' errors propagate.
    """

    __slots__ = ("queue", "dead_letter", "on_discard", "journal", "wall_clock", "exchange",
                 "routing_key")

    def __init__(self, queue: str, *, dead_letter: DeadLetterCallback | None,
                 on_discard: DiscardCallback | None, journal: Journal | None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.queue = queue
        self.dead_letter = dead_letter
        self.on_discard = on_discard
        self.journal = journal
        self.wall_clock = wall_clock
        self.exchange: str | None = None
        self.routing_key: str | None = None

    def configure(self, exchange: str | None, routing_key: str | None) -> None:
        """The queue's x-dead-letter-exchange and x-dead-letter-routing-key (None: unset)."""
        self.exchange = exchange
        self.routing_key = routing_key

    def discard(self, entry: QueueEntry, reason: str) -> None:
        """``entry`` has left the queue for ``reason``: dead-letter it if configured, settle it
        in the journal when stored, notify ``on_discard``."""
        if self.exchange is not None:
            self.dead_letter_message(entry.message, reason)
        journal = self.journal
        if journal is not None and entry.message.store_id is not None:
            journal.settled((entry,))
        self.notify(entry, reason)

    def notify(self, entry: QueueEntry, reason: str) -> None:
        """Only tell ``on_discard`` (purged and deleted entries: not dead-lettered)."""
        on_discard = self.on_discard
        if on_discard is not None:
            on_discard(entry, reason)

    def dead_letter_message(self, message: Message, reason: str) -> None:
        """Dead-letter ``message`` for ``reason`` when the queue has a dead-letter exchange and a
        callback (x-overflow reject-publish-dlx refuses a message that never became an entry)."""
        exchange = self.exchange
        callback = self.dead_letter
        if exchange is None or callback is None:
            return
        dead, routing_keys = make_dead_letter(
            message, reason=reason, queue=self.queue, dead_letter_exchange=exchange,
            dead_letter_routing_key=self.routing_key, now=self.wall_clock())
        callback(dead, exchange, routing_keys)
