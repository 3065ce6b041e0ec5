"""At-least-once dead-lettering of a quorum queue across a leader's death (issue 25), with real
brokers and pika: a source quorum queue with ``x-dead-letter-strategy: at-least-once`` (and
``x-overflow: reject-publish``, as RabbitMQ requires) whose every message is rejected while its
dead-letter exchange routes nowhere; its leader is killed with SIGKILL; then the target quorum
queue is bound. Every published message reaches the target (duplicates allowed, losses not): the
dead letters are held in the replicated state until a target confirmed them, and the new leader
sends them. Source: RabbitMQ "Quorum Queues" (at-least-once dead-lettering)."""

from __future__ import annotations

import pytest

from cluster.tests.processes import wait_for
from cluster.tests.quorum_scenarios import Consumer, Publisher, declare, drain, wait_leader

pytestmark = pytest.mark.timeout(180)
COUNT = 100


def test_dead_letters_held_at_least_once_survive_a_kill_of_the_leader_and_reach_a_late_target(
        cluster):
    """Dead letters whose target is not bound yet (an outage of the target, as far as the
    source can tell) are held; the source's leader is killed; once the target is bound, the new
    leader sends every one of them. At most once (before issue 25, or without the strategy) they
    would all have been dropped at the reject."""
    n2, n3, n4 = cluster.start_three()
    declare(n3, "source", **{"x-dead-letter-exchange": "dead",
                             "x-dead-letter-strategy": "at-least-once",
                             "x-overflow": "reject-publish"})
    declare(n3, "target")
    conn = n3.connect()
    try:
        conn.channel().exchange_declare("dead", "fanout", durable=True)
    finally:
        conn.close()
    leader = wait_leader(cluster, "source")
    publisher_at, rejecter_at = [m for m in (n2, n3, n4) if m is not leader]
    pub = Publisher(publisher_at, "source", COUNT)
    pub.join(90)
    assert pub.error is None and len(pub.confirmed) == COUNT, pub.error
    rejecter = Consumer(rejecter_at, "source", prefetch=20, reject=True)
    wait_for(lambda: len(set(rejecter.received)) >= COUNT, 60,
             f"only {len(set(rejecter.received))} of {COUNT} rejected")
    rejecter.stop()
    assert rejecter.error is None, rejecter.error
    cluster.kill(leader)   # SIGKILL: the dead letters are held by the replicated state only
    conn = publisher_at.connect()
    try:
        conn.channel().queue_bind("target", "dead")
    finally:
        conn.close()
    got: set[str] = set()
    for _ in range(10):   # bounded: the new leader sends what it holds once routable
        got |= set(drain(publisher_at, "target", quiet=1.0))
        if got >= set(pub.confirmed):
            break
    lost = set(pub.confirmed) - got
    assert not lost, f"{len(lost)} dead letters lost, e.g. {sorted(lost)[:5]}"
