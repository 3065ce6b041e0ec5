"""Publishes lost with a dropped connection must never look confirmed (with ``reconnect=True``).

The broker process is frozen with SIGSTOP before the publishes go out (so it reads none of them
and answers no confirm), then SIGKILLed and restarted on the same port: every publish of the
batch is certainly lost, the client reconnects, and each API must say so. Only our broker (a
RabbitMQ can't be killed from here).
"""

from __future__ import annotations

import signal
import threading
import time

import anyio
import pytest

from clients.aio import Reconnected, connect
from clients.blocking import BlockingConnection
from clients.errors import ConfirmsLost, ConnectionClosed, MessageReturned
from clients.message import Properties, encode_properties
from clients.reliable import ReliableClient

pytestmark = pytest.mark.anyio
T = 15
N = 3000
PERSISTENT = Properties(delivery_mode=2)


def _freeze(broker) -> None:
    broker.proc.send_signal(signal.SIGSTOP)


async def _until(predicate, timeout: float = T) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


async def _reconnected(conn) -> None:
    await _until(lambda: conn.ready and conn.epoch >= 2)


async def test_wait_for_confirms_raises_when_connection_drops_with_confirms_pending(
        own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, durable=True)
        _freeze(own_broker)
        confirmations = [ch.publish_nowait(b"m%d" % i, "", name, PERSISTENT) for i in range(N)]
        await conn.drain()  # written to the socket; the frozen broker reads nothing
        own_broker.kill()
        with pytest.raises(ConfirmsLost) as info:
            await ch.wait_for_confirms(T)
        assert info.value.unconfirmed == N
        assert isinstance(info.value, ConnectionClosed)  # old handlers keep working
        # every per-message confirmation failed with the connection error too
        assert all(c.done and isinstance(c.error, ConnectionClosed) for c in confirmations)
        for c in (confirmations[0], confirmations[-1]):
            with pytest.raises(ConnectionClosed):
                await c.wait(1)

        await anyio.to_thread.run_sync(own_broker.start)
        await _reconnected(conn)
        probe = await conn.channel()
        assert (await probe.queue_declare(name, passive=True)).message_count == 0  # truly lost
        # the loss was reported once; the channel goes on in confirm mode
        ch.publish_nowait(b"after", "", name, PERSISTENT)
        assert await ch.wait_for_confirms(T) == []
        assert (await probe.queue_declare(name, passive=True)).message_count == 1


async def test_loss_before_wait_for_confirms_is_still_reported(own_broker, name):
    """The drop happens (and the reconnect completes) before anyone waits: the next
    wait_for_confirms still reports the lost publishes instead of returning []."""
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        events: list = []
        conn.add_listener(events.append)
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, durable=True)
        _freeze(own_broker)
        for i in range(100):
            ch.publish_nowait(b"m%d" % i, "", name, PERSISTENT)
        await conn.drain()
        own_broker.kill()
        await anyio.to_thread.run_sync(own_broker.start)
        await _until(lambda: any(isinstance(e, Reconnected) for e in events))
        with pytest.raises(ConfirmsLost) as info:
            await ch.wait_for_confirms(T)
        assert info.value.unconfirmed == 100
        assert await ch.wait_for_confirms(T) == []  # reported once


async def test_publish_wait_raises_when_connection_drops_in_flight(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, durable=True)
        _freeze(own_broker)
        outcome: list = []

        async def publish() -> None:
            try:
                await ch.basic_publish(b"x", "", name, PERSISTENT)
                outcome.append("returned normally")
            except BaseException as exc:  # noqa: BLE001 - recorded for the assert
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(publish)
            await anyio.sleep(0.3)
            own_broker.kill()
            await anyio.to_thread.run_sync(own_broker.start)
        assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome
        await _reconnected(conn)
        await ch.basic_publish(b"again", "", name, PERSISTENT)  # a retry works
        assert (await ch.queue_declare(name, passive=True)).message_count == 1


async def test_drain_raises_when_the_connection_is_replaced(own_broker, name):
    """Bytes queued on a connection that dropped are gone: drain() must not return normally
    just because the *new* connection's buffer is empty."""
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel()
        await ch.queue_declare(name)
        _freeze(own_broker)
        body = b"x" * 65536
        for _ in range(400):  # 26 MB: more than the socket buffers hold
            ch.publish_nowait(body, "", name)
        outcome: list = []

        async def drain() -> None:
            try:
                await conn.drain()
                outcome.append("returned normally")
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await anyio.sleep(0.3)
            own_broker.kill()
            await anyio.to_thread.run_sync(own_broker.start)
        assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome


async def test_concurrent_drains_all_return(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=5) as conn:
        ch = await conn.channel()
        await ch.queue_declare(name)
        _freeze(own_broker)
        for _ in range(200):
            ch.publish_nowait(b"x" * 65536, "", name)
        done: list[int] = []

        async def drain(k: int) -> None:
            await conn.drain()
            done.append(k)

        with anyio.fail_after(T):
            async with anyio.create_task_group() as tg:
                for k in range(3):
                    tg.start_soon(drain, k)
                await anyio.sleep(0.3)
                own_broker.proc.send_signal(signal.SIGCONT)
        assert sorted(done) == [0, 1, 2]


