"""Reliable pub/sub: ``put(topic, body)``, ``get(topic)``, ``subscribe(topic)``,
``unsubscribe(topic)`` over one topic exchange and one durable queue per subscriber and topic.

Owns the exactly-once publishing protocol on the client side. Every put gets a message id (the
``message_id`` property, also sent as the ``x-deduplication-header`` header that RabbitMQ's
message-deduplication plugin reads); before the first send the put is written to a small SQLite
file (the in-flight log, WAL mode: it survives the process being killed), and it is removed only
when the broker confirmed the publish (publisher confirms). A retry after a lost confirm, or after
the process was killed between send and confirm (``resume()``, run on open), publishes the same id
again; queues are declared with ``x-message-deduplication: true`` so a broker with publish dedup
drops the second copy. Without broker dedup the guarantee is at-least-once (no loss, maybe a
duplicate). Each request is safe to retry after a lost reply: put by its message id, subscribe and
unsubscribe because declare/bind/delete are idempotent, get because the message is acked only after
it reached the client (a lost Get-Ok leaves it unacked, so the broker requeues it).

Layout: exchange ``exchange`` (topic, durable); subscriber ``client_id`` on topic pattern T owns the
durable queue ``sub.<client_id>.<T>`` (escaped, see ``queue_name``) bound with routing key T (``*``/``#`` wildcards work).
Messages put before a subscription exists are not kept for it (pub/sub semantics).
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from .aio import Connection, connect
from .channel import Channel, Consumer
from .errors import ChannelClosed, ConnectionClosed, PublishNacked
from .message import Message, Properties
from .uri import ConnectionParams

__all__ = ["ReliableClient", "Subscription", "InflightLog", "DEDUP_HEADER", "QUEUE_ARGUMENTS"]

log = logging.getLogger(__name__)

DEDUP_HEADER = "x-deduplication-header"
QUEUE_ARGUMENTS = {"x-message-deduplication": True}


def _escape(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.:-]",
                  lambda m: "".join(f"_{b:02x}" for b in m.group().encode()), text)


class InflightLog:
    """The SQLite in-flight log: puts sent but not yet confirmed.

    Schema (version 1, ``PRAGMA user_version``): ``inflight(message_id TEXT PRIMARY KEY, exchange
    TEXT, routing_key TEXT, body BLOB, created REAL)`` (``created``: seconds since the epoch).
    WAL journal with ``synchronous=NORMAL``: a committed row survives the process being killed
    (not necessarily a power cut). Raises ``sqlite3.Error`` on I/O problems.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS inflight (message_id TEXT PRIMARY KEY, "
                         "exchange TEXT NOT NULL, routing_key TEXT NOT NULL, body BLOB NOT NULL, "
                         "created REAL NOT NULL)")
        self._db.execute("PRAGMA user_version=1")

    def add(self, message_id: str, exchange: str, routing_key: str, body: bytes) -> None:
        """Record a put before its first send (a second add of the same id is ignored)."""
        self._db.execute("INSERT OR IGNORE INTO inflight VALUES (?, ?, ?, ?, ?)",
                         (message_id, exchange, routing_key, body, time.time()))

    def remove(self, message_id: str) -> None:
        """Forget a confirmed put."""
        self._db.execute("DELETE FROM inflight WHERE message_id = ?", (message_id,))

    def pending(self) -> list[tuple[str, str, str, bytes]]:
        """Every unconfirmed put as (message_id, exchange, routing_key, body), oldest first."""
        return [(r[0], r[1], r[2], bytes(r[3])) for r in self._db.execute(
            "SELECT message_id, exchange, routing_key, body FROM inflight ORDER BY created")]

    def close(self) -> None:
        """Close the database."""
        self._db.close()


