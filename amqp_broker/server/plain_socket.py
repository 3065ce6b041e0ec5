"""A plain-TCP client socket for ``connection_io``: reads on demand, writes by callback.

``PlainSocket`` is the asyncio protocol of one accepted socket. It replaces anyio's socket stream
on the plain listener (TLS keeps anyio's stream) for what idleness costs (issue 14: 10,000 idle
connections with heartbeats): anyio woke the connection's writer task, made events and two
checkpoints for every frame written, and woke the reader task for every heartbeat received.

* **Reading** is what anyio's stream does, so busy connections read in the same batches: the
  socket is read only while the reader waits in ``receive`` (reading paused otherwise, so a reader
  held back by back pressure leaves the data in the kernel and TCP slows the client), a chunk at a
  time, up to ``max_bytes``; a chunk already there is returned after one checkpoint. One
  exception: a heartbeat frame arriving alone while the reader waits is offered to
  ``on_heartbeat`` at once and, when taken, the reader sleeps on (a heartbeat is all an idle
  client sends).
* **Writing** is ``write`` / ``write_parts`` (several buffers, one ``writev``): straight to the
  transport, whose high-water mark is 0 (as anyio's), so
  ``writing_paused`` is set as soon as the kernel does not take everything; ``on_drained`` runs when
  the transport's buffer is empty again.

Errors: ``receive`` raises ``anyio.EndOfStream`` after the client closed its side and
``anyio.BrokenResourceError`` once the socket is gone (the errors anyio's stream raises, which
``connection_io`` already handles). Source: Python docs "Transports and Protocols" (flow control
callbacks); AMQP 0-9-1 §4.2.3 (the heartbeat frame: type 8, channel 0, empty payload).
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable
from typing import cast

import anyio

from ..protocol.constants import HEARTBEAT_FRAME

__all__ = ["PlainSocket", "listen_plain"]


class PlainSocket(asyncio.Protocol):
    """One accepted plain-TCP socket (see the module docstring). ``on_open(sock)`` is called once
    the socket is connected (TCP_NODELAY on) and starts serving it; ``peer`` is the client's
    (host, port), ("?", 0) when the OS does not say."""

    def __init__(self, on_open: Callable[[PlainSocket], None]) -> None:
        self._on_open = on_open
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("?", 0)
        self._chunks: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self.lost = False
        self.writing_paused = False
        #: Offered a lone heartbeat frame received while the reader waits (module docstring);
        #: returns False to decline it (it is then buffered for the reader like any data).
        self.on_heartbeat: Callable[[], bool] | None = None
        #: Called when everything written has reached the kernel after a paused write.
        self.on_drained: Callable[[], None] | None = None

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Set TCP_NODELAY and the write limit, pause reading, then ``on_open``."""
        t = self.transport = cast(asyncio.Transport, transport)
        sock = t.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        addr = t.get_extra_info("peername")
        try:
            self.peer = (str(addr[0]), int(addr[1]))
        except (TypeError, IndexError, ValueError):
            pass
        t.set_write_buffer_limits(0)
        t.pause_reading()
        self._on_open(self)

    def data_received(self, data: bytes) -> None:
        """Buffer ``data`` for the reader, or hand a lone heartbeat on (module docstring)."""
        if (self._waiter is not None and not self._chunks and data == HEARTBEAT_FRAME
                and self.on_heartbeat is not None and self.on_heartbeat()):
            return
        self._chunks.append(data)
        self._wake()

    def eof_received(self) -> bool:
        """The client closed its side: the reader gets EndOfStream; ours stays open to write."""
        self._eof = True
        self._wake()
        return True

    def pause_writing(self) -> None:
        """The kernel did not take everything written (high-water mark 0)."""
        self.writing_paused = True

    def resume_writing(self) -> None:
        """The transport's buffer is empty again."""
        self.writing_paused = False
        if self.on_drained is not None:
            self.on_drained()

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is gone: wake the reader (it raises) and whoever waits for a drain."""
        self.lost = True
        self.writing_paused = False
        self._wake()
        if self.on_drained is not None:
            self.on_drained()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---------------------------------------------------------------------- the reader
    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next chunk the client sent, at most ``max_bytes`` bytes (the rest stays buffered).
        Raises ``anyio.EndOfStream`` when the client closed its side and nothing is buffered,
        ``anyio.BrokenResourceError`` when the socket is gone."""
        t = self.transport
        if not self._chunks and not self._eof and not self.lost and t is not None:
            self._waiter = asyncio.get_running_loop().create_future()
            t.resume_reading()
            try:
                await self._waiter
            finally:
                self._waiter = None
                if not self.lost:
                    t.pause_reading()
        else:
            await asyncio.sleep(0)   # a checkpoint, as anyio's stream takes
        if not self._chunks:
            if self.lost:
                raise anyio.BrokenResourceError
            raise anyio.EndOfStream
        chunk = self._chunks.popleft()
        if len(chunk) > max_bytes:
            self._chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    # ---------------------------------------------------------------------- the writer
    def write(self, data: bytes) -> None:
        """Hand ``data`` to the transport (dropped once the socket is gone)."""
        t = self.transport
        if t is not None and not self.lost and not t.is_closing():
            t.write(data)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Hand ``parts`` to the transport as one write, in order (dropped once the socket is
        gone): uvloop sends them with one ``writev`` and keeps what the kernel did not take as
        the same buffers, uncopied (asyncio's own transport joins them on Python 3.11)."""
        t = self.transport
        if t is not None and not self.lost and not t.is_closing():
            if len(parts) == 1:
                t.write(parts[0])
            else:
                t.writelines(parts)

    def close(self) -> None:
        """Close the socket once what was written is sent (idempotent)."""
        t = self.transport
        if t is not None and not t.is_closing():
            t.close()


async def listen_plain(host: str, port: int, on_open: Callable[[PlainSocket], None]
                       ) -> asyncio.Server:
    """Bind ``host``:``port`` (0: any free port; backlog 1,024, SO_REUSEADDR) with a
    ``PlainSocket`` per accepted socket; accepting starts with ``await server.start_serving()``.
    A host name that resolves to several addresses gets a socket each (with port 0, each its own
    port). Raises ``OSError`` when the address is taken."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: PlainSocket(on_open), host, port, backlog=1024,
                                    reuse_address=True, start_serving=False)
