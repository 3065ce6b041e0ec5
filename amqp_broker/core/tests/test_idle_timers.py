"""Idle costs nothing (issue 14, DESIGN.md §5): the broker's timers work from heaps of next
deadlines (``core.timers``) and the memory alarm from a running total, never by scanning every
queue or connection. On a fake clock: x-expires, message TTL and heartbeats still happen on time;
idle queues put nothing on any heap; after random operations (hypothesis, with a paging durable
queue among the queues) the running memory total equals a full recount and every queue holding
messages or consumers is among ``busy_queues`` (what the management sampler reads)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands as cmd
from pamqp import frame, heartbeat

import amqp_broker_native
from amqp_broker.core.broker import Broker
from amqp_broker.core.durability import Durability
from amqp_broker.core.timers import TimerHeap
from queues.queue import Queue
from queues.store.store import MessageStore

from .client import Client
from .conftest import SETTINGS, FakeClock

HEARTBEAT = frame.marshal(heartbeat.Heartbeat(), 0)


# ------------------------------------------------------------------------------ TimerHeap
def test_timer_heap_fires_due_keys_in_order_and_keeps_the_earlier_deadline() -> None:
    fired: list[tuple[str, float]] = []
    timers: TimerHeap[str] = TimerHeap(lambda key, now: fired.append((key, now)))
    timers.schedule("b", 2.0)
    timers.schedule("a", 1.0)
    timers.schedule("a", 5.0)  # later: the earlier deadline stays
    timers.schedule("c", 3.0)
    timers.schedule("c", 0.5)  # earlier: moves
    assert len(timers) == 3 and timers.when("a") == 1.0 and timers.next_deadline() == 0.5
    assert timers.run_due(0.4) == 0 and not fired
    assert timers.run_due(2.0) == 3
    assert fired == [("c", 2.0), ("a", 2.0), ("b", 2.0)]
    assert len(timers) == 0 and timers.next_deadline() is None


def test_timer_heap_cancel_and_reschedule_inside_fire() -> None:
    timers: TimerHeap[int] = TimerHeap(lambda key, now: None)
    log: list[int] = []

    def fire(key: int, now: float) -> None:
        log.append(key)
        if key == 1:
            timers.cancel(2)  # due in this very run: skipped
            timers.schedule(1, now)  # due again now: runs at the next call, not this one
    timers._fire = fire  # type: ignore[attr-defined]
    timers.schedule(1, 1.0)
    timers.schedule(2, 1.0)
    assert timers.run_due(1.0) == 1 and log == [1]
    assert timers.run_due(1.0) == 1 and log == [1, 1]


def test_timer_heap_stays_small_when_keys_churn() -> None:
    timers: TimerHeap[int] = TimerHeap(lambda key, now: None)
    for i in range(20_000):
        timers.schedule(i % 10, 1000.0 - i * 0.01)  # each earlier: a stale entry each time
        if i % 3 == 0:
            timers.cancel((i + 5) % 10)
    assert timers._entries <= 2 * len(timers) + 300  # type: ignore[attr-defined]
    assert len(timers._heap) <= timers._entries  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- idle queues
@pytest.mark.skipif(amqp_broker_native.ACTIVE, reason="spies on Queue's methods: a compiled "
                    "broker calls them natively, past the spy (the pure-Python pass runs it)")
def test_idle_queues_put_nothing_on_a_heap_and_ticks_look_at_none(broker, client,
                                                                  monkeypatch) -> None:
    for i in range(500):
        client.declare_queue(1, f"idle-{i}")
    broker.tick()
    broker.message_memory()
    calls = []
    real = Queue.next_expiry
    monkeypatch.setattr(Queue, "next_expiry", lambda self: calls.append(1) or real(self))
    monkeypatch.setattr(Queue, "in_memory", lambda self: pytest.fail("scanned a queue"))
    for _ in range(20):
        broker.tick()
        assert broker.message_memory() == 0
    assert not calls
    assert len(broker.ttl_timers) == 0 and len(broker.vhosts["/"].expiry_timers) == 0
    assert not broker.queue_changes and broker.busy_queues() == []


def test_idle_queue_with_x_expires_is_deleted_on_time(broker, clock, client) -> None:
    vhost = broker.vhosts["/"]
    for i, expires in enumerate((1000, 2500, 4000)):
        client.declare_queue(1, f"exp-{i}", arguments={"x-expires": expires})
    client.declare_queue(1, "keep")
    assert len(vhost.expiry_timers) == 3
    alive = []
    for _ in range(50):  # 5 s in 100 ms ticks
        clock.advance(0.1)
        broker.tick()
        alive.append(sorted(n for n in vhost.queues if n.startswith("exp-")))
    # deleted at the first tick at or past its deadline (tick i is at (i + 1) * 100 ms)
    assert alive[8] == ["exp-0", "exp-1", "exp-2"] and alive[9] == ["exp-1", "exp-2"]
    assert alive[23] == ["exp-1", "exp-2"] and alive[24] == ["exp-2"]
    assert alive[38] == ["exp-2"] and alive[39] == []
    assert "keep" in vhost.queues and len(vhost.expiry_timers) == 0


def test_deleted_and_redeclared_queue_keeps_one_expiry_entry(broker, clock, client) -> None:
    vhost = broker.vhosts["/"]
    for _ in range(50):
        client.declare_queue(1, "r", arguments={"x-expires": 60_000})
        client.call(1, cmd.Queue.Delete(queue="r"))
    client.declare_queue(1, "r", arguments={"x-expires": 60_000})
    assert len(vhost.expiry_timers) == 1


# ---------------------------------------------------------------------------- message TTL
def _ready(broker: Broker, name: str) -> list[bytes]:
    return [e.message.body for e in broker.vhosts["/"].queues[name].ready_entries()]


def test_message_ttl_heads_expire_on_time(broker, clock, client) -> None:
    client.declare_queue(1, "t", arguments={"x-message-ttl": 500})
    client.publish(1, "", "t", b"a")
    clock.advance(0.2)
    client.publish(1, "", "t", b"b")
    client.publish(1, "", "t", b"c", cmd.Basic.Properties(expiration="100"))  # behind b
    seen = []
    for _ in range(8):
        clock.advance(0.1)
        broker.tick()
        seen.append(_ready(broker, "t"))
    # a expires at 0.5 s (tick 2), b at 0.7 s (tick 4); c expired at 0.3 s but waits behind b
    assert seen[1] == [b"a", b"b", b"c"] and seen[2] == [b"b", b"c"]
    assert seen[3] == [b"b", b"c"] and seen[4] == []
    assert len(broker.ttl_timers) == 0


def test_requeued_head_with_an_earlier_ttl_expires_on_time(broker, clock, client) -> None:
    client.declare_queue(1, "t")
    client.publish(1, "", "t", b"early", cmd.Basic.Properties(expiration="300"))
    client.publish(1, "", "t", b"late", cmd.Basic.Properties(expiration="5000"))
    client.send(1, cmd.Basic.Get(queue="t"))
    tag = client.expect_message().method.delivery_tag
    broker.tick()  # the heap now waits for "late" (5 s)
    client.send(1, cmd.Basic.Nack(tag, requeue=True))  # "early" is the head again
    clock.advance(0.35)
    broker.tick()
    assert _ready(broker, "t") == [b"late"]


def test_ttl_expiry_in_a_priority_queue_and_dead_lettering(broker, clock, client) -> None:
    client.declare_queue(1, "dlq")
    client.declare_queue(1, "p", arguments={"x-max-priority": 5, "x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "dlq"})
    client.publish(1, "", "p", b"hi", cmd.Basic.Properties(priority=5, expiration="1000"))
    client.publish(1, "", "p", b"lo", cmd.Basic.Properties(priority=1, expiration="200"))
    clock.advance(0.25)
    broker.tick()
    assert _ready(broker, "p") == [b"hi"] and _ready(broker, "dlq") == [b"lo"]
    clock.advance(0.8)
    broker.tick()
    assert _ready(broker, "p") == [] and _ready(broker, "dlq") == [b"lo", b"hi"]
    assert broker.message_memory() == broker.message_memory_recount()


# ----------------------------------------------------------------------------- heartbeats
def test_heartbeats_sent_and_missed_heartbeats_close_with_many_connections(broker, clock,
                                                                           make_client) -> None:
    talking = [make_client(heartbeat=2) for _ in range(20)]
    silent = [make_client(heartbeat=2) for _ in range(5)]
    quiet = [make_client(heartbeat=0) for _ in range(5)]
    for cl in talking + silent + quiet:
        cl.frames()
    assert len(broker.connection_timers) == 25  # none for heartbeat 0
    beats = {id(cl): 0 for cl in talking}
    for step in range(60):  # 6 s
        clock.advance(0.1)
        if step % 5 == 4:
            for cl in talking:
                cl.send_raw(HEARTBEAT)
        broker.tick()
        for cl in talking:
            beats[id(cl)] += sum(isinstance(f, heartbeat.Heartbeat) for _c, f in cl.frames())
        if step == 38:  # 3.9 s: silent ones still open (closed after 2 intervals, 4 s)
            assert not any(cl.conn.closed for cl in silent)
    assert all(cl.conn.closed for cl in silent)
    assert not any(cl.conn.closed for cl in talking + quiet)
    assert set(beats.values()) == {6}  # one per second of our silence (interval / 2)
    assert all(not cl.frames() for cl in quiet)


def test_closed_connections_leave_no_timer(broker, make_client) -> None:
    clients = [make_client(heartbeat=5) for _ in range(10)]
    for cl in clients:
        cl.close()
        cl.conn.connection_lost()
    assert len(broker.connection_timers) == 0 and not broker.connections


# --------------------------------------------------------------- running memory total
QUEUES = ("plain", "prio", "ttl", "paged")
OPS = st.one_of(
    st.tuples(st.just("pub"), st.sampled_from(QUEUES), st.integers(0, 3000),
              st.sampled_from([None, "0", "150", "5000"])),
    st.tuples(st.sampled_from(["get", "get_noack", "purge", "delete", "consume"]),
              st.sampled_from(QUEUES)),
    st.tuples(st.sampled_from(["ack1", "nack1", "ack2", "reopen2"])),
    st.tuples(st.just("tick"), st.integers(1, 400)),
)


def _open_paging_broker(path: Path) -> Broker:
    durability = Durability(MessageStore(path / "msgs", sync="none"))
    return Broker(replace(SETTINGS, queue_memory_budget=4096), clock=FakeClock(),
                  durability=durability)


def _declare(cl: Client, name: str) -> None:
    args = {"prio": {"x-max-priority": 3},
            "ttl": {"x-message-ttl": 200, "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": "plain"}}.get(name, {})
    cl.declare_queue(1, name, durable=name == "paged", arguments=args)


def _tags(cl: Client, tags: dict[int, list[int]]) -> None:
    for ch, f in cl.frames():
        if isinstance(f, cmd.Basic.GetOk | cmd.Basic.Deliver):
            tags[ch].append(f.delivery_tag)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=40))
def test_running_memory_total_equals_a_recount(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = _open_paging_broker(Path(tmp))
        try:
            cl = Client(broker)
            cl.handshake()
            cl.open_channel(1)
            cl.open_channel(2)
            cl.call(2, cmd.Basic.Qos(prefetch_count=2))
            for name in QUEUES:
                _declare(cl, name)
            tags: dict[int, list[int]] = {1: [], 2: []}
            consuming = ""  # the queue channel 2 consumes from
            for op in ops:
                kind = op[0]
                if kind == "pub":
                    _, name, size, expiration = op
                    props = cmd.Basic.Properties(delivery_mode=2, expiration=expiration,
                                                 priority=size % 4)
                    cl.publish(1, "", name, b"x" * size, props)
                elif kind in ("get", "get_noack"):
                    cl.send(1, cmd.Basic.Get(queue=op[1], no_ack=kind == "get_noack"))
                    if kind == "get_noack":
                        cl.frames()
                elif kind == "purge":
                    cl.call(1, cmd.Queue.Purge(queue=op[1]))
                elif kind == "delete":
                    cl.call(1, cmd.Queue.Delete(queue=op[1]))
                    _tags(cl, tags)  # a Basic.Cancel on channel 2 when it consumed from it
                    if consuming == op[1]:
                        consuming = ""
                    _declare(cl, op[1])
                elif kind == "consume" and not consuming:
                    cl.consume(2, op[1], "c")
                    consuming = op[1]
                elif kind in ("ack1", "nack1", "ack2") and tags[1 if kind != "ack2" else 2]:
                    ch = 2 if kind == "ack2" else 1
                    tag = tags[ch].pop(0)
                    if kind == "nack1":
                        cl.send(1, cmd.Basic.Nack(tag, requeue=True))
                    else:
                        cl.send(ch, cmd.Basic.Ack(tag))
                elif kind == "reopen2":  # unacked deliveries of channel 2 are requeued
                    cl.call(2, cmd.Channel.Close(200, "", 0, 0))
                    cl.open_channel(2)
                    cl.call(2, cmd.Basic.Qos(prefetch_count=2))
                    tags[2].clear()
                    consuming = ""
                elif kind == "tick":
                    broker.clock.advance(op[1] / 1000)  # type: ignore[attr-defined]
                    broker.tick()
                _tags(cl, tags)
                assert broker.message_memory() == broker.message_memory_recount(), op
                busy = broker.busy_queues()
                assert all(q in busy for v in broker.vhosts.values() for q in v.queues.values()
                           if q.message_count or q.unacked_count or q.consumer_count), op
        finally:
            assert broker.durability.store is not None
            broker.durability.store.close()
