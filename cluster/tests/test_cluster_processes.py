"""A cluster of real broker processes on 127.0.0.2-6, driven by pika clients (issue "Peer clustering").

Covers: three brokers form one ordered view, leader first, visible in every broker's Connection.Start
(``cluster_members``); a late joiner (joining through a non-leader) gets every exchange, queue and
binding; declarations made on one broker exist on the others when the client gets its Declare-Ok
(reply policy ``all``), an inequivalent redeclare on another broker is refused with 406, and with
``--sync-replies none`` the client is answered at once and the change still arrives; kill -9 of a
member and of the leader gives a new view within 2 s and clients on the survivors keep publishing
and consuming; a frozen (SIGSTOP) broker is removed by the ring ping and rejoins after SIGCONT; an
orderly SIGTERM leaves the view; a lone survivor of a three-member view (a minority) does not change
the view; a client claiming ``cluster-peer`` without the secret is refused with 403.
Source: ../shared/seeds/qpid-clustering-ha-proposal.txt, DESIGN.md §4.
"""

from __future__ import annotations

import time

import pika
import pytest
from pamqp import commands

from cluster.tests.processes import server_properties, wait_for
from interop_tests.rawamqp import RawConnection

pytestmark = pytest.mark.timeout(120)


def test_three_brokers_form_one_ordered_view(cluster):
    n2, n3, n4 = cluster.start_three()
    props = server_properties(n3.host, n3.port)
    assert props["node_name"] == "n3"
    assert props["cluster_member_names"] == ["n2", "n3", "n4"]  # the leader first


def test_declarations_propagate_and_a_late_joiner_gets_them(cluster):
    n2, n3, n4 = cluster.start_three()
    conn = n3.connect()
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.queue_declare("shipping", durable=True)
    ch.queue_bind("shipping", "orders", "order.*")
    # Declare-Ok came after every member applied it (policy "all").
    other = n4.connect()
    och = other.channel()
    och.basic_publish("orders", "order.new", b"routed on n4")
    assert och.basic_get("shipping", auto_ack=True)[2] == b"routed on n4"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        och.exchange_declare("orders", "fanout", durable=True)
    assert info.value.reply_code == 406
    n5 = cluster.start(5, n4)  # joins through a non-leader
    wait_for(lambda: n5.members() == [n2.address, n3.address, n4.address, n5.address], 10,
             "n5 did not join")
    late = n5.connect().channel()
    late.exchange_declare("orders", "topic", durable=True, passive=True)
    late.basic_publish("orders", "order.late", b"routed on n5")
    assert late.basic_get("shipping", auto_ack=True)[2] == b"routed on n5"
    ch.queue_delete("shipping")
    check = n5.connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        check.queue_declare("shipping", passive=True)
    assert info.value.reply_code == 404


