"""A blocking, thread-safe facade over ``clients.aio`` for scripts and Spark executors.

Owns one event loop thread per ``BlockingConnection`` (``anyio.from_thread.start_blocking_portal``,
asyncio by default, trio with ``backend="trio"``); every call is run there with ``portal.call``
and blocks the calling thread until it returns. Same semantics, arguments, units and errors as
the async API (``clients.aio`` / ``clients.channel``). Any thread may call; calls are serialised
per channel by the channel itself. Usage::

    with BlockingConnection(["amqp://127.0.0.1:5672/"]) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare("q")
        ch.basic_publish(b"hi", routing_key="q")
        msg = ch.basic_get("q"); ch.ack(msg)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from anyio.from_thread import start_blocking_portal

from .aio import connect
from .channel import Channel, Confirmation, Consumer
from .message import Message, Properties
from .uri import ConnectionParams

__all__ = ["BlockingConnection", "BlockingChannel", "BlockingConsumer"]

#: Channel methods offered blocking, unchanged (see ``clients.channel.Channel``).
_FORWARDED = frozenset({
    "exchange_declare", "exchange_delete", "exchange_bind", "exchange_unbind", "queue_declare",
    "queue_bind", "queue_unbind", "queue_purge", "queue_delete", "basic_qos", "basic_cancel",
    "basic_get", "basic_ack", "basic_nack", "basic_reject", "basic_recover", "basic_publish",
    "publish", "publish_nowait", "wait_for_confirms", "wait_confirmations", "confirm_select",
    "tx_select", "tx_commit", "tx_rollback", "close",
})


class BlockingConnection:
    """Connect (blocking) to the first answering broker of ``uris``; keyword arguments are those
    of ``clients.aio.connect`` (``reconnect``, ``operation_timeout`` seconds, ...). ``backend``:
    "asyncio" or "trio". Raises ``NoBrokerAvailable``/``ValueError`` like ``connect``. Close it
    with ``close()`` or use it as a context manager."""

    def __init__(self, uris: str | ConnectionParams | Sequence[str | ConnectionParams], *,
                 backend: str = "asyncio", **connect_kwargs: Any) -> None:
        self._portal_cm = start_blocking_portal(backend)
        self.portal = self._portal_cm.__enter__()
        try:
            self._conn_cm = self.portal.wrap_async_context_manager(connect(uris, **connect_kwargs))
            self.connection = self._conn_cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise
        self._closed = False

    @property
    def address(self) -> str:
        """``host:port`` of the broker currently connected."""
        return self.connection.address

    @property
    def blocked(self) -> str | None:
        """The broker's Connection.Blocked reason, None when not blocked."""
        return self.connection.blocked

    def channel(self, *, confirm: bool = False, prefetch: int | None = None) -> BlockingChannel:
        """Open a channel (see ``Connection.channel``)."""
        return BlockingChannel(self, self.portal.call(
            lambda: self.connection.channel(confirm=confirm, prefetch=prefetch)))

    def add_listener(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Like ``Connection.add_listener``; ``callback`` runs in the event loop thread."""
        return self.portal.call(self.connection.add_listener, callback)

    def close(self) -> None:
        """Close the connection (Connection.Close 200) and stop the event loop thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingChannel:
    """Blocking twin of ``clients.channel.Channel``: every method of ``_FORWARDED`` takes the
    same arguments and raises the same errors, but blocks. Extra: ``consume`` (an iterator),
    ``ack``/``nack``/``reject`` of a received ``Message``, ``publish_batch`` and
    ``publish_many``. As in the async API, publishes lost with a dropped connection are never
    re-sent nor reported as confirmed, also with ``reconnect=True`` (``ConfirmsLost``)."""

    def __init__(self, owner: BlockingConnection, channel: Channel) -> None:
        self._owner = owner
        self.channel = channel

    def __getattr__(self, name: str) -> Any:
        if name not in _FORWARDED:
            raise AttributeError(name)
        method = getattr(self.channel, name)
        portal = self._owner.portal

        def call(*args: Any, **kwargs: Any) -> Any:
            return portal.call(lambda: method(*args, **kwargs))

        call.__doc__ = method.__doc__
        call.__name__ = name
        return call

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | _FORWARDED)

    @property
    def is_open(self) -> bool:
        """True until closed by us or the broker."""
        return self.channel.is_open

    def ack(self, message: Message, multiple: bool = False) -> bool:
        """Basic.Ack ``message``; False (nothing sent) if it came before a reconnect."""
        return self._owner.portal.call(message.ack, multiple)

    def nack(self, message: Message, requeue: bool = True, multiple: bool = False) -> bool:
        """Basic.Nack ``message``; False if stale."""
        return self._owner.portal.call(message.nack, requeue, multiple)

    def reject(self, message: Message, requeue: bool = True) -> bool:
        """Basic.Reject ``message``; False if stale."""
        return self._owner.portal.call(message.reject, requeue)

    def consume(self, queue: str, **kwargs: Any) -> BlockingConsumer:
        """Basic.Consume (keywords of ``Channel.basic_consume``); returns an iterator."""
        return BlockingConsumer(self, self._owner.portal.call(
            lambda: self.channel.basic_consume(queue, **kwargs)))

    def publish_batch(self, messages: Iterable[Any], exchange: str = "", routing_key: str = "",
                      properties: Properties | None = None, *,
                      mandatory: bool = False) -> list[Confirmation]:
        """``Channel.publish_batch`` in one trip to the event loop thread: write every message
        (items: a body, ``(body, routing_key)`` or ``(body, routing_key, props)`` with
        ``props`` a ``Properties``, encoded bytes or None), pausing at ``high_water`` bytes, and
        return their ``Confirmation`` objects (empty outside confirm mode) without waiting for
        them; hand them to ``wait_confirmations``. ``messages`` is read in the calling thread
        first. Raises ``ChannelClosed``, ``ConfirmsLost``/``ConnectionClosed`` (connection lost
        while writing: re-send the whole batch), ``TimeoutError``."""
        items = messages if isinstance(messages, list) else list(messages)
        return self._owner.portal.call(lambda: self.channel.publish_batch(
            items, exchange, routing_key, properties, mandatory=mandatory))

    def publish_many(self, bodies: Iterable[bytes | str], exchange: str = "",
                     routing_key: str = "", properties: Properties | None = None, *,
                     mandatory: bool = False, batch: int = 1000,
                     timeout: float | None = None) -> int:
        """Publish every body (all with ``routing_key`` and ``properties``), ``batch`` per trip
        to the event loop thread; in confirm mode wait for the confirms of each batch
        (``timeout`` seconds each, default ``operation_timeout``) before sending the next.
        Returns the count published. Raises ``ConfirmsLost`` (a ``ConnectionClosed``) when the
        connection drops before a batch is confirmed, even if it reconnects: ``unconfirmed`` of
        that batch may or may not have arrived, the batches before it were confirmed and later
        ones were not sent; ``PublishNacked``, ``MessageReturned`` (mandatory, unroutable),
        ``ChannelClosed``, ``ConnectionClosed``, ``TimeoutError``."""
        ch = self.channel
        count = 0

        async def send(chunk: list) -> None:
            confirmations = await ch.publish_batch(chunk, exchange, routing_key, properties,
                                                   mandatory=mandatory)
            await ch.wait_confirmations(confirmations, timeout)

        chunk: list = []
        for body in bodies:
            chunk.append(body)
            if len(chunk) >= batch:
                self._owner.portal.call(send, chunk)
                count += len(chunk)
                chunk = []
        if chunk:
            self._owner.portal.call(send, chunk)
            count += len(chunk)
        return count

    def __enter__(self) -> BlockingChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self._owner.portal.call(self.channel.close)


class BlockingConsumer:
    """Iterator over a consumer's messages (``for msg in consumer``); ``get(timeout)`` returns
    the next message or None after ``timeout`` seconds; ``cancel()`` ends it."""

    def __init__(self, owner: BlockingChannel, consumer: Consumer) -> None:
        self._owner = owner
        self.consumer = consumer

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            return self._owner._owner.portal.call(self.consumer.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def get(self, timeout: float | None = None) -> Message | None:
        """Next message within ``timeout`` seconds, else None."""
        return self._owner._owner.portal.call(self.consumer.get, timeout)

    def cancel(self) -> None:
        """Basic.Cancel this consumer."""
        self._owner._owner.portal.call(self.consumer.cancel)

    def __enter__(self) -> BlockingConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()
