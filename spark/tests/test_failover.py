"""Failover of the source's offset probes (``spark.failover``) against the broker process: a probe
whose broker is lost under it goes on through the next URI of the list; a list where nothing
answers gives up within its budget, naming the addresses; a stream reader's ``latestOffset``
plans no batch while no broker answers, goes on when one does, and fails the query after
``failover_timeout``. The broker is "lost" through ``benchmarks.cluster_proxy.SplitProxy``: its
connections are cut (as a SIGKILL of the broker cuts them) or sent to a port where nothing
listens. No JVM needed (the stream reader is called as Spark's Python worker calls it)."""

from __future__ import annotations

import socket

import pytest

from benchmarks.cluster_proxy import SplitProxy
from spark import failover
from spark.consume import SourceOptions, StreamProbe

from .conftest import _free_port

pika = pytest.importorskip("pika")

STREAM = {"x-queue-type": "stream"}


def _uri(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def _cut(proxy: SplitProxy) -> None:
    """Cut every connection going through ``proxy`` (the broker behind it is lost)."""
    with proxy.lock:
        sockets = list(proxy.sockets)
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture
def proxy():
    p = SplitProxy()
    yield p
    p.close()


@pytest.fixture
def stream(amqp, unique):
    amqp.confirm_delivery()
    amqp.queue_declare(unique, durable=True, arguments=STREAM)
    for i in range(5):
        amqp.basic_publish("", unique, b"m%d" % i)
    return unique


def test_a_probe_whose_broker_is_lost_goes_on_through_the_next_uri(broker, proxy, stream):
    proxy.set_routes([("127.0.0.1", broker.port)])
    opts = SourceOptions.parse({"uri": f"{_uri(proxy.port)},{broker.uri}", "queue": stream})
    seen = []

    def end_offset(probe: StreamProbe) -> int:
        seen.append(probe.conn.address)
        if len(seen) == 1:
            _cut(proxy)  # lost between the connect and the consume
        return probe.end_offset()

    assert failover.probe(opts, "test probe", end_offset) == 5
    # the retry started at the next URI of the list
    assert seen == [f"127.0.0.1:{proxy.port}", f"127.0.0.1:{broker.port}"]


def test_a_list_where_nothing_answers_gives_up_naming_the_addresses(unique):
    dead = _free_port()
    opts = SourceOptions.parse({"uri": _uri(dead), "queue": unique, "failover_timeout": "1"})
    assert failover.call_budget(opts) == 0.5
    with pytest.raises(failover.SourceUnavailable,
                       match=f"no broker of 127.0.0.1:{dead} answered within 0.5 s") as info:
        failover.probe(opts, "test probe", lambda p: p.end_offset())
    assert "guest" not in str(info.value)  # addresses, not the URIs' passwords


def test_latest_offset_waits_for_a_broker_then_fails_after_failover_timeout(broker, amqp,
                                                                           proxy, stream):
    pytest.importorskip("pyspark")
    from spark.source import AmqpStreamReader

    dead = ("127.0.0.1", _free_port())
    reader = AmqpStreamReader(SourceOptions.parse(
        {"uri": _uri(proxy.port), "queue": stream, "failover_timeout": "2"}))

    def latest(start: int) -> int:
        return reader.latestOffset({"queue": stream, "next": start}, None)["next"]

    proxy.set_routes([("127.0.0.1", broker.port)])
    assert latest(0) == 5
    proxy.set_routes([dead])
    assert latest(5) == 5  # no broker answers (1 s of retries): no new batch
    proxy.set_routes([("127.0.0.1", broker.port)])
    for i in range(5, 8):
        amqp.basic_publish("", stream, b"m%d" % i)
    assert latest(5) == 8  # a broker answers again: the query goes on
    proxy.set_routes([dead])
    answers = []
    with pytest.raises(failover.SourceUnavailable, match=r"failover_timeout 2 s"):
        for _ in range(10):  # each call retries for about 1 s; after 2 s the query fails
            answers.append(latest(8))
    assert answers and set(answers) == {8}  # until then: no new batch


def test_tasks_connect_in_rounds_while_the_list_refuses(broker, proxy, stream):
    """A member changing its view may refuse a connection for a moment: a range read (source)
    and a publisher (sink) go round the list again (``CONNECT_ROUNDS``) rather than fail the
    task at once. Here the list's only URI refuses the first connection of each."""
    from spark.consume import read_range
    from spark.publish import MessageBuilder, Publisher, SinkOptions

    route = ("127.0.0.1", broker.port)
    opts = SourceOptions.parse({"uri": _uri(proxy.port), "queue": stream})
    proxy.set_routes([("127.0.0.1", _free_port()), route])
    assert [r[0] for r in read_range(opts, 0, 5)] == list(range(5))
    assert proxy.accepted == 2
    proxy.set_routes([("127.0.0.1", _free_port()), route])
    sink = SinkOptions.parse({"uri": _uri(proxy.port), "routing_key": stream})
    with Publisher(sink) as pub:
        pub.send(MessageBuilder(sink, ["body"]).build({"body": ["m5"]}))
        pub.flush()
    assert proxy.accepted == 2
    assert [r[0] for r in read_range(opts, 5, 6)] == [5]