class Subscription:
    """Iterate a subscription (``async for message in sub``): each message is acked when the
    next one is asked for, or when the ``async with`` block / ``close()`` ends without an error
    (an error nacks it back to the queue). Survives reconnects (the consumer is recovered)."""

    def __init__(self, topic: str, queue: str, consumer: Consumer) -> None:
        self.topic = topic
        self.queue = queue
        self.consumer = consumer
        self._last: Message | None = None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        await self._settle(True)
        msg = await self.consumer.__anext__()
        self._last = msg
        return msg

    async def next(self, timeout: float | None = None) -> Message | None:
        """The next message within ``timeout`` seconds, else None (acks the previous one)."""
        await self._settle(True)
        msg = await self.consumer.get(timeout)
        self._last = msg
        return msg

    async def _settle(self, ok: bool) -> None:
        last, self._last = self._last, None
        if last is not None:
            await (last.ack() if ok else last.nack(requeue=True))

    async def close(self, ok: bool = True) -> None:
        """Ack (``ok``) or requeue the last message and cancel the consumer."""
        try:
            await self._settle(ok)
        finally:
            await self.consumer.cancel()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, exc_type: type | None, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close(exc_type is None)


class ReliableClient:
    """put/get/subscribe/unsubscribe with exactly-once publishing (see the module docstring).

    ``uris``: broker URIs (failover); ``client_id``: this subscriber's name (queue names derive
    from it); ``state_path``: the SQLite in-flight log file; ``exchange``: the topic exchange;
    ``put_timeout``: seconds a put keeps retrying before raising; other keywords go to
    ``clients.aio.connect``. Use as ``async with ReliableClient(...) as client``; opening
    resumes the puts left in the log. Raises ``NoBrokerAvailable`` when no broker answers.
    """

    #: Test hook: called after a put's frames were written, before its confirm is awaited.
    _after_send: Callable[[], None] | None = None

    def __init__(self, uris: str | ConnectionParams | Sequence[str | ConnectionParams], *,
                 client_id: str, state_path: str | Path, exchange: str = "reliable.topics",
                 put_timeout: float = 60.0, prefetch: int = 100, **connect_kwargs: Any) -> None:
        self.uris = uris
        self.client_id = client_id
        self.exchange = exchange
        self.put_timeout = put_timeout
        self.prefetch = prefetch
        self.log = InflightLog(state_path)
        self._connect_kwargs = connect_kwargs
        self._stack = AsyncExitStack()
        self.connection: Connection
        self._pub: Channel
        self._get: Channel
        self._subs: dict[str, Subscription] = {}
        self._declared: set[str] = set()
        self.resumed = 0

    async def __aenter__(self) -> ReliableClient:
        try:
            self.connection = await self._stack.enter_async_context(
                connect(self.uris, **self._connect_kwargs))
            self._pub = await self.connection.channel(confirm=True)
            self._get = await self.connection.channel()
            await self._pub.exchange_declare(self.exchange, "topic", durable=True)
            self.resumed = await self.resume()
        except BaseException:
            await self._stack.aclose()
            self.log.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stack.aclose()
        finally:
            self.log.close()

    def queue_name(self, topic: str) -> str:
        """This subscriber's queue for ``topic``: ``sub.<client_id>.<topic>`` with every
        character outside ``[A-Za-z0-9.:-]`` written as ``_xx`` (hex), since AMQP's queue-name
        domain has no ``*``/``#``; names over 255 bytes end in a SHA-1 instead."""
        name = f"sub.{_escape(self.client_id)}.{_escape(topic)}"
        if len(name) > 255:
            name = name[:200] + "." + hashlib.sha1(name.encode()).hexdigest()
        return name

    # ------------------------------------------------------------------------------ put
    async def put(self, topic: str, body: bytes | str, *, message_id: str | None = None,
                  properties: Properties | None = None) -> str:
        """Publish ``body`` to ``topic`` exactly once (see module docstring); returns the
        message id (a new UUID unless given: pass your own to make a whole put idempotent
        across your own retries). Retries on connection loss, nack and timeout for
        ``put_timeout`` seconds, then raises the last error (``ConnectionClosed``,
        ``PublishNacked``, ``TimeoutError``); ``ChannelClosed`` 404 if the exchange vanished.
        A put whose confirm was lost (connection dropped, even with a reconnect after) stays in
        the in-flight log and is re-sent with the same message id until confirmed; when this
        raises it is still in the log, and the next ``resume()`` (on open) finishes it."""
        if isinstance(body, str):
            body = body.encode()
        mid = message_id or uuid.uuid4().hex
        self.log.add(mid, self.exchange, topic, body)
        await self._publish_until_confirmed(mid, self.exchange, topic, body, properties)
        self.log.remove(mid)
        return mid

    async def resume(self) -> int:
        """Finish every put left in the in-flight log (same message ids); returns how many."""
        rows = self.log.pending()
        for mid, exchange, topic, body in rows:
            log.info("resuming put %s to %s/%s", mid, exchange, topic)
            await self._publish_until_confirmed(mid, exchange, topic, body, None)
            self.log.remove(mid)
        return len(rows)

    async def _publish_until_confirmed(self, mid: str, exchange: str, topic: str, body: bytes,
                                       properties: Properties | None) -> None:
        props = Properties() if properties is None else properties
        props.message_id = mid
        props.delivery_mode = props.delivery_mode or 2
        props.headers = {**(props.headers or {}), DEDUP_HEADER: mid}
        deadline = anyio.current_time() + self.put_timeout
        delay = 0.05
        while True:
            remaining = deadline - anyio.current_time()
            try:
                ch = self._pub
                if not ch.is_open:
                    self._pub = ch = await self.connection.channel(confirm=True)
                (confirmation,) = await ch.publish_batch([(body, topic, props)], exchange)
                if self._after_send is not None:
                    self._after_send()
                await confirmation.wait(max(remaining, 0.01))
                return
            except (ConnectionClosed, PublishNacked, TimeoutError) as exc:
                if anyio.current_time() >= deadline:
                    raise
                log.info("put %s not confirmed (%s); retrying with the same id", mid, exc)
            except ChannelClosed as exc:
                if exc.reply_code == 404 or anyio.current_time() >= deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------------ subscribe
    async def _declare(self, topic: str) -> str:
        queue = self.queue_name(topic)
        if queue not in self._declared:
            await self._get.queue_declare(queue, durable=True, arguments=dict(QUEUE_ARGUMENTS))
            await self._get.queue_bind(queue, self.exchange, topic)
            self._declared.add(queue)
        return queue

    async def subscribe(self, topic: str) -> Subscription:
        """Create (idempotently) this subscriber's durable queue for ``topic`` and consume it;
        returns the ``Subscription`` to iterate. Raises ``ChannelClosed`` (e.g. 406 when the
        queue exists with other arguments), ``ConnectionClosed``."""
        queue = await self._declare(topic)
        sub = self._subs.get(topic)
        if sub is not None and sub.consumer.channel.is_open and sub.consumer.tag in \
                sub.consumer.channel.consumers:
            return sub
        ch = await self.connection.channel(prefetch=self.prefetch)
        sub = Subscription(topic, queue, await ch.basic_consume(queue))
        self._subs[topic] = sub
        return sub

    async def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` and delete this subscriber's queue for it (messages in it are
        dropped); idempotent."""
        sub = self._subs.pop(topic, None)
        if sub is not None:
            await sub.close()
            await sub.consumer.channel.close()
        queue = self.queue_name(topic)
        await self._get.queue_delete(queue)
        self._declared.discard(queue)

    async def get(self, topic: str, *, ack: bool = True) -> Message | None:
        """The next message of this subscriber's queue for ``topic`` (declared on first use),
        or None when it is empty. The message is acked only once it fully arrived here; with
        ``ack=False`` the caller acks it (``await message.ack()``) after handling it.
        Raises ``ChannelClosed``, ``ConnectionClosed``, ``TimeoutError``."""
        queue = await self._declare(topic)
        if not self._get.is_open:
            self._get = await self.connection.channel()
        msg = await self._get.basic_get(queue)
        if msg is not None and ack:
            await msg.ack()
        return msg
