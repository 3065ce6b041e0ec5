"""Publish dedup seen from pika: a retried publish with the same message-id lands once.

Covers x-message-deduplication queues (argument names of the RabbitMQ message-deduplication
plugin, window semantics: see queues/dedup.py): duplicates are confirmed with Basic.Ack but not
enqueued, also after the first copy was consumed; the x-deduplication-header header takes precedence
over message-id. Our broker only (RabbitMQ needs the plugin, which Debian's package lacks).
"""

from __future__ import annotations

import pika
import pytest


@pytest.fixture(autouse=True)
def _ours_only(broker):
    if broker.is_rabbitmq:
        pytest.skip("RabbitMQ needs the rabbitmq_message_deduplication plugin")


def test_retried_publish_is_confirmed_and_delivered_once(broker, unique_name):
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        ch = conn.channel()
        ch.queue_declare(unique_name, arguments={"x-message-deduplication": True,
                                                 "x-cache-ttl": 60000})
        ch.confirm_delivery()
        for attempt in range(3):  # basic_publish raises if a publish is nacked
            ch.basic_publish("", unique_name, f"try {attempt}".encode(),
                             pika.BasicProperties(message_id="order-1"))
        ch.basic_publish("", unique_name, b"other", pika.BasicProperties(message_id="order-2"))
        ch.basic_publish("", unique_name, b"h1", pika.BasicProperties(
            message_id="x", headers={"x-deduplication-header": "h"}))
        ch.basic_publish("", unique_name, b"h2", pika.BasicProperties(
            message_id="y", headers={"x-deduplication-header": "h"}))
        bodies = []
        while True:
            method, _props, body = ch.basic_get(unique_name, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        assert bodies == [b"try 0", b"other", b"h1"]
        ch.basic_publish("", unique_name, b"late retry", pika.BasicProperties(message_id="order-1"))
        assert ch.queue_declare(unique_name, passive=True).method.message_count == 0
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["sigterm", "kill -9 after a snapshot"])
def test_dedup_window_survives_a_restart(broker_factory, tmp_path, how):
    if broker_factory is None:
        pytest.skip("needs private broker processes")
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    conn = pika.BlockingConnection(pika.URLParameters(b.uri))
    ch = conn.channel()
    ch.queue_declare("dd", durable=True, arguments={"x-message-deduplication": True})
    ch.confirm_delivery()
    ch.basic_publish("", "dd", b"first", pika.BasicProperties(message_id="m1", delivery_mode=2))
    ch.basic_publish("", "dd", b"second", pika.BasicProperties(message_id="m2", delivery_mode=2))
    assert ch.basic_get("dd", auto_ack=True)[2] == b"first"  # m1 consumed: only the window knows it
    conn.close()
    if how == "sigterm":
        b.stop()
    else:
        import time
        time.sleep(2.5)  # more than one snapshot interval
        b.kill()
    b = broker_factory(data_dir=data, port=b.port)
    conn = pika.BlockingConnection(pika.URLParameters(b.uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for mid in ("m1", "m2"):  # retries of both: consumed one and still-queued one
        ch.basic_publish("", "dd", b"retry", pika.BasicProperties(message_id=mid, delivery_mode=2))
    ch.basic_publish("", "dd", b"third", pika.BasicProperties(message_id="m3", delivery_mode=2))
    bodies = []
    while (got := ch.basic_get("dd", auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"second", b"third"]
    conn.close()
