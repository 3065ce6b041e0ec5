"""anyio transport and the public async API: ``connect(uris)`` -> ``Connection`` -> ``Channel``.

Owns the socket (TCP or TLS via ``anyio.connect_tcp``), one reader task (reads up to 256 KiB,
hands the bytes to the sans-IO ``ClientProtocol``, dispatches its events), one writer task (writes
everything queued in one ``send``), heartbeats (§4.2.7: a heartbeat when nothing was sent for half
the interval; the broker is declared dead after two silent intervals), failover across a list of
addresses, reconnect with exponential backoff and jitter, and recovery of the topology this
connection declared (exchanges, queues, bindings, then each channel's qos/confirm/tx mode and
consumers), as pika's and aio-pika's robust connections do. Runs on asyncio and trio.

Usage::

    async with connect(["amqp://127.0.0.1:5672/", "amqp://127.0.0.1:5673/"]) as conn:
        ch = await conn.channel(confirm=True)
        await ch.queue_declare("q")
        await ch.basic_publish(b"hi", routing_key="q")

Must not import ``amqp_broker.core`` / ``amqp_broker.server``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup

from amqp_broker.protocol.errors import ConnectionException

from .channel import Channel
from .errors import ConnectionClosed, NoBrokerAvailable
from .message import Message
from .protocol import Blocked, ChannelMethod, ClientProtocol, Closed, Confirm, Opened, Unblocked
from .topology import Topology
from .uri import ConnectionParams, parse_uri

__all__ = ["connect", "Connection", "Disconnected", "Reconnected", "Blocked", "Unblocked",
           "OPEN_ATTEMPTS"]

log = logging.getLogger(__name__)

#: Connections ``Connection.channel()`` tries its Channel.Open on (with ``reconnect``) when the
#: connection drops before the Open-Ok: bounded, as a connection that drops at every open is
#: better reported than retried forever.
OPEN_ATTEMPTS = 3


class Disconnected:
    """Event: the connection to ``address`` was lost (``error``: why); reconnecting follows when
    enabled."""

    __slots__ = ("address", "error")

    def __init__(self, address: str, error: BaseException) -> None:
        self.address = address
        self.error = error


class Reconnected:
    """Event: connected again to ``address`` and the recorded topology was replayed."""

    __slots__ = ("address",)

    def __init__(self, address: str) -> None:
        self.address = address


class Connection:
    """A robust connection to one of several brokers (made by ``connect``).

    ``operation_timeout``: seconds any request waits for its reply or for a reconnect
    (``TimeoutError`` / ``ConnectionClosed``). ``high_water``: bytes queued for the socket before
    ``basic_publish`` waits for the writer. ``server_properties``, ``address`` (current
    ``host:port``), ``blocked`` (Connection.Blocked reason or None), ``epoch`` (number of
    successful connects) describe the live connection.
    """

    def __init__(self, params: list[ConnectionParams], *, reconnect: bool = True,
                 operation_timeout: float = 30.0, backoff_initial: float = 0.1,
                 backoff_max: float = 5.0, reconnect_timeout: float | None = None,
                 client_properties: dict | None = None, high_water: int = 1 << 20) -> None:
        if not params:
            raise ValueError("at least one broker address is needed")
        self._params = params
        self._index = 0
        self.reconnect = reconnect
        self.operation_timeout = operation_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.reconnect_timeout = reconnect_timeout
        self.high_water = high_water
        self._client_properties = client_properties
        self._proto: ClientProtocol = ClientProtocol()
        self._stream: ByteStream | None = None
        self.epoch = 0
        self.ready = False
        self._ready_event = anyio.Event()
        self._closing = False
        self._closed_event = anyio.Event()
        self._lost_reason: BaseException | None = None
        self._channels: dict[int, Channel] = {}
        self._all_channels: list[Channel] = []
        self._topology = Topology()
        self._wake = anyio.Event()
        self._drained = anyio.Event()  # set by the writer when idle and when a connection ends
        self._sending = False  # the writer holds bytes taken from the buffer, not yet sent
        self._listeners: list[Callable[[Any], None]] = []
        self._conn_scope: anyio.CancelScope | None = None
        self._last_sent = 0.0
        self._last_received = 0.0
        self.server_properties: dict = {}
        self.address = ""
        self.blocked: str | None = None

    # -------------------------------------------------------------------------- events
    def add_listener(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Call ``callback(event)`` (synchronously, in the reader task: keep it short) for each
        ``Blocked``, ``Unblocked``, ``Disconnected``, ``Reconnected`` and returned ``Message``
        (Basic.Return, ``kind == "return"``). Returns a function that removes the listener."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    @asynccontextmanager
    async def events(self, max_buffer: int = 1000) -> AsyncIterator[Any]:
        """``async with conn.events() as stream: async for event in stream`` (see
        ``add_listener``); events beyond ``max_buffer`` unread ones are dropped."""
        send, recv = anyio.create_memory_object_stream[Any](max_buffer)

        def push(event: Any) -> None:
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                log.warning("event stream full: %r dropped", event)
            except anyio.ClosedResourceError:
                pass

        remove = self.add_listener(push)
        try:
            async with recv:
                yield recv
        finally:
            remove()
            send.close()

    def _notify(self, event: Any) -> None:
        for callback in list(self._listeners):
            try:
                callback(event)
            except Exception:
                log.exception("event listener failed on %r", event)

    # ---------------------------------------------------------------------- public API
    async def channel(self, *, confirm: bool = False, prefetch: int | None = None) -> Channel:
        """Open a channel; ``confirm`` puts it in publisher-confirm mode, ``prefetch`` sets
        Basic.Qos prefetch_count. Raises ``ConnectionClosed``, ``TimeoutError``.

        A connection lost while Channel.Open is unanswered fails the open at once with that
        loss's ``ConnectionClosed`` (not after ``operation_timeout``); with ``reconnect`` the
        open is tried again on the next connection (at most ``OPEN_ATTEMPTS`` connections)."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            await self._wait_ready()
            ch = Channel(self)
            try:
                await ch._open(fresh=True)
            except ConnectionClosed:
                if not self.reconnect or self._closing or attempt == OPEN_ATTEMPTS:
                    raise
                continue
            break
        self._all_channels.append(ch)
        if prefetch is not None:
            await ch.basic_qos(prefetch)
        if confirm:
            await ch.confirm_select()
        return ch

    async def drain(self) -> None:
        """Wait until the writer has handed every queued byte to the socket (bounded by
        ``operation_timeout``; ``TimeoutError``). Raises ``ConnectionClosed`` if the connection
        is lost first, also when it reconnects meanwhile: bytes queued on a dropped connection
        are gone, never re-sent. Any number of tasks may drain at once."""
        epoch = self.epoch
        with anyio.fail_after(self.operation_timeout):
            while self._proto.buffered or self._sending:
                if not self.ready or self.epoch != epoch:
                    raise self._lost_reason or ConnectionClosed(0, "connection lost while "
                                                                   "draining")
                if self._drained.is_set():
                    self._drained = anyio.Event()
                self._wake.set()
                await self._drained.wait()
                if not self.ready or self.epoch != epoch:
                    raise self._lost_reason or ConnectionClosed(0, "connection lost while "
                                                                   "draining")

    async def flush(self) -> None:
        """Have what was queued (``publish_nowait``) written soon: wait for the writer
        (``drain``) only while more than ``high_water`` bytes are queued, else wake it and
        return at once (the flow control ``basic_publish`` applies inline). For callers
        outside this package, e.g. the shovel's pipeline. Raises what ``drain`` raises."""
        if self.ready and self._proto.buffered >= self.high_water:
            await self.drain()
        else:
            self._kick()

    async def close(self, wait: float = 5.0) -> None:
        """Connection.Close (200) and wait (at most ``wait`` seconds) for Close-Ok; no reconnect
        after."""
        if self._closing:
            return
        self._closing = True
        if self.ready:
            self._proto.close()
            self._kick()
            with anyio.move_on_after(wait):
                await self._closed_event.wait()
        if self._conn_scope is not None:
            self._conn_scope.cancel()
        final = ConnectionClosed(200, "connection closed by client")
        for ch in list(self._all_channels):
            ch._connection_lost(final, True)
        self._ready_event.set()

    # ---------------------------------------------------------------------- internals
    def _kick(self) -> None:
        self._wake.set()

    def _send_method(self, channel: int, method: Any) -> None:
        self._proto.send_method(channel, method)
        self._wake.set()

    def _send_raw(self, data: bytes) -> None:
        self._proto._write(data)
        self._wake.set()

    def _channel_gone(self, ch: Channel) -> None:
        if self._channels.get(ch.number) is ch:
            del self._channels[ch.number]
            self._proto.channel_gone(ch.number)
        if ch in self._all_channels:
            self._all_channels.remove(ch)

    def _fail_opening(self, reason: BaseException) -> None:
        """Fail the Channel.Open of every channel still waiting for its Open-Ok on the lost
        connection: such a channel is not in ``_all_channels`` yet, so nothing else wakes it
        (its open then waited ``operation_timeout`` on a dead socket). Never recovered: the
        caller of ``channel()`` opens a new one."""
        for ch in list(self._channels.values()):
            if ch not in self._all_channels:
                ch._connection_lost(reason, True)

    async def _wait_ready(self) -> None:
        if self.ready:
            return
        if self._closing or not self.reconnect:
            raise self._lost_reason or ConnectionClosed(0, "connection is closed")
        with anyio.move_on_after(self.operation_timeout):
            while not self.ready and not self._closing:
                await self._ready_event.wait()
        if not self.ready:
            raise ConnectionClosed(0, f"not connected within {self.operation_timeout} s (last "
                                      f"error: {self._lost_reason})")

    async def _open_transport(self, params: ConnectionParams) -> tuple[ByteStream, ClientProtocol]:
        proto = ClientProtocol(params.username, params.password, params.vhost, params.heartbeat,
                               params.frame_max, params.channel_max, self._client_properties)
        with anyio.fail_after(params.connection_timeout):
            stream: ByteStream = await anyio.connect_tcp(
                params.host, params.port, ssl_context=params.ssl_context(),
                # anyio's overloads want a str tls_hostname when ssl_context may be None; the
                # implementation takes None (then the host name is used)
                tls_hostname=params.server_name,  # type: ignore[arg-type]
                tls_standard_compatible=False) if params.tls \
                else await anyio.connect_tcp(params.host, params.port)
            try:
                proto.start()
                await stream.send(proto.data_to_send())
                while True:
                    try:
                        data = await stream.receive(65536)
                    except anyio.EndOfStream:
                        raise ConnectionClosed(0, "broker closed the socket during the "
                                                  "handshake") from None
                    events = proto.receive_data(data)
                    out = proto.data_to_send()
                    if out:
                        await stream.send(out)
                    for event in events:
                        if isinstance(event, Closed):
                            raise ConnectionClosed(event.reply_code, event.reply_text,
                                                   event.class_id, event.method_id)
                        if isinstance(event, Opened):
                            self.server_properties = event.server_properties
                            return stream, proto
            except BaseException:
                await anyio.aclose_forcefully(stream)
                raise

    async def _connect_any(self, rounds: int | None, deadline: float | None) -> tuple:
        attempt = 0
        n = len(self._params)
        while True:
            errors: list[tuple[str, BaseException]] = []
            for _ in range(n):
                params = self._params[self._index]
                try:
                    stream, proto = await self._open_transport(params)
                except (OSError, TimeoutError, ConnectionClosed, ConnectionException,
                        anyio.BrokenResourceError, anyio.EndOfStream) as exc:
                    log.info("connect to %s failed: %r", params.address, exc)
                    errors.append((params.address, exc))
                    self._index = (self._index + 1) % n
                    continue
                self.address = params.address
                return stream, proto
            attempt += 1
            if (rounds is not None and attempt >= rounds) or self._closing:
                raise NoBrokerAvailable(errors)
            if deadline is not None and anyio.current_time() >= deadline:
                raise NoBrokerAvailable(errors)
            delay = min(self.backoff_max, self.backoff_initial * (2 ** min(attempt - 1, 20)))
            await anyio.sleep(random.uniform(delay / 2, delay))

    async def _start(self, tg: TaskGroup, attempts: int) -> None:
        stream, proto = await self._connect_any(attempts, None)
        await tg.start(self._supervise, stream, proto)

    async def _supervise(self, stream: ByteStream, proto: ClientProtocol, *,
                         task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        first = True
        while True:
            await self._serve(stream, proto, recover=not first,
                              task_status=task_status if first else anyio.TASK_STATUS_IGNORED)
            first = False
            reason = self._lost_reason or ConnectionClosed(0, "connection lost")
            self.ready = False
            self._sending = False
            self._drained.set()  # wake drain() callers: they see the loss and raise
            self._ready_event = anyio.Event()
            final = self._closing or not self.reconnect
            for ch in list(self._all_channels):
                ch._connection_lost(reason, final)
            self._fail_opening(reason)
            if final:
                self._closed_event.set()
                self._ready_event.set()
                return
            self._notify(Disconnected(self.address, reason))
            log.warning("connection to %s lost (%s); reconnecting", self.address, reason)
            self._index = (self._index + 1) % len(self._params)
            deadline = (None if self.reconnect_timeout is None
                        else anyio.current_time() + self.reconnect_timeout)
            try:
                stream, proto = await self._connect_any(None, deadline)
            except NoBrokerAvailable as exc:
                self._lost_reason = exc
                self.reconnect = False
                for ch in list(self._all_channels):
                    ch._connection_lost(exc, True)
                self._ready_event.set()
                return

    async def _serve(self, stream: ByteStream, proto: ClientProtocol, recover: bool,
                     task_status: Any) -> None:
        self._stream = stream
        self._proto = proto
        self._channels = {}
        self._lost_reason = None
        self.blocked = None
        self.epoch += 1
        now = anyio.current_time()
        self._last_sent = self._last_received = now
        try:
            async with anyio.create_task_group() as tg:
                self._conn_scope = tg.cancel_scope
                tg.start_soon(self._reader, stream, proto)
                tg.start_soon(self._writer, stream, proto)
                if proto.heartbeat:
                    tg.start_soon(self._heartbeat, proto)
                if recover:
                    tg.start_soon(self._recover)
                else:
                    self._set_ready()
                task_status.started()
        finally:
            self._conn_scope = None
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(stream)

    def _set_ready(self) -> None:
        self.ready = True
        self._ready_event.set()

    def _lost(self, reason: BaseException) -> None:
        if self._lost_reason is None:
            self._lost_reason = reason
        self.ready = False
        if self._conn_scope is not None:
            self._conn_scope.cancel()

    async def _recover(self) -> None:
        try:
            for ch in list(self._all_channels):
                await ch._recover()
            tmp = Channel(self)
            await tmp._open()
            await self._topology.replay(tmp)
            for ch in list(self._all_channels):
                await ch._recover_consumers()
        except (ConnectionClosed, TimeoutError) as exc:
            self._lost(exc if isinstance(exc, ConnectionClosed)
                       else ConnectionClosed(0, f"recovery timed out: {exc!r}"))
            return
        except Exception as exc:  # a bug: stop reconnecting rather than loop on it
            log.exception("topology recovery failed")
            self.reconnect = False
            self._lost(ConnectionClosed(0, f"topology recovery failed: {exc!r}"))
            return
        log.info("reconnected to %s; topology recovered", self.address)
        self._set_ready()
        self._notify(Reconnected(self.address))

    async def _reader(self, stream: ByteStream, proto: ClientProtocol) -> None:
        channels = self._channels
        while True:
            try:
                data = await stream.receive(262144)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
                self._lost(ConnectionClosed(0, f"connection lost: {exc!r}"))
                return
            self._last_received = anyio.current_time()
            try:
                events = proto.receive_data(data)
            except ConnectionException as exc:
                self._wake.set()
                await anyio.sleep(0.05)  # let the writer send our Connection.Close
                self._lost(ConnectionClosed(exc.reply_code, exc.reply_text, exc.class_id,
                                            exc.method_id))
                return
            for event in events:
                cls = event.__class__
                if cls is Message:
                    ch = channels.get(event.channel_id)
                    if ch is not None:
                        ch._on_message(event)
                elif cls is Confirm:
                    ch = channels.get(event.channel)
                    if ch is not None:
                        ch._on_confirm(event.delivery_tag, event.multiple, event.ack)
                elif cls is ChannelMethod:
                    ch = channels.get(event.channel)
                    if ch is not None:
                        ch._on_method(event.method)
                elif cls is Closed:
                    self._closed_event.set()
                    self._wake.set()
                    await anyio.sleep(0)
                    self._lost(ConnectionClosed(event.reply_code, event.reply_text,
                                                event.class_id, event.method_id))
                    return
                elif cls is Blocked:
                    self.blocked = event.reason or "blocked"
                    self._notify(event)
                elif cls is Unblocked:
                    self.blocked = None
                    self._notify(event)
            if proto.buffered:
                self._wake.set()

    async def _writer(self, stream: ByteStream, proto: ClientProtocol) -> None:
        while True:
            data = proto.data_to_send()
            if not data:
                self._drained.set()
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            self._sending = True
            try:
                await stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self._lost(ConnectionClosed(0, f"connection lost while writing: {exc!r}"))
                return
            self._sending = False
            self._last_sent = anyio.current_time()

    async def _heartbeat(self, proto: ClientProtocol) -> None:
        interval = proto.heartbeat
        while True:
            await anyio.sleep(interval / 2)
            now = anyio.current_time()
            if now - self._last_received > 2 * interval:
                self._lost(ConnectionClosed(0, f"missed heartbeats: nothing received for "
                                               f"{now - self._last_received:.1f} s"))
                return
            if now - self._last_sent >= interval / 2:
                proto.send_heartbeat()
                self._wake.set()


def _as_params(uris: str | ConnectionParams | Sequence[str | ConnectionParams]) -> list:
    if isinstance(uris, str | ConnectionParams):
        uris = [uris]
    return [u if isinstance(u, ConnectionParams) else parse_uri(u) for u in uris]


@asynccontextmanager
async def connect(uris: str | ConnectionParams | Sequence[str | ConnectionParams], *,
                  reconnect: bool = True, connect_attempts: int = 1,
                  operation_timeout: float = 30.0, backoff_initial: float = 0.1,
                  backoff_max: float = 5.0, reconnect_timeout: float | None = None,
                  client_properties: dict | None = None,
                  high_water: int = 1 << 20) -> AsyncIterator[Connection]:
    """Connect to the first broker of ``uris`` that answers and yield the ``Connection``.

    ``uris``: one URI or a list (``amqp://`` / ``amqps://``, see ``clients.uri``) tried in order;
    ``connect_attempts``: rounds over the list before giving up (backoff ``backoff_initial``
    doubling up to ``backoff_max`` seconds, with jitter). With ``reconnect`` a lost connection
    is re-established on the next address (for at most ``reconnect_timeout`` seconds, None:
    forever) and the topology replayed; publishes written on the lost connection are not
    re-sent and never count as confirmed (their ``Confirmation`` fails, ``wait_for_confirms``
    raises ``ConfirmsLost``, as aio-pika does). ``operation_timeout``: seconds per request.
    Raises ``NoBrokerAvailable`` (with each address's error), ``ValueError`` for a bad URI.
    On exit the connection is closed (Connection.Close, 200).
    """
    conn = Connection(_as_params(uris), reconnect=reconnect, operation_timeout=operation_timeout,
                      backoff_initial=backoff_initial, backoff_max=backoff_max,
                      reconnect_timeout=reconnect_timeout, client_properties=client_properties,
                      high_water=high_water)
    try:
        async with anyio.create_task_group() as tg:
            await conn._start(tg, connect_attempts)
            try:
                yield conn
            finally:
                # cancelled from outside: the reader and writer are cancelled too and no
                # Close-Ok can come, so do not wait the 5 s for it (the socket just closes)
                cancelled = anyio.current_effective_deadline() == -math.inf
                with anyio.CancelScope(shield=True):
                    await conn.close(wait=0.0 if cancelled else 5.0)
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        single = _single(group)
        if single is None:
            raise
        raise single from None


def _single(group: BaseExceptionGroup) -> BaseException | None:
    """The one real exception inside nested task-group exception groups, else None."""
    found: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif not isinstance(exc, anyio.get_cancelled_exc_class()):
            found.append(exc)

    walk(group)
    return found[0] if len(found) == 1 else None
