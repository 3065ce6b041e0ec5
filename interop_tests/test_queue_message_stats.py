"""A queue's ``message_stats`` in the management API (issue 26), against both brokers
(``management_broker``: ours and the RabbitMQ 3.10 node with rabbitmq_management): the same
clients' work on a classic queue, a quorum queue and a stream gives the same counts on both --
``publish``, ``deliver``, ``deliver_no_ack``, ``get``, ``get_no_ack``, ``get_empty``,
``deliver_get``, ``ack`` and ``redeliver`` (all of them, zeros included, once any is non-zero) --
each with a numeric ``<name>_details.rate``. RabbitMQ's statistics show after its next
collection (every 5 s): reads are polled, bounded. Source: "Management HTTP API"
(``/api/queues/vhost/name``, ``message_stats``), RabbitMQ "Management Plugin" (rates mode basic).
"""

from __future__ import annotations

import pika
import pytest

from interop_tests.test_management_differential import api, eventually

pytestmark = pytest.mark.interop

#: What the work of ``_classic_or_quorum`` leaves in a queue's ``message_stats``.
EXPECTED = {"publish": 8, "deliver": 5, "deliver_no_ack": 2, "get": 1, "get_no_ack": 1,
            "get_empty": 1, "deliver_get": 9, "ack": 5, "redeliver": 1}
#: ... and that of ``_stream`` in a stream's (RabbitMQ counts its consumers' deliveries too).
EXPECTED_STREAM = {"publish": 6, "deliver": 6, "deliver_no_ack": 0, "get": 0, "get_no_ack": 0,
                   "get_empty": 0, "deliver_get": 6, "ack": 4, "redeliver": 0}


def _publish(ch, queue: str, n: int) -> None:
    for i in range(n):
        ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))


def _consume(conn, ch, queue: str, n: int, **kwargs) -> list:
    """Subscribe, wait for ``n`` deliveries (bounded), cancel; the deliveries' methods."""
    got: list = []
    tag = ch.basic_consume(queue, lambda _c, m, _p, _b: got.append(m), **kwargs)
    for _ in range(200):
        if len(got) >= n:
            break
        conn.process_data_events(time_limit=0.05)
    ch.basic_cancel(tag)
    assert len(got) == n, f"{queue}: {len(got)} deliveries, expected {n}"
    return got


def _ready(conn, ch, queue: str, n: int) -> None:
    """Wait (bounded) until ``queue`` has ``n`` ready messages: a quorum queue applies a
    requeue through its log, after the Basic.Nack's return."""
    for _ in range(100):
        if ch.queue_declare(queue, passive=True).method.message_count == n:
            return
        conn.sleep(0.05)
    raise AssertionError(f"{queue}: never {n} ready")


def _classic_or_quorum(conn, ch, queue: str) -> None:
    """5 published; a consumer (prefetch 5, manual ack) takes them and is cancelled; 4 acked,
    the 5th nacked back (requeued, so redelivered); Basic.Get takes it (manual ack: acked); one
    more published, Basic.Get takes it (no ack); one more Basic.Get finds the queue empty; 2
    more published go to a no-ack consumer."""
    _publish(ch, queue, 5)
    deliveries = _consume(conn, ch, queue, 5)
    for m in deliveries[:4]:
        ch.basic_ack(m.delivery_tag)
    ch.basic_nack(deliveries[4].delivery_tag, requeue=True)
    _ready(conn, ch, queue, 1)
    method, _props, _body = ch.basic_get(queue)
    assert method.redelivered
    ch.basic_ack(method.delivery_tag)
    _publish(ch, queue, 1)
    method, _props, _body = ch.basic_get(queue, auto_ack=True)
    assert method is not None and not method.redelivered
    assert ch.basic_get(queue)[0] is None
    _publish(ch, queue, 2)
    _consume(conn, ch, queue, 2, auto_ack=True)


def _stream(conn, ch, queue: str) -> None:
    """6 published; a consumer (prefetch 10) from the first offset takes them all, acks 4."""
    _publish(ch, queue, 6)
    ch.basic_qos(prefetch_count=10)
    deliveries = _consume(conn, ch, queue, 6, arguments={"x-stream-offset": "first"})
    for m in deliveries[:4]:
        ch.basic_ack(m.delivery_tag)


def test_queue_message_stats_count_deliveries_gets_acks_and_redeliveries(management_broker,
                                                                          unique_name):
    base = management_broker.api_url
    queues = {f"{unique_name}.{kind}": (kind, EXPECTED if kind != "stream" else EXPECTED_STREAM)
              for kind in ("classic", "quorum", "stream")}
    with pika.BlockingConnection(pika.URLParameters(management_broker.uri)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_qos(prefetch_count=5)
        try:
            for name, (kind, _expected) in queues.items():
                ch.queue_declare(name, durable=True, arguments={"x-queue-type": kind})
                (_stream if kind == "stream" else _classic_or_quorum)(conn, ch, name)
            seen: dict[str, dict] = {}

            def counted() -> bool:
                for name, (_kind, expected) in queues.items():
                    status, body = api(base, f"/queues/%2F/{name}")
                    stats = body.get("message_stats", {}) if status == 200 else {}
                    seen[name] = {k: v for k, v in stats.items() if not k.endswith("_details")}
                    if seen[name] != expected:
                        return False
                return True

            try:
                eventually(counted, "the queues' message_stats")
            except AssertionError:
                assert seen == {name: expected for name, (_k, expected) in queues.items()}
                raise
            for name in queues:
                stats = api(base, f"/queues/%2F/{name}")[1]["message_stats"]
                for key in EXPECTED:
                    assert isinstance(stats[f"{key}_details"]["rate"], float), (name, key)
                listed = [x for x in api(base, "/queues/%2F")[1] if x["name"] == name]
                assert {k: v for k, v in listed[0]["message_stats"].items()
                        if not k.endswith("_details")} == queues[name][1]
        finally:
            for name in queues:
                ch.queue_delete(name)
