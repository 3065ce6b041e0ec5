"""Quorum queues larger than RAM (issue 25), with real brokers and pika: every body is paged out
(``AMQP_QUORUM_PAGE_BYTES=0``: the queue keeps only a record per message and reads the body back
from its Raft log on delivery), and what a user sees is unchanged: messages come in order with
their bodies, a requeued one comes back with ``x-delivery-count``, a rejected one reaches the
dead-letter queue, messages survive a kill -9 and restart, and a member that was down while the
leader took a snapshot (and cut its log) catches up and delivers the bodies.
Sources: RabbitMQ "Quorum Queues" (memory usage: bodies in the log segments; poison message
handling; dead-lettering); rabbit_fifo (a message is its Raft index, read on delivery)."""

from __future__ import annotations

import pika
import pytest

from cluster.tests.processes import Member, wait_for
from cluster.tests.quorum_scenarios import declare, message_count, wait_leader

pytestmark = pytest.mark.timeout(240)
#: Entries between a queue's snapshots in these brokers (8192 by default: a long test).
SNAPSHOT_ENTRIES = 600
#: Messages of the backlog with properties.
PROPS = 60


@pytest.fixture(autouse=True)
def _paged(monkeypatch):
    """Every body of every quorum queue read back from the log (the brokers inherit it)."""
    monkeypatch.setenv("AMQP_QUORUM_PAGE_BYTES", "0")
    monkeypatch.setenv("AMQP_QUORUM_SNAPSHOT_ENTRIES", str(SNAPSHOT_ENTRIES))


def body(i: int, size: int = 3000) -> bytes:
    """A body that says which message it is, over ``size`` bytes."""
    head = f"message {i:06d} ".encode()
    return (head * (size // len(head) + 1))[:size]


def publish(member: Member, queue: str, bodies: list[bytes], confirm: bool = True) -> None:
    conn = member.connect()
    try:
        ch = conn.channel()
        if confirm:
            ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        for b in bodies:
            ch.basic_publish("", queue, b, props)
    finally:
        conn.close()


def take(member: Member, queue: str, count: int) -> list[bytes]:
    """Consume and ack ``count`` messages (fewer when none comes for 10 s): their bodies."""
    out: list[bytes] = []
    conn = member.connect()
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        for method, _props, b in ch.consume(queue, inactivity_timeout=10):
            if method is None:
                break
            out.append(b)
            if len(out) % 100 == 0 or len(out) == count:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(out) == count:
                break
        ch.cancel()
    finally:
        conn.close()
    return out


def props_of(i: int) -> pika.BasicProperties:
    """Message ``i``'s properties: its own headers, priority (> 4: RabbitMQ 4's high ones),
    expiration (far off) and ids."""
    return pika.BasicProperties(
        delivery_mode=2, headers={"i": i, "tag": f"t{i % 3}"}, priority=i % 10,
        expiration=str(3_600_000 + i), message_id=f"m{i}", correlation_id=f"c{i}",
        content_type="text/plain", timestamp=1_700_000_000 + i, type="kind", app_id="qqram")


def test_paged_queues_deliver_survive_a_kill_and_catch_up_after_a_snapshot(cluster):
    """One cluster for all of it (brokers are slow to start on a loaded machine)."""
    n2, n3, n4 = cluster.start_three()
    declare(n2, "props")
    declare(n2, "dead")
    declare(n2, "paged", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    declare(n2, "snapped")
    leader = wait_leader(cluster, "snapped")
    away = next(m for m in (n2, n3, n4) if m is not leader)
    here = next(m for m in (n2, n3, n4) if m not in (leader, away))
    bodies = [body(i) for i in range(60)]
    publish(here, "paged", bodies)
    wait_for(lambda: message_count(away, "paged") == 60, 20, "not on every member")
    # a backlog with properties: held as integers (Raft index, size, expiry), its headers in
    # the log with the bodies
    conn = here.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(PROPS):
        ch.basic_publish("", "props", body(i, 300), props_of(i))
    conn.close()
    wait_for(lambda: message_count(away, "props") == PROPS, 20, "props not on every member")
    cluster.kill(away)   # its replicas come back from their own logs

    # the leader of "snapped" takes a snapshot (and cuts its log) while ``away`` is down
    total, left = SNAPSHOT_ENTRIES + 500, 100
    snapped = [body(i, 200) for i in range(total)]
    publish(here, "snapped", snapped[:-1], confirm=False)
    publish(here, "snapped", snapped[-1:])   # confirmed: every earlier one is in too
    assert take(leader, "snapped", total - left) == snapped[:total - left]
    cluster.start(int(away.host.rsplit(".", 1)[1]), here)
    wait_for(lambda: message_count(away, "snapped") == left, 30,
             f"{away.name} holds {message_count(away, 'snapped')} of {left}")
    cluster.kill(leader)   # what is left is served by the members that were apart
    # the unacked ones in flight when ``take`` stopped came back first: any order
    assert sorted(take(away, "snapped", left)) == snapped[total - left:]

    # consumed on the restarted member, from its own replica: in order, a requeued message
    # counted, a rejected one dead-lettered
    conn = away.connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)   # one at a time: a requeued message comes back first
    got: list[bytes] = []
    counts: list[int] = []
    for method, props, b in ch.consume("paged", inactivity_timeout=10):
        assert method is not None, f"only {len(got)} delivered"
        got.append(b)
        counts.append((props.headers or {}).get("x-delivery-count", 0))
        if len(got) == 1:
            ch.basic_nack(method.delivery_tag, requeue=True)      # back, counted
        elif len(got) == 3:
            ch.basic_reject(method.delivery_tag, requeue=False)   # dead-lettered
        else:
            ch.basic_ack(method.delivery_tag)
        if len(got) == 61:
            break
    ch.cancel()
    conn.close()
    assert got[0] == got[1] == bodies[0]
    assert counts[:2] == [0, 1]
    assert got[1:] == bodies
    assert take(away, "dead", 1) == [bodies[1]]

    # the backlog with properties, from the member restarted after kill -9: every message
    # with its own properties; the first one requeued comes back first, counted
    conn = away.connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    seen: list[tuple[int, int]] = []
    for method, p, b in ch.consume("props", inactivity_timeout=10):
        assert method is not None, f"only {len(seen)} delivered"
        i = int(p.message_id[1:])
        want = props_of(i)
        count = p.headers.pop("x-delivery-count", 0)
        assert (b, p.headers, p.priority, p.expiration, p.correlation_id, p.content_type,
                p.timestamp, p.type, p.app_id, p.delivery_mode) == \
            (body(i, 300), want.headers, want.priority, want.expiration, want.correlation_id,
             want.content_type, want.timestamp, want.type, want.app_id, 2)
        seen.append((i, count))
        if len(seen) == 1:
            ch.basic_nack(method.delivery_tag, requeue=True)
        else:
            ch.basic_ack(method.delivery_tag)
        if len(seen) == PROPS + 1:
            break
    ch.cancel()
    conn.close()
    assert seen[1] == (seen[0][0], 1) and seen[0][1] == 0
    assert sorted(i for i, _ in seen[1:]) == list(range(PROPS))
    # RabbitMQ 4's two priorities: the high ones (priority > 4) go 2 for 1 normal
    assert sum(i % 10 > 4 for i, _ in seen[2:11]) == 6
