"""Per-object message rates for the management API's ``message_stats`` / ``*_details``: per
queue, per channel and per exchange, sampled with the node's totals (``context.Sampler``, every 5 s: RabbitMQ's
``collect_statistics_interval``) and computed as RabbitMQ's "basic" rates mode does, per second
between the newest two samples of the object. Source: "Management HTTP API" (``message_stats``,
``*_details.rate``), RabbitMQ docs "Management Plugin" (statistics interval, rates mode).

A sample reads the busy queues (``Broker.busy_queues``: O(those)) plus the queues of the last
sample that were still changing (so a queue that fell idle shows its rates going to 0), and
every live channel, and the exchanges clients published to (``VirtualHost.exchange_counts``,
``core.stats.exchange_cell``: O(those)).
Queue counters: ``messages``, ``messages_ready``, ``messages_unacknowledged`` (counts),
``publish`` (messages the queue took: a classic queue's entry sequence; a stream's or replicated
queue's count of publishes enqueued on this member) and RabbitMQ 3.10's ``deliver``,
``deliver_no_ack``, ``get``, ``get_no_ack``, ``get_empty``, ``deliver_get``, ``ack`` and
``redeliver`` (``core.stats.queue_message_stats``: read once per sample from the queues' cells
and the live consumers' native counters, nothing kept per message). Channel counters:
``publish``, ``ack``, ``deliver_get``, ``confirm``. Exchange counters: ``publish_in`` (messages
clients published to it) and ``publish_out`` (one per queue each of those reached), RabbitMQ's.
Must not know: HTTP, timers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.stats import queue_message_stats

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["ObjectRates", "queue_counters", "channel_counters", "exchange_counters"]

_Snap = dict[int, tuple[Any, float, dict[str, int]]]


def queue_counters(q: Any, stats: dict[str, int] | None = None) -> dict[str, int]:
    """A queue's counters now (see module docstring): its message counts, ``stats`` (its entry
    of ``core.stats.queue_message_stats``, None when it has none) and ``publish`` (a classic
    queue's entry sequence less the messages other members relayed to its consumers, the
    ``relayed_in`` of ``stats``; else the ``publish`` of ``stats``; absent when neither has
    one)."""
    ready, unacked = q.message_count, q.unacked_count
    out = {"messages": ready + unacked, "messages_ready": ready,
           "messages_unacknowledged": unacked}
    relayed = 0
    if stats is not None:
        out.update(stats)
        relayed = out.pop("relayed_in", 0)
    seq = getattr(q, "_next_seq", None)
    if isinstance(seq, int):
        out["publish"] = seq - relayed
    return out


def channel_counters(ch: Any) -> dict[str, int]:
    """A channel's message counters now (as ``shapes.channel_json``'s ``message_stats``)."""
    return {"publish": ch.n_publish, "ack": ch.n_ack, "deliver_get": ch.next_delivery_tag - 1,
            "confirm": ch.confirms.confirmed if ch.confirms else 0}


def exchange_counters(vhost: Any, ex: Any) -> dict[str, int] | None:
    """``ex``'s (a ``routing.Exchange`` of ``vhost``, a ``VirtualHost``) ``publish_in`` and
    ``publish_out`` now; None when no client published to it since it was declared."""
    cell = vhost.exchange_counts.get(ex)
    return (None if cell is None
            else {"publish_in": cell.publish_in, "publish_out": cell.publish_out})


def _rates(prev: _Snap, cur: _Snap, obj: Any) -> dict[str, float]:
    key = id(obj)
    a, b = prev.get(key), cur.get(key)
    if a is None or b is None or a[0] is not obj or b[0] is not obj:
        return {}
    dt = max(b[1] - a[1], 1e-9)
    return {k: (v - a[2].get(k, v)) / dt for k, v in b[2].items()}


class ObjectRates:
    """The newest two samples of every sampled queue, channel and exchange (keyed by object
    identity)."""

    def __init__(self) -> None:
        self._queues: tuple[_Snap, _Snap] = ({}, {})
        self._channels: tuple[_Snap, _Snap] = ({}, {})
        self._exchanges: tuple[_Snap, _Snap] = ({}, {})

    def sample(self, broker: Broker, now: float) -> None:
        """Take one sample of ``broker``'s queues, channels and exchanges at wall time ``now``
        (s)."""
        queues = {id(q): q for q in broker.busy_queues()}
        older, last = self._queues
        for key, (q, _, counts) in last.items():
            before = older.get(key)
            changing = before is None or before[0] is not q or before[2] != counts
            if changing and not getattr(q, "deleted", False):
                queues.setdefault(key, q)
        stats = queue_message_stats(broker, queues.values())
        self._queues = (self._queues[1], {k: (q, now, queue_counters(q, stats.get(q)))
                                          for k, q in queues.items()})
        channels = {}
        for conn in list(broker.connections.values()):
            for ch in list(conn.channels.values()):
                channels[id(ch)] = (ch, now, channel_counters(ch))
        self._channels = (self._channels[1], channels)
        exchanges = {}
        for vhost in list(broker.vhosts.values()):
            routing = vhost.routing
            for ex, cell in list(vhost.exchange_counts.items()):
                n_in, n_out = cell.publish_in, cell.publish_out
                if routing.get_exchange(ex.name) is ex:
                    exchanges[id(ex)] = (ex, now, {"publish_in": n_in, "publish_out": n_out})
        self._exchanges = (self._exchanges[1], exchanges)

    def queue(self, q: Any) -> dict[str, float]:
        """Per-second rates of ``q``'s counters ({} until it was in two samples in a row;
        an idle queue's are 0)."""
        return _rates(*self._queues, q)

    def channel(self, ch: Any) -> dict[str, float]:
        """Per-second rates of ``ch``'s counters ({} until it was in two samples)."""
        return _rates(*self._channels, ch)

    def exchange(self, ex: Any) -> dict[str, float]:
        """Per-second rates of ``ex``'s counters ({} until it was in two samples)."""
        return _rates(*self._exchanges, ex)
