"""The receive buffer the plain listener's sockets read into (``recv_into``), shared by the
sockets of one listener: reads land one after another in a ``bytearray`` of ``BUFFER_SIZE``
bytes and are handed on as memoryviews of it, so a large body is not copied between the socket
and the frame splitter (issue 28; before, the event loop read every chunk into a new ``bytes``).

A region handed out is never written over while anything still refers to the buffer: when fewer
than ``READ_MIN`` bytes are left, the next read starts a new buffer, unless nothing but this
object refers to the old one (every view of it gone: read chunks handled, frame tails and body
parts joined), in which case it is used again from its start. So views can live as long as they
like (an assembling body's frames, a partial frame waiting for its end) at the cost of the memory
they pin; a connection whose frames are small holds none after each read (the splitter copies
small frames out, ``protocol.framing``). Idle connections hold nothing: one buffer per listener,
not per socket.

Use from the event loop's thread only: ``region`` and ``commit`` are called in pairs, by the
protocol's ``get_buffer`` and ``buffer_updated`` (asyncio "Buffered Streaming Protocols": the
transport reads into the buffer between the two calls, on the loop's thread).
"""

from __future__ import annotations

import sys

__all__ = ["BUFFER_SIZE", "READ_MAX", "READ_MIN", "ReadBuffer"]

#: Bytes of one buffer (1 MiB).
BUFFER_SIZE = 1 << 20
#: Bytes a read is offered at most (256 KiB, ``connection_io.READ_SIZE``).
READ_MAX = 262144
#: Bytes a read is offered at least (64 KiB: libuv's suggested read size); fewer left in the
#: buffer: the next buffer.
READ_MIN = 65536


class ReadBuffer:
    """Hands out regions of a shared receive buffer (module docstring). ``region()``: a writable
    memoryview of at least ``READ_MIN`` and at most ``READ_MAX`` bytes for the next read;
    ``commit(n)``: the read put ``n`` bytes there (0 <= n <= the region's length); returns them
    as a memoryview, which stays valid as long as it is referenced. ``rewind(n)``: the last
    ``n`` committed bytes are not needed (the caller keeps no view of them)."""

    __slots__ = ("_buf", "_used", "_free_refs", "buffers")

    def __init__(self) -> None:
        self._buf = bytearray(BUFFER_SIZE)
        self._used = 0
        #: ``_refs()`` of a buffer nothing else refers to (measured, not assumed: what
        #: ``sys.getrefcount`` counts of its argument differs between Python versions).
        self._free_refs = self._refs()
        #: Buffers made so far (1 + every time a full one was still referenced), for tests.
        self.buffers = 1

    def _refs(self) -> int:
        """References to the current buffer (every memoryview of it holds one)."""
        return sys.getrefcount(self._buf)

    def region(self) -> memoryview:
        """Where the next read goes (see the class docstring)."""
        used = self._used
        if BUFFER_SIZE - used < READ_MIN:
            if self._refs() > self._free_refs:   # a view of it lives: leave it to them
                self._buf = bytearray(BUFFER_SIZE)
                self.buffers += 1
            used = self._used = 0
        return memoryview(self._buf)[used:used + READ_MAX]

    def commit(self, nbytes: int) -> memoryview:
        """The ``nbytes`` bytes the last read put at the start of ``region()``'s view."""
        used = self._used
        self._used = used + nbytes
        return memoryview(self._buf)[used:used + nbytes]

    def rewind(self, nbytes: int) -> None:
        """Give back the last ``nbytes`` committed bytes (no view of them may be kept)."""
        self._used -= nbytes
