"""Unit tests of consumers on a broker outside a quorum queue's group (issue 12,
``cluster.quorum.remote`` / ``shipping``) over the fake transport of ``cluster.tests.quorum_fake``:
the leader ships the deliveries, acks and requeues are forwarded and applied once, a new leader
re-ships what the old one may not have, lost ships come back through the Holding reports, a broker
that leaves the view has its unacked messages redelivered elsewhere, Basic.Get is refused (406).
No sockets, no real time."""

from __future__ import annotations

import pytest

from cluster.quorum.machine import Cancelled
from cluster.quorum.remote import RemoteGroup
from cluster.quorum.shipping import (
    decode_holding,
    decode_ship,
    encode_holding,
    encode_ship,
    missing,
)
from cluster.raft import fifo as f
from cluster.tests.quorum_fake import FakeConsumer, Net, RemoteMember
from queues.errors import NotServed


def started(seed: int) -> tuple[Net, RemoteMember]:
    net = Net(seed=seed)
    net.run_until(lambda: net.leader() is not None)
    return net, net.add_remote("d")


def consume(net: Net, outside: RemoteMember, **kw: object) -> FakeConsumer:
    consumer = FakeConsumer(**kw)  # type: ignore[arg-type]
    outside.queue.add_consumer(consumer)
    net.woken.add(outside.name)
    return consumer


def bodies(consumer: FakeConsumer) -> list[str]:
    return [e.message.body.decode() for e in consumer.got]


def out_of(net: Net, cid: str) -> int:
    leader = net.leader()
    assert leader is not None
    c = leader.group.machine.fifo.consumers.get(cid)
    return -1 if c is None else len(c.out)


def test_ship_and_holding_payloads_round_trip_and_missing_lists_what_is_not_held():
    d = [f.Deliver("d#1/1", 7, b"h", b"body", 0), f.Deliver("d#1/2", 9, b"", b"", 3)]
    assert decode_ship(encode_ship(d, ["d#1/3"])) == (d, ["d#1/3"])
    assert decode_holding(encode_holding("d#1", {"d#1/1": [(7, 0)], "d#1/2": []})) == \
        ("d#1", {"d#1/1": {(7, 0)}, "d#1/2": set()})
    with pytest.raises(ValueError):
        decode_ship(encode_ship(d)[:-3])
    fifo = f.FifoQueue(f.FifoConfig())
    fifo.apply_command(1, f.Checkout("d#1/1", 0, 0))
    for i in (2, 3, 4):
        fifo.apply_command(i, f.Enqueue("p", i, None, b"h", f"m{i}".encode(), 0))
    deliveries, cancelled = missing(fifo, {"d#1/1": {(3, 0)}, "d#1/9": set()})
    assert [x.msg_id for x in deliveries] == [2, 4] and cancelled == ["d#1/9"]


def test_received_drops_re_ships_of_held_and_settled_deliveries_but_not_redeliveries():
    g = RemoteGroup("d", "d#1", ("a", "b", "c"), None)  # type: ignore[arg-type]
    g.submit(f.Checkout("d#1/1", 10, 0))
    first = encode_ship([f.Deliver("d#1/1", 5, b"", b"x", 0)])
    assert len(g.received("a", first)) == 1
    assert g.received("b", first) == []             # a new leader's re-ship: held
    seq = g.submit(f.Return("d#1/1", (5,), 0))       # requeued; redelivered with count 1
    again = encode_ship([f.Deliver("d#1/1", 5, b"", b"x", 1)])
    assert len(g.received("a", again)) == 1
    g.notified("a", seq, False, 0)                   # the Return applied: (5, 0) released
    assert g.holding["d#1/1"] == {5: 1}
    seq = g.submit(f.Settle("d#1/1", (5,)))
    g.notified("a", seq, False, 0)
    assert g.received("a", again) == [] and g.holding["d#1/1"] == {}   # late ship: dropped
    assert g.received("a", encode_ship([], ["d#1/1"])) == [Cancelled("d#1/1")]
    assert g.received("a", b"\x00") == []            # malformed: nothing