async def test_tx_commit_raises_when_the_transaction_died_with_the_connection(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel()
        await ch.queue_declare(name, durable=True)
        await ch.tx_select()
        await ch.basic_publish(b"in the lost transaction", "", name, PERSISTENT)
        await conn.drain()
        own_broker.kill()
        await anyio.to_thread.run_sync(own_broker.start)
        await _reconnected(conn)
        await ch.basic_publish(b"after the reconnect", "", name, PERSISTENT)
        with pytest.raises(ConnectionClosed, match="transaction"):
            await ch.tx_commit()
        probe = await conn.channel()
        assert (await probe.queue_declare(name, passive=True)).message_count == 0
        # the half transaction was rolled back: redoing it commits exactly once
        await ch.basic_publish(b"redo", "", name, PERSISTENT)
        await ch.tx_commit()
        assert (await probe.queue_declare(name, passive=True)).message_count == 1


async def test_publish_batch_returns_confirmations_and_respects_high_water(broker, name):
    async with connect(broker.uri, operation_timeout=T, high_water=20_000) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, exclusive=True)
        raw = encode_properties(Properties(message_id="raw"))
        messages = [b"a" * 1000] * 500 + [("s", name), (b"t", name, PERSISTENT), (b"u", name, raw)]
        confirmations = await ch.publish_batch(messages, "", name)
        assert len(confirmations) == 503
        assert [c.delivery_tag for c in confirmations] == list(range(1, 504))
        await ch.wait_confirmations(confirmations)
        assert all(c.done and c.error is None for c in confirmations)
        assert (await ch.queue_declare(name, passive=True)).message_count == 503
        # mandatory and unroutable: the confirmation carries the return
        bad = await ch.publish_batch([b"nowhere"], "", name + ".missing", mandatory=True)
        with pytest.raises(MessageReturned):
            await ch.wait_confirmations(bad)
        plain = await conn.channel()
        assert await plain.publish_batch([b"x"], "", name) == []  # not in confirm mode


async def test_publish_batch_reports_a_loss(own_broker, name):
    async with connect(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                       backoff_max=0.3) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare(name, durable=True)
        _freeze(own_broker)
        confirmations = await ch.publish_batch([(b"m", name, PERSISTENT)] * 500)
        own_broker.kill()
        with pytest.raises(ConfirmsLost) as info:
            await ch.wait_confirmations(confirmations, T)
        assert info.value.unconfirmed == 500
        await anyio.to_thread.run_sync(own_broker.start)
        await _reconnected(conn)
        assert await ch.wait_for_confirms(T) == []  # already reported by wait_confirmations


def _restart_later(broker, kill_after: float, start_after: float) -> threading.Thread:
    def run() -> None:
        time.sleep(kill_after)
        broker.kill()
        time.sleep(start_after)
        broker.start()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_blocking_publish_many_raises_when_connection_drops(own_broker, name):
    with BlockingConnection(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                            backoff_max=0.3) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare(name, durable=True)
        _freeze(own_broker)
        restarter = _restart_later(own_broker, 1.0, 0.5)
        try:
            with pytest.raises(ConfirmsLost) as info:
                ch.publish_many((b"m%d" % i for i in range(N)), routing_key=name,
                                properties=PERSISTENT, batch=1000, timeout=T)
            assert info.value.unconfirmed == 1000  # the first batch; no later batch was sent
        finally:
            restarter.join(30)
        deadline = time.monotonic() + T
        while not (conn.connection.ready and conn.connection.epoch >= 2):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert ch.queue_declare(name, passive=True).message_count == 0


def test_blocking_publish_batch_and_wait_confirmations(own_broker, name):
    with BlockingConnection(own_broker.uri, operation_timeout=T, backoff_initial=0.05,
                            backoff_max=0.3) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare(name, durable=True)
        ok = ch.publish_batch([b"a", b"b"], routing_key=name)
        ch.wait_confirmations(ok)
        assert [c.error for c in ok] == [None, None]
        _freeze(own_broker)
        lost = ch.publish_batch([(b"c", name, PERSISTENT)] * 10)
        restarter = _restart_later(own_broker, 0.5, 0.5)
        try:
            with pytest.raises(ConfirmsLost) as info:
                ch.wait_confirmations(lost, T)
            assert info.value.unconfirmed == 10
        finally:
            restarter.join(30)


async def test_reliable_put_keeps_lost_put_in_flight_and_resends_same_id(own_broker, name,
                                                                           tmp_path):
    exchange = f"{name}.topics"
    async with ReliableClient(own_broker.uri, client_id=f"{name}-sub",
                              state_path=tmp_path / "sub.db", exchange=exchange,
                              operation_timeout=T, backoff_initial=0.05,
                              backoff_max=0.3) as sub, \
            ReliableClient(own_broker.uri, client_id=f"{name}-pub",
                           state_path=tmp_path / "pub.db", exchange=exchange,
                           operation_timeout=T, backoff_initial=0.05, backoff_max=0.3) as pub:
        assert await sub.get("jobs.#") is None  # the subscriber's queue exists
        seen_in_flight: list = []

        async def watch() -> None:  # while the broker is down the put is in the log
            await _until(lambda: not pub.connection.ready)
            seen_in_flight.extend(pub.log.pending())

        _freeze(own_broker)  # the first send is never read: it and its confirm are lost
        restarter = _restart_later(own_broker, 0.5, 0.7)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                mid = await pub.put("jobs.x", b"payload", message_id="fixed-id-7")
        finally:
            await anyio.to_thread.run_sync(restarter.join, 30)
        assert [row[0] for row in seen_in_flight] == ["fixed-id-7"]
        assert mid == "fixed-id-7" and pub.log.pending() == []
        assert pub.connection.epoch >= 2
        await _until(lambda: sub.connection.ready and sub.connection.epoch >= 2)
        got = []
        while (m := await sub.get("jobs.#")) is not None:
            got.append(m.properties.message_id)
        assert got == ["fixed-id-7"]
