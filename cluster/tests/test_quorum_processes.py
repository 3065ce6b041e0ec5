"""Quorum queues with real brokers and pika clients (issue 12): ``x-queue-type: quorum`` on a
3-broker cluster, declared, published to and consumed from any member; kill -9 of the leader's
broker under load loses no confirmed message and publishing resumes after the Raft election.
Source: RabbitMQ "Quorum Queues"; DESIGN.md §4 (replicated queues)."""

from __future__ import annotations

import time

import pika
import pytest

from cluster.tests.processes import wait_for
from cluster.tests.quorum_scenarios import (
    Consumer,
    Publisher,
    declare,
    drain,
    message_count,
    wait_leader,
)

pytestmark = pytest.mark.timeout(240)


def test_declare_publish_on_one_member_consume_on_another(cluster):
    n2, n3, n4 = cluster.start_three()
    declare(n3, "orders")
    declare(n2, "orders")   # equivalent: fine on any member
    declare(n4, "orders")
    wait_leader(cluster, "orders")
    pub = Publisher(n3, "orders", 500)
    pub.join(120)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == 500
    wait_for(lambda: message_count(n2, "orders") == 500, 15,
             f"n2 reports {message_count(n2, 'orders')} messages")
    consumer = Consumer(n4, "orders", prefetch=50)
    wait_for(lambda: len(consumer.received) >= 500, 30, f"got {len(consumer.received)}")
    time.sleep(0.5)
    consumer.stop()
    assert consumer.error is None, consumer.error
    assert sorted(consumer.received) == sorted(pub.confirmed)   # each once
    wait_for(lambda: message_count(n3, "orders") == 0, 10, "messages left after the acks")
    assert not consumer.redelivered


def test_killing_the_leaders_broker_loses_no_confirmed_message(cluster):
    n2, n3, n4 = cluster.start_three()
    declare(n3, "orders")
    leader = wait_leader(cluster, "orders")
    others = [m for m in (n2, n3, n4) if m is not leader]
    pub = Publisher(others[0], "orders", 100_000)
    consumer = Consumer(others[1], "orders", prefetch=50)
    wait_for(lambda: len(pub.confirmed) >= 300, 60, f"only {len(pub.confirmed)} confirmed")
    before = len(pub.confirmed)
    killed_at = time.monotonic()
    cluster.kill(leader)
    wait_for(lambda: len(pub.confirmed) >= before + 300, 60,
             f"publishing did not resume: {len(pub.confirmed) - before} after the kill")
    pub.stop()
    assert pub.error is None, pub.error
    after = [t for t in pub.times if t > killed_at]
    gap = after[0] - killed_at
    print(f"kill -9 of the leader -> next confirm: {gap:.2f} s")
    octet = int(leader.host.rsplit(".", 1)[1])
    cluster.start(octet, others[0])
    wait_for(lambda: set(pub.confirmed) <= set(consumer.received), 60,
             f"{len(set(pub.confirmed) - set(consumer.received))} confirmed not received yet")
    consumer.stop()
    assert consumer.error is None, consumer.error
    # the restarted broker refuses clients (320) until it has re-joined and synced; start()
    # may return before it began to join (its view number still reads 0)
    wait_for(leader.serving, 20, f"{leader.name} never served a client:\n{leader.log_tail()}")
    rest = drain(leader, "orders", quiet=2.0)
    received = set(consumer.received) | set(rest)
    lost = set(pub.confirmed) - received
    assert not lost, f"{len(lost)} confirmed messages lost"


def test_a_broker_outside_the_group_forwards_publishes_with_confirms(cluster):
    n2, n3, n4 = cluster.start_three()
    declare(n2, "small", **{"x-quorum-initial-group-size": 2})
    wait_leader(cluster, "small")
    outside = next(m for m in (n2, n3, n4)
                   if "no replica here, forwarding" in m.log_path.read_text(errors="replace"))
    member = next(m for m in (n2, n3, n4) if m is not outside)
    pub = Publisher(outside, "small", 200)
    pub.join(60)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == 200
    got = drain(member, "small", quiet=2.0)
    assert sorted(got) == sorted(pub.confirmed)


def test_an_orderly_stop_hands_leadership_over(cluster):
    n2, n3, n4 = cluster.start_three()
    declare(n3, "handover")
    leader = wait_leader(cluster, "handover")
    others = [m for m in (n2, n3, n4) if m is not leader]
    pub = Publisher(others[0], "handover", 100_000)
    wait_for(lambda: len(pub.confirmed) >= 200, 60, f"only {len(pub.confirmed)} confirmed")
    stopped_at = time.monotonic()
    assert cluster.terminate(leader) == 0
    wait_for(lambda: bool(pub.times) and pub.times[-1] > stopped_at + 0.5, 30, "no confirm")
    pub.stop()
    assert pub.error is None, pub.error
    gaps = [b - a for a, b in zip(pub.times, pub.times[1:], strict=False) if b > stopped_at]
    print(f"SIGTERM of the leader: longest gap between confirms {max(gaps):.2f} s")
    got = drain(others[1], "handover", quiet=2.0)
    assert set(pub.confirmed) <= set(got)


def test_a_purge_drops_only_what_was_published_before_it(cluster):
    """Queue.Purge on one member is one Purge in the queue's log: a message published and
    confirmed through another member after Purge-Ok came back is still there (RabbitMQ: a
    purge removes the messages ready at the time). Before, every member the purge was
    propagated to proposed a Purge of its own, and those late Purges dropped such messages."""
    n2, n3, n4 = cluster.start_three()
    queues = [f"purged{k}" for k in range(8)]
    for q in queues:
        declare(n2, q)
    for q in queues:
        wait_leader(cluster, q)
    purger, publisher = n2.connect(), n3.connect()
    try:
        pch = purger.channel()
        ch = publisher.channel()
        ch.confirm_delivery()
        for q in queues:
            for i in range(5):
                ch.basic_publish("", q, f"m{i}".encode(),
                                 pika.BasicProperties(delivery_mode=2), mandatory=True)
            assert pch.queue_purge(q).method.message_count == 5
            for i in range(5):
                ch.basic_publish("", q, f"kept{i}".encode(),
                                 pika.BasicProperties(delivery_mode=2), mandatory=True)
    finally:
        purger.close()
        publisher.close()
    for q in queues:
        assert sorted(drain(n4, q, quiet=0.5)) == [f"kept{i}" for i in range(5)], q