def test_a_consumer_outside_the_group_gets_every_message_once_and_acks_stick():
    net, outside = started(seed=31)
    consumer = consume(net, outside)
    member = next(m for m in net.members.values() if m is not outside)
    for i in range(20):
        member.publish(f"m{i}")
    net.run_until(lambda: len(consumer.got) == 20, 3000)
    assert sorted(bodies(consumer)) == sorted(f"m{i}" for i in range(20))
    assert not any(e.redelivered for e in consumer.got)
    first = consumer.got[0]
    outside.queue.requeue_many([first])
    outside.queue.ack_many(consumer.got[1:])
    net.run_until(lambda: len(consumer.got) == 21, 3000)
    again = consumer.got[20]
    assert again.message.body == first.message.body and again.redelivered
    assert again.message.headers["x-delivery-count"] == 1
    outside.queue.ack(again)
    net.run_until(lambda: out_of(net, again.cid) == 0, 3000)
    net.advance(10, 300)   # Holding reports every second: nothing acked comes back
    assert len(consumer.got) == 21
    assert all(m.queue.message_count == 0 for m in net.members.values() if m is not outside)


def test_a_new_leader_re_ships_and_nothing_arrives_twice():
    net, outside = started(seed=33)
    consumer = consume(net, outside)
    leader = net.leader()
    assert leader is not None
    member = next(m for m in net.members.values() if m not in (outside, leader))
    for i in range(5):
        member.publish(f"a{i}")
    net.run_until(lambda: len(consumer.got) == 5, 3000)
    net.cut.add(frozenset((leader.name, "d")))   # the next ships are lost
    for i in range(5):
        member.publish(f"b{i}")
    net.run_until(lambda: out_of(net, consumer.got[0].cid) == 10, 3000)
    assert len(consumer.got) == 5
    net.kill(leader.name)
    net.run_until(lambda: len(consumer.got) == 10, 5000)
    net.advance(10, 200)
    assert sorted(bodies(consumer)) == sorted([f"a{i}" for i in range(5)] +
                                              [f"b{i}" for i in range(5)])


def test_ships_lost_on_a_cut_link_come_back_through_holding_reports():
    net, outside = started(seed=35)
    consumer = consume(net, outside)
    leader = net.leader()
    assert leader is not None
    net.run_until(lambda: outside.group.checkouts and
                  min(outside.group.checkouts.values()) <= outside.group.applied, 3000)
    net.cut.add(frozenset((leader.name, "d")))
    for i in range(8):
        leader.publish(f"m{i}")
    net.advance(10, 50)
    assert consumer.got == []
    net.cut.clear()
    net.run_until(lambda: len(consumer.got) == 8, 5000)
    net.advance(10, 200)
    assert sorted(bodies(consumer)) == sorted(f"m{i}" for i in range(8))


def leader_publishes(net, count: int, until, within_ms: int = 3000):
    """The leader publishes ``m0``..``m{count-1}``; run until ``until()``; returns the leader."""
    leader = net.leader()
    assert leader is not None
    for i in range(count):
        leader.publish(f"m{i}")
    net.run_until(until, within_ms)
    return leader


def test_the_outside_broker_leaving_the_view_has_its_unacked_redelivered_elsewhere():
    net, outside = started(seed=37)
    held = consume(net, outside, prefetch=5)
    leader = leader_publishes(net, 5, lambda: len(held.got) == 5)
    other = next(m for m in net.members.values() if m not in (outside, leader))
    second = FakeConsumer(prefetch=10)
    other.queue.add_consumer(second)
    net.woken.add(other.name)
    net.kill("d")
    net.run_until(lambda: len(second.got) == 5, 5000)
    assert all(e.redelivered for e in second.got)
    assert sorted(bodies(second)) == sorted(bodies(held))


def test_cancel_outside_with_unacked_suspends_then_cancels_and_get_is_refused():
    net, outside = started(seed=39)
    consumer = consume(net, outside, prefetch=2)
    leader = leader_publishes(net, 4, lambda: len(consumer.got) == 2)
    with pytest.raises(NotServed):   # no replica here to dequeue from: 406 to the client
        outside.queue.get_then(False, lambda entry, remaining: None)
    cid = consumer.got[0].cid
    assert outside.queue.remove_consumer(consumer)
    net.run_until(lambda: leader.group.machine.fifo.consumers[cid].prefetch == -1, 3000)
    outside.queue.ack_many(consumer.got)
    net.run_until(lambda: cid not in leader.group.machine.fifo.consumers, 3000)
    assert leader.queue.message_count == 2 and len(consumer.got) == 2
