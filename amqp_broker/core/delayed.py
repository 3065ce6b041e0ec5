"""The messages ``x-delayed-message`` exchanges hold, and the timers that route them when due.

``DelayedMessages`` (one per broker, ``Broker.delayed``) takes a message published to an
``x-delayed-message`` exchange with an ``x-delay`` of 1 ms or more (``hold_delayed``), writes it
to the broker's ``delayed.log`` (``core.delayed_log``; none on a broker built without a data
directory: then held in memory only) and schedules it in a ``TimerHeap`` keyed by message id.
Nothing runs per held message while the broker is idle: ``Broker.tick_delay`` sleeps until the
heap's earliest deadline. When a message is due it is routed through its exchange's bindings by
the ``x-delayed-type`` rules (``routing.exchange_types.delayed``), with ``x-delay`` negated, and
then marked done in the log. A message whose exchange is gone or that routes nowhere when due
is dropped (the plugin: "The plugin only performs one attempt at publishing each message"); the
mandatory flag is not acted on (README "Limitations": "the mandatory flag is not supported").

On a clustered broker ``replicated`` (``core.delayed_replicated``, set by
``clustering.delayed``) holds them instead, in a vhost's internal quorum queue: a majority of
the cluster holds each one and any member routes it when due; this broker's own log then only
keeps what was held before that queue existed.

Due times are wall-clock ms, so a restart keeps them: a message due while the broker was down
is routed at the first tick after the start. Delivery is at least once across a crash: a broker
killed after routing a message but before its done record reached the OS routes it again at
restart. Must not know: frames, sockets. Source: rabbitmq-delayed-message-exchange README
(Usage, Limitations), ``rabbit_delayed_message.erl``.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pamqp import commands as cmd

from queues.message import Message
from routing.exchange_types.delayed import DELAYED_TYPE, delay_of, due_headers

from .delayed_log import DelayedLog, HeldRecord
from .delayed_replicated import ReplicatedDelayed
from .timers import TimerHeap

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VirtualHost

__all__ = ["DelayedMessages", "hold_delayed"]

log = logging.getLogger(__name__)


class DelayedMessages:
    """The held messages of one broker. ``wall()`` is the wall clock in seconds (``time.time``);
    the timers run on ``broker.clock``. ``open(path)`` loads ``path`` (``delayed.log``) and
    schedules what it holds; without it messages are held in memory only."""

    def __init__(self, broker: Broker, wall: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.wall = wall
        self.log: DelayedLog | None = None
        self.held: dict[int, HeldRecord] = {}
        self.timers: TimerHeap[int] = TimerHeap(self._due, broker._timer_earlier)
        self._ids = itertools.count(1)
        #: Messages routed when due (to at least one queue) and dropped (no exchange, no queue).
        self.routed = 0
        self.dropped = 0
        #: A clustered broker's replicated holder (``enable_replication``); None: this log only.
        self.replicated: ReplicatedDelayed | None = None

    def enable_replication(self) -> ReplicatedDelayed:
        """Hold delayed messages in each vhost's internal quorum queue from now on
        (``core.delayed_replicated``; ``clustering.delayed`` declares the queues)."""
        if self.replicated is None:
            self.replicated = ReplicatedDelayed(self.broker, self.route, self.wall)
        return self.replicated

    def __len__(self) -> int:
        """Messages held now."""
        return len(self.held)

    def open(self, path: Path) -> int:
        """Load the log at ``path`` and schedule every message it holds; returns how many.
        Raises ``OSError`` when the file cannot be read or rewritten."""
        self.log = DelayedLog(path)
        records = self.log.open()
        now_wall = self._wall_ms()
        now = self.broker.clock()
        for r in records:
            self.held[r.id] = r
            # overdue ones too keep their order: the earliest due fires first
            self.timers.schedule(r.id, now + (r.due_ms - now_wall) / 1000)
        if records:
            self._ids = itertools.count(max(r.id for r in records) + 1)
            log.info("%d delayed messages loaded from %s", len(records), path)
        return len(records)

    def close(self) -> None:
        """Sync and close the log (held messages stay in it for the next start)."""
        if self.log is not None:
            self.log.close()

    def _wall_ms(self) -> int:
        return int(self.wall() * 1000)

    def hold(self, vhost: str, msg: Message, delay_ms: int) -> None:
        """Hold ``msg`` (published to ``msg.exchange`` in ``vhost``) for ``delay_ms`` ms.
        Raises ``OSError`` when the log cannot be written (the message is then not held)."""
        r = HeldRecord(next(self._ids), self._wall_ms() + delay_ms, delay_ms, vhost,
                       msg.exchange, msg.routing_key, msg.header_payload, msg.body)
        self.held[r.id] = r if self.log is None else self.log.append_held(r)
        self.timers.schedule(r.id, self.broker.clock() + delay_ms / 1000)

    def run_due(self, now: float) -> int:
        """Route every message due by ``now`` (``broker.clock`` s); returns how many fired."""
        fired = self.timers.run_due(now)
        if self.replicated is not None:
            fired += self.replicated.run_due(now)
        if self.log is not None:
            self.log.sync()
        return fired

    def next_deadline(self) -> float | None:
        """When (``broker.clock`` s) the next held message is due; None when none is held."""
        mine = self.timers.next_deadline()
        other = self.replicated.next_deadline() if self.replicated is not None else None
        return other if mine is None else mine if other is None else min(mine, other)

    def _due(self, id_: int, now: float) -> None:
        r = self.held.get(id_)
        if r is None:
            return
        early_ms = r.due_ms - self._wall_ms()
        if early_ms > 0:  # the clocks drifted apart: wait for the wall clock
            self.timers.schedule(id_, now + early_ms / 1000)
            return
        del self.held[id_]
        if self.log is not None:
            try:
                r = self.log.read(id_)
            except (OSError, ValueError) as exc:
                log.error("delayed message %d unreadable, dropped: %s", id_, exc)
                self.dropped += 1
                self.log.append_done(id_)
                return
        self.route(r.vhost, r)
        if self.log is not None:
            self.log.append_done(id_)

    def route(self, vhost_name: str, r: HeldRecord
              ) -> tuple[bool, int | None, list[tuple[object, int]] | None] | None:
        """Route the due message ``r`` in vhost ``vhost_name`` through its exchange's bindings
        with ``x-delay`` negated: ``VirtualHost.enqueue``'s (ok, store id, waits), or None when
        dropped (no vhost, no exchange, no queue)."""
        vhost = self.broker.vhosts.get(vhost_name)
        if vhost is None or vhost.routing.get_exchange(r.exchange) is None:
            self.dropped += 1
            log.debug("delayed message for missing exchange %r dropped", r.exchange)
            return None
        msg = Message(r.exchange, r.routing_key, r.header, r.body)
        try:
            headers = msg.headers or {}
            props = msg.properties
        except (ValueError, TypeError):  # checked at publish; cannot happen
            self.dropped += 1
            return None
        fresh = cmd.Basic.Properties(**{k: getattr(props, k) for k in props.__slots__})
        fresh.headers = due_headers(headers, r.delay_ms)
        msg = msg.with_properties(fresh)
        names = vhost.route(msg)
        if not names:
            self.dropped += 1
            return None
        self.routed += 1
        return vhost.enqueue(msg, names)


def hold_delayed(vhost: VirtualHost, msg: Message) -> list[tuple[object, int]] | None:
    """Hold ``msg`` (with headers) published in ``vhost`` when its exchange is an
    ``x-delayed-message`` exchange and it has an ``x-delay`` of 1 to 2^32-1 ms. Returns None to
    route it at once, else the ``(source, token)`` waits of its publisher confirm (the caller
    then neither routes nor returns it): none when written to this broker's log, the internal
    quorum queue's commit on a clustered broker (``core.delayed_replicated``).
    Raises ``OSError`` when the log cannot be written."""
    exchange = vhost.routing.get_exchange(msg.exchange)
    if exchange is None or exchange.type != DELAYED_TYPE:
        return None
    delay = delay_of(msg.headers)
    if delay is None:
        return None
    delayed = vhost.broker.delayed
    if delayed.replicated is not None:
        waits = delayed.replicated.hold(vhost, msg, delay)
        if waits is not None:
            return waits
    delayed.hold(vhost.name, msg, delay)
    return []
