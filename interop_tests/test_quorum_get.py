"""Basic.Get on a quorum queue, against our broker and RabbitMQ (pika, blocking).

A quorum queue answers Basic.Get once the get has gone through its log (RabbitMQ
``rabbit_quorum_queue:dequeue/4``): each message reaches one Basic.Get only, and a requeued one
is handed out again, marked redelivered, with ``x-delivery-count`` 1. The first time a get's
message carries ``x-delivery-count: 0`` on RabbitMQ 3.10 and none on 4.x (``rabbit_fifo_client:
add_delivery_count_header``: only once > 0, as a consumer's delivery), which ours follows.
RabbitMQ may apply a requeue after a get that follows it at once, so these tests do not fix which
comes first (ours applies them in the order the channel sent them). Get-Ok's message_count is
what is left ready. Source: RabbitMQ "Quorum Queues" (poison message handling).
"""

from __future__ import annotations

import time

import pika
import pytest
from pamqp import commands

from interop_tests.rawamqp import handshake, method_frame


@pytest.fixture
def conn(broker):
    params = pika.URLParameters(broker.uri)
    params.socket_timeout = 10
    c = pika.BlockingConnection(params)
    yield c
    if c.is_open:
        c.close()


def test_basic_get_hands_a_requeued_message_out_again_with_its_delivery_count(broker, conn,
                                                                              unique_name):
    ch = conn.channel()
    ch.queue_declare(unique_name, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for body in (b"a", b"b"):
        ch.basic_publish("", unique_name, body, pika.BasicProperties(delivery_mode=2))
    method, props, body = ch.basic_get(unique_name)
    assert (body, method.redelivered, method.message_count) == (b"a", False, 1)
    # 3.10's get always says it (0 the first time); 4.x only once > 0, as deliveries (ours)
    assert props.headers == ({"x-delivery-count": 0} if broker.is_rabbitmq else None)
    ch.basic_reject(method.delivery_tag, requeue=True)
    got = {}
    for _ in range(100):   # RabbitMQ may apply the requeue after the next get: b, then a
        method, props, body = ch.basic_get(unique_name)
        if body is None:
            time.sleep(0.05)
            continue
        got[body] = (method.redelivered, (props.headers or {}).get("x-delivery-count"))
        ch.basic_ack(method.delivery_tag)
        if len(got) == 2:
            break
    assert got == {b"a": (True, 1), b"b": (False, 0 if broker.is_rabbitmq else None)}
    assert ch.basic_get(unique_name) == (None, None, None)   # Get-Empty
    ch.queue_delete(unique_name)
    assert conn.is_open


def test_two_channels_getting_at_once_never_share_a_message(broker, conn, unique_name):
    first, second = conn.channel(), conn.channel()
    first.queue_declare(unique_name, durable=True, arguments={"x-queue-type": "quorum"})
    first.confirm_delivery()
    for i in range(20):
        first.basic_publish("", unique_name, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    got = []
    for _ in range(11):
        for ch in (first, second):
            _method, _props, body = ch.basic_get(unique_name, auto_ack=True)
            if body is not None:
                got.append(body)
    assert sorted(got, key=int) == [b"%d" % i for i in range(20)]
    first.queue_delete(unique_name)


def test_a_get_whose_channel_closes_before_the_answer_leaves_the_message_in_the_queue(
        broker, conn, unique_name):
    """Basic.Get and Channel.Close in one write: the channel is gone before the get is answered
    (ours answers once the log applies the Dequeue). The message is not lost: another channel
    gets it, and the queue is empty after that."""
    ch = conn.channel()
    ch.queue_declare(unique_name, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    ch.basic_publish("", unique_name, b"only", pika.BasicProperties(delivery_mode=2))
    raw = handshake(broker)   # channel 1 open
    try:
        raw.send(method_frame(commands.Basic.Get(queue=unique_name), 1)
                 + method_frame(commands.Channel.Close(200, "bye", 0, 0), 1))
        for _ in range(10):   # a Get-Ok (and its content) may come first
            if isinstance(raw.read_method()[1], commands.Channel.CloseOk):
                break
        else:
            pytest.fail("no Channel.CloseOk")
    finally:
        raw.close()
    body = None
    for _ in range(100):   # the requeue is applied through the log too
        _method, _props, body = ch.basic_get(unique_name)
        if body is not None:
            ch.basic_ack(_method.delivery_tag)
            break
        time.sleep(0.05)
    assert body == b"only"
    assert ch.basic_get(unique_name) == (None, None, None)
    ch.queue_delete(unique_name)
