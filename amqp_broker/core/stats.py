"""Message and churn counters for the management API's rates and the Prometheus totals.

Cheap by construction: the hot path adds one integer per publish (``Channel.n_publish``), one per
routing outcome, one native integer per delivery and per ack on the consumer
(``ChannelConsumer.n_delivered`` / ``n_acked``, moved into the channel's ``Channel.typed`` slots
when the consumer leaves it: a boxed list slot per message cost ~2% of the hot path), one per
Basic.Ack call (``Channel.n_ack``, by the number of deliveries it settles) and, per publish, a
dict lookup and two native integers of the exchange's cell (``VirtualHost.exchange_counts``:
``exchange_cell``, a ``core.counts.ExchangeCounts``); the delivery total and confirms are read
from counters the channel keeps anyway (``next_delivery_tag``, the confirm tracker's sequence
numbers). Totals are summed over the live
channels when someone asks (a management sample every few seconds, a Prometheus scrape), and a
channel's counts are folded into ``Broker.message_totals`` once when it is released, so totals
only grow (Prometheus counters).

Names follow RabbitMQ's ``message_stats`` (Management HTTP API: publish, deliver_get, ack,
confirm) and ``rabbit_global_counters`` (3.10: routed, unroutable returned / dropped,
received_confirm; per queue type: delivered by consume / get and auto / manual ack, redelivered,
get_empty, acknowledged; source: rabbitmq-server ``deps/rabbit/src/rabbit_channel.erl`` v3.10.8,
whose ``messages_routed`` counts one per queue a message reached). ``Churn`` holds
``rabbit_core_metrics``' connection / channel / queue churn (``connection_churn_metrics``).
Must not know: timers, sockets (rates are computed by the caller from samples).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .counts import ExchangeCounts, QueueCounts

if TYPE_CHECKING:
    from queues.queue_type import QueueType

    from .broker import Broker
    from .channel import Channel
    from .vhost import VirtualHost

__all__ = ["ACKED", "CONSUME_AUTO", "CONSUME_MANUAL", "Churn", "GET_AUTO", "GET_EMPTY",
           "GET_MANUAL", "MessageTotals", "N_TYPED", "QUEUE_TYPES", "REDELIVERED", "TYPED_KINDS",
           "EXCHANGE_SLACK", "QUEUE_STATS", "exchange_cell", "fold_channel", "message_totals",
           "queue_cell", "queue_message_stats", "typed_slot"]

#: RabbitMQ's ``queue_type`` label values, in slot order.
QUEUE_TYPES = ("rabbit_classic_queue", "rabbit_quorum_queue", "rabbit_stream_queue")
_TYPE_INDEX = {"classic": 0, "quorum": 1, "stream": 2}
#: Kinds of per-queue-type counts (``rabbitmq_global_messages_<kind>_total``), in slot order;
#: ``Channel.typed[kind * len(QUEUE_TYPES) + type]``.
TYPED_KINDS = ("delivered_consume_auto_ack", "delivered_consume_manual_ack",
               "delivered_get_auto_ack", "delivered_get_manual_ack", "redelivered", "get_empty",
               "acknowledged")
CONSUME_AUTO, CONSUME_MANUAL, GET_AUTO, GET_MANUAL, REDELIVERED, GET_EMPTY, ACKED = range(7)
N_TYPED = len(TYPED_KINDS) * len(QUEUE_TYPES)


def typed_slot(kind: int, queue: QueueType) -> int:
    """The ``Channel.typed`` slot of ``kind`` (``CONSUME_AUTO`` ...) for ``queue``'s type (a type
    we do not name counts as classic)."""
    return kind * len(QUEUE_TYPES) + _TYPE_INDEX.get(queue.capabilities.type_name, 0)


@dataclass(slots=True)
class MessageTotals:
    """Counts since the broker started (integers, monotonically growing). ``typed`` has
    ``N_TYPED`` slots (see ``TYPED_KINDS``)."""

    publish: int = 0
    deliver_get: int = 0
    ack: int = 0
    confirm: int = 0
    routed: int = 0
    unroutable_returned: int = 0
    unroutable_dropped: int = 0
    received_confirm: int = 0
    typed: list[int] = field(default_factory=lambda: [0] * N_TYPED)

    def add_channel(self, ch: Channel) -> None:
        """Add one channel's counts."""
        self.publish += ch.n_publish
        self.ack += ch.n_ack
        self.deliver_get += ch.next_delivery_tag - 1
        self.routed += ch.n_routed
        self.unroutable_returned += ch.n_returned
        self.unroutable_dropped += ch.n_dropped
        if ch.confirms is not None:
            self.confirm += ch.confirms.confirmed
            self.received_confirm += ch.confirms.received
        typed = self.typed
        for i, n in enumerate(ch.typed):
            typed[i] += n
        for consumer in ch.consumers.values():  # counted on the consumer until it leaves
            consumer.add_counts(typed)

    def copy(self) -> MessageTotals:
        """An independent copy."""
        return MessageTotals(self.publish, self.deliver_get, self.ack, self.confirm, self.routed,
                             self.unroutable_returned, self.unroutable_dropped,
                             self.received_confirm, list(self.typed))


@dataclass(slots=True)
class Churn:
    """Client connections, channels and queues since the broker started (RabbitMQ's
    ``connection_churn_metrics``): a connection counts as opened at Connection.Open-Ok and closed
    when it goes (cluster peer links and the management API's in-process connections never
    count, nor their channels); ``queues_declared`` counts every non-passive Queue.Declare from a
    client (before its checks, as RabbitMQ), ``queues_created`` / ``queues_deleted`` every queue
    this broker made / removed (a cluster member holds its own copy of each queue)."""

    connections_opened: int = 0
    connections_closed: int = 0
    channels_opened: int = 0
    channels_closed: int = 0
    queues_declared: int = 0
    queues_created: int = 0
    queues_deleted: int = 0


