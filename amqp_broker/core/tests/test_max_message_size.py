"""max_message_size (RabbitMQ's setting): a body larger than it closes the publisher's channel with
406 and RabbitMQ's text; a body of exactly that size goes through; the connection and its other
channels carry on. The same through real clients against RabbitMQ: interop_tests/test_max_message_size.py.
"""

from __future__ import annotations

import importlib

import pytest
from pamqp import commands as cmd

from amqp_broker.core.broker import Broker
from amqp_broker.core.connection import State
from amqp_broker.core.settings import BrokerSettings
from amqp_broker.protocol import constants as c

from .client import Client

config = importlib.import_module("amqp_broker.config")  # as test_config: socket is off limits


@pytest.fixture
def small(clock) -> Client:
    """A client of a broker whose max_message_size is 100 bytes, channels 1 and 2 open, frame_max
    4096 (so a body of 10,000 bytes comes in three frames)."""
    cl = Client(Broker(BrokerSettings(max_message_size=100), clock=clock))
    cl.handshake(frame_max=4096)
    cl.open_channel(1)
    cl.open_channel(2)
    return cl


def test_a_body_over_the_limit_closes_the_channel_with_406(small: Client) -> None:
    small.declare_queue(1, "q")
    small.publish(1, "", "q", b"x" * 100)  # exactly the limit: accepted
    small.publish(1, "", "q", b"y" * 101)
    close = small.expect(cmd.Channel.Close, 1)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        c.PRECONDITION_FAILED,
        "PRECONDITION_FAILED - message size 101 is larger than configured max size 100", 60, 40)
    small.send(1, cmd.Channel.CloseOk())
    assert small.conn.state is State.OPEN
    small.consume(2, "q", "t", no_ack=True)
    assert [m.body for m in small.messages()] == [b"x" * 100]


def test_the_body_frames_of_a_refused_message_are_dropped(small: Client) -> None:
    # three body frames follow the header; the channel closes at the header, they are dropped
    small.declare_queue(2, "q2")
    small.publish(1, "", "q2", b"z" * 10000)
    close = small.expect(cmd.Channel.Close, 1)
    assert close.reply_text.startswith("PRECONDITION_FAILED - message size 10000 ")
    small.expect_nothing()
    assert small.conn.state is State.OPEN
    assert small.declare_queue(2, "q2").message_count == 0


def test_the_default_is_16_mib_and_the_setting_is_bounded_as_rabbitmq() -> None:
    assert BrokerSettings().max_message_size == 16 * 1024 * 1024
    cfg = config.load_config(["--max-message-size", "100"], {})
    assert cfg.broker_settings().max_message_size == 100
    assert config.load_config([], {"AMQP_BROKER_MAX_MESSAGE_SIZE": "2048"}).max_message_size == 2048
    assert config.load_config([], {}).broker_settings().max_message_size == 16 * 1024 * 1024
    for bad in ("0", "536870913"):
        with pytest.raises(config.ConfigError, match="max_message_size"):
            config.load_config(["--max-message-size", bad], {})
    assert config.load_config(["--max-message-size", "536870912"], {}).max_message_size == \
        536870912
