"""aio-pika workload clients: a publisher with confirms and an acking consumer, each pinned to
one broker, all run as tasks of one asyncio loop in a thread (:class:`AioLoop`).

Same contract as :mod:`interop_tests.faults.pika_clients`: persistent, mandatory publishes of
unique ids; ``ok`` on Ack, ``fail`` on Nack (``DeliveryError``), on a return (``PublishError``,
the channel has ``on_return_raises``) or a closed channel/connection, ``info`` when no answer
comes within ``confirm_timeout`` s (aio-pika cancels the wait, so a later Ack is not seen).
Consumers record every delivery and ack it. Reconnects are bounded by ``max_connects`` and the
shared ``stop`` event (a ``threading.Event``, polled every 0.2 s).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aio_pika
import aio_pika.exceptions

from .clients_common import (
    ClientSettings,
    IdSource,
    StreamPosition,
    publish_headers,
    record_delivery,
)
from .history import History

__all__ = ["AioConsumer", "AioLoop", "AioPublisher"]

CONNECT_TIMEOUT = 5.0


class AioLoop(threading.Thread):
    """An asyncio loop in a daemon thread; ``spawn(coro)`` runs a coroutine on it; ``join``
    waits for every spawned coroutine (bounded by the caller's timeout)."""

    def __init__(self) -> None:
        super().__init__(name="aio-pika-loop", daemon=True)
        self.loop = asyncio.new_event_loop()
        self._futures: list[Any] = []

    def run(self) -> None:
        """Run the loop until :meth:`close`."""
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Schedule ``coro`` on the loop (thread-safe)."""
        self._futures.append(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` s in total for the spawned coroutines to end."""
        deadline = time.monotonic() + timeout
        for fut in self._futures:
            try:
                fut.result(max(0.0, deadline - time.monotonic()))
            except Exception:   # ended with an error: already recorded by the client
                pass

    def close(self) -> None:
        """Stop the loop and join its thread (at most 5 s)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(5)


async def _connect(url: str, settings: ClientSettings) -> Any:
    return await asyncio.wait_for(
        aio_pika.connect(url, timeout=CONNECT_TIMEOUT, heartbeat=settings.heartbeat),
        CONNECT_TIMEOUT + 1)


async def _reconnecting(client: Any, session: Callable[[], Awaitable[None]]) -> None:
    """Run ``session`` again after each failure (recorded), ``reconnect_delay`` s apart, at most
    ``max_connects`` times, until the client's stop event is set."""
    for _ in range(client.settings.max_connects):
        if client.stop_event.is_set():
            break
        try:
            await session()
        except Exception as exc:
            client.history.record("client", client=client.client, event="error",
                                  error=repr(exc)[:200])
        await asyncio.sleep(client.settings.reconnect_delay)


class AioPublisher:
    """Publishes ids to broker ``url`` at ``settings.rate`` per second with at most
    ``settings.window`` unconfirmed, until ``stop``; ``run()`` is the coroutine."""

    def __init__(self, name: str, broker: str, url: str, settings: ClientSettings,
                 ids: IdSource, history: History, stop: threading.Event) -> None:
        self.client, self.broker, self.url = name, broker, url
        self.settings, self.ids, self.history, self.stop_event = settings, ids, history, stop

    async def run(self) -> None:
        """Connect, publish, reconnect after failures; bounded by ``stop`` and max_connects."""
        await _reconnecting(self, self._session)

    async def _session(self) -> None:
        conn = await _connect(self.url, self.settings)
        self.history.record("client", client=self.client, event="connected")
        pending: set[asyncio.Task[None]] = set()
        try:
            channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
            exchange = (await channel.get_exchange(self.settings.exchange, ensure=False)
                        if self.settings.exchange else channel.default_exchange)
            while not self.stop_event.is_set() and not channel.is_closed:
                if len(pending) < self.settings.window:
                    task = asyncio.create_task(self._publish_one(exchange, self.ids.next()))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await asyncio.sleep(1.0 / self.settings.rate)
            if pending:
                await asyncio.wait(pending, timeout=self.settings.confirm_timeout + 1)
        finally:
            try:
                await asyncio.wait_for(conn.close(), 3)
            except Exception:
                pass

    async def _publish_one(self, exchange: Any, ident: int) -> None:
        record = self.history.record
        common = {"id": ident, "client": self.client, "broker": self.broker}
        record("publish", type="invoke", **common)
        message = aio_pika.Message(str(ident).encode(), message_id=str(ident),
                                   delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                   headers=publish_headers(self.settings))
        try:
            await asyncio.wait_for(
                exchange.publish(message, routing_key=self.settings.queue, mandatory=True),
                self.settings.confirm_timeout)
        except TimeoutError:
            record("publish", type="info", error="confirm timeout", **common)
        except aio_pika.exceptions.PublishError:
            record("publish", type="fail", error="returned", **common)
        except aio_pika.exceptions.DeliveryError:
            record("publish", type="fail", error="nack", **common)
        except Exception as exc:   # closed channel / connection, reset socket
            record("publish", type="fail", error=repr(exc)[:200], **common)
        else:
            record("publish", type="ok", **common)


class AioConsumer:
    """Consumes ``settings.queue`` on broker ``url``, records and acks every delivery, until
    ``stop``; ``run()`` is the coroutine. ``last_delivery``: monotonic s of the latest one;
    ``position``: where a stream consumer resumes (``settings.stream``)."""

    def __init__(self, name: str, broker: str, url: str, settings: ClientSettings,
                 history: History, stop: threading.Event, drain: bool = False) -> None:
        self.client, self.broker, self.url = name, broker, url
        self.settings, self.history, self.stop_event, self.drain = settings, history, stop, drain
        self.last_delivery = time.monotonic()
        self.deliveries = 0
        self.position = StreamPosition()

    async def run(self) -> None:
        """Consume until ``stop``; bounded by max_connects connection attempts."""
        await _reconnecting(self, self._session)

    async def _session(self) -> None:
        conn = await _connect(self.url, self.settings)
        self.history.record("client", client=self.client, event="connected")
        try:
            channel = await conn.channel()
            await channel.set_qos(prefetch_count=self.settings.prefetch)
            queue = await channel.get_queue(self.settings.queue, ensure=False)
            await queue.consume(self._on_message, arguments=(
                self.position.arguments() if self.settings.stream else None))
            while not self.stop_event.is_set() and not channel.is_closed and not conn.is_closed:
                await asyncio.sleep(0.2)
        finally:
            try:
                await asyncio.wait_for(conn.close(), 3)
            except Exception:
                pass

    async def _on_message(self, message: Any) -> None:
        self.last_delivery = time.monotonic()
        self.deliveries += 1
        offset = self.position.read(message.headers) if self.settings.stream else None
        record_delivery(self.history, self.client, self.broker, message.body,
                        bool(message.redelivered), self.drain, offset)
        if self.settings.ack_delay > 0 and not self.drain:
            await asyncio.sleep(self.settings.ack_delay)
        await message.ack()
