"""Per-exchange publish counts, a class of its own so that the compiled hot path (mypyc) keeps
them as native integers: ``cell.publish_in += 1`` adds in place, where a list slot or a plain
object's attribute boxes a new ``int`` (an allocation) per publish once past 256. Used by
``core.stats.exchange_cell`` and ``core.handlers.basic.deliver_published``; read by
``management.object_rates``. Source of the names: RabbitMQ's exchange ``message_stats``
(Management HTTP API: ``publish_in``, ``publish_out``). ``QueueCounts``: a queue's figures for its
``message_stats`` that nothing on the per-message path keeps (see its docstring)."""

from __future__ import annotations

__all__ = ["ExchangeCounts", "QueueCounts"]


class ExchangeCounts:
    """``publish_in``: messages clients published to the exchange, routed or not;
    ``publish_out``: one per queue each of them reached (RabbitMQ 3.10's
    ``queue_exchange_stats``). Both only grow."""

    def __init__(self) -> None:
        self.publish_in = 0
        self.publish_out = 0


class QueueCounts:
    """One queue's counts for its ``message_stats`` (RabbitMQ 3.10's per-queue
    ``channel_queue_stats`` fields, Management HTTP API), kept in ``VirtualHost.queue_counts``
    (``core.stats.queue_cell``), all only growing: ``publish`` (messages enqueued on a stream or a
    replicated queue; a classic queue's is its entry sequence), ``get`` / ``get_no_ack`` (Basic.Get
    answered with a message, manual / auto ack), ``get_empty``, ``redeliver`` (deliveries and
    Get-Oks with redelivered set), ``ack`` (acks not counted on a live consumer: Basic.Get's, and
    those after the consumer left) and ``deliver`` / ``deliver_no_ack`` (deliveries of consumers
    that left; a live consumer's stay on it, ``ChannelConsumer.n_delivered`` / ``n_acked``, and
    are added when someone asks: ``core.stats.queue_message_stats``)."""

    def __init__(self) -> None:
        self.publish = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.ack = 0
        self.redeliver = 0