def test_reply_policy_none_answers_at_once_and_still_propagates(cluster):
    n2 = cluster.start(2)
    n3 = cluster.start(3, n2, "--sync-replies", "none")
    wait_for(lambda: n2.members() == [n2.address, n3.address], 10, "no view of two")

    def declared_on_n3() -> bool:  # n3 refuses clients ("joining the cluster") until synced
        try:
            n3.connect().channel().queue_declare("eventually")
            return True
        except pika.exceptions.AMQPError:
            return False
    wait_for(declared_on_n3, 10, "n3 never served a client")

    def on_n2() -> bool:
        ch = n2.connect().channel()
        try:
            ch.queue_declare("eventually", passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False
    wait_for(on_n2, 5, "the declaration never reached n2")


@pytest.mark.parametrize("victim", ["member", "leader"])
def test_kill_9_gives_a_new_view_and_survivors_serve(cluster, victim):
    n2, n3, n4 = cluster.start_three()
    dead, survivors = (n4, (n2, n3)) if victim == "member" else (n2, (n3, n4))
    conn = survivors[0].connect()
    ch = conn.channel()
    ch.queue_declare("work")
    cluster.kill(dead)
    expected = [m.address for m in survivors]
    # how fast: benchmarks/cluster.py (failover); here only that it happens and they serve
    wait_for(lambda: all(m.members() == expected for m in survivors), 10,
             f"no new view after kill -9 of the {victim}")
    ch.basic_publish("", "work", b"still here")
    assert ch.basic_get("work", auto_ack=True)[2] == b"still here"
    ch.queue_declare("declared-after")
    survivors[1].connect().channel().queue_declare("declared-after", passive=True)


def test_frozen_broker_is_removed_and_rejoins_after_sigcont(cluster):
    n2, n3, n4 = cluster.start_three()
    cluster.freeze(n4)
    wait_for(lambda: n2.members() == [n2.address, n3.address], 10,
             "a frozen broker was never removed")
    cluster.thaw(n4)
    wait_for(lambda: n2.members() == [n2.address, n3.address, n4.address]
             and n4.members() == n2.members(), 15, "the thawed broker did not rejoin")


def test_orderly_leave_on_sigterm(cluster):
    n2, n3, n4 = cluster.start_three()
    assert cluster.terminate(n3) == 0
    wait_for(lambda: n2.members() == [n2.address, n4.address], 5, "n3's Leave was not applied")


def test_minority_does_not_change_the_view(cluster):
    n2, n3, n4 = cluster.start_three()
    cluster.freeze(n3)
    cluster.freeze(n4)
    time.sleep(3)  # six ping intervals: long enough for any suspicion to act
    assert n2.members() == [n2.address, n3.address, n4.address]
    cluster.thaw(n3)
    cluster.thaw(n4)


def test_cluster_peer_without_the_secret_is_refused(cluster):
    n2 = cluster.start(2)
    raw = RawConnection(n2.host, n2.port)
    try:
        raw.send(b"AMQP\x00\x00\x09\x01")
        _, start = raw.read_method()
        assert isinstance(start, commands.Connection.Start)
        raw.send_method(commands.Connection.StartOk(
            client_properties={"capabilities": {"cluster-peer": True}}, mechanism="PLAIN",
            response="\x00guest\x00guest", locale="en_US"))
        close = raw.expect_connection_close()
        assert close.reply_code == 403
    finally:
        raw.close()


def test_broker_with_the_wrong_secret_cannot_join(cluster, tmp_path):
    n2 = cluster.start(2)
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("not-the-cluster-secret-0123456789")
    intruder = cluster.start(3, n2, "--cluster-secret", str(wrong), wait=False)
    view: list[list[str] | None] = [None]  # the intruder's, as last seen

    def refused() -> bool:
        """The intruder answers clients and has tried to join: n2 refused its link."""
        view[0] = intruder.members()
        return (view[0] is not None and "failed authentication" in n2.log_tail(200)
                and "peer refused the link: 403" in intruder.log_tail(200))
    # bounded; the intruder's start alone takes seconds on a loaded machine
    try:
        wait_for(refused, 60)
    except AssertionError:
        raise AssertionError(f"no refused join in the logs:\n{n2.log_tail()}\n---\n"
                             f"{intruder.log_tail()}") from None
    assert n2.members() == [n2.address]
    assert view[0] == [intruder.address]  # alone in its own view, n2 not in it


def _consume_counts(members_tags, queue: str, total: int, timeout: float = 20.0) -> dict:
    """Start one consumer per (member, tag); return deliveries per tag once ``total`` arrived."""
    import threading
    from collections import Counter
    got: Counter = Counter()
    stop = threading.Event()
    ready = threading.Barrier(len(members_tags) + 1, timeout=timeout)

    def run(member, tag):
        conn = member.connect()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=20)

        def on_message(channel, method, _props, _body):
            got[tag] += 1
            channel.basic_ack(method.delivery_tag)
        ch.basic_consume(queue, on_message)
        ready.wait()
        while not stop.is_set():
            conn.process_data_events(0.05)
        conn.close()

    threads = [threading.Thread(target=run, args=mt) for mt in members_tags]
    for t in threads:
        t.start()
    ready.wait()
    return {"got": got, "stop": stop, "threads": threads}


def test_shared_queue_deals_fairly_across_brokers(cluster):
    n2, n3, n4 = cluster.start_three()
    setup = n2.connect().channel()
    setup.exchange_declare("jobs-x", "direct")
    setup.queue_declare("jobs")
    setup.queue_bind("jobs", "jobs-x", "job")
    run = _consume_counts([(n2, "n2"), (n3, "n3"), (n4, "n4a"), (n4, "n4b")], "jobs", 2000)
    time.sleep(1.0)  # Cluster.Consumers reaches every member
    pub = n3.connect().channel()
    pub.confirm_delivery()
    for i in range(2000):
        pub.basic_publish("jobs-x", "job", str(i).encode())
    wait_for(lambda: sum(run["got"].values()) >= 2000, 20, f"only {run['got']} delivered")
    run["stop"].set()
    for t in run["threads"]:
        t.join(10)
    got = run["got"]
    assert sum(got.values()) == 2000
    for tag in ("n2", "n3", "n4a", "n4b"):  # each consumer's share within ±10 % of fair
        assert abs(got[tag] - 500) <= 50, got


