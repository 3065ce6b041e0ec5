"""Replicated streams with real brokers and pika, aio-pika and kombu (issue 25): one 3-broker cluster shared by the
module (n2, n3, n4 on 127.0.0.2-4). A stream declared on one member is one log: what is
published on n3 is read at the same offsets with the same bodies on n2 and n4; a kill -9 of the
broker a publisher is connected to loses no confirmed message; a restarted member catches up
from the others without stopping the stream; every member reports the same message count
(passive declare, the management API); ``ctl add_replica`` / ``delete_replica`` move a stream's
replicas while it serves. With ``AMQP_STREAMS_LONG=1`` also a member that returns
after a snapshot compacted the leader's log (a minute or more). Every wait is bounded.
Source: RabbitMQ "Streams" (replication, offsets), DESIGN.md §4 (replicated queues)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import socket
import subprocess
import sys
import time

import aio_pika
import kombu
import pika
import pytest

from amqp_broker.management import ctl
from cluster.stream.group import SNAPSHOT_MIN_ENTRIES
from cluster.tests.processes import Cluster, Member, api_get, start_with_api, wait_for
from cluster.tests.quorum_scenarios import Publisher

pytestmark = pytest.mark.timeout(240)

STREAM = {"x-queue-type": "stream"}


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """n2 (with its management API), n3 and n4 in one view, for the whole module."""
    cluster = Cluster.create(tmp_path_factory.mktemp("streams"))
    try:
        n2, api = start_with_api(cluster, 2, None)
        n3 = cluster.start(3, n2, wait=False)   # both join at once: a shorter setup
        n4 = cluster.start(4, n2, wait=False)
        wait_for(lambda: all(m.members() is not None and len(m.members() or ()) == 3
                             and m.serving() for m in (n2, n3, n4)), 40,
                 "the three brokers did not agree on one view")
        yield cluster, (n2, n3, n4), api
    finally:
        cluster.stop_all()


def _declare(member: Member, name: str, **arguments: object) -> None:
    conn = member.connect()
    try:
        conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    finally:
        conn.close()


def _count(member: Member, name: str) -> int:
    """Queue.Declare passive's message count on ``member``; -1 while it refuses clients."""
    try:
        conn = member.connect()
    except pika.exceptions.AMQPConnectionError:
        return -1
    try:
        return conn.channel().queue_declare(name, passive=True).method.message_count
    finally:
        conn.close()


def _publish(member: Member, name: str, bodies: list[bytes]) -> None:
    conn = member.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", name, body)
    finally:
        conn.close()


def _read(member: Member, name: str, count: int, offset: object = "first",
          timeout: float = 20) -> list[tuple[int, bytes]]:
    """(x-stream-offset, body) of the first ``count`` messages from ``offset`` on ``member``."""
    conn = member.connect()
    got: list[tuple[int, bytes]] = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=200)

        def on_message(_ch, method, props, body):
            got.append((props.headers["x-stream-offset"], body))
            _ch.basic_ack(method.delivery_tag)

        ch.basic_consume(name, on_message, arguments={"x-stream-offset": offset})
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.05)
    finally:
        conn.close()
    return got


def test_published_on_one_member_read_at_the_same_offsets_on_the_others(three):
    _cluster, (n2, n3, n4), api = three
    _declare(n2, "events")
    bodies = [f"e-{i}".encode() for i in range(100)]
    _publish(n3, "events", bodies)
    expected = list(enumerate(bodies))
    for member in (n2, n3, n4):
        assert _read(member, "events", 100) == expected, member.name
    assert _read(n4, "events", 10, offset=90) == expected[90:]
    assert _read(n2, "events", 1, offset="last") == expected[-1:]
    assert _read(n3, "events", 100, offset=datetime.datetime(2020, 1, 1)) == expected
    conn = n4.connect()   # Basic.Qos required, as on one broker (RabbitMQ: 406)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch = conn.channel()
        ch.basic_consume("events", lambda *_: None, arguments={"x-stream-offset": "first"})
        conn.process_data_events(time_limit=1)
    assert refused.value.reply_code == 406
    conn.close()
    wait_for(lambda: [_count(m, "events") for m in (n2, n3, n4)] == [100] * 3, 10,
             f"counts {[_count(m, 'events') for m in (n2, n3, n4)]}")
    queue = api_get(api, "/queues/%2F/events")
    assert isinstance(queue, dict)
    assert (queue["type"], queue["messages"]) == ("stream", 100)
    assert sorted(queue["members"]) == ["n2", "n3", "n4"]
    listed = subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", "--url", api,
                             "--formatter", "json", "list_queues", "name", "messages"],
                            capture_output=True, text=True, timeout=60)
    assert {"name": "events", "messages": 100} in json.loads(listed.stdout), listed.stderr


