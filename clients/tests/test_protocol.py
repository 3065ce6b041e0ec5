"""``clients.protocol``: the sans-IO client state machine against scripted broker frames."""

import pytest
from pamqp import commands as cmd
from pamqp import frame, header
from pamqp.body import ContentBody

from amqp_broker.protocol.delivery import deliver_prefix, encode_deliver, encode_routing
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.framing import FrameSplitter
from amqp_broker.protocol.methods import decode_method
from clients.message import Message
from clients.protocol import (
    Blocked,
    ChannelMethod,
    ClientProtocol,
    Closed,
    Confirm,
    Opened,
    State,
)


def sent_methods(proto: ClientProtocol) -> list:
    data = proto.data_to_send()
    if data.startswith(b"AMQP"):
        data = data[8:]
    return [decode_method(p) for t, _, p in FrameSplitter(1 << 20).feed(data) if t == 1]


def opened(heartbeat=None) -> ClientProtocol:
    proto = ClientProtocol("u", "p", "/v", heartbeat=heartbeat, frame_max=65536)
    proto.start()
    assert proto.data_to_send() == b"AMQP\x00\x00\x09\x01"
    assert proto.receive_data(frame.marshal(cmd.Connection.Start(
        server_properties={"product": "x"}, mechanisms="AMQPLAIN PLAIN"), 0)) == []
    (start_ok,) = sent_methods(proto)
    assert start_ok.mechanism == "PLAIN" and start_ok.response == "\0u\0p"
    assert proto.receive_data(frame.marshal(cmd.Connection.Tune(2047, 131072, 60), 0)) == []
    tune_ok, open_ = sent_methods(proto)
    assert (tune_ok.frame_max, tune_ok.channel_max) == (65536, 2047)
    assert open_.virtual_host == "/v"
    (ev,) = proto.receive_data(frame.marshal(cmd.Connection.OpenOk(), 0))
    assert isinstance(ev, Opened) and ev.server_properties == {"product": "x"}
    assert proto.state is State.OPEN
    return proto


@pytest.mark.parametrize("ours,theirs,expect", [(None, 60, 60), (0, 60, 0), (10, 60, 10),
                                                (30, 0, 30)])
def test_heartbeat_negotiation(ours, theirs, expect):
    proto = ClientProtocol(heartbeat=ours)
    proto.start()
    proto.receive_data(frame.marshal(cmd.Connection.Start(mechanisms="PLAIN"), 0))
    proto.receive_data(frame.marshal(cmd.Connection.Tune(0, 131072, theirs), 0))
    assert proto.heartbeat == expect


def test_deliver_fast_path_and_split_body():
    proto = opened()
    ch = proto.open_channel()
    proto.receive_data(frame.marshal(cmd.Channel.OpenOk(), ch))
    body = b"x" * 70000
    hdr = header.ContentHeader(0, len(body), cmd.Basic.Properties(message_id="m1")).marshal()
    data = encode_deliver(ch, deliver_prefix("ctag"), 7, True, encode_routing("ex", "rk"),
                          hdr, body, 65536)
    events = []
    for i in range(0, len(data), 1000):  # arbitrary chunking
        events += proto.receive_data(data[i:i + 1000])
    (msg,) = events
    assert isinstance(msg, Message)
    assert (msg.kind, msg.delivery_tag, msg.redelivered, msg.exchange, msg.routing_key,
            msg.consumer_tag) == ("deliver", 7, True, "ex", "rk", "ctag")
    assert msg.body == body and msg.properties.message_id == "m1"


def test_confirms_returns_and_get_ok():
    proto = opened()
    ch = proto.open_channel()
    proto.receive_data(frame.marshal(cmd.Channel.OpenOk(), ch))
    ev = proto.receive_data(frame.marshal(cmd.Basic.Ack(5, True), ch)
                            + frame.marshal(cmd.Basic.Nack(6, False, False), ch))
    assert [(e.delivery_tag, e.multiple, e.ack) for e in ev] == [(5, True, True), (6, False, False)]
    assert all(isinstance(e, Confirm) for e in ev)
    data = (frame.marshal(cmd.Basic.Return(312, "NO_ROUTE", "", "q"), ch)
            + frame.marshal(header.ContentHeader(0, 0, cmd.Basic.Properties()), ch)
            + frame.marshal(cmd.Basic.GetOk(9, False, "", "q", 3), ch)
            + frame.marshal(header.ContentHeader(0, 2, cmd.Basic.Properties()), ch)
            + frame.marshal(ContentBody(b"hi"), ch))
    ret, got = proto.receive_data(data)
    assert (ret.kind, ret.reply_code, ret.routing_key, ret.body) == ("return", 312, "q", b"")
    assert (got.kind, got.delivery_tag, got.message_count, got.body) == ("get", 9, 3, b"hi")


def test_channel_close_is_answered_and_connection_close_too():
    proto = opened()
    ch = proto.open_channel()
    proto.data_to_send()
    (ev,) = proto.receive_data(frame.marshal(cmd.Channel.Close(404, "NOT_FOUND - x", 50, 10), ch))
    assert isinstance(ev, ChannelMethod) and ev.method.reply_code == 404
    assert isinstance(sent_methods(proto)[0], cmd.Channel.CloseOk)
    (blocked,) = proto.receive_data(frame.marshal(cmd.Connection.Blocked("low memory"), 0))
    assert isinstance(blocked, Blocked) and blocked.reason == "low memory"
    (closed,) = proto.receive_data(frame.marshal(cmd.Connection.Close(320, "FORCED", 0, 0), 0))
    assert isinstance(closed, Closed) and closed.by_broker and closed.reply_code == 320
    assert isinstance(sent_methods(proto)[0], cmd.Connection.CloseOk)


def test_protocol_violation_queues_close():
    proto = opened()
    with pytest.raises(ConnectionException) as info:
        proto.receive_data(frame.marshal(cmd.Basic.Ack(1, False), 9))  # unopened channel
    assert info.value.reply_code == 504
    (close,) = sent_methods(proto)
    assert isinstance(close, cmd.Connection.Close) and close.reply_code == 504


def test_channel_numbers_are_reused_after_close():
    proto = opened()
    a, b = proto.open_channel(), proto.open_channel()
    assert (a, b) == (1, 2)
    proto.channel_gone(a)
    proto.channel_max = 2
    assert proto.open_channel() == 1


def test_amqplain_when_plain_is_not_offered():
    from amqp_broker.core.auth import parse_response

    proto = ClientProtocol("user-ü", "pässword", "/")
    proto.start()
    proto.data_to_send()
    proto.receive_data(frame.marshal(cmd.Connection.Start(
        server_properties={"product": "x"}, mechanisms="AMQPLAIN"), 0))
    (start_ok,) = sent_methods(proto)
    assert start_ok.mechanism == "AMQPLAIN"
    assert parse_response("AMQPLAIN", start_ok.response) == ("user-ü", "pässword")


def test_basic_publish_on_channel_0_from_a_server_is_command_invalid():
    proto = opened()
    publish = frame.marshal(cmd.Basic.Publish(exchange="", routing_key="q"), 0)
    with pytest.raises(ConnectionException) as info:
        proto.receive_data(publish)
    assert info.value.reply_code == 503
    assert (info.value.class_id, info.value.method_id) == (60, 40)
