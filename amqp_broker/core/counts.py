"""Per-exchange publish counts, a class of its own so that the compiled hot path (mypyc) keeps
them as native integers: ``cell.publish_in += 1`` adds in place, where a list slot or a plain
object's attribute boxes a new ``int`` (an allocation) per publish once past 256. Used by
``core.stats.exchange_cell`` and ``core.handlers.basic.deliver_published``; read by
``management.object_rates``. Source of the names: RabbitMQ's exchange ``message_stats``
(Management HTTP API: ``publish_in``, ``publish_out``)."""

from __future__ import annotations

__all__ = ["ExchangeCounts"]


class ExchangeCounts:
    """``publish_in``: messages clients published to the exchange, routed or not;
    ``publish_out``: one per queue each of them reached (RabbitMQ 3.10's
    ``queue_exchange_stats``). Both only grow."""

    def __init__(self) -> None:
        self.publish_in = 0
        self.publish_out = 0
