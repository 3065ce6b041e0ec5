"""Exchanges and queues through the wire: declare equivalence (RabbitMQ's texts), reserved names,
exclusivity, server-named queues, delete/purge, auto-delete, x-expires, bindings."""

from __future__ import annotations

import re

import pytest
from pamqp import commands as cmd

from amqp_broker.protocol import constants as c

from .client import Client


def channel_close(cl: Client, code: int, channel: int = 1) -> cmd.Channel.Close:
    close = cl.expect(cmd.Channel.Close, channel)
    assert close.reply_code == code, close.reply_text
    cl.send(channel, cmd.Channel.CloseOk())
    return close


def reopen(cl: Client, channel: int = 1) -> None:
    cl.open_channel(channel)


# ------------------------------------------------------------------------------ exchanges
def test_exchange_declare_and_passive(client) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="x", exchange_type="direct"))
    client.call(1, cmd.Exchange.Declare(exchange="x", exchange_type="direct"))
    client.call(1, cmd.Exchange.Declare(exchange="x", passive=True))
    client.call(1, cmd.Exchange.Declare(exchange="amq.topic", passive=True))
    client.call(1, cmd.Exchange.Declare(exchange="amq.topic", exchange_type="topic",
                                        durable=True))


@pytest.mark.parametrize("kw,text", [
    ({"exchange_type": "fanout"},
     "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': "
     "received 'fanout' but current is 'direct'"),
    ({"exchange_type": "direct", "durable": True},
     "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '/': "
     "received 'true' but current is 'false'"),
    ({"exchange_type": "direct", "auto_delete": True},
     "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for exchange 'x' in vhost '/': "
     "received 'true' but current is 'false'"),
])
def test_exchange_redeclare_inequivalent_is_406(client, kw, text) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="x", exchange_type="direct"))
    client.send(1, cmd.Exchange.Declare(exchange="x", **kw))
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert close.reply_text == text
    assert (close.class_id, close.method_id) == (40, 10)


def test_passive_declare_of_missing_exchange_is_404(client) -> None:
    client.send(1, cmd.Exchange.Declare(exchange="nope", passive=True))
    close = channel_close(client, c.NOT_FOUND)
    assert close.reply_text == "NOT_FOUND - no exchange 'nope' in vhost '/'"


@pytest.mark.parametrize("name", ["amq.mine", "amq.direct2"])
def test_declaring_amq_exchange_is_403(client, name) -> None:
    client.send(1, cmd.Exchange.Declare(exchange=name, exchange_type="direct"))
    assert "amq." in channel_close(client, c.ACCESS_REFUSED).reply_text


def test_declaring_the_default_exchange_is_403(client) -> None:
    client.send(1, cmd.Exchange.Declare(exchange="", exchange_type="direct"))
    channel_close(client, c.ACCESS_REFUSED)


@pytest.mark.parametrize("method", [
    cmd.Exchange.Delete(exchange=""),
    cmd.Exchange.Delete(exchange="amq.direct"),
    cmd.Queue.Bind(queue="q", exchange="", routing_key="q"),
    cmd.Queue.Unbind(queue="q", exchange="", routing_key="q"),
    cmd.Exchange.Bind(destination="", source="amq.fanout"),
])
def test_default_and_amq_exchanges_cannot_be_deleted_or_bound(client, method) -> None:
    client.declare_queue(1, "q")
    client.send(1, method)
    channel_close(client, c.ACCESS_REFUSED)


def test_unknown_exchange_type_is_503(client) -> None:
    client.send(1, cmd.Exchange.Declare(exchange="x", exchange_type="nonsense"))
    close = client.expect(cmd.Connection.Close, 0)
    assert close.reply_code == c.COMMAND_INVALID
    assert (close.class_id, close.method_id) == (40, 10)


def test_unknown_exchange_type_on_redeclare_is_503(client) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="x", exchange_type="direct"))
    client.send(1, cmd.Exchange.Declare(exchange="x", exchange_type="nonsense"))
    assert client.expect((cmd.Connection.Close, cmd.Channel.Close)).reply_code == \
        c.COMMAND_INVALID


