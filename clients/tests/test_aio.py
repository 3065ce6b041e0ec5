"""``clients.aio`` against a real broker (ours, and RabbitMQ when configured): every method,
confirms, returns, failover, heartbeats, Connection.Blocked."""

from __future__ import annotations

import anyio
import pytest

from clients.aio import connect
from clients.errors import (
    ChannelClosed,
    ConnectionClosed,
    MessageReturned,
    NoBrokerAvailable,
)
from clients.message import Properties

from .conftest import BrokerProcess, free_port

pytestmark = pytest.mark.anyio
T = 10  # seconds: bound for every wait in these tests


async def test_exchange_methods(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel()
        for kind in ("direct", "fanout", "topic", "headers"):
            await ch.exchange_declare(f"{name}.{kind}", kind, auto_delete=False)
        await ch.exchange_declare(f"{name}.direct", "direct", passive=True)
        await ch.exchange_bind(f"{name}.fanout", f"{name}.direct", "k")
        q = (await ch.queue_declare("", exclusive=True)).queue
        await ch.queue_bind(q, f"{name}.fanout")
        await ch.basic_publish(b"via e2e", f"{name}.direct", "k")
        msg = await _get_soon(ch, q)
        assert msg.body == b"via e2e" and msg.exchange == f"{name}.direct"
        await ch.exchange_unbind(f"{name}.fanout", f"{name}.direct", "k")
        await ch.basic_publish(b"not routed", f"{name}.direct", "k")
        await anyio.sleep(0.1)
        assert await ch.basic_get(q) is None
        for kind in ("direct", "fanout", "topic", "headers"):
            await ch.exchange_delete(f"{name}.{kind}")
        with pytest.raises(ChannelClosed) as info:
            await ch.exchange_declare(f"{name}.direct", passive=True)
        assert info.value.reply_code == 404 and not ch.is_open


async def _get_soon(ch, queue, timeout=T):
    with anyio.fail_after(timeout):
        while True:
            msg = await ch.basic_get(queue)
            if msg is not None:
                return msg
            await anyio.sleep(0.02)


async def test_queue_methods(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True)
        ok = await ch.queue_declare(name, auto_delete=False)
        assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 0)
        server_named = await ch.queue_declare("", exclusive=True)
        assert server_named.queue.startswith("amq.gen-")
        await ch.queue_bind(name, "amq.direct", "rk")
        for i in range(3):
            await ch.basic_publish(f"m{i}", "amq.direct", "rk")
        assert (await ch.queue_declare(name, passive=True)).message_count == 3
        assert await ch.queue_purge(name) == 3
        await ch.queue_unbind(name, "amq.direct", "rk")
        with pytest.raises(MessageReturned) as returned:
            await ch.basic_publish(b"x", "amq.direct", "rk", mandatory=True)
        assert returned.value.reply_code == 312
        await ch.basic_publish(b"left", "", name)
        assert await ch.queue_delete(name) == 1
        ch2 = await conn.channel()
        await ch2.queue_declare(name + "d", durable=True)
        with pytest.raises(ChannelClosed) as info:
            await ch2.queue_declare(name + "d", durable=False)
        assert info.value.reply_code == 406
        ch3 = await conn.channel()
        assert await ch3.queue_delete(name + "d") == 0


async def test_get_ack_nack_reject_recover(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, exclusive=True)
        props = Properties(content_type="text/plain", headers={"h": 1}, message_id="id-1",
                           delivery_mode=2, priority=3, timestamp=1700000000)
        await ch.basic_publish(b"one", "", name, props)
        await ch.basic_publish(b"two", "", name)
        m1 = await ch.basic_get(name)
        assert m1.body == b"one" and m1.message_count == 1 and not m1.redelivered
        assert m1.properties == props
        assert await m1.nack(requeue=True)
        m2 = await ch.basic_get(name)
        assert await m2.reject(requeue=True)
        got = sorted([(await ch.basic_get(name)).body, (await ch.basic_get(name)).body])
        assert got == [b"one", b"two"]
        await ch.basic_recover(requeue=True)
        m = await _get_soon(ch, name)
        assert m.redelivered
        assert await ch.basic_ack(0, multiple=True)
        assert await ch.basic_get(name, no_ack=True) is None or True


async def test_consumer_iterator_qos_and_cancel(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True, prefetch=5)
        await ch.queue_declare(name, exclusive=True)
        for i in range(20):
            ch.publish_nowait(str(i), "", name)
        await ch.wait_for_confirms()
        got = []
        with anyio.fail_after(T):
            async with await ch.basic_consume(name) as consumer:
                async for msg in consumer:
                    got.append(int(msg.body))
                    await msg.ack()
                    if len(got) == 20:
                        break
        assert got == list(range(20))
        assert consumer.tag not in ch.consumers
        await ch.basic_publish(b"after cancel", "", name)
        assert (await _get_soon(ch, name)).body == b"after cancel"


