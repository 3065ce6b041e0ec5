"""Tests for queues.arguments: Queue.Declare x-argument validation and message expiration parsing.

Source of the expected refusals: rabbitmq-server ``rabbit_amqqueue:declare_args/0``.
"""

from __future__ import annotations

import decimal

import pytest

from queues.arguments import (
    MAX_EXPIRY,
    QueueSettings,
    message_ttl_or_none,
    parse_arguments,
    parse_expiration,
)
from queues.errors import InvalidArgument, QueueError


def test_no_arguments_gives_defaults():
    for args in (None, {}):
        s = parse_arguments(args)
        assert s == QueueSettings()
        assert s.overflow == "drop-head"
        assert s.queue_type == "classic"
        assert s.single_active_consumer is False
        assert s.message_ttl is None and s.dead_letter_exchange is None


def test_all_arguments_parsed():
    s = parse_arguments({
        "x-message-ttl": 1000, "x-expires": 5000, "x-max-length": 10,
        "x-max-length-bytes": 2048, "x-overflow": "reject-publish-dlx",
        "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead",
        "x-max-priority": 10, "x-single-active-consumer": True, "x-queue-type": "quorum",
    })
    assert s == QueueSettings(message_ttl=1000, expires=5000, max_length=10,
                              max_length_bytes=2048, overflow="reject-publish-dlx",
                              dead_letter_exchange="dlx", dead_letter_routing_key="dead",
                              max_priority=10, single_active_consumer=True, queue_type="quorum")


def test_settings_are_frozen():
    s = parse_arguments({"x-message-ttl": 1})
    with pytest.raises(AttributeError):
        s.message_ttl = 2  # type: ignore[misc]


def test_unknown_arguments_ignored():
    s = parse_arguments({"x-unknown": "whatever", "foo": 1, "x-delivery-limit": "nope"})
    assert s == QueueSettings()


@pytest.mark.parametrize("value", [0, 1, MAX_EXPIRY])
def test_message_ttl_range_accepted(value):
    assert parse_arguments({"x-message-ttl": value}).message_ttl == value


@pytest.mark.parametrize("value", [-1, MAX_EXPIRY + 1, "1000", 1.5, True, None,
                                   decimal.Decimal(5)])
def test_message_ttl_refused(value):
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-message-ttl": value})
    assert info.value.argument == "x-message-ttl"
    assert "x-message-ttl" in str(info.value)
    assert isinstance(info.value, QueueError)


@pytest.mark.parametrize("value", [0, -5, MAX_EXPIRY + 1, "10", 2.0, False])
def test_expires_refused(value):
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-expires": value})
    assert info.value.argument == "x-expires"


def test_expires_accepted():
    assert parse_arguments({"x-expires": 1}).expires == 1


@pytest.mark.parametrize("key", ["x-max-length", "x-max-length-bytes"])
def test_max_length_non_negative_int(key):
    assert parse_arguments({key: 0}) != QueueSettings()
    for bad in (-1, "5", 1.0, True):
        with pytest.raises(InvalidArgument) as info:
            parse_arguments({key: bad})
        assert info.value.argument == key


@pytest.mark.parametrize("value", [0, 1, 10, 255])
def test_max_priority_accepted(value):
    assert parse_arguments({"x-max-priority": value}).max_priority == value


@pytest.mark.parametrize("value", [256, -1, "10", 3.0, True])
def test_max_priority_refused(value):
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-max-priority": value})
    assert info.value.argument == "x-max-priority"


@pytest.mark.parametrize("value", ["drop-head", "reject-publish", "reject-publish-dlx"])
def test_overflow_accepted(value):
    assert parse_arguments({"x-overflow": value}).overflow == value


@pytest.mark.parametrize("value", ["drop-tail", "", 1, True])
def test_overflow_refused(value):
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-overflow": value})
    assert info.value.argument == "x-overflow"


def test_dead_letter_exchange_may_be_default_exchange():
    s = parse_arguments({"x-dead-letter-exchange": ""})
    assert s.dead_letter_exchange == ""
    assert s.dead_letter_routing_key is None


def test_dead_letter_exchange_must_be_string():
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-dead-letter-exchange": 5})
    assert info.value.argument == "x-dead-letter-exchange"


def test_dead_letter_exchange_bytes_decoded():
    assert parse_arguments({"x-dead-letter-exchange": b"dlx"}).dead_letter_exchange == "dlx"
    with pytest.raises(InvalidArgument):
        parse_arguments({"x-dead-letter-exchange": b"\xff"})


def test_routing_key_without_dlx_refused():
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-dead-letter-routing-key": "k"})
    assert info.value.argument == "x-dead-letter-routing-key"
    assert "routing_key_but_no_dlx_defined" in str(info.value)


def test_routing_key_must_be_string():
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": 7})
    assert info.value.argument == "x-dead-letter-routing-key"


def test_single_active_consumer_must_be_bool():
    assert parse_arguments({"x-single-active-consumer": False}).single_active_consumer is False
    for bad in (1, "true"):
        with pytest.raises(InvalidArgument) as info:
            parse_arguments({"x-single-active-consumer": bad})
        assert info.value.argument == "x-single-active-consumer"


def test_queue_type():
    assert parse_arguments({"x-queue-type": "stream"}).queue_type == "stream"
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-queue-type": "fancy"})
    assert info.value.argument == "x-queue-type"


@pytest.mark.parametrize("args", [
    {"x-queue-mode": "eager"}, {"x-max-age": "7X"}, {"x-max-age": "0D"},
    {"x-quorum-initial-group-size": 0}, {"x-max-in-memory-length": -1},
    {"x-queue-leader-locator": "anywhere"},
])
def test_validated_but_uninterpreted_arguments(args):
    with pytest.raises(InvalidArgument) as info:
        parse_arguments(args)
    assert info.value.argument == next(iter(args))


def test_validated_but_uninterpreted_arguments_accepted():
    s = parse_arguments({"x-queue-mode": "lazy", "x-max-age": "7D",
                         "x-quorum-initial-group-size": 3})
    assert s == QueueSettings()


def test_first_failing_argument_in_rabbitmq_order_is_reported():
    # RabbitMQ checks x-expires before x-message-ttl regardless of table order.
    with pytest.raises(InvalidArgument) as info:
        parse_arguments({"x-message-ttl": -1, "x-expires": 0})
    assert info.value.argument == "x-expires"


@pytest.mark.parametrize("text,value", [("0", 0), ("1000", 1000), ("+5", 5),
                                        (str(MAX_EXPIRY), MAX_EXPIRY)])
def test_parse_expiration(text, value):
    assert parse_expiration(text) == value
    assert message_ttl_or_none(text) == value


@pytest.mark.parametrize("text", ["", "-1", "abc", "10ms", " 10", "1_000", "1.5", "٣",
                                  str(MAX_EXPIRY + 1)])
def test_parse_expiration_refused(text):
    with pytest.raises(InvalidArgument) as info:
        parse_expiration(text)
    assert info.value.argument == "expiration"
    assert message_ttl_or_none(text) is None
