"""Message counters for the management API's rates and the Prometheus totals.

Cheap by construction: the hot path adds one integer per publish (``Channel.n_publish``) and one
per Basic.Ack call (``Channel.n_ack``, by the number of deliveries it settles); deliveries and
confirms are read from counters the channel keeps anyway (``next_delivery_tag``, the confirm
tracker's last confirmed sequence number). Totals are summed over the live channels when someone
asks (a management sample every few seconds, a Prometheus scrape), and a channel's counts are
folded into ``Broker.message_totals`` once when it is released, so totals only grow.
Names follow RabbitMQ's ``message_stats`` (Management HTTP API): publish, deliver_get, ack,
confirm. Must not know: timers, sockets (rates are computed by the caller from samples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .broker import Broker
    from .channel import Channel

__all__ = ["MessageTotals", "fold_channel", "message_totals"]


@dataclass(slots=True)
class MessageTotals:
    """Counts since the broker started (integers, monotonically growing)."""

    publish: int = 0
    deliver_get: int = 0
    ack: int = 0
    confirm: int = 0

    def add_channel(self, ch: Channel) -> None:
        """Add one channel's counts."""
        self.publish += ch.n_publish
        self.ack += ch.n_ack
        self.deliver_get += ch.next_delivery_tag - 1
        if ch.confirms is not None:
            self.confirm += ch.confirms.confirmed


def fold_channel(ch: Channel) -> None:
    """A channel is released: add its counts to the broker's totals (once per channel)."""
    if ch.counts_folded:
        return
    ch.counts_folded = True
    ch.connection.broker.message_totals.add_channel(ch)


def message_totals(broker: Broker) -> MessageTotals:
    """The broker's totals now: folded channels plus every live one."""
    base = broker.message_totals
    out = MessageTotals(base.publish, base.deliver_get, base.ack, base.confirm)
    for conn in list(broker.connections.values()):
        for ch in list(conn.channels.values()):
            if not ch.counts_folded:
                out.add_channel(ch)
    return out