async def test_consumer_take_nowait_takes_what_arrived(amqp_uri, name):
    """``take_nowait`` hands over the buffered deliveries without waiting (at most ``limit``);
    once the broker cancelled the consumer, the rest are taken and iteration then ends."""
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True, prefetch=5)
        await ch.queue_declare(name)
        for i in range(8):
            ch.publish_nowait(str(i), "", name)
        await ch.wait_for_confirms()
        consumer = await ch.basic_consume(name)
        got = [await consumer.get(T)]
        with anyio.fail_after(T):
            while len(got) < 5:   # the prefetch window, as it arrives
                taken = consumer.take_nowait(2)
                assert len(taken) <= 2
                got += taken
                await anyio.sleep(0.01)
        assert [m.body for m in got] == [b"0", b"1", b"2", b"3", b"4"]
        assert consumer.take_nowait(10) == []   # the other 3 wait for an ack
        await ch.basic_ack(got[-1].delivery_tag, multiple=True)
        with anyio.fail_after(T):
            while len(got) < 8:
                got += consumer.take_nowait(10)
                await anyio.sleep(0.01)
        await (await conn.channel()).queue_delete(name)
        with anyio.fail_after(T):
            assert [m async for m in consumer] == []
        assert [m.body for m in got[5:]] == [b"5", b"6", b"7"] and consumer.take_nowait(1) == []


async def test_broker_cancel_ends_iteration(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel()
        await ch.queue_declare(name)
        consumer = await ch.basic_consume(name, no_ack=True)
        other = await conn.channel()
        await other.queue_delete(name)
        with anyio.fail_after(T):
            assert [m async for m in consumer] == []
        assert consumer.cancelled_by_broker


async def test_confirms_batch_and_per_message(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, exclusive=True)
        confirmations = [ch.publish_nowait(b"x" * 100, "", name) for _ in range(2000)]
        assert await ch.wait_for_confirms() == []
        assert all(c.done and c.error is None for c in confirmations)
        assert [c.delivery_tag for c in confirmations[:3]] == [1, 2, 3]
        c = await ch.basic_publish(b"y", "", name)
        assert c.done and c.delivery_tag == 2001
        assert (await ch.queue_declare(name, passive=True)).message_count == 2001


async def test_returns_as_events_without_confirms(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel()
        async with conn.events() as events:
            await ch.basic_publish(b"lost", "", name, mandatory=True)
            with anyio.fail_after(T):
                event = await events.receive()
        assert event.kind == "return" and event.reply_code == 312 and event.body == b"lost"
        assert event.routing_key == name


async def test_tx(amqp_uri, name):
    async with connect(amqp_uri, operation_timeout=T) as conn:
        ch = await conn.channel()
        await ch.queue_declare(name, exclusive=True)
        await ch.tx_select()
        await ch.basic_publish(b"rolled back", "", name)
        await ch.tx_rollback()
        await ch.basic_publish(b"committed", "", name)
        await ch.tx_commit()
        check = await conn.channel()
        assert (await check.queue_declare(name, passive=True)).message_count == 1
        m = await check.basic_get(name)
        assert m.body == b"committed"
        await ch.basic_ack(m.delivery_tag) if False else await m.ack()
        confirm_ch = await conn.channel(confirm=True)
        with pytest.raises(ChannelClosed) as info:
            await confirm_ch.tx_select()
        assert info.value.reply_code == 406


async def test_large_body_is_split_over_frames(amqp_uri, name):
    async with connect(amqp_uri + "?frame_max=4096", operation_timeout=T) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, exclusive=True)
        body = bytes(range(256)) * 1000
        await ch.basic_publish(body, "", name)
        assert (await ch.basic_get(name)).body == body


async def test_failover_to_second_address(amqp_uri):
    dead = f"amqp://127.0.0.1:{free_port()}/"
    async with connect([dead, amqp_uri], operation_timeout=T) as conn:
        assert conn.address.endswith(str(conn._params[1].port))
        ch = await conn.channel()
        assert (await ch.queue_declare("", exclusive=True)).queue


async def test_no_broker_available_and_bad_login(amqp_uri):
    with pytest.raises(NoBrokerAvailable) as info:
        async with connect([f"amqp://127.0.0.1:{free_port()}/"] * 2, connect_attempts=2,
                           backoff_initial=0.01):
            pass
    assert len(info.value.errors) == 2
    bad = amqp_uri.replace("guest:guest@", "guest:wrong@")
    with pytest.raises(NoBrokerAvailable) as info:
        async with connect(bad, operation_timeout=T):
            pass
    (addr, err), = info.value.errors
    assert isinstance(err, ConnectionClosed) and err.reply_code == 403


async def test_heartbeats_keep_an_idle_connection(broker):
    async with connect(broker.uri + "?heartbeat=1", operation_timeout=T) as conn:
        assert conn._proto.heartbeat == 1
        await anyio.sleep(3.5)
        ch = await conn.channel()
        await ch.queue_declare("", exclusive=True)
        assert conn.epoch == 1


async def test_connection_blocked_and_unblocked(tmp_path, name):
    b = BrokerProcess(tmp_path / "mem", extra=["--memory-high-watermark", "20000"]).start()
    try:
        async with connect(b.uri, operation_timeout=T) as conn, \
                connect(b.uri, operation_timeout=T) as admin:
            seen = []
            conn.add_listener(lambda ev: seen.append(type(ev).__name__))
            ch = await conn.channel()
            await ch.queue_declare(name)
            for _ in range(50):
                await ch.basic_publish(b"x" * 1024, "", name)
            with anyio.fail_after(T):
                while "Blocked" not in seen:
                    await anyio.sleep(0.05)
            assert conn.blocked
            purge = await admin.channel()
            await purge.queue_purge(name)
            with anyio.fail_after(T):
                while "Unblocked" not in seen:
                    await anyio.sleep(0.05)
            assert conn.blocked is None
    finally:
        b.kill()
