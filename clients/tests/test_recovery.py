"""Reconnect and topology recovery when the broker process is SIGKILLed and restarted on the
same port (our broker; RabbitMQ can't be killed from here)."""

from __future__ import annotations

import anyio
import pytest

from clients.aio import Disconnected, Reconnected, connect
from clients.errors import ConnectionClosed

pytestmark = pytest.mark.anyio
T = 15


async def test_reconnect_recovers_topology_and_consumers(own_broker, name):
    ex, q = f"{name}.ex", f"{name}.q"
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.5) as conn:
        events: list = []
        conn.add_listener(events.append)
        ch = await conn.channel(confirm=True, prefetch=10)
        await ch.exchange_declare(ex, "topic")
        await ch.queue_declare(q)
        await ch.queue_bind(q, ex, "a.#")
        server_named = (await ch.queue_declare("", exclusive=True)).queue
        await ch.queue_bind(server_named, ex, "a.#")
        consumer = await ch.basic_consume(q)
        await ch.basic_publish(b"before", ex, "a.b")
        old = await consumer.get(T)
        assert old.body == b"before"

        own_broker.kill()
        own_broker.start()
        with anyio.fail_after(T):
            while not any(isinstance(e, Reconnected) for e in events):
                await anyio.sleep(0.05)
        assert any(isinstance(e, Disconnected) for e in events)
        assert conn.epoch == 2 and ch.epoch == 2
        assert await old.ack() is False  # tag from the dead connection: not sent

        await ch.basic_publish(b"after", ex, "a.c")  # exchange is back (else 404)
        new = await consumer.get(T)  # binding and consumer are back
        assert new.body == b"after" and await new.ack()
        renamed = conn._topology.renamed[server_named]
        probe = await conn.channel()
        assert (await probe.queue_declare(renamed, passive=True)).message_count == 1


async def test_calls_during_outage_wait_for_the_reconnect(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name)
        own_broker.kill()
        async with anyio.create_task_group() as tg:
            async def restart_later():
                await anyio.sleep(1.0)
                await anyio.to_thread.run_sync(own_broker.start)
            tg.start_soon(restart_later)
            with anyio.fail_after(T):
                while conn.ready:
                    await anyio.sleep(0.02)
                await ch.basic_publish(b"waited", "", name)
        assert (await ch.basic_get(name)).body == b"waited"


async def test_in_flight_confirms_fail_with_connection_closed(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, reconnect=False) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name)
        own_broker.kill()
        with pytest.raises(ConnectionClosed):
            with anyio.fail_after(T):
                while True:
                    c = await ch.basic_publish(b"x", "", name, wait=False)
                    await c.wait(T)
                    await anyio.sleep(0.01)
        with pytest.raises(ConnectionClosed):
            await conn.channel()


async def test_failover_to_next_address_when_first_dies(tmp_path, name):
    from .conftest import BrokerProcess
    a = BrokerProcess(tmp_path / "a").start()
    b = BrokerProcess(tmp_path / "b").start()
    try:
        async with connect([a.uri, b.uri], operation_timeout=T, backoff_initial=0.05) as conn:
            assert conn.address.endswith(str(a.port))
            ch = await conn.channel()
            await ch.queue_declare(name)
            a.kill()
            with anyio.fail_after(T):
                while not (conn.ready and conn.epoch == 2):
                    await anyio.sleep(0.05)
            assert conn.address.endswith(str(b.port))
            ok = await ch.queue_declare(name, passive=True)  # recovered on broker b
            assert ok.queue == name
    finally:
        a.kill()
        b.kill()