def test_exchange_delete_is_idempotent_and_if_unused(client) -> None:
    client.call(1, cmd.Exchange.Delete(exchange="never-there"))
    client.call(1, cmd.Exchange.Declare(exchange="x", exchange_type="fanout"))
    client.declare_queue(1, "q")
    client.call(1, cmd.Queue.Bind(queue="q", exchange="x"))
    client.send(1, cmd.Exchange.Delete(exchange="x", if_unused=True))
    channel_close(client, c.PRECONDITION_FAILED)
    reopen(client)
    client.call(1, cmd.Exchange.Delete(exchange="x"))
    client.send(1, cmd.Exchange.Declare(exchange="x", passive=True))
    channel_close(client, c.NOT_FOUND)


def test_exchange_to_exchange_binding_routes(client) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="src", exchange_type="topic"))
    client.call(1, cmd.Exchange.Declare(exchange="dst", exchange_type="fanout"))
    client.call(1, cmd.Exchange.Bind(destination="dst", source="src", routing_key="a.*"))
    client.declare_queue(1, "q")
    client.call(1, cmd.Queue.Bind(queue="q", exchange="dst"))
    client.publish(1, "src", "a.b", b"yes")
    client.publish(1, "src", "b.b", b"no")
    client.call(1, cmd.Exchange.Unbind(destination="dst", source="src", routing_key="a.*"))
    client.publish(1, "src", "a.b", b"no")
    assert client.call(1, cmd.Queue.Declare(queue="q", passive=True)).message_count == 1


def test_bind_to_missing_exchange_or_queue_is_404(client) -> None:
    client.declare_queue(1, "q")
    client.send(1, cmd.Queue.Bind(queue="q", exchange="nope"))
    channel_close(client, c.NOT_FOUND)
    reopen(client)
    client.send(1, cmd.Queue.Bind(queue="nope", exchange="amq.direct"))
    channel_close(client, c.NOT_FOUND)


# ------------------------------------------------------------------------------ queues
def test_server_named_queue(client) -> None:
    ok = client.declare_queue(1, "")
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", ok.queue)
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    other = client.declare_queue(1, "")
    assert other.queue != ok.queue
    # "" means the last queue declared on this channel
    client.call(1, cmd.Queue.Bind(queue="", exchange="amq.fanout"))
    client.publish(1, "amq.fanout", "", b"m")
    assert client.call(1, cmd.Queue.Declare(queue=other.queue, passive=True)).message_count == 1


def test_empty_queue_name_without_a_previous_declare_is_404(client) -> None:
    client.send(1, cmd.Queue.Bind(queue="", exchange="amq.fanout"))
    channel_close(client, c.NOT_FOUND)


def test_queue_declare_reports_counts(make_client) -> None:
    a = make_client()
    a.declare_queue(1, "q")
    a.publish(1, "", "q", b"1")
    a.publish(1, "", "q", b"2")
    ok = a.declare_queue(1, "q")
    assert (ok.message_count, ok.consumer_count) == (2, 0)
    a.consume(1, "q", "t")
    assert len(a.messages()) == 2
    ok = a.declare_queue(1, "q")
    assert (ok.message_count, ok.consumer_count) == (0, 1)


def test_reserved_queue_name_is_403(client) -> None:
    client.send(1, cmd.Queue.Declare(queue="amq.myqueue"))
    channel_close(client, c.ACCESS_REFUSED)


@pytest.mark.parametrize("kw,arg,got,have", [
    ({"durable": True}, "durable", "true", "false"),
    ({"auto_delete": True}, "auto_delete", "true", "false"),
    ({"arguments": {"x-message-ttl": 100}}, "x-message-ttl", "100", "None"),
])
def test_queue_redeclare_inequivalent_is_406(client, kw, arg, got, have) -> None:
    client.declare_queue(1, "q")
    client.send(1, cmd.Queue.Declare(queue="q", **kw))
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert close.reply_text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue 'q' in vhost '/': "
        f"received '{got}'")


