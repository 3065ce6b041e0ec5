"""A Basic.Consume subscription: the object a queue hands messages to.

Owns one consumer's credit (its prefetch count and unacked count) and the Basic.Deliver encoding for
it; implements the ``queues.queue.Consumer`` protocol. Source: AMQP 0-9-1 basic.consume / basic.deliver;
RabbitMQ "Consumer Prefetch" (per-consumer prefetch, ``global`` per channel) and "Consumer Priorities".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from queues.consumers import DirectConsumer

from ..protocol.delivery import DeliverEncoder, encode_deliver_parts, encode_routing
from .stats import ACKED, CONSUME_AUTO, CONSUME_MANUAL, REDELIVERED, queue_cell, typed_slot

if TYPE_CHECKING:
    from queues.entry import QueueEntry
    from queues.queue_type import QueueType

    from .channel import Channel
    from .counts import QueueCounts

__all__ = ["ChannelConsumer", "LARGE_BODY"]

#: Bodies above this many bytes are written as separate parts (one copy fewer per delivery).
LARGE_BODY: Final = 8192


class ChannelConsumer(DirectConsumer):
    """One consumer on one channel.

    ``tag``: consumer tag; ``no_ack``: deliveries need no ack; ``prefetch``: per-consumer prefetch
    count (0: unlimited); ``unacked``: deliveries not yet settled; ``priority``: x-priority argument.
    """

    __slots__ = ("tag", "exclusive", "priority", "prefetch", "unacked", "channel", "queue",
                 "_encoder", "arguments", "_slot", "_redelivered_slot", "acked_slot", "n_delivered",
                 "n_acked", "folded", "counts")

    def __init__(self, channel: Channel, queue: QueueType, tag: str, *, no_ack: bool, exclusive: bool,
                 prefetch: int, priority: int = 0, arguments: dict | None = None) -> None:
        super().__init__(no_ack)
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.priority = priority
        self.unacked = 0
        self.arguments = arguments or {}
        #: Basic.Deliver + content in one pack (``protocol.delivery``); the channel and the
        #: frame size are fixed by the time a consumer exists (Tune-Ok comes before any channel)
        self._encoder = DeliverEncoder(channel.id, tag, channel.connection.frame_max)
        # the channel's counters this consumer's deliveries go to (``core.stats``)
        self._slot = typed_slot(CONSUME_AUTO if no_ack else CONSUME_MANUAL, queue)
        self._redelivered_slot = typed_slot(REDELIVERED, queue)
        self.acked_slot = typed_slot(ACKED, queue)   # counted where its deliveries are acked
        # deliveries and acks counted here (a native int: no boxed list slot per message) and
        # moved into the channel's ``typed`` slots when the consumer leaves it (``fold_counts``)
        self.n_delivered = 0
        self.n_acked = 0
        self.folded = False
        #: the queue's ``message_stats`` cell (``stats.queue_cell``): this consumer's counts go
        #: there when it leaves, its redeliveries at once, acks after it left there directly
        self.counts: QueueCounts = queue_cell(channel.vhost, queue)

    def add_counts(self, typed: list[int]) -> None:
        """Add this consumer's deliveries and acks not yet folded to ``typed`` (a ``core.stats``
        slot list of ``N_TYPED`` counts)."""
        if not self.folded:
            typed[self._slot] += self.n_delivered
            typed[self.acked_slot] += self.n_acked

    def fold_counts(self) -> None:
        """The consumer leaves its channel (cancelled, its queue deleted, the channel closed):
        its counts go into the channel's ``typed`` slots and its queue's ``counts``, once; later
        acks of its deliveries are counted there directly (``settle_unacked``)."""
        if not self.folded:
            self.add_counts(self.channel.typed)
            counts = self.counts
            if self.no_ack:
                counts.deliver_no_ack += self.n_delivered
            else:
                counts.deliver += self.n_delivered
            counts.ack += self.n_acked
        self.folded = True

    def can_deliver(self) -> bool:
        """True when a delivery now respects prefetch, channel flow and connection output credit."""
        ch = self.channel
        if not ch.deliverable:
            return False
        if self.no_ack:
            return ch.connection.output_size < ch.connection.high_water
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        if ch.global_prefetch and len(ch.unacked) >= ch.global_prefetch:
            return False
        return ch.connection.output_size < ch.connection.high_water

    def deliver(self, queue: QueueType, entry: QueueEntry) -> None:
        """Write Basic.Deliver + content to the connection; track it as unacked unless no_ack."""
        ch = self.channel
        tag = ch.next_delivery_tag
        ch.next_delivery_tag = tag + 1
        msg = entry.message
        if not self.no_ack:
            ch.unacked[tag] = (queue, entry, self)
            self.unacked += 1
        self.n_delivered += 1
        if entry.redelivered:
            ch.typed[self._redelivered_slot] += 1
            self.counts.redeliver += 1
        routing_raw = msg.routing_raw
        if routing_raw is None:
            routing_raw = msg.routing_raw = encode_routing(msg.exchange, msg.routing_key)
        conn = ch.connection
        body = msg.body
        if len(body) > LARGE_BODY:
            conn.write_parts(encode_deliver_parts(ch.id, self._encoder.prefix, tag,
                                                  entry.redelivered, routing_raw,
                                                  msg.header_payload, body, conn.frame_max))
        else:
            conn.write(self._encoder.encode(tag, entry.redelivered, routing_raw, msg.header_payload,
                                            body))
