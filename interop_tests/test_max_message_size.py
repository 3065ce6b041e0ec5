"""max_message_size, differential: a publisher of a body larger than the broker's max_message_size
gets Channel.Close 406 PRECONDITION_FAILED with RabbitMQ's text, a body of exactly that size is
delivered, and the connection carries on.

Both brokers run with max_message_size = 1000 bytes: ours started with ``--max-message-size 1000``,
the private RabbitMQ node told with ``rabbitmqctl eval 'application:set_env(rabbit,
max_message_size, 1000).'`` (a channel reads it when it opens: ``rabbit_channel:init``) and given
its default back afterwards (3.10's 128 MiB). Our default (16 MiB, RabbitMQ 4.x's) is checked on
the session broker with a body of 16 MiB + 1 (RabbitMQ 3.10's default differs: ours only).
Source: RabbitMQ "Configuration" (``max_message_size``), ``rabbit_channel:check_msg_size``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from interop_tests.conftest import Broker
from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_ctl

LIMIT = 1000
#: RabbitMQ 3.10's default max_message_size (128 MiB), set back after the test.
RABBITMQ_310_DEFAULT = 134217728


def _set_rabbitmq_limit(size: int) -> None:
    done = rabbitmq_ctl("eval", f"application:set_env(rabbit, max_message_size, {size}).")
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl eval failed: {done.stdout}{done.stderr}")


@pytest.fixture(params=["ours", "rabbitmq"])
def limited(request) -> Iterator[Broker]:
    """A broker whose max_message_size is ``LIMIT`` bytes: ours (a private process) or RabbitMQ
    (the private node, set at run time and restored)."""
    if request.param == "ours":
        yield request.getfixturevalue("broker_factory")("--max-message-size", str(LIMIT))
        return
    rabbit = request.getfixturevalue("rabbitmq")
    try:
        _set_rabbitmq_limit(LIMIT)
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield rabbit
    finally:
        _set_rabbitmq_limit(RABBITMQ_310_DEFAULT)


def test_a_body_over_max_message_size_closes_the_channel_with_406(limited, unique_name):
    conn = pika.BlockingConnection(pika.URLParameters(limited.uri))
    try:
        ch = conn.channel()
        ch.queue_declare(unique_name, auto_delete=True)
        ch.basic_publish("", unique_name, b"a" * LIMIT)  # exactly the limit: accepted
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.basic_publish("", unique_name, b"b" * (LIMIT + 1))
            ch.queue_declare(unique_name, passive=True)  # waits for the broker's answer
        assert (closed.value.reply_code, closed.value.reply_text) == (
            406, f"PRECONDITION_FAILED - message size {LIMIT + 1} is larger than configured max "
                 f"size {LIMIT}")
        other = conn.channel()  # the connection carries on
        method, _props, body = other.basic_get(unique_name, auto_ack=True)
        assert method is not None and body == b"a" * LIMIT
        assert other.queue_declare(unique_name, passive=True).method.message_count == 0
    finally:
        conn.close()


def test_our_default_max_message_size_is_16_mib(our_broker, unique_name):
    if our_broker.pid is None:
        pytest.skip("an external broker's limit is its own")
    conn = pika.BlockingConnection(pika.URLParameters(our_broker.uri))
    try:
        ch = conn.channel()
        ch.queue_declare(unique_name, auto_delete=True)
        with pytest.raises(ChannelClosedByBroker) as closed:
            # ours closes as soon as the content header declares the size: pika may see the
            # Close while it still writes the body
            ch.basic_publish("", unique_name, bytes(16 * 1024 * 1024 + 1))
            ch.queue_declare(unique_name, passive=True)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            406, "PRECONDITION_FAILED - message size 16777217 is larger than configured max size "
                 "16777216")
    finally:
        conn.close()