def test_queue_type_quorum_is_406_and_classic_is_fine(client) -> None:
    client.declare_queue(1, "c", arguments={"x-queue-type": "classic"})
    client.declare_queue(1, "c")  # absent x-queue-type is classic: equivalent
    client.send(1, cmd.Queue.Declare(queue="qq", durable=True,
                                     arguments={"x-queue-type": "quorum"}))
    close = channel_close(client, c.PRECONDITION_FAILED)
    assert "x-queue-type" in close.reply_text and "quorum" in close.reply_text


def test_invalid_queue_argument_is_406(client) -> None:
    client.send(1, cmd.Queue.Declare(queue="q", arguments={"x-max-length": "ten"}))
    channel_close(client, c.PRECONDITION_FAILED)


def test_exclusive_queue_is_locked_to_its_connection(make_client) -> None:
    owner, other = make_client(), make_client()
    owner.declare_queue(1, "ex", exclusive=True)
    for method in (cmd.Queue.Declare(queue="ex", exclusive=True),
                   cmd.Queue.Declare(queue="ex", passive=True),
                   cmd.Basic.Consume(queue="ex"), cmd.Basic.Get(queue="ex"),
                   cmd.Queue.Purge(queue="ex"), cmd.Queue.Delete(queue="ex"),
                   cmd.Queue.Bind(queue="ex", exchange="amq.direct")):
        other.send(1, method)
        close = channel_close(other, c.RESOURCE_LOCKED)
        assert "exclusive" in close.reply_text
        reopen(other)
    owner.consume(1, "ex")


def test_exclusive_mismatch_on_redeclare_is_405(client) -> None:
    client.declare_queue(1, "ex", exclusive=True)
    client.send(1, cmd.Queue.Declare(queue="ex"))
    channel_close(client, c.RESOURCE_LOCKED)


def test_exclusive_queues_are_deleted_when_their_connection_closes(broker, make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "ex1", exclusive=True)
    a.declare_queue(1, "ex2", exclusive=True)
    a.declare_queue(1, "shared")
    a.close()
    assert set(broker.vhosts["/"].queues) == {"shared"}
    b.declare_queue(1, "ex1", exclusive=True)  # the name is free again
    b.conn.connection_lost()  # socket gone without a close handshake
    assert "ex1" not in broker.vhosts["/"].queues


def test_queue_delete_if_unused_and_if_empty(make_client) -> None:
    a = make_client()
    a.declare_queue(1, "q")
    a.publish(1, "", "q", b"m")
    a.send(1, cmd.Queue.Delete(queue="q", if_empty=True))
    assert "not empty" in channel_close(a, c.PRECONDITION_FAILED).reply_text
    reopen(a)
    a.call(1, cmd.Queue.Purge(queue="q"))
    a.consume(1, "q", "t")
    a.send(1, cmd.Queue.Delete(queue="q", if_unused=True))
    assert "in use" in channel_close(a, c.PRECONDITION_FAILED).reply_text
    reopen(a)  # the channel close cancelled the consumer
    assert a.call(1, cmd.Queue.Delete(queue="q", if_unused=True, if_empty=True)).message_count == 0


def test_queue_delete_returns_ready_count_and_missing_queue_is_fine(client) -> None:
    client.declare_queue(1, "q")
    for i in range(3):
        client.publish(1, "", "q", b"%d" % i)
    assert client.call(1, cmd.Queue.Delete(queue="q")).message_count == 3
    assert client.call(1, cmd.Queue.Delete(queue="q")).message_count == 0


def test_purge_counts_ready_not_unacked(client) -> None:
    client.declare_queue(1, "q")
    for i in range(5):
        client.publish(1, "", "q", b"%d" % i)
    client.call(1, cmd.Basic.Get(queue="q"), cmd.Basic.GetOk)
    client.frames()
    assert client.call(1, cmd.Queue.Purge(queue="q")).message_count == 4
    assert client.call(1, cmd.Queue.Purge(queue="q")).message_count == 0
    client.call(1, cmd.Basic.Recover(requeue=True))
    assert client.call(1, cmd.Queue.Purge(queue="q")).message_count == 1


