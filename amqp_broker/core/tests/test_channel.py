"""Channels: a channel error closes only that channel, the close handshakes, requeue of unacked
deliveries on close, Channel.Flow, and tx mode."""

from __future__ import annotations

import pytest
from pamqp import commands as cmd
from pamqp import frame, header
from pamqp.body import ContentBody

from amqp_broker.core.connection import State
from amqp_broker.protocol import constants as c

from .client import Client


def channel_close(cl: Client, code: int, channel: int = 1) -> cmd.Channel.Close:
    close = cl.expect(cmd.Channel.Close, channel)
    assert close.reply_code == code, close.reply_text
    return close


def test_channel_error_closes_only_the_channel(client) -> None:
    client.open_channel(2)
    client.send(1, cmd.Queue.Declare(queue="missing", passive=True))
    close = channel_close(client, c.NOT_FOUND)
    assert close.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    assert (close.class_id, close.method_id) == (50, 10)
    client.send(1, cmd.Channel.CloseOk())
    client.expect_nothing()
    assert client.conn.state is State.OPEN
    client.declare_queue(2, "q2")  # the other channel carries on
    client.open_channel(1)  # and the closed number can be reused
    client.declare_queue(1, "q1")
    client.open_channel(3)
    client.declare_queue(3, "q3")


def test_frames_on_a_closing_channel_are_dropped_until_close_ok(client) -> None:
    client.declare_queue(1, "q")
    client.send(1, cmd.Queue.Declare(queue="missing", passive=True))
    channel_close(client, c.NOT_FOUND)
    client.send(1, cmd.Queue.Declare(queue="q"), cmd.Basic.Qos(prefetch_count=1))
    client.publish(1, "", "q", b"dropped")
    client.expect_nothing()
    assert client.conn.state is State.OPEN
    client.send(1, cmd.Channel.CloseOk())
    client.open_channel(1)
    assert client.declare_queue(1, "q").message_count == 0


def test_close_crossing_our_channel_close(client) -> None:
    client.send(1, cmd.Queue.Declare(queue="missing", passive=True))
    channel_close(client, c.NOT_FOUND)
    client.send(1, cmd.Channel.Close(200, "", 0, 0))
    client.expect(cmd.Channel.CloseOk, 1)
    client.send(1, cmd.Channel.CloseOk())  # ours is answered too: the channel is gone now
    client.open_channel(1)


@pytest.mark.parametrize("crossing_close", [False, True])
def test_channel_open_before_close_ok_for_ours_is_504(client, crossing_close) -> None:
    """RabbitMQ 3.10 does the same: the channel is closing until the client's Close-Ok."""
    client.send(1, cmd.Queue.Declare(queue="missing", passive=True))
    channel_close(client, c.NOT_FOUND)
    if crossing_close:
        client.send(1, cmd.Channel.Close(200, "", 0, 0))
        client.expect(cmd.Channel.CloseOk, 1)
    client.send(1, cmd.Channel.Open())
    close = client.expect(cmd.Connection.Close, 0)
    assert close.reply_code == c.CHANNEL_ERROR and "second 'channel.open'" in close.reply_text


def test_client_channel_close(client) -> None:
    client.call(1, cmd.Channel.Close(200, "bye", 0, 0))
    client.send(1, cmd.Queue.Declare(queue="q"))  # channel 1 is gone now
    assert client.expect(cmd.Connection.Close, 0).reply_code == c.CHANNEL_ERROR


def test_unsolicited_close_ok_is_503_as_rabbitmq(client) -> None:
    client.send(1, cmd.Channel.CloseOk())
    close = client.expect(cmd.Connection.Close, 0)
    assert (close.reply_code, close.reply_text) == (c.COMMAND_INVALID,
                                                    "COMMAND_INVALID - unimplemented method")


def test_unacked_deliveries_of_a_closed_channel_are_redelivered(make_client) -> None:
    cl = make_client(channels=2)
    cl.declare_queue(1, "q")
    for i in range(3):
        cl.publish(1, "", "q", b"m%d" % i)
    cl.consume(1, "q", "first")
    got = cl.messages()
    assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
    assert not any(m.method.redelivered for m in got)
    cl.send(1, cmd.Basic.Ack(delivery_tag=1))
    cl.call(1, cmd.Channel.Close(200, "", 0, 0))
    cl.consume(2, "q", "second")
    again = cl.messages()
    assert [m.body for m in again] == [b"m1", b"m2"]
    assert all(m.method.redelivered for m in again)
    assert [m.method.delivery_tag for m in again] == [1, 2]  # tags are per channel


