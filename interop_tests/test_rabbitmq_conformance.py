"""Where RabbitMQ parts from the letter of AMQP 0-9-1 and clients depend on it (issue 9).

Differential: every test runs against our broker and against RabbitMQ (the ``broker`` fixture is
parametrised over both; RabbitMQ is a private 3.10 node, see ``interop_tests/rabbitmq_node.py``) and asserts the same outcome
on both, each with the client library that met the difference:

1. ``Queue.Unbind`` / ``Exchange.Unbind`` of a missing queue, exchange or binding is Unbind-Ok
   (aio-pika's RPC pattern unbinds its auto-deleted reply queue in ``close()``).
2. channel_max limits how many channels are open, not the channel number (aiormq's
   ``connection.channel(65535)``); one channel over it is 530 NOT_ALLOWED.
3. ``Exchange.Declare`` of the default exchange, passive or not, is 403 ACCESS_REFUSED (pika).
4. A client's ``Channel.Flow(active=false)`` is 540 NOT_IMPLEMENTED (the frames Go's amqp091
   sends; its test suite panics on anything else).
5. After the client's Connection.Close the broker reads on until the client closes its socket:
   Node's amqplib closing with publishes still buffered must not die of EPIPE.
6. A Channel.Close crossing the broker's own (publish to a missing exchange, then close at once,
   as Go's amqp091 does) ends that channel only, never the connection.
7. ``Queue.Delete`` of a queue consumed on the same channel: Delete-Ok comes before the
   Basic.Cancel, so kombu/py-amqp leave their ``Consumer`` context cleanly.
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aiormq
import kombu
import pika
import pika.exceptions
import pytest
from aio_pika.patterns import RPC
from pamqp import commands

from interop_tests.rawamqp import RawConnection, Timeout, content_body, content_header, method_frame
from interop_tests.test_node_amqplib import NODE, NODE_DIR, run_script

pytestmark = pytest.mark.timeout(120)


def _name(what: str) -> str:
    return f"it.conformance.{what}.{uuid.uuid4().hex[:10]}"


def _raw(broker, **handshake) -> RawConnection:
    conn = RawConnection(broker.host, broker.port)
    conn.handshake(**handshake)
    return conn


def _replies(conn: RawConnection, quiet: float = 0.5) -> list[tuple[int, object]]:
    """Every method the broker sends until it is quiet for ``quiet`` s (or closes the socket)."""
    out = []
    while True:
        try:
            out.append(conn.read_method(quiet))
        except Timeout:
            return out
        except Exception:  # the socket closed
            return out


# ---------------------------------------------------------------------------------- 1. unbind
def test_unbind_of_missing_things_is_unbind_ok(broker):
    queue = _name("q")
    with _raw(broker) as conn:
        conn.send_method(commands.Queue.Unbind(queue=_name("none"), exchange=_name("none"),
                                               routing_key="k"), 1)
        conn.send_method(commands.Exchange.Unbind(destination=_name("none"),
                                                  source=_name("none"), routing_key="k"), 1)
        conn.send_method(commands.Queue.Declare(queue=queue, auto_delete=True), 1)
        conn.send_method(commands.Queue.Unbind(queue=queue, exchange="amq.direct",
                                               routing_key="never-bound"), 1)
        conn.send_method(commands.Queue.Unbind(queue=queue, exchange="", routing_key="k"), 1)
        got = [(ch, type(m).__name__, getattr(m, "reply_code", None)) for ch, m in _replies(conn)]
    assert got == [(1, "UnbindOk", None), (1, "UnbindOk", None), (1, "DeclareOk", None),
                   (1, "UnbindOk", None), (1, "Close", 403)]  # the default exchange stays 403


def test_aio_pika_rpc_pattern_closes_cleanly(broker):
    """RPC.close() cancels its consumer (the auto-delete reply queue goes), then unbinds it."""

    async def main() -> int:
        connection = await aio_pika.connect(broker.uri)
        async with connection:
            channel = await connection.channel()
            rpc = await RPC.create(channel)
            method = _name("double")

            async def double(*, x: int) -> int:
                return 2 * x

            await rpc.register(method, double, auto_delete=True)
            result = await rpc.call(method, kwargs={"x": 21})
            await rpc.close()
            # the channel is still open and usable after close()
            await channel.declare_queue(_name("after"), auto_delete=True)
            return result

    assert asyncio.run(asyncio.wait_for(main(), 30)) == 42


# ------------------------------------------------------------------------------ 2. channel_max
def test_aiormq_opens_channel_65535(broker):
    async def main() -> bool:
        connection = await aiormq.connect(broker.uri)
        try:
            channel = await connection.channel(65535)
            ok = await channel.queue_declare(_name("hi"), auto_delete=True, exclusive=True)
            return ok.queue.startswith("it.conformance")
        finally:
            await connection.close()

    assert asyncio.run(asyncio.wait_for(main(), 30)) is True


def test_one_channel_over_channel_max_is_530(broker):
    with RawConnection(broker.host, broker.port) as conn:
        conn.send(b"AMQP\x00\x00\x09\x01")
        conn.read_method()
        conn.send_method(commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest",
            locale="en_US"))
        conn.read_method()
        conn.send_method(commands.Connection.TuneOk(channel_max=2, frame_max=131072, heartbeat=0))
        conn.send_method(commands.Connection.Open(virtual_host="/"))
        conn.read_method()
        for number in (9, 65535, 1):
            conn.send_method(commands.Channel.Open(), number)
        got = _replies(conn)
    # RabbitMQ runs each channel in its own process: the two OpenOks come in either order
    assert sorted((ch, type(m).__name__) for ch, m in got) == [
        (0, "Close"), (9, "OpenOk"), (65535, "OpenOk")]
    close = next(m for ch, m in got if ch == 0)
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - number of channels opened (2) has reached the "
                                "negotiated channel_max (2)")


# --------------------------------------------------------------------- 3. the default exchange
@pytest.mark.parametrize("passive", [False, True])
def test_declaring_the_default_exchange_is_403(broker, passive):
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as connection:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            channel.exchange_declare("", "direct", passive=passive)
        assert err.value.reply_code == 403
        assert err.value.reply_text == ("ACCESS_REFUSED - operation not permitted on the "
                                        "default exchange")
        assert connection.channel().is_open  # a channel error only


# ------------------------------------------------------------------------- 4. Channel.Flow
def test_client_channel_flow_false_is_540_and_true_is_flow_ok(broker):
    with _raw(broker) as conn:
        conn.send_method(commands.Channel.Flow(active=True), 1)
        assert isinstance(conn.read_method()[1], commands.Channel.FlowOk)
        conn.send_method(commands.Channel.Flow(active=False), 1)
        close = conn.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - active=false")
    assert (close.class_id, close.method_id) == (20, 20)


# ------------------------------------------------------------ 5. reading on after Close-Ok
@pytest.mark.skipif(NODE is None or not (NODE_DIR / "node_modules" / "amqplib").is_dir(),
                    reason="node and amqplib are installed by interop_tests/setup.sh")
def test_amqplib_close_with_buffered_publishes_survives(broker):
    result = run_script(broker.uri, "close_buffered.js", _name("buffered"), "5")
    assert result["rounds"] == 5 and result["published"] > 250


def test_frames_after_close_ok_are_discarded_until_the_client_closes(broker):
    """Close, then (before reading Close-Ok) more frames: the broker answers Close-Ok, keeps
    the socket open and sends nothing else until we close it."""
    with _raw(broker) as conn:
        conn.send_method(commands.Connection.Close(reply_code=200, reply_text="bye",
                                                   class_id=0, method_id=0))
        channel, close_ok = conn.read_method()
        assert (channel, type(close_ok).__name__) == (0, "CloseOk")
        body = b"x" * 1000
        for _ in range(200):
            conn.send(method_frame(commands.Basic.Publish(exchange="", routing_key="k"), 1)
                      + content_header(len(body), 1) + content_body(body, 1))
        assert not conn.wait_closed(1.0), "the broker closed the socket under a closing client"
        assert not conn.buf, f"nothing may follow Close-Ok, got {bytes(conn.buf[:40])!r}"


# ------------------------------------------------------------------------ 6. crossing closes
def test_channel_close_crossing_the_brokers_close_keeps_the_connection(broker):
    """Go's amqp091: publish to a missing exchange, then Channel.Close at once; the broker's
    Close(404) and ours cross. Each side answers the other's Close with Close-Ok, and the
    connection and its other channels live on."""
    publish = (method_frame(commands.Basic.Publish(exchange=_name("missing"), routing_key="k"), 1)
               + content_header(3, 1) + content_body(b"abc", 1))
    with _raw(broker) as conn:
        conn.send_method(commands.Channel.Open(), 2)
        assert isinstance(conn.read_method()[1], commands.Channel.OpenOk)
        conn.send(publish + method_frame(commands.Channel.Close(
            reply_code=200, reply_text="bye", class_id=0, method_id=0), 1))
        seen = []
        while len(seen) < 2:
            channel, method = conn.read_method()
            seen.append((channel, type(method).__name__, getattr(method, "reply_code", None)))
            if isinstance(method, commands.Channel.Close):
                conn.send_method(commands.Channel.CloseOk(), 1)  # as amqp091 does
        assert sorted(seen) == [(1, "Close", 404), (1, "CloseOk", None)]
        queue = _name("after")
        conn.send_method(commands.Queue.Declare(queue=queue, exclusive=True), 2)
        conn.send_method(commands.Channel.Open(), 1)
        got = [(ch, type(m).__name__) for ch, m in _replies(conn)]
    assert sorted(got) == [(1, "OpenOk"), (2, "DeclareOk")]  # channels are independent


# --------------------------------------------------- 7. Queue.Delete under its own consumer
def test_kombu_deletes_its_consumed_queue_and_leaves_cleanly(broker):
    queue_name = _name("deleted")
    with kombu.Connection(broker.uri.replace("%2F", "/").rstrip("/") + "//") as conn:
        channel = conn.channel()
        queue = kombu.Queue(queue_name, channel=channel, durable=False)
        queue.declare()
        with kombu.Consumer(channel, queues=[queue], callbacks=[lambda body, message: None]):
            queue.delete()
        # what is still pending (the Basic.Cancel after Delete-Ok, the Cancel-Ok) is handled
        # without raising (py-amqp raises ConsumerCancelled for a Cancel met while it waits for
        # Delete-Ok), and the connection is fine afterwards
        try:
            conn.drain_events(timeout=0.5)
        except TimeoutError:
            pass
        channel2 = conn.channel()
        assert kombu.Queue(_name("after"), channel=channel2, auto_delete=True).declare()


def test_delete_ok_comes_before_the_consumers_cancel(broker):
    queue = _name("order")
    with RawConnection(broker.host, broker.port) as conn:
        conn.send(b"AMQP\x00\x00\x09\x01")
        conn.read_method()
        conn.send_method(commands.Connection.StartOk(
            client_properties={"capabilities": {"consumer_cancel_notify": True}},
            mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
        conn.read_method()
        conn.send_method(commands.Connection.TuneOk(channel_max=2047, frame_max=131072,
                                                    heartbeat=0))
        conn.send_method(commands.Connection.Open(virtual_host="/"))
        conn.read_method()
        conn.send_method(commands.Channel.Open(), 1)
        conn.read_method()
        conn.send_method(commands.Queue.Declare(queue=queue), 1)
        conn.read_method()
        conn.send_method(commands.Basic.Consume(queue=queue, consumer_tag="ct"), 1)
        assert isinstance(conn.read_method()[1], commands.Basic.ConsumeOk)
        conn.send_method(commands.Queue.Delete(queue=queue), 1)
        got = [(ch, type(m).__name__, getattr(m, "consumer_tag", None))
               for ch, m in _replies(conn)]
    assert got == [(1, "DeleteOk", None), (1, "Cancel", "ct")]


# ------------------------------------------------------------- sweep: what else clients rely on
def test_x_death_count_is_a_long_long(broker):
    """RabbitMQ sends x-death ``count`` as a long-long (field type ``l``); the Java client casts
    it to Long. Read the raw content header of a dead-lettered message."""
    queue, dlq = _name("dl-src"), _name("dl-dst")
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as connection:
        ch = connection.channel()
        ch.queue_declare(dlq, auto_delete=False)
        ch.queue_declare(queue, arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", queue, b"x")
        method = None
        for _ in range(50):
            method, _props, _body = ch.basic_get(queue)
            if method is not None:
                break
        assert method is not None
        ch.basic_reject(method.delivery_tag, requeue=False)
    with _raw(broker) as conn:
        for _ in range(50):
            conn.send_method(commands.Basic.Get(queue=dlq, no_ack=True), 1)
            channel, got = conn.read_method()
            if isinstance(got, commands.Basic.GetOk):
                break
        assert isinstance(got, commands.Basic.GetOk)
        content_header = conn.read_frame()
        conn.send_method(commands.Queue.Delete(queue=dlq), 1)
        conn.send_method(commands.Queue.Delete(queue=queue), 1)
    assert b"\x05countl\x00\x00\x00\x00\x00\x00\x00\x01" in content_header.payload


def test_utf8_queue_and_exchange_names_work(broker):
    """RabbitMQ takes any UTF-8 name of up to 255 bytes, not only the spec's character grammar
    (our replies carrying such a name once failed to encode: 541 INTERNAL_ERROR)."""
    queue, exchange = _name("очередь-é"), _name("ex-ü")
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as connection:
        ch = connection.channel()
        assert ch.queue_declare(queue, auto_delete=True).method.queue == queue
        ch.exchange_declare(exchange, "direct", auto_delete=True)
        ch.queue_bind(queue, exchange, routing_key="clé")
        ch.basic_publish(exchange, "clé", b"bonjour")
        method, _props, body = None, None, None
        for _ in range(50):  # bounded: the publish is asynchronous
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is not None:
                break
            connection.sleep(0.05)
        assert method is not None and body == b"bonjour"
        assert (method.exchange, method.routing_key) == (exchange, "clé")
        ch.exchange_delete(exchange)