def test_auto_delete_queue_goes_after_its_last_consumer(broker, client) -> None:
    client.declare_queue(1, "ad", auto_delete=True)
    client.publish(1, "", "ad", b"m")  # no consumer yet: stays
    assert "ad" in broker.vhosts["/"].queues
    client.consume(1, "ad", "t1")
    client.messages()
    client.consume(1, "ad", "t2")
    client.call(1, cmd.Basic.Cancel("t1"))
    assert "ad" in broker.vhosts["/"].queues
    client.call(1, cmd.Basic.Cancel("t2"))
    assert "ad" not in broker.vhosts["/"].queues


def test_auto_delete_queue_goes_when_the_consuming_channel_closes(broker, client) -> None:
    client.declare_queue(1, "ad", auto_delete=True)
    client.consume(1, "ad", "t1")
    client.call(1, cmd.Channel.Close(200, "", 0, 0))
    assert "ad" not in broker.vhosts["/"].queues


def test_x_expires_deletes_an_unused_queue(broker, clock, client) -> None:
    queues = broker.vhosts["/"].queues
    client.declare_queue(1, "exp", arguments={"x-expires": 1000})
    clock.advance(0.9)
    broker.tick()
    client.declare_queue(1, "exp", arguments={"x-expires": 1000})  # redeclare counts as use
    clock.advance(0.9)
    broker.tick()
    assert "exp" in queues
    client.consume(1, "exp", "t")
    clock.advance(5)
    broker.tick()
    assert "exp" in queues  # never while it has consumers
    client.call(1, cmd.Basic.Cancel("t"))
    clock.advance(0.99)
    broker.tick()
    assert "exp" in queues
    clock.advance(0.02)
    broker.tick()
    assert "exp" not in queues


def test_x_expires_counts_basic_get_as_use(broker, clock, client) -> None:
    queues = broker.vhosts["/"].queues
    client.declare_queue(1, "exp", arguments={"x-expires": 1000})
    clock.advance(0.8)
    client.call(1, cmd.Basic.Get(queue="exp"), cmd.Basic.GetEmpty)
    clock.advance(0.8)
    broker.tick()
    assert "exp" in queues
    clock.advance(0.3)
    broker.tick()
    assert "exp" not in queues


# ------------------------------------------------------------------------------ queue features
def test_single_active_consumer(make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "sac", arguments={"x-single-active-consumer": True})
    a.consume(1, "sac", "a", no_ack=True)
    b.consume(1, "sac", "b", no_ack=True)
    for i in range(3):
        a.publish(1, "", "sac", b"%d" % i)
    assert len(a.messages()) == 3
    b.expect_nothing()
    a.call(1, cmd.Basic.Cancel("a"))
    a.publish(1, "", "sac", b"next")
    assert [m.body for m in b.messages()] == [b"next"]


def test_message_and_consumer_priorities(make_client) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "pq", arguments={"x-max-priority": 5})
    for p in (1, 9, 3):  # 9 is capped at 5
        a.publish(1, "", "pq", b"p%d" % p, cmd.Basic.Properties(priority=p))
    a.consume(1, "pq", "t", no_ack=True)
    assert [m.body for m in a.messages()] == [b"p9", b"p3", b"p1"]
    a.declare_queue(1, "cp")
    a.consume(1, "cp", "low", no_ack=True)
    b.consume(1, "cp", "high", no_ack=True, arguments={"x-priority": 10})
    for i in range(3):
        a.publish(1, "", "cp", b"%d" % i)
    a.expect_nothing()
    assert len(b.messages()) == 3
    b.send(1, cmd.Basic.Consume(queue="cp", arguments={"x-priority": "high"}))
    channel_close(b, c.PRECONDITION_FAILED)


def test_auto_delete_exchange_goes_with_its_last_binding(client) -> None:
    client.call(1, cmd.Exchange.Declare(exchange="ad", exchange_type="fanout", auto_delete=True))
    client.declare_queue(1, "q")
    client.call(1, cmd.Queue.Bind(queue="q", exchange="ad"))
    client.call(1, cmd.Queue.Unbind(queue="q", exchange="ad"))
    client.send(1, cmd.Exchange.Declare(exchange="ad", passive=True))
    channel_close(client, c.NOT_FOUND)
