"""The ``x-delayed-message`` exchange (RabbitMQ's rabbitmq-delayed-message-exchange plugin) with pika.

Not differential: Debian's rabbitmq-server 3.10 does not ship the plugin (no
``rabbitmq_delayed_message_exchange`` under ``/usr/lib/rabbitmq/lib/*/plugins``), so these tests
follow the plugin's README (Usage, Routing, Limitations) and source
(``rabbit_exchange_type_delayed_message.erl``: ``validate/1``'s 406 text, a 503 from
``rabbit_exchange:check_type`` for an unknown ``x-delayed-type``; ``rabbit_delayed_message_utils``:
``x-delay`` is negated on the routed message). No timing is asserted: only the order messages
arrive in, where they arrive, and that they survive a broker's death.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from interop_tests.conftest import _free_port

DELAYED = "x-delayed-message"
WAIT_S = 20.0  # bound of every wait for a delayed message (they are due within 2 s)


def _channel(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def _publish(ch, exchange, key, body, delay=None, headers=None, mandatory=False):
    hdrs = dict(headers or {})
    if delay is not None:
        hdrs["x-delay"] = delay
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=hdrs or None,
                                                               delivery_mode=2),
                     mandatory=mandatory)


def _take(ch, queue, n):
    """The first ``n`` messages of ``queue`` as (body, headers), waiting at most ``WAIT_S``."""
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        got.append((body, props.headers))
    return got


def _setup(ch, name, delayed_type, bindings, durable=False):
    ch.exchange_declare(name, DELAYED, durable=durable,
                        arguments={"x-delayed-type": delayed_type})
    for q, key, args in bindings:
        ch.queue_declare(q, durable=durable)
        ch.queue_bind(q, name, key, arguments=args)


def test_messages_arrive_in_due_order_not_publish_order(our_broker, unique_name):
    conn, ch = _channel(our_broker)
    try:
        q = unique_name + ".q"
        _setup(ch, unique_name, "direct", [(q, "k", None)])
        _publish(ch, unique_name, "k", b"late", delay=1200)
        _publish(ch, unique_name, "k", b"early", delay=400)
        _publish(ch, unique_name, "k", b"no-header")
        _publish(ch, unique_name, "k", b"negative", delay=-5)
        _publish(ch, unique_name, "other", b"other-key", delay=1)  # delayed, then routes nowhere
        got = _take(ch, q, 4)
        assert [b for b, _ in got] == [b"no-header", b"negative", b"early", b"late"]
        # routed when due with x-delay negated (rabbit_delayed_message_utils:swap_delay_header)
        assert [h and h.get("x-delay") for _, h in got] == [None, -5, -400, -1200]
    finally:
        conn.close()


def test_topic_and_headers_delayed_types_route_as_those_types(our_broker, unique_name):
    conn, ch = _channel(our_broker)
    try:
        topic, headers = unique_name + ".t", unique_name + ".h"
        _setup(ch, topic, "topic", [(topic + ".a", "a.#", None), (topic + ".b", "*.b", None)])
        _setup(ch, headers, "headers",
               [(headers + ".all", "", {"x-match": "all", "k": "v", "n": 1}),
                (headers + ".any", "", {"x-match": "any", "k": "v", "n": 9})])
        _publish(ch, topic, "a.x.y", b"t1", delay=50)
        _publish(ch, topic, "z.b", b"t2", delay=50)
        _publish(ch, topic, "a.b", b"t3", delay=60)
        _publish(ch, headers, "", b"h1", delay=50, headers={"k": "v", "n": 1})
        _publish(ch, headers, "", b"h2", delay=60, headers={"k": "v", "n": 2})
        assert [b for b, _ in _take(ch, topic + ".a", 2)] == [b"t1", b"t3"]
        assert [b for b, _ in _take(ch, topic + ".b", 2)] == [b"t2", b"t3"]
        assert [b for b, _ in _take(ch, headers + ".all", 1)] == [b"h1"]
        assert [b for b, _ in _take(ch, headers + ".any", 2)] == [b"h1", b"h2"]
        # nothing more: the last due message (t3, h2) has arrived everywhere it routes
        for q in (topic + ".a", topic + ".b", headers + ".all", headers + ".any"):
            assert ch.basic_get(q, auto_ack=True)[0] is None
    finally:
        conn.close()


def test_mandatory_delayed_message_is_not_returned(our_broker, unique_name):
    """README "Limitations": the mandatory flag is not supported. A held message is accepted
    (confirmed, no Basic.Return: pika raises UnroutableError for a returned confirmed publish);
    an undelayed unroutable one is returned as from any exchange."""
    conn, ch = _channel(our_broker)
    try:
        ch.exchange_declare(unique_name, DELAYED, arguments={"x-delayed-type": "fanout"})
        _publish(ch, unique_name, "", b"held", delay=100, mandatory=True)
        with pytest.raises(pika.exceptions.UnroutableError):
            _publish(ch, unique_name, "", b"now", mandatory=True)
    finally:
        if conn.is_open:
            conn.close()


@pytest.mark.parametrize("arguments, code, text", [
    ({}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must bean existing "
              "exchnage type"),
    ({"x-delayed-type": 7}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must "
                                 "bean existing exchnage type"),
    ({"x-delayed-type": "nope"}, 503, "COMMAND_INVALID - unknown exchange type 'nope'"),
])
def test_declare_without_a_known_delayed_type_is_refused(our_broker, unique_name, arguments,
                                                         code, text):
    conn = pika.BlockingConnection(pika.URLParameters(our_broker.uri))
    try:
        ch = conn.channel()
        with pytest.raises((ChannelClosedByBroker, ConnectionClosedByBroker)) as err:
            ch.exchange_declare(unique_name, DELAYED, arguments=arguments)
        assert (err.value.reply_code, err.value.reply_text) == (code, text)
    finally:
        if conn.is_open:
            conn.close()


def test_held_messages_survive_kill_9_and_show_in_the_api(broker_factory, tmp_path):
    http = _free_port()
    data = tmp_path / "data"
    b = broker_factory("--management-port", str(http), data_dir=data)
    conn, ch = _channel(b)
    _setup(ch, "dx", "direct", [("dq", "k", None)], durable=True)
    _publish(ch, "dx", "k", b"second", delay=3000)
    _publish(ch, "dx", "k", b"first", delay=2000)
    conn.close()
    b.kill()  # SIGKILL: confirmed held messages were written before their Basic.Ack
    b = broker_factory("--management-port", str(http), data_dir=data)
    conn, ch = _channel(b)
    try:
        got = _take(ch, "dq", 2)
        assert [body for body, _ in got] == [b"first", b"second"]
        assert ch.basic_get("dq", auto_ack=True)[0] is None  # each routed once
    finally:
        conn.close()
    # the management API shows the exchange as RabbitMQ with the plugin does
    req = urllib.request.Request(f"http://127.0.0.1:{http}/api/exchanges/%2F/dx")
    req.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
    deadline = time.monotonic() + WAIT_S
    while True:  # the HTTP listener opens beside the AMQP one: bounded wait
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                shown = json.load(resp)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert (shown["type"], shown["arguments"]) == (DELAYED, {"x-delayed-type": "direct"})
