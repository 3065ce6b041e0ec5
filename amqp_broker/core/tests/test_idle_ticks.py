"""An idle broker ticks about once a second, not ten times (issue 14), and still does everything
on time. ``Ticker`` below is the server's ticker (``server.listener._ticker``) on the fake clock:
``tick``, then sleep ``tick_delay`` s, ended early when ``Broker.on_wake`` asks for a tick sooner.
What a client sees: heartbeats every ~half interval, on shared whole-second ticks; a message TTL
and an x-expires that come due while the broker sleeps still act at their deadline; a busy broker
ticks every 100 ms as before."""

from __future__ import annotations

from itertools import pairwise

import pytest
from pamqp import commands as cmd
from pamqp import frame, heartbeat

from amqp_broker.core.broker import IDLE_TICK_SECONDS, TICK_SECONDS, Broker

from .conftest import FakeClock

HEARTBEAT = frame.marshal(heartbeat.Heartbeat(), 0)
WAKE_MARGIN = 0.002  # as server.listener: a woken tick comes this long after the deadline


class Ticker:
    """The server's ticker on a fake clock; ``ticks``: the clock at each tick."""

    def __init__(self, broker: Broker, clock: FakeClock) -> None:
        self.broker, self.clock = broker, clock
        self.at = clock.now + TICK_SECONDS
        self.ticks: list[float] = []
        broker.on_wake = self.wake

    def wake(self, when: float) -> None:
        self.at = min(self.at, max(when, self.clock.now) + WAKE_MARGIN)

    def run_until(self, t: float) -> None:
        while self.at <= t:
            self.clock.now = self.at
            self.broker.tick()
            self.ticks.append(self.clock.now)
            self.at = self.clock.now + self.broker.tick_delay(self.clock.now)
        self.clock.now = t


def _heartbeats(cl) -> int:
    return sum(isinstance(f, heartbeat.Heartbeat) for _c, f in cl.frames())


def test_idle_connections_heartbeats_share_about_one_tick_a_second(broker, clock,
                                                                   make_client) -> None:
    clients = []
    for _ in range(40):  # opened over 4 s, so their heartbeats would fall at 40 moments
        clients.append(make_client(heartbeat=60))
        clock.advance(0.1)
    for cl in clients:
        cl.frames()
    ticker = Ticker(broker, clock)
    start = clock.now
    sent_at: dict[int, list[float]] = {id(cl): [] for cl in clients}
    for second in range(1, 241):  # 4 minutes; clients send their heartbeats every 30 s
        ticker.run_until(start + second)
        for cl in clients:
            if _heartbeats(cl):
                sent_at[id(cl)].append(clock.now)
        if second % 30 == 0:
            for cl in clients:
                cl.send_raw(HEARTBEAT)
    assert not any(cl.conn.closed for cl in clients)
    for times in sent_at.values():  # ~every 30 s (brought forward to a whole second)
        assert len(times) == 8
        assert all(29 <= b - a <= 31 for a, b in pairwise(times))
    # idle: a tick at least every IDLE_TICK_SECONDS, plus one at each second heartbeats are
    # due and a busy one after each round of client heartbeats: well under 2 a second, not 10
    assert 240 / IDLE_TICK_SECONDS <= len(ticker.ticks) <= 240 * 1.5


def test_a_message_ttl_due_while_the_broker_sleeps_expires_on_time(broker, clock,
                                                                 client) -> None:
    client.declare_queue(1, "dlq")
    client.declare_queue(1, "t", arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "dlq"})
    ticker = Ticker(broker, clock)
    ticker.run_until(clock.now + 5)  # idle by now: sleeping up to a second
    assert ticker.ticks[-1] - ticker.ticks[-2] == pytest.approx(IDLE_TICK_SECONDS)
    ticker.run_until(ticker.ticks[-1] + 0.01)  # the next tick is ~1 s away
    published = clock.now
    client.publish(1, "", "t", b"x", cmd.Basic.Properties(expiration="250"))
    ticker.run_until(published + 0.25 - 0.01)
    assert [e.message.body for e in broker.vhosts["/"].queues["dlq"].ready_entries()] == []
    ticker.run_until(published + 0.25 + TICK_SECONDS)
    assert [e.message.body for e in broker.vhosts["/"].queues["dlq"].ready_entries()] == [b"x"]


def test_an_x_expires_due_while_the_broker_sleeps_deletes_the_queue_on_time(
        broker, clock, client) -> None:
    ticker = Ticker(broker, clock)
    ticker.run_until(clock.now + 5)
    ticker.run_until(ticker.ticks[-1] + 0.01)  # idle: the next tick is ~1 s away
    declared = clock.now
    client.declare_queue(1, "gone-soon", arguments={"x-expires": 500})
    ticker.run_until(declared + 0.5 - 0.01)
    assert "gone-soon" in broker.vhosts["/"].queues
    ticker.run_until(declared + 0.5 + TICK_SECONDS)
    assert "gone-soon" not in broker.vhosts["/"].queues


def test_a_busy_broker_ticks_every_100_ms(broker, clock, client) -> None:
    client.declare_queue(1, "q")
    ticker = Ticker(broker, clock)
    start = clock.now
    for i in range(1, 31):  # a publish every 100 ms for 3 s
        client.publish(1, "", "q", b"m")
        ticker.run_until(start + i * 0.1)
    gaps = [b - a for a, b in pairwise(ticker.ticks)]
    assert len(ticker.ticks) >= 28 and max(gaps) <= TICK_SECONDS + WAKE_MARGIN + 1e-9