def test_message_waits_until_a_consumer_appears_on_another_broker(cluster):
    n2, n3, n4 = cluster.start_three()
    ch = n2.connect().channel()
    ch.queue_declare("later")
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "later", str(i).encode())
    run = _consume_counts([(n4, "n4")], "later", 10)
    wait_for(lambda: run["got"]["n4"] == 10, 10, f"got {run['got']}")
    run["stop"].set()
    for t in run["threads"]:
        t.join(10)


def test_private_queue_is_reached_through_another_broker_and_relayed_once(cluster):
    n2, n3, n4 = cluster.start_three()
    home = n3.connect()
    ch = home.channel()
    ch.exchange_declare("ev", "topic")
    q1 = ch.queue_declare("", exclusive=True).method.queue
    q2 = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q1, "ev", "a.*")
    ch.queue_bind(q1, "ev", "*.b")  # a.b matches q1 twice and q2 once: one copy each
    ch.queue_bind(q2, "ev", "*.b")
    pub = n2.connect().channel()
    pub.confirm_delivery()
    pub.basic_publish("ev", "a.b", b"both")
    pub.basic_publish("ev", "a.c", b"q1 only")

    def drain(queue):
        out = []
        while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
            out.append((got[0].exchange, got[0].routing_key, got[2]))
        return out
    wait_for(lambda: ch.queue_declare(q1, passive=True).method.message_count == 2, 5,
             "the relayed messages did not reach the private queue")
    assert drain(q1) == [("ev", "a.b", b"both"), ("ev", "a.c", b"q1 only")]
    assert drain(q2) == [("ev", "a.b", b"both")]
    other = n4.connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.queue_declare(q1, passive=True)
    assert info.value.reply_code == 405
    home.close()  # the private queues go, and with them the proxies on n2 and n4
    check = n2.connect().channel()

    def gone() -> bool:
        try:
            n2.connect().channel().queue_declare(q1, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code == 404
    wait_for(gone, 5, "the proxy outlived its private queue")
    check.basic_publish("ev", "a.b", b"nobody")


def test_restarted_broker_rejoins_with_its_durable_state(cluster):
    n2, n3, n4 = cluster.start_three()
    ch = n2.connect().channel()
    ch.exchange_declare("durable-x", "fanout", durable=True)
    cluster.kill(n3)
    wait_for(lambda: n2.members() == [n2.address, n4.address], 5, "n3 was not removed")
    ch.queue_declare("declared-while-n3-was-down")
    cluster.start(3, n2)  # same node name, address and data dir
    wait_for(lambda: n2.members() == [n2.address, n4.address, n3.address], 15,
             "the restarted broker did not rejoin")
    wait_for(n3.serving, 20, "the restarted broker never served a client (still syncing)")
    back = n3.connect().channel()
    back.exchange_declare("durable-x", "fanout", durable=True, passive=True)
    back.queue_declare("declared-while-n3-was-down", passive=True)  # replayed by the leader


def test_aio_pika_clients_on_different_brokers_share_a_queue(cluster):
    import asyncio

    import aio_pika

    n2, n3, n4 = cluster.start_three()

    async def scenario() -> list[bytes]:
        producer = await aio_pika.connect(n2.uri)
        consumer = await aio_pika.connect(n4.uri)
        async with producer, consumer:
            pch = await producer.channel()
            cch = await consumer.channel()
            queue = await cch.declare_queue("aio-shared")
            got: list[bytes] = []
            done = asyncio.Event()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    got.append(message.body)
                    if len(got) == 20:
                        done.set()
            await queue.consume(on_message)
            await asyncio.sleep(0.5)  # the consumer count reaches n2
            for i in range(20):
                await pch.default_exchange.publish(aio_pika.Message(str(i).encode()),
                                                   routing_key="aio-shared")
            await asyncio.wait_for(done.wait(), 10)
            return got
    got = asyncio.run(scenario())
    assert sorted(got, key=int) == [str(i).encode() for i in range(20)]