def test_kill_9_mid_publish_loses_no_confirmed_message_and_the_member_catches_up(three):
    cluster, (n2, n3, n4), _api = three
    _declare(n4, "orders")
    pub = Publisher(n3, "orders", 1_000_000, prefix="o")
    wait_for(lambda: len(pub.confirmed) >= 50, 60, f"only {len(pub.confirmed)} confirmed")
    cluster.kill(n3)
    pub.join(10)
    confirmed = [b.encode() for b in pub.confirmed]
    assert confirmed
    # the stream goes on without n3 (a majority is left) ...
    _publish(n2, "orders", [b"after-1", b"after-2"])
    total = _count(n2, "orders")
    assert total >= len(confirmed) + 2
    for member in (n2, n4):
        got = _read(member, "orders", total)
        assert [o for o, _b in got] == list(range(total)), member.name
        bodies = [b for _o, b in got]
        assert bodies[:len(confirmed)] == confirmed, member.name   # every confirmed one, in order
        assert bodies[-2:] == [b"after-1", b"after-2"], member.name
    # ... and n3 restarted catches up: same records at the same offsets
    cluster.start(3, n2)
    wait_for(lambda: _count(n3, "orders") == total, 30,
             f"n3 reports {_count(n3, 'orders')} of {total}")
    on_n2 = _read(n2, "orders", total)
    assert _read(n3, "orders", total) == on_n2
    assert [_count(m, "orders") for m in (n2, n3, n4)] == [total] * 3


def test_retention_is_decided_by_the_leader_and_the_same_on_every_member(three):
    _cluster, (n2, n3, n4), _api = three
    _declare(n3, "logs", **{"x-max-length-bytes": 6000, "x-stream-max-segment-size-bytes": 4096})
    _publish(n4, "logs", [b"%04d" % i + b"." * 300 for i in range(60)])

    def firsts() -> list[int]:
        return [(_read(m, "logs", 1, timeout=5) or [(-1, b"")])[0][0] for m in (n2, n3, n4)]

    wait_for(lambda: len(set(firsts())) == 1 and firsts()[0] > 0, 15,
             f"first offsets {firsts()}")
    first = firsts()[0]
    assert 30 < first < 60   # whole segments went, about 6 kB kept
    counts = [_count(m, "logs") for m in (n2, n3, n4)]
    assert counts == [60 - first] * 3
    assert _read(n2, "logs", 60 - first, offset=first) == \
        [(i, b"%04d" % i + b"." * 300) for i in range(first, 60)]


def test_a_broker_outside_x_initial_cluster_size_publishes_and_reads_through_the_members(three):
    _cluster, members, api = three
    _declare(members[0], "pairs", **{"x-initial-cluster-size": 2})
    wait_for(lambda: isinstance(api_get(api, "/queues/%2F/pairs"), dict), 10, "not declared")
    replicas = sorted(api_get(api, "/queues/%2F/pairs")["members"])  # type: ignore[index]
    assert len(replicas) == 2
    outside = next(m for m in members if m.name not in replicas)
    _publish(outside, "pairs", [b"o-%d" % i for i in range(10)])   # confirmed through them
    _publish(next(m for m in members if m is not outside), "pairs", [b"r-%d" % i for i in range(10)])
    expected = list(enumerate([b"o-%d" % i for i in range(10)] + [b"r-%d" % i for i in range(10)]))
    for member in members:
        assert _read(member, "pairs", 20) == expected, member.name
    wait_for(lambda: [_count(m, "pairs") for m in members] == [20] * 3, 10,
             f"counts {[_count(m, 'pairs') for m in members]}")


@pytest.mark.skipif(os.environ.get("AMQP_STREAMS_LONG") != "1",
                    reason="a minute or more: set AMQP_STREAMS_LONG=1")
def test_a_member_back_after_a_snapshot_fetches_the_records_from_the_others(three):
    """n4 is down while more than ``SNAPSHOT_MIN_ENTRIES`` messages are published (our asyncio
    client, window 256): the leader compacts its Raft log, so n4 gets a snapshot and fetches the
    records from the others' segments (STREAM_FETCH); a consumer on n4 at an offset it does not
    have yet waits for it, and reads what n2 reads."""
    cluster, (n2, n3, n4), _api = three
    _declare(n2, "bench")
    cluster.kill(n4)
    done = subprocess.run([sys.executable, "-m", "benchmarks.quorum", "--role", "publish",
                           "--url", n3.uri, "--seconds", "15"], capture_output=True, text=True,
                          timeout=120)
    assert json.loads(done.stdout)["confirmed"] > SNAPSHOT_MIN_ENTRIES + 1000, done.stdout
    total = _count(n2, "bench")
    cluster.start(4, n2)
    assert _read(n4, "bench", 50, offset=total - 50, timeout=60) == \
        _read(n2, "bench", 50, offset=total - 50)
    assert _read(n4, "bench", 20) == _read(n2, "bench", 20)
    wait_for(lambda: _count(n4, "bench") == total, 30, f"n4 reports {_count(n4, 'bench')}")
    assert "caught up to offset" in n4.log_path.read_text(errors="replace")


