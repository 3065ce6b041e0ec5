"""What the management API and the Prometheus endpoint serve from: the broker, this node's
listeners, and the message-rate sampler.

``Sampler`` takes a sample of the broker's message totals (``core.stats``) and queue totals every
``interval`` seconds (RabbitMQ's ``collect_statistics_interval`` is 5 s) and keeps the last
``keep`` of them; rates are per second between the newest two samples, as RabbitMQ's "basic"
rates mode. ``sample`` is pure (the timer that calls it lives in ``server``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.stats import MessageTotals, message_totals
from .object_rates import ObjectRates

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["Listener", "Management", "Sample", "Sampler", "queue_totals"]


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket: ``protocol`` ("amqp", "http", "http/prometheus"), host, port."""

    protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Sample:
    """Totals at wall time ``at`` (seconds): message counters and queue message counts."""

    at: float
    totals: MessageTotals
    messages: int
    ready: int
    unacked: int


def queue_totals(broker: Broker) -> tuple[int, int]:
    """(ready, unacknowledged) messages summed over every queue of every vhost; O(busy
    queues), since idle ones hold none (``Broker.busy_queues``; sampled every 5 s)."""
    ready = unacked = 0
    for q in broker.busy_queues():
        ready += q.message_count
        unacked += q.unacked_count
    return ready, unacked


class Sampler:
    """The last ``keep`` samples of one broker (see module docstring)."""

    def __init__(self, broker: Broker, interval: float = 5.0, keep: int = 120) -> None:
        self.broker = broker
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=keep)
        #: Per-queue and per-channel rates, sampled with the totals (``object_rates``).
        self.objects = ObjectRates()

    def sample(self, now: float | None = None) -> Sample:
        """Take and keep one sample now (``now``: wall seconds, default ``time.time()``)."""
        ready, unacked = queue_totals(self.broker)
        s = Sample(time.time() if now is None else now, message_totals(self.broker),
                   ready + unacked, ready, unacked)
        self.samples.append(s)
        self.objects.sample(self.broker, s.at)
        return s

    def rates(self) -> dict[str, float]:
        """Per-second rates between the newest two samples (zeros before there are two):
        publish, deliver_get, ack, confirm, messages, messages_ready, messages_unacknowledged."""
        keys = ("publish", "deliver_get", "ack", "confirm", "messages", "messages_ready",
                "messages_unacknowledged")
        if len(self.samples) < 2:
            return dict.fromkeys(keys, 0.0)
        a, b = self.samples[-2], self.samples[-1]
        dt = max(b.at - a.at, 1e-9)
        ta, tb = a.totals, b.totals
        return {"publish": (tb.publish - ta.publish) / dt,
                "deliver_get": (tb.deliver_get - ta.deliver_get) / dt,
                "ack": (tb.ack - ta.ack) / dt, "confirm": (tb.confirm - ta.confirm) / dt,
                "messages": (b.messages - a.messages) / dt,
                "messages_ready": (b.ready - a.ready) / dt,
                "messages_unacknowledged": (b.unacked - a.unacked) / dt}


@dataclass
class Management:
    """Everything the HTTP apps need: ``broker``, this node's ``listeners``, ``sampler``,
    ``data_dir`` (for disk figures), ``started_at`` (wall seconds), ``peer_cache`` (the other
    members' listeners by AMQP address, with the monotonic time they expire: ``peers``);
    ``maintenance_wake``: the event ``maintenance.drain`` sets for ``maintenance.enforce`` (an
    ``anyio.Event``, made in the event loop); ``shovels``: the dynamic shovels
    (``routes_parameters.shovels_of``); ``federation``: the federation links
    (``routes_parameters.federation_of``); ``vhost_meta`` reads the broker's."""

    broker: Broker
    listeners: list[Listener] = field(default_factory=list)
    data_dir: str | None = None
    sampler: Sampler | None = None
    started_at: float = field(default_factory=time.time)
    peer_cache: dict[str, tuple[float, list[Listener] | None]] = field(default_factory=dict)
    maintenance_wake: Any = None
    shovels: Any = None   # the ShovelManager (``amqp_broker.shovel.manager``), made at start
    federation: Any = None   # the FederationManager (``amqp_broker.federation.manager``), too

    def __post_init__(self) -> None:
        if self.sampler is None:
            self.sampler = Sampler(self.broker)
        store = self.broker.durability.definitions
        if store is not None and not self.broker.vhost_meta:
            self.broker.vhost_meta.update({v.name: (v.description, tuple(v.tags))
                                           for v in store.load().vhosts})

    @property
    def vhost_meta(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """vhost -> (description, tags): the broker's (``Broker.vhost_meta``), kept in
        definitions.db and replicated with the vhosts (``core.access_store``)."""
        return self.broker.vhost_meta

    @property
    def amqp_address(self) -> tuple[str, int]:
        """(host, port) of the AMQP listener (connection names use it)."""
        for listener in self.listeners:
            if listener.protocol == "amqp":
                return listener.host, listener.port
        return "127.0.0.1", 5672

    def listener(self, protocol: str) -> Listener | None:
        """The first listener of ``protocol``, or None."""
        return next((x for x in self.listeners if x.protocol == protocol), None)
