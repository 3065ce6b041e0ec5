"""Connection lifecycle as a client sees it: handshake, tuning, timers, frame-level errors, the close
handshake and the memory alarm."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands as cmd
from pamqp import frame, header, heartbeat
from pamqp.header import ProtocolHeader

from amqp_broker.core.connection import CLOSE_TIMEOUT, State
from amqp_broker.protocol import constants as c

from .client import PROTOCOL_HEADER, Client


def expect_close(cl: Client, code: int, class_id: int | None = None,
                 method_id: int | None = None) -> cmd.Connection.Close:
    close = cl.expect(cmd.Connection.Close, 0)
    assert close.reply_code == code, close.reply_text
    if class_id is not None:
        assert (close.class_id, close.method_id) == (class_id, method_id)
    return close


# ------------------------------------------------------------------------------ handshake
def test_start_announces_capabilities_and_mechanisms(broker) -> None:
    cl = Client(broker)
    start = cl.handshake()
    assert (start.version_major, start.version_minor) == (0, 9)
    caps = start.server_properties["capabilities"]
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "authentication_failure_close",
                "per_consumer_qos"):
        assert caps[cap] is True, cap
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}
    assert "en_US" in start.locales.split()
    assert cl.conn.state is State.OPEN


@pytest.mark.parametrize("bad", [b"AMQP\x00\x00\x08\x00", b"AMQP\x01\x01\x00\x09",
                                 b"GET / HTTP/1.1\r\n\r\n", b"XYZ"])
def test_wrong_protocol_header_gets_ours_back_and_closes(broker, bad) -> None:
    cl = Client(broker)
    cl.send_raw(bad)
    ((ch, value),) = cl.frames()
    assert isinstance(value, ProtocolHeader)
    assert (value.major_version, value.minor_version, value.revision) == (0, 9, 1)
    assert cl.conn.closed
    cl.send_raw(PROTOCOL_HEADER)  # ignored once closed
    cl.expect_nothing()


def test_protocol_header_split_over_chunks(broker) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER[:3])
    cl.expect_nothing()
    cl.send_raw(PROTOCOL_HEADER[3:])
    cl.expect(cmd.Connection.Start, 0)


def test_tune_carries_the_broker_offer(broker) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER)
    cl.expect(cmd.Connection.Start)
    cl.send(0, cmd.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"))
    tune = cl.expect(cmd.Connection.Tune, 0)
    s = broker.settings
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (s.channel_max, s.frame_max,
                                                                  s.heartbeat)


@pytest.mark.parametrize("frame_max", [4095, 512, 131073, 1 << 20])
def test_tune_ok_frame_max_outside_the_offer_is_530(broker, frame_max) -> None:
    cl = Client(broker)
    cl.handshake(frame_max=frame_max, expect_open=False)
    expect_close(cl, c.NOT_ALLOWED, 10, 31)
    assert cl.conn.closed


@pytest.mark.parametrize("field", ["frame_max", "channel_max"])
def test_tune_ok_zero_no_limit_is_530_as_rabbitmq(broker, field) -> None:
    """RabbitMQ 3.10 refuses a Tune-Ok of 0 ("no limit") above its own non-zero maximum."""
    cl = Client(broker)
    cl.handshake(**{field: 0}, expect_open=False)
    close = expect_close(cl, c.NOT_ALLOWED, 10, 31)
    assert f"negotiated {field} = 0" in close.reply_text
    assert "is higher than the maximum allowed value" in close.reply_text


def test_tune_ok_frame_max_4096_is_allowed(broker) -> None:
    cl2 = Client(broker, port=2)
    cl2.handshake(frame_max=4096)
    assert cl2.conn.frame_max == 4096


def test_tune_ok_channel_max_above_the_offer_is_530(broker) -> None:
    cl = Client(broker)
    cl.handshake(channel_max=broker.settings.channel_max + 1, expect_open=False)
    expect_close(cl, c.NOT_ALLOWED, 10, 31)


def test_method_out_of_handshake_order_is_503(broker) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER)
    cl.expect(cmd.Connection.Start)
    cl.send(0, cmd.Connection.Open("/"))
    expect_close(cl, c.COMMAND_INVALID, 10, 40)
    assert cl.conn.closed


def test_handshake_timeout(broker, clock) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER)
    cl.expect(cmd.Connection.Start)
    clock.advance(broker.settings.handshake_timeout - 0.5)
    broker.tick()
    assert not cl.conn.closed
    clock.advance(1.0)
    broker.tick()
    assert cl.conn.closed


def test_no_handshake_timeout_once_open(broker, clock, client) -> None:
    clock.advance(broker.settings.handshake_timeout * 3)
    client.send_raw(frame.marshal(heartbeat.Heartbeat(), 0))
    broker.tick()
    assert not client.conn.closed


# ------------------------------------------------------------------------------ heartbeats
def test_heartbeat_sent_after_half_the_interval_of_our_silence(broker, clock) -> None:
    cl = Client(broker)
    cl.handshake(heartbeat=2)
    cl.expect_nothing()  # took the output: our last write is "now"
    clock.advance(0.9)
    broker.tick()
    cl.expect_nothing()
    clock.advance(0.1)
    broker.tick()
    cl.expect(heartbeat.Heartbeat, 0)
    assert not cl.conn.closed


def test_client_silence_over_two_intervals_drops_the_connection(broker, clock, make_client) -> None:
    cl = make_client(heartbeat=2)
    q = cl.declare_queue(1, "", exclusive=True).queue
    clock.advance(3.5)
    cl.send_raw(frame.marshal(heartbeat.Heartbeat(), 0))  # a heartbeat resets the timer
    clock.advance(4.0)
    broker.tick()
    assert not cl.conn.closed
    clock.advance(0.1)
    broker.tick()
    assert cl.conn.closed
    assert q not in broker.vhosts["/"].queues  # exclusive queue went with it


def test_heartbeat_zero_disables_both_directions(broker, clock) -> None:
    cl = Client(broker)
    cl.handshake(heartbeat=0)
    cl.expect_nothing()
    clock.advance(10_000)
    broker.tick()
    cl.expect_nothing()
    assert not cl.conn.closed


# ------------------------------------------------------------------------------ frame errors
def test_frame_over_frame_max_is_501(make_client) -> None:
    cl = make_client(frame_max=4096)
    cl.send_raw(struct.pack(">BHI", 3, 1, 5000) + b"x" * 5000 + b"\xce")
    expect_close(cl, c.FRAME_ERROR)


def test_bad_frame_end_is_501(client) -> None:
    client.send_raw(frame.marshal(cmd.Basic.Qos(), 1)[:-1] + b"\x00")
    expect_close(client, c.FRAME_ERROR)


def test_method_on_unopened_channel_is_504(client) -> None:
    client.send(7, cmd.Queue.Declare(queue="q"))
    expect_close(client, c.CHANNEL_ERROR, 50, 10)


def test_second_channel_open_is_504(client) -> None:
    client.send(1, cmd.Channel.Open())
    expect_close(client, c.CHANNEL_ERROR, 20, 10)


def test_channel_max_limits_open_channels_not_numbers(make_client) -> None:
    cl = make_client(channels=0, channel_max=2)
    cl.call(65535, cmd.Channel.Open())
    cl.call(7, cmd.Channel.Open())
    cl.send(3, cmd.Channel.Open())  # a third open channel: 530, as RabbitMQ
    close = expect_close(cl, c.NOT_ALLOWED)
    assert "number of channels opened (2)" in close.reply_text


def test_content_header_without_publish_is_505(client) -> None:
    client.send_raw(frame.marshal(header.ContentHeader(0, 3, cmd.Basic.Properties()), 1))
    expect_close(client, c.UNEXPECTED_FRAME)


def test_method_while_content_expected_is_505(client) -> None:
    client.send(1, cmd.Basic.Publish(routing_key="q"), cmd.Basic.Qos())
    expect_close(client, c.UNEXPECTED_FRAME)


def test_content_on_unopened_channel_is_504(client) -> None:
    client.send_raw(frame.marshal(header.ContentHeader(0, 3, cmd.Basic.Properties()), 9))
    expect_close(client, c.CHANNEL_ERROR)


def test_content_after_its_channel_closed_in_the_same_read_is_504(client) -> None:
    """One read: a whole publish on channel 1, Channel.Close of channel 1, then a content
    header on channel 1. The broker answers the Close with Close-Ok and forgets the channel, so
    the header is content on an unopened channel (the frame loop remembers the channel of the
    last content frame; a method frame in between must make it look the channel up again)."""
    client.send_raw(client.encode_publish(1, "", "nowhere", b"abc")
                    + frame.marshal(cmd.Channel.Close(200, "bye", 0, 0), 1)
                    + frame.marshal(header.ContentHeader(0, 3, cmd.Basic.Properties()), 1))
    client.expect(cmd.Channel.CloseOk, 1)
    close = expect_close(client, c.CHANNEL_ERROR)
    assert "unopened channel 1" in close.reply_text


def test_unknown_method_is_540(client) -> None:
    payload = struct.pack(">HH", 60, 99)
    client.send_raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    expect_close(client, c.NOT_IMPLEMENTED, 60, 99)


def test_truncated_method_is_502(client) -> None:
    good = frame.marshal(cmd.Queue.Declare(queue="some-queue"), 1)
    payload = good[7:-1][:-6]
    client.send_raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    expect_close(client, c.SYNTAX_ERROR, 50, 10)


def test_heartbeat_on_channel_1_is_501(client) -> None:
    client.send_raw(b"\x08\x00\x01\x00\x00\x00\x00\xce")
    expect_close(client, c.FRAME_ERROR)


def test_non_connection_method_on_channel_0_is_504(client) -> None:
    client.send(0, cmd.Queue.Declare(queue="q"))
    expect_close(client, c.CHANNEL_ERROR, 50, 10)


def test_publish_on_channel_0_is_504(client) -> None:
    client.publish(0, "", "q", b"x")
    expect_close(client, c.CHANNEL_ERROR, 60, 40)


def test_after_our_close_frames_are_ignored_until_close_ok(client) -> None:
    client.send(1, cmd.Channel.Open())  # 504: we send Connection.Close
    expect_close(client, c.CHANNEL_ERROR)
    conn = client.conn
    assert conn.state is State.CLOSING and not conn.closed
    client.send(1, cmd.Queue.Declare(queue="q"))
    client.send(2, cmd.Channel.Open())
    client.publish(1, "", "q", b"body")
    client.send(0, cmd.Connection.Open("/"))
    client.expect_nothing()
    assert not conn.closed
    client.send(0, cmd.Connection.CloseOk())
    client.expect_nothing()
    assert conn.closed and conn.state is State.CLOSED


def test_close_handshake_times_out(broker, clock, client) -> None:
    client.send(1, cmd.Channel.Open())
    expect_close(client, c.CHANNEL_ERROR)
    clock.advance(CLOSE_TIMEOUT - 0.1)
    broker.tick()
    assert not client.conn.closed
    clock.advance(0.2)
    broker.tick()
    assert client.conn.closed


def test_after_a_frame_error_input_is_dropped_until_the_timeout(broker, clock, client) -> None:
    client.send_raw(b"\x08\x00\x00\x00\x00\x00\x01x\xce")  # heartbeat with a payload
    expect_close(client, c.FRAME_ERROR)
    client.send(0, cmd.Connection.CloseOk())  # the stream is not trusted any more
    client.expect_nothing()
    assert not client.conn.closed
    clock.advance(CLOSE_TIMEOUT + 0.1)
    broker.tick()
    assert client.conn.closed


def test_close_crossing_ours_is_answered(client) -> None:
    client.send(1, cmd.Channel.Open())
    expect_close(client, c.CHANNEL_ERROR)
    client.send(0, cmd.Connection.Close(200, "bye", 0, 0))
    client.expect(cmd.Connection.CloseOk, 0)
    assert client.conn.closed


def test_client_close(client) -> None:
    client.close()
    assert client.conn.closed


def test_update_secret_is_acknowledged(client) -> None:
    client.call(0, cmd.Connection.UpdateSecret("new", "because"))


# ------------------------------------------------------------------------------ memory alarm
def test_memory_alarm_blocks_only_clients_that_understand_it(broker, make_client) -> None:
    aware = make_client()
    unaware = make_client(capabilities={"publisher_confirms": True})
    silent = make_client()  # never publishes: blocked, but RabbitMQ does not tell it
    for cl in (aware, unaware):
        cl.publish(1, "", "nowhere", b"x")
    broker.set_memory_alarm(True)
    blocked = aware.expect(cmd.Connection.Blocked, 0)
    assert blocked.reason == "low on memory"
    unaware.expect_nothing()
    silent.expect_nothing()
    assert aware.conn.blocked and unaware.conn.blocked and silent.conn.blocked
    broker.set_memory_alarm(True)  # no repeat
    aware.expect_nothing()
    late = make_client()  # opened during the alarm: told at its first publish
    late.expect_nothing()
    late.publish(1, "", "nowhere", b"x")
    late.expect(cmd.Connection.Blocked, 0)
    silent.publish(1, "", "nowhere", b"x")
    silent.expect(cmd.Connection.Blocked, 0)
    broker.set_memory_alarm(False)
    aware.expect(cmd.Connection.Unblocked, 0)
    late.expect(cmd.Connection.Unblocked, 0)
    silent.expect(cmd.Connection.Unblocked, 0)
    unaware.expect_nothing()
    assert not aware.conn.blocked and not unaware.conn.blocked


def test_memory_alarm_during_handshake_waits_for_open_ok(broker) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER)
    cl.expect(cmd.Connection.Start)
    cl.send(0, cmd.Connection.StartOk({"capabilities": {"connection.blocked": True}},
                                      "PLAIN", "\0guest\0guest"))
    cl.expect(cmd.Connection.Tune)
    broker.set_memory_alarm(True)
    cl.send(0, cmd.Connection.TuneOk(2047, 4096, 0), cmd.Connection.Open("/"))
    cl.expect(cmd.Connection.OpenOk, 0)
    cl.expect_nothing()
    assert cl.conn.blocked
    cl.open_channel(1)
    cl.publish(1, "", "nowhere", b"x")
    cl.expect(cmd.Connection.Blocked, 0)


def test_memory_alarm_skips_closing_connections(broker, client) -> None:
    client.send(1, cmd.Channel.Open())  # 504: we send Connection.Close
    expect_close(client, c.CHANNEL_ERROR)
    broker.set_memory_alarm(True)
    client.expect_nothing()
