"""Serving one accepted socket: feeds ``core.Connection`` and writes out what it produces.

A reader task receives large chunks (256 KiB) and hands each to ``Connection.receive_data``
synchronously (every frame in the chunk handled, no task per message). Output goes out in one
write per turn of the loop: on a plain socket (``serve_plain``, over ``plain_socket.PlainSocket``)
by callback, one flush scheduled when the connection gets output; on a TLS stream
(``serve_connection``, anyio's stream) by a writer task that sleeps until there is output. Back
pressure: the reader does not read while the connection's own output is above the high-water mark
(it drops below only once the socket took everything written), nor while the connection is
blocked by the memory alarm after it has published (RabbitMQ's connection.blocked), so one client
can never make the broker buffer without bound. While the broker is saturated, an open-loop
publisher's steady inflow is read in batches (``read_pacing``). An idle plain connection's
heartbeats wake no task: one in is taken by ``Connection.heartbeat_received`` from the socket's
callback, one out is a single flush (issue 14). Source: DESIGN.md §5 (figures: one send per
chunk, not per frame).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol, cast

import anyio
from anyio.abc import ByteStream

from ..core.broker import Broker
from ..core.connection import LINGER_TIMEOUT, Connection
from ..core.external import TlsPeer
from .plain_socket import PlainSocket
from .read_pacing import ReadPacer

if TYPE_CHECKING:
    from anyio.abc import IPSockAddrType

__all__ = ["serve_connection", "serve_plain"]

log = logging.getLogger(__name__)

READ_SIZE = 262144


class _Receiver(Protocol):
    async def receive(self, max_bytes: int = ...) -> bytes: ...


class _Link:
    """Wake-up plumbing between the core connection, its writer and its reader: ``drained`` is
    made only while the reader waits for the output to drain."""

    __slots__ = ("wake", "drained", "done")

    def __init__(self) -> None:
        self.wake = anyio.Event()
        self.drained: anyio.Event | None = None
        self.done = False

    def on_writable(self) -> None:
        self.wake.set()

    def set_drained(self) -> None:
        """Everything written reached the socket: wake a reader held by back pressure."""
        ev = self.drained
        if ev is not None:
            self.drained = None
            ev.set()

    async def wait_drained(self) -> None:
        ev = self.drained
        if ev is None:
            ev = self.drained = anyio.Event()
        await ev.wait()


class _Flusher:
    """A plain socket's writer, by callback: ``on_writable`` schedules one ``flush`` for the next
    turn of the loop, which writes everything queued in one ``writev`` of the connection's buffers
    (``Connection.take_output_parts``: large bodies as they are, not joined); while the kernel has
    not taken it all (``PlainSocket.writing_paused``) output waits in the connection, and the socket's
    drain flushes again. Once the connection is closed and its output written, the socket closes
    (unless it lingers after the client's own Close)."""

    __slots__ = ("conn", "sock", "link", "loop", "scheduled")

    def __init__(self, conn: Connection, sock: PlainSocket, link: _Link) -> None:
        self.conn = conn
        self.sock = sock
        self.link = link
        self.loop = asyncio.get_running_loop()
        self.scheduled = False

    def on_writable(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def send_now(self, data: bytes) -> bool:
        """``Connection.send_now``: write ``data`` to the socket at once when nothing of ours
        waits to be written (no flush due, the kernel took everything so far); False otherwise."""
        sock = self.sock
        t = sock.transport
        if self.scheduled or sock.writing_paused or sock.lost or t is None or t.is_closing():
            return False
        t.write(data)
        return True

    def flush(self) -> None:
        self.scheduled = False
        conn, sock = self.conn, self.sock
        if sock.lost:
            self.link.set_drained()   # the reader finds the socket gone
            return
        if sock.writing_paused:
            return   # the socket's drain calls this again
        parts = conn.take_output_parts()
        if parts:
            sock.write_parts(parts)
            if sock.writing_paused:
                return
        if conn.closed:
            self.link.set_drained()
            if not conn.linger:
                sock.close()   # after what was written is sent
            return
        self.link.set_drained()
        conn.output_drained()   # may queue more: ``on_writable`` schedules the next flush


async def _writer(conn: Connection, stream: ByteStream, link: _Link) -> None:
    while True:
        await link.wake.wait()
        link.wake = anyio.Event()
        data = conn.take_output()
        if data:
            await stream.send(data)
        if conn.closed and not conn.output_size:
            break
        if not conn.output_size:
            link.set_drained()
            conn.output_drained()
        if conn.output_size:
            link.wake.set()
        if link.done:
            break


async def _reader(conn: Connection, stream: _Receiver, link: _Link,
                  pacer: ReadPacer | None) -> None:
    high = conn.high_water
    clock = time.monotonic if pacer is None else pacer.clock
    last = prev = 0.0
    size = 0
    while not conn.closed:
        while conn.output_size > high and not conn.closed:
            await link.wait_drained()
        while conn.blocked and conn.has_published and not conn.closed:
            await anyio.sleep(0.05)
        if pacer is not None:
            wait = pacer.delay(conn, last, prev, size)
            if wait:   # saturated, and a steady inflow: let it gather (``read_pacing``)
                await anyio.sleep(wait)
        try:
            data = await stream.receive(READ_SIZE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError, OSError):
            return
        prev, last = last, clock()
        size = len(data)
        conn.receive_data(data)
    if conn.linger:
        await _discard_until_peer_closes(stream)


async def _discard_until_peer_closes(stream: _Receiver) -> None:
    """After the Close-Ok for the peer's Connection.Close: read and drop what still arrives until
    the peer closes its socket, at most ``LINGER_TIMEOUT`` s. Closing at once would make the
    kernel answer frames still in flight (a client flushing publishes behind its Close, as Node's
    amqplib does) with a reset, and the client would see EPIPE; RabbitMQ's reader lingers too."""
    with anyio.move_on_after(LINGER_TIMEOUT):
        while True:
            try:
                await stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError, OSError):
                return


async def serve_connection(broker: Broker, stream: ByteStream, tls: TlsPeer | None = None,
                           pacer: ReadPacer | None = None) -> None:
    """Run one client connection until either side closes it; ``tls``: the TLS session of an
    AMQPS connection (``server.amqps``), None on the plain listener; ``pacer``: the listener's
    ``read_pacing.ReadPacer`` (None: every read at once)."""
    try:
        # anyio types the address as ``str`` too (UNIX sockets); ours are TCP: (host, port, ...)
        addr = cast("IPSockAddrType", stream.extra(anyio.abc.SocketAttribute.remote_address))
        host, port = addr[:2]
    except Exception:
        host, port = "?", 0
    conn = broker.open_connection((str(host), int(port)))
    conn.tls = tls
    link = _Link()
    conn.on_writable = link.on_writable
    try:
        async with anyio.create_task_group() as tg:
            async def write_then_stop() -> None:
                try:
                    await _writer(conn, stream, link)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                if not conn.linger:  # else the reader discards input until the peer closes
                    tg.cancel_scope.cancel()

            tg.start_soon(write_then_stop)
            await _reader(conn, stream, link, pacer)
            # Reader ended: let the writer flush what is left (e.g. a Connection.Close) briefly.
            link.done = True
            link.wake.set()
            with anyio.move_on_after(2):
                while conn.output_size:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        conn.on_writable = None
        conn.connection_lost()
        with anyio.CancelScope(shield=True):
            await stream.aclose()


async def serve_plain(broker: Broker, sock: PlainSocket, pacer: ReadPacer | None = None) -> None:
    """Run one client connection on a plain TCP socket (``plain_socket.PlainSocket``, from
    ``listen_plain``) until either side closes it; ``pacer`` as for ``serve_connection``."""
    try:
        conn = broker.open_connection(sock.peer)
    except BaseException:
        sock.close()
        raise
    link = _Link()
    flusher = _Flusher(conn, sock, link)
    conn.on_writable = flusher.on_writable
    conn.send_now = flusher.send_now
    sock.on_drained = flusher.flush
    sock.on_heartbeat = conn.heartbeat_received
    try:
        await _reader(conn, sock, link, pacer)
        if not conn.linger:
            # Reader ended: let the flusher send what is left (e.g. a Connection.Close) briefly.
            with anyio.move_on_after(2):
                while conn.output_size and not sock.lost:
                    await anyio.sleep(0.01)
    finally:
        conn.on_writable = None
        conn.send_now = None
        sock.on_drained = None
        sock.on_heartbeat = None
        conn.connection_lost()
        sock.close()
