"""Serving plain-TCP client sockets with asyncio's transport callbacks: no task per connection.

``AmqpProtocol`` feeds one ``core.Connection``: each received chunk goes to
``Connection.receive_data`` synchronously (every frame in it handled); when the connection gets
output (``on_writable``), one flush is scheduled with ``loop.call_soon``, so everything produced in
this turn of the loop goes out in one ``transport.write`` (or, when large bodies are among it, one
``transport.writelines`` of the pieces: uvloop sends them with one ``writev``, not joined first). An idle connection costs nothing but its
timers: a heartbeat is one callback each way, where the stream tasks of ``connection_io`` woke two
tasks and an event per frame (issue 14: 10,000 idle connections with heartbeats).

Back pressure, as ``connection_io``: while the transport's buffer is above its high-water mark
(``pause_writing``) output stays in the connection, whose own high-water mark then holds back
deliveries; reading pauses while the connection's output is above ``Connection.high_water``, and,
polled every 50 ms, while the connection is blocked by a resource alarm after it published
(RabbitMQ's connection.blocked). Closing: once the core marks the connection closed and its output
is written, the transport closes; after the client's own Connection.Close it lingers first,
reading and discarding until the client closes, at most ``LINGER_TIMEOUT`` s (as RabbitMQ's
reader does, so frames a client flushes behind its Close get no reset). TLS connections keep the
stream tasks (``connection_io`` over anyio's TLS stream). Source: DESIGN.md §5 (one write per
turn, not per frame); Python docs "Transports and Protocols" (flow control callbacks).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import cast

from ..core.broker import Broker
from ..core.connection import LINGER_TIMEOUT, Connection

__all__ = ["AmqpProtocol", "serve_plain", "close_all"]

log = logging.getLogger(__name__)

#: How often a connection blocked by a resource alarm checks whether it may read again, s.
BLOCKED_POLL_S = 0.05


class AmqpProtocol(asyncio.Protocol):
    """One client connection on a plain TCP socket (see the module docstring). ``live``: the set
    of protocols of this listener, for closing them all when it stops."""

    def __init__(self, broker: Broker, live: set[AmqpProtocol]) -> None:
        self.broker = broker
        self.live = live
        self.conn: Connection | None = None
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.flush_scheduled = False
        self.writing_paused = False
        self.reading_paused = False   # paused for output back pressure or a resource alarm
        self.lingering = False
        self.linger_timer: asyncio.TimerHandle | None = None
        self.poll_timer: asyncio.TimerHandle | None = None   # while blocked by an alarm

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Open the core connection for this socket (TCP_NODELAY on, as before)."""
        self.transport = t = cast(asyncio.Transport, transport)
        sock = t.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        addr = t.get_extra_info("peername")
        try:
            host, port = str(addr[0]), int(addr[1])
        except (TypeError, IndexError, ValueError):
            host, port = "?", 0
        self.live.add(self)
        conn = self.conn = self.broker.open_connection((host, port))
        conn.on_writable = self._schedule_flush

    def data_received(self, data: bytes) -> None:
        """Hand ``data`` to the core, then apply back pressure and closing."""
        conn = self.conn
        if conn is None or self.lingering:
            return   # lingering after the client's Close: discard
        conn.receive_data(data)
        if conn.closed:
            if conn.linger and not self.lingering:
                self.lingering = True
                self.linger_timer = self.loop.call_later(LINGER_TIMEOUT, self._close)
            return
        if conn.output_size > conn.high_water or (conn.blocked and conn.has_published):
            self._pause_reading()

    def eof_received(self) -> bool:
        """The client closed its side: close ours (``connection_lost`` follows)."""
        return False

    def pause_writing(self) -> None:
        """The transport's buffer is full: keep output in the connection."""
        self.writing_paused = True

    def resume_writing(self) -> None:
        """The transport's buffer drained below its low-water mark: write what waits."""
        self.writing_paused = False
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is gone: free everything the connection held."""
        self.lost()

    def lost(self) -> None:
        """Forget the socket and free the connection's resources (once)."""
        self.live.discard(self)
        for timer in (self.linger_timer, self.poll_timer):
            if timer is not None:
                timer.cancel()
        self.transport = None
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.on_writable = None
            conn.connection_lost()

    # ------------------------------------------------------------------ output and closing
    def _schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        t, conn = self.transport, self.conn
        if t is None or conn is None or t.is_closing():
            return
        if not self.writing_paused and conn.output_size:
            if conn.output_has_large:   # large bodies among it: one gather write, no join
                t.writelines(conn.take_output_parts())
            else:
                t.write(conn.take_output())
            if not conn.closed:
                conn.output_drained()   # may produce more: flushed next turn
        if conn.closed:
            if not conn.output_size and not self.lingering:
                t.close()   # after the buffered output is sent
            return   # lingering: closed by the client, or by the timer
        if self.reading_paused and conn.output_size <= conn.high_water:
            self._maybe_resume_reading()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _pause_reading(self) -> None:
        t = self.transport
        if t is not None and not self.reading_paused:
            self.reading_paused = True
            t.pause_reading()
        self._maybe_resume_reading()

    def _poll(self) -> None:
        self.poll_timer = None
        self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        t, conn = self.transport, self.conn
        if t is None or conn is None or not self.reading_paused or conn.closed:
            return
        if conn.blocked and conn.has_published:
            if self.poll_timer is None:
                self.poll_timer = self.loop.call_later(BLOCKED_POLL_S, self._poll)
            return
        if conn.output_size > conn.high_water:
            return   # the next flush looks again
        self.reading_paused = False
        t.resume_reading()


async def serve_plain(broker: Broker, host: str, port: int) -> tuple[asyncio.Server,
                                                                     set[AmqpProtocol]]:
    """Listen on ``host``:``port`` (0: any free port; backlog 1,024) with ``AmqpProtocol``;
    returns the server and its live protocols. Raises ``OSError`` when the address is taken."""
    live: set[AmqpProtocol] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: AmqpProtocol(broker, live), host, port,
                                      backlog=1024, reuse_address=True)
    return server, live


def close_all(live: set[AmqpProtocol]) -> None:
    """Close every live connection's socket (its buffered output is still sent while the loop
    runs) and free what the connection held, now (the listener is stopping)."""
    for proto in list(live):
        if proto.transport is not None:
            proto.transport.close()
        proto.lost()