def test_unacked_deliveries_return_when_the_channel_is_closed_by_an_error(make_client) -> None:
    cl = make_client(channels=2)
    cl.declare_queue(1, "q")
    cl.publish(1, "", "q", b"m")
    cl.send(1, cmd.Basic.Get(queue="q"))
    cl.expect_message(cmd.Basic.GetOk)
    cl.send(1, cmd.Basic.Ack(delivery_tag=99))
    assert "unknown delivery tag 99" in channel_close(cl, c.PRECONDITION_FAILED).reply_text
    cl.send(1, cmd.Channel.CloseOk())
    cl.send(2, cmd.Basic.Get(queue="q"))
    m = cl.expect_message(cmd.Basic.GetOk, 2)
    assert m.body == b"m" and m.method.redelivered


def test_unacked_deliveries_return_when_the_connection_goes(make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    a.publish(1, "", "q", b"m")
    a.consume(1, "q")
    a.messages()
    a.conn.connection_lost()
    b.consume(1, "q")
    (m,) = b.messages()
    assert m.body == b"m" and m.method.redelivered


def test_channel_flow_active_false_is_540_as_rabbitmq(client) -> None:
    client.declare_queue(1, "q")
    client.send(1, cmd.Channel.Flow(active=False))
    close = client.expect(cmd.Connection.Close, 0)
    assert (close.reply_code, close.reply_text) == (c.NOT_IMPLEMENTED,
                                                    "NOT_IMPLEMENTED - active=false")
    assert (close.class_id, close.method_id) == (20, 20)


def test_channel_flow_active_true_is_answered_and_deliveries_go_on(client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", "t", no_ack=True)
    assert client.call(1, cmd.Channel.Flow(active=True)).active is True
    client.publish(1, "", "q", b"1")
    assert [m.body for m in client.messages()] == [b"1"]


def test_close_crossing_ours_then_close_ok_keeps_the_connection(client) -> None:
    """Our Channel.Close (404) and the client's Close cross: the client's Close gets Close-Ok, its
    Close-Ok for ours ends the channel, and the connection and its other channels go on."""
    client.open_channel(2)
    client.publish(1, "no-such-exchange", "k", b"x")
    client.send(1, cmd.Channel.Close(200, "bye", 0, 0))
    close = client.expect(cmd.Channel.Close, 1)
    assert close.reply_code == c.NOT_FOUND
    client.expect(cmd.Channel.CloseOk, 1)
    client.send(1, cmd.Channel.CloseOk())
    client.expect_nothing()
    client.declare_queue(2, "still-open")
    client.call(1, cmd.Channel.Open())  # the number is free again


def test_content_of_two_channels_may_interleave(make_client) -> None:
    cl = make_client(channels=2)
    cl.declare_queue(1, "q")

    def parts(ch: int, body: bytes) -> list[bytes]:
        return [frame.marshal(cmd.Basic.Publish(routing_key="q"), ch),
                frame.marshal(header.ContentHeader(0, len(body), cmd.Basic.Properties()), ch),
                frame.marshal(ContentBody(body), ch)]

    one, two = parts(1, b"one"), parts(2, b"two")
    cl.send_raw(b"".join([one[0], two[0], one[1], two[1], two[2], one[2]]))
    cl.consume(1, "q", "t", no_ack=True)
    assert [m.body for m in cl.messages()] == [b"two", b"one"]


def test_output_high_water_holds_deliveries_until_drained(broker, client) -> None:
    client.conn.high_water = 1000
    client.declare_queue(1, "q")
    client.consume(1, "q", "t", no_ack=True)
    client.send_raw(b"".join(client.encode_publish(1, "", "q", b"x" * 400) for _ in range(6)))
    assert len(client.messages()) == 3  # the third write crossed 1000 bytes
    client.expect_nothing()
    client.conn.output_drained()  # the I/O layer wrote everything
    assert len(client.messages()) == 3
    assert broker.message_memory() == 0


def test_message_memory_counts_ready_messages(broker, client) -> None:
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"x" * 1000)
    client.publish(1, "", "q", b"")
    assert broker.message_memory() == 1000 + 2 * broker.MESSAGE_OVERHEAD
    client.send(1, cmd.Basic.Get(queue="q"))
    client.expect_message(cmd.Basic.GetOk)
    assert broker.message_memory() == broker.MESSAGE_OVERHEAD  # unacked is not counted


# ------------------------------------------------------------------------------ tx
def test_tx_rollback_drops_publishes_commit_delivers(make_client) -> None:
    pub, con = make_client(), make_client()
    con.declare_queue(1, "q")
    con.consume(1, "q", "t", no_ack=True)
    pub.call(1, cmd.Tx.Select())
    pub.publish(1, "", "q", b"rolled back")
    pub.call(1, cmd.Tx.Rollback())
    pub.publish(1, "", "q", b"a")
    pub.publish(1, "", "q", b"b")
    con.expect_nothing()
    pub.call(1, cmd.Tx.Commit())
    assert [m.body for m in con.messages()] == [b"a", b"b"]
    pub.call(1, cmd.Tx.Commit())  # an empty commit is fine
    con.expect_nothing()


def test_tx_acks_apply_on_commit_and_rollback_keeps_them_unacked(client) -> None:
    client.declare_queue(1, "q")
    for i in range(3):
        client.publish(1, "", "q", b"%d" % i)
    client.call(1, cmd.Basic.Qos(prefetch_count=3))
    client.call(1, cmd.Tx.Select())
    client.consume(1, "q", "t")
    assert len(client.messages()) == 3
    client.send(1, cmd.Basic.Ack(delivery_tag=1))
    client.call(1, cmd.Tx.Rollback())
    client.send(1, cmd.Basic.Ack(delivery_tag=2, multiple=True))
    client.call(1, cmd.Tx.Commit())
    client.send(1, cmd.Basic.Recover(requeue=True))  # only tag 3 was still unacked
    m = client.expect_message()
    assert m.body == b"2" and m.method.redelivered
    client.expect(cmd.Basic.RecoverOk, 1)


def test_tx_commit_without_select_is_406(client) -> None:
    client.send(1, cmd.Tx.Commit())
    assert "not transactional" in channel_close(client, c.PRECONDITION_FAILED).reply_text


def test_confirm_select_on_a_tx_channel_is_406_and_vice_versa(client) -> None:
    client.open_channel(2)
    client.call(1, cmd.Tx.Select())
    client.send(1, cmd.Confirm.Select())
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert (close.class_id, close.method_id) == (85, 10)
    client.call(2, cmd.Confirm.Select())
    client.send(2, cmd.Tx.Select())
    channel_close(client, c.PRECONDITION_FAILED, 2)


def test_tx_mandatory_return_happens_at_commit(client) -> None:
    client.call(1, cmd.Tx.Select())
    client.publish(1, "amq.direct", "nowhere", b"x", mandatory=True)
    client.expect_nothing()
    client.send(1, cmd.Tx.Commit())
    ret = client.expect_message(cmd.Basic.Return)
    assert ret.method.reply_code == c.NO_ROUTE and ret.body == b"x"
    client.expect(cmd.Tx.CommitOk, 1)


def test_publish_to_missing_exchange_is_404_and_needs_its_content(client) -> None:
    client.publish(1, "nope", "rk", b"body")
    close = channel_close(client, c.NOT_FOUND)
    assert (close.class_id, close.method_id) == (60, 40)
    client.expect_nothing()
    assert client.conn.state is State.OPEN


def test_content_header_for_another_class_is_505(client) -> None:
    client.send(1, cmd.Basic.Publish(routing_key="q"))
    raw = header.ContentHeader(0, 0, cmd.Basic.Properties()).marshal()
    client.send_raw(b"\x02\x00\x01" + len(raw).to_bytes(4, "big") + b"\x00\x32" + raw[2:] + b"\xce")
    assert client.expect(cmd.Connection.Close, 0).reply_code == c.UNEXPECTED_FRAME
