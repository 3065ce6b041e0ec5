"""Consumers on a broker outside a quorum queue's group, with real brokers and pika (issue 12):
the leader ships them their deliveries, acks stick, Basic.Get there is refused with 406, and
kill -9 of that broker while its consumer holds unacked messages redelivers them to a consumer
elsewhere (nothing confirmed lost). Source: RabbitMQ "Quorum Queues" (consumers on any node)."""

from __future__ import annotations

import time

import pika
import pytest

from cluster.tests.processes import Cluster, Member, wait_for
from cluster.tests.quorum_scenarios import (
    Consumer,
    Publisher,
    declare,
    message_count,
    wait_leader,
)
from cluster.tests.relay_scenarios import HoldingConsumer

pytestmark = pytest.mark.timeout(240)


def outside_of(members: list[Member]) -> Member:
    """The broker that logged that it holds no replica."""
    return next(m for m in members
                if "no replica here, forwarding" in m.log_path.read_text(errors="replace"))


def test_a_consumer_on_a_broker_outside_the_group_gets_everything_once(cluster: Cluster):
    n2, n3, n4 = cluster.start_three()
    n5 = cluster.start(5, n2)
    view = sorted(m.address for m in (n2, n3, n4, n5))
    wait_for(lambda: all(sorted(m.members() or []) == view for m in (n2, n3, n4, n5)), 20,
             "the four brokers did not agree on one view")
    for m in (n2, n3, n4, n5):   # the default group size is 3: one of the four holds no replica
        declare(m, "orders")
    wait_leader(cluster, "orders")
    outside = outside_of([n2, n3, n4, n5])
    members = [m for m in (n2, n3, n4, n5) if m is not outside]
    consumer = Consumer(outside, "orders", prefetch=50)
    pub = Publisher(members[0], "orders", 400)
    pub.join(120)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == 400
    wait_for(lambda: len(consumer.received) >= 400, 60, f"got {len(consumer.received)}")
    wait_for(lambda: message_count(members[1], "orders") == 0, 15, "messages left")
    time.sleep(3)   # several Holding reports and their answers: nothing acked comes back
    consumer.stop()
    assert consumer.error is None, consumer.error
    assert sorted(consumer.received) == sorted(pub.confirmed)   # each once
    assert not consumer.redelivered
    conn = outside.connect()
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            conn.channel().basic_get("orders")
        assert exc.value.reply_code == 406
    finally:
        conn.close()


def test_kill_of_the_outside_broker_holding_unacked_redelivers_them(cluster: Cluster):
    n2, n3, n4 = cluster.start_three()
    declare(n2, "held", **{"x-quorum-initial-group-size": 2})
    wait_leader(cluster, "held")
    outside = outside_of([n2, n3, n4])
    member = next(m for m in (n2, n3, n4) if m is not outside)
    holder = HoldingConsumer(outside, "held", prefetch=30)   # never acks
    pub = Publisher(member, "held", 100)
    pub.join(120)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == 100
    wait_for(lambda: len(holder.received) == 30, 30, f"holder got {len(holder.received)}")
    cluster.kill(outside)
    consumer = Consumer(member, "held", prefetch=50)
    wait_for(lambda: set(pub.confirmed) <= set(consumer.received), 60,
             f"{len(set(pub.confirmed) - set(consumer.received))} confirmed not received")
    consumer.stop()
    assert consumer.error is None, consumer.error
    assert set(holder.received) <= set(consumer.redelivered)   # returned by Down, redelivered
    assert sorted(consumer.received) == sorted(pub.confirmed)