def fold_channel(ch: Channel) -> None:
    """A channel is released: add its counts to the broker's totals (once per channel)."""
    if ch.counts_folded:
        return
    ch.counts_folded = True
    broker = ch.connection.broker
    broker.message_totals.add_channel(ch)
    if ch.connection.counted:
        broker.churn.channels_closed += 1


def message_totals(broker: Broker) -> MessageTotals:
    """The broker's totals now: folded channels plus every live one."""
    out = broker.message_totals.copy()
    for conn in list(broker.connections.values()):
        for ch in list(conn.channels.values()):
            if not ch.counts_folded:
                out.add_channel(ch)
    return out


#: Cells in a vhost's ``exchange_counts`` before ``exchange_cell`` first looks for stale ones.
EXCHANGE_SLACK = 16


def exchange_cell(vhost: VirtualHost, exchange: Any) -> ExchangeCounts:
    """A new ``ExchangeCounts`` cell (``publish_in``, ``publish_out``) for ``exchange`` (a ``routing.Exchange`` of
    ``vhost``) in ``vhost.exchange_counts``, the per-exchange counts of RabbitMQ's exchange
    ``message_stats`` (Management HTTP API: ``publish_in``, messages clients published to the
    exchange, routed or not; ``publish_out``, one per queue each of them reached, as RabbitMQ's
    ``queue_exchange_stats`` count them: rabbit_channel.erl v3.10.8 ``deliver_to_queues``). The
    publish path calls it on an exchange's first publish only. When the dict holds a power of two
    (at least ``EXCHANGE_SLACK``) cells, the cells of exchanges no longer declared (deleted,
    auto-deleted, replaced by a new one of the same name) go first: the dict stays within about
    twice the exchanges published to that are still declared, at O(1) amortised per call."""
    counts = vhost.exchange_counts
    n = len(counts)
    if n >= EXCHANGE_SLACK and n & (n - 1) == 0:
        routing = vhost.routing
        for old in [x for x in counts if routing.get_exchange(x.name) is not x]:
            del counts[old]
    cell = counts[exchange] = ExchangeCounts()
    return cell


#: The fields of a queue's ``message_stats`` besides ``publish``, in RabbitMQ 3.10's order of
#: listing (its management API shows all of them, zeros too, once any is non-zero).
QUEUE_STATS = ("ack", "deliver", "deliver_get", "deliver_no_ack", "get", "get_empty",
               "get_no_ack", "redeliver")


def queue_cell(vhost: VirtualHost, queue: Any) -> QueueCounts:
    """``queue``'s (a ``QueueType`` of ``vhost``) ``QueueCounts`` in ``vhost.queue_counts``, made
    on first use: by a consumer when it subscribes, by Basic.Get, by a stream's or replicated
    queue's first publish. ``VirtualHost.delete_queue`` drops it (RabbitMQ's figures go with
    the queue); for a queue no longer declared (a late ack of a deleted queue's message) a cell
    that is not kept."""
    cell = vhost.queue_counts.get(queue)
    if cell is None:
        cell = QueueCounts()
        if vhost.queues.get(queue.name) is queue:
            vhost.queue_counts[queue] = cell
    return cell


def queue_message_stats(broker: Broker, queues: Iterable[Any]) -> dict[Any, dict[str, int]]:
    """The ``message_stats`` counts now of each of ``queues`` (of ``broker``'s vhosts), by queue
    object: the counts in its ``QueueCounts`` plus the deliveries and acks its live consumers
    hold (``ChannelConsumer.n_delivered`` / ``n_acked``, not yet folded; another member's relay
    consumers count there), and ``deliver_get``, the sum of ``deliver``, ``deliver_no_ack``,
    ``get`` and ``get_no_ack`` (RabbitMQ's). A queue without a cell (never consumed from, got
    from, nor published to as a stream or replicated queue) has no entry; ``publish`` counts a
    stream's or replicated queue's publishes (0 for a classic queue: its figure is its entry
    sequence); ``relayed_in``, only when non-zero, counts the messages other cluster members
    relayed to its local consumers (``RelayInbox.relayed_in``: they took entry sequence numbers
    here but were published to another member, which counts them). O(those queues and their
    consumers, times the vhosts): for the management API's answers and samples (every 5 s),
    never per message."""
    cells = [vhost.queue_counts for vhost in list(broker.vhosts.values())]
    relayed: dict[Any, int] = getattr(broker.relay_inbox, "relayed_in", None) or {}
    out: dict[Any, dict[str, int]] = {}
    for q in queues:
        cell = next((found[q] for found in cells if q in found), None)
        if cell is None:
            continue
        counts = {"publish": cell.publish, "ack": cell.ack, "deliver": cell.deliver,
                  "deliver_no_ack": cell.deliver_no_ack, "get": cell.get,
                  "get_empty": cell.get_empty, "get_no_ack": cell.get_no_ack,
                  "redeliver": cell.redeliver}
        for consumer in q.consumers():
            delivered = getattr(consumer, "n_delivered", None)   # a ChannelConsumer's
            if delivered is None or consumer.folded:
                continue
            counts["deliver_no_ack" if consumer.no_ack else "deliver"] += delivered
            counts["ack"] += consumer.n_acked
        counts["deliver_get"] = (counts["deliver"] + counts["deliver_no_ack"] + counts["get"]
                                 + counts["get_no_ack"])
        if relayed.get(q):
            counts["relayed_in"] = relayed[q]
        out[q] = counts
    return out