def _replicas(api: str, name: str) -> list[str]:
    queue = api_get(api, f"/queues/%2F/{name}")
    return sorted(queue["members"]) if isinstance(queue, dict) else []   # type: ignore[index]


def test_add_replica_catches_up_and_delete_replica_leaves_the_stream_serving(three):
    """rabbitmq-streams add_replica / delete_replica (``ctl``): a stream on 2 of the 3 brokers
    gets a replica on the third, which reads every record from it; one of the first two is
    deleted and the stream still takes publishes and serves them on every broker, also after
    both changed brokers restart."""
    cluster, members, api = three
    _declare(members[0], "grown", **{"x-initial-cluster-size": 2})
    wait_for(lambda: len(_replicas(api, "grown")) == 2, 10, "not declared")
    first_two = _replicas(api, "grown")
    third = next(m for m in members if m.name not in first_two)
    before = [b"b-%d" % i for i in range(50)]
    _publish(members[0], "grown", before)
    assert ctl.main(["--url", api, "add_replica", "grown", "nosuch"]) == 1   # node_not_running
    assert ctl.main(["--url", api, "add_replica", "nosuchstream", third.name]) == 1
    assert ctl.main(["--url", api, "add_replica", "grown", third.name]) == 0
    assert _replicas(api, "grown") == sorted((*first_two, third.name))
    assert _read(third, "grown", 50) == list(enumerate(before))
    gone = next(m for m in members if m.name in first_two and m is not members[0])
    assert ctl.main(["--url", api, "delete_replica", "grown", gone.name]) == 0
    kept = sorted((members[0].name, third.name))
    wait_for(lambda: _replicas(api, "grown") == kept, 15, f"members {_replicas(api, 'grown')}")
    after = [b"a-%d" % i for i in range(10)]
    _publish(gone, "grown", after[:5])     # now outside the members: through them
    _publish(third, "grown", after[5:])
    expected = list(enumerate(before + after))
    for member in members:
        assert _read(member, "grown", 60) == expected, member.name
    wait_for(lambda: [_count(m, "grown") for m in members] == [60] * 3, 10,
             f"counts {[_count(m, 'grown') for m in members]}")
    # restarted, each keeps its part (members.json, not the declared members): the deleted
    # member reads from the others and publishes through them, the added one is a member
    cluster.kill(gone)
    cluster.kill(third)
    cluster.start(int(gone.name[1:]), members[0])
    cluster.start(int(third.name[1:]), members[0])
    wait_for(lambda: gone.serving() and third.serving(), 40, "the restarted brokers do not serve")
    _publish(gone, "grown", [b"r-0", b"r-1"])
    expected += [(60, b"r-0"), (61, b"r-1")]
    for member in members:
        assert _read(member, "grown", 62) == expected, member.name
    assert _replicas(api, "grown") == kept


def test_aio_pika_and_kombu_read_a_replicated_stream_through_other_members(three):
    """The clients issue 25 names beside pika: aio-pika publishes with confirms on n3 and reads
    from the first offset on n4 (``x-stream-offset`` as a consume argument, prefetch set, as
    RabbitMQ requires for a stream consumer); kombu (py-amqp) reads the same records at the same
    offsets on n2. Source: RabbitMQ "Streams" (consuming over AMQP 0-9-1)."""
    _cluster, (n2, n3, n4), _api = three
    name = "stream-clients"
    _declare(n2, name)
    bodies = [f"m{i}".encode() for i in range(20)]

    async def aio() -> list[tuple[int, bytes]]:
        pub = await aio_pika.connect(n3.uri)
        async with pub:
            ch = await pub.channel(publisher_confirms=True)
            for body in bodies:
                await ch.default_exchange.publish(aio_pika.Message(body), routing_key=name)
        con = await aio_pika.connect(n4.uri)
        got: list[tuple[int, bytes]] = []
        async with con:
            ch = await con.channel()
            await ch.set_qos(prefetch_count=50)
            queue = await ch.get_queue(name, ensure=False)
            async with queue.iterator(arguments={"x-stream-offset": "first"}) as it:
                async for message in it:
                    got.append((message.headers["x-stream-offset"], message.body))
                    await message.ack()
                    if len(got) == len(bodies):
                        break
        return got

    by_aio = asyncio.run(asyncio.wait_for(aio(), 60))
    assert by_aio == list(enumerate(bodies))

    got: list[tuple[int, bytes]] = []
    with kombu.Connection(n2.uri, transport="pyamqp") as conn:
        queue = kombu.Queue(name, no_declare=True,
                            consumer_arguments={"x-stream-offset": "first"})

        def on_message(body, message):
            got.append((message.headers["x-stream-offset"], message.body))
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], accept=None,
                           prefetch_count=50):
            deadline = time.monotonic() + 30
            while len(got) < len(bodies) and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError, socket.timeout):
                    conn.drain_events(timeout=0.5)
    assert got == list(enumerate(bodies))
