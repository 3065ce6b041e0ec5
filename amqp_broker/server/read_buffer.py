"""The receive buffer the plain listener's sockets read into (``recv_into``), shared by the
sockets of one listener: reads land one after another in a ``bytearray`` of ``BUFFER_SIZE``
bytes and are handed on as memoryviews of it, so a large body is not copied between the socket
and the frame splitter (issue 28; before, the event loop read every chunk into a new ``bytes``).

A region handed out is never written over while anything still refers to the buffer: when fewer
than ``READ_MIN`` bytes are left, the next read goes to the start of a buffer nothing but this
object refers to (every view of it gone: read chunks handled, frame tails and body parts joined):
the current one, or one of the ``POOL`` kept before it, or else a new one. So views can live as
long as they like (an assembling body's frames, a partial frame waiting for its end) at the cost
of the memory they pin; a connection whose frames are small holds none after each read (the
splitter copies small frames out, ``protocol.framing``), and buffers are made only while views
pin the ones there are (a new ``bytearray`` costs a 1 MiB zero fill and its page faults: made on
every wrap, it cost small messages ~5% of their instructions). Idle connections hold nothing:
one buffer pool per listener, not per socket.

Use from the event loop's thread only: ``region`` and ``commit`` are called in pairs, by the
protocol's ``get_buffer`` and ``buffer_updated`` (asyncio "Buffered Streaming Protocols": the
transport reads into the buffer between the two calls, on the loop's thread).
"""

from __future__ import annotations

import sys

__all__ = ["BUFFER_SIZE", "POOL", "READ_MAX", "READ_MIN", "ReadBuffer"]

#: Bytes of one buffer (1 MiB).
BUFFER_SIZE = 1 << 20
#: Bytes a read is offered at most (256 KiB, ``connection_io.READ_SIZE``).
READ_MAX = 262144
#: Bytes a read is offered at least: all of ``READ_MAX``, fewer left in the buffer: the next
#: buffer (the rest of this one unused). Smaller regions (64 KiB at least, as at first) made
#: smaller reads, each a turn of the reader: +1% instructions a 1 KiB message
#: (``benchmarks.socketpath``).
READ_MIN = READ_MAX
#: Buffers kept for reuse besides the current one (4: 5 MiB a listener at most, while views pin
#: them; more are made when all are pinned, and dropped by the pool once it is full).
POOL = 4


class ReadBuffer:
    """Hands out regions of a shared receive buffer (module docstring). ``region()``: a writable
    memoryview of at least ``READ_MIN`` and at most ``READ_MAX`` bytes for the next read;
    ``commit(n)``: the read put ``n`` bytes there (0 <= n <= the region's length); returns them
    as a memoryview, which stays valid as long as it is referenced. ``rewind(n)``: the last
    ``n`` committed bytes are not needed (the caller keeps no view of them)."""

    __slots__ = ("_buf", "_used", "_free_refs", "_pool", "buffers")

    def __init__(self) -> None:
        self._buf = bytearray(BUFFER_SIZE)
        self._used = 0
        #: ``sys.getrefcount`` of a buffer nothing else refers to, as ``_free`` calls it
        #: (measured, not assumed: what it counts of its argument differs between versions).
        self._free_refs = 0
        self._free_refs = sys.getrefcount(self._buf)
        #: Earlier buffers kept for reuse (at most ``POOL``).
        self._pool: list[bytearray] = []
        #: Buffers made so far (1 + every time the current and pooled ones were all referenced),
        #: for tests.
        self.buffers = 1

    def region(self) -> memoryview:
        """Where the next read goes (see the class docstring)."""
        used = self._used
        if BUFFER_SIZE - used < READ_MIN:
            if sys.getrefcount(self._buf) > self._free_refs:   # a view of it lives
                self._next_buffer()
            used = self._used = 0
        return memoryview(self._buf)[used:used + READ_MAX]

    def _next_buffer(self) -> None:
        """Make a free buffer current: a pooled one nothing refers to, else a new one; the
        current one goes to the pool while there is room (else it lives as long as its views)."""
        pool = self._pool
        current = self._buf
        for i in range(len(pool)):
            # ``pool[i]``, as ``self._buf`` when ``_free_refs`` was measured: one owner, then
            # the argument
            if sys.getrefcount(pool[i]) <= self._free_refs:
                self._buf = pool[i]
                pool[i] = current
                return
        if len(pool) < POOL:
            pool.append(current)
        self._buf = bytearray(BUFFER_SIZE)
        self.buffers += 1

    def commit(self, nbytes: int) -> memoryview:
        """The ``nbytes`` bytes the last read put at the start of ``region()``'s view."""
        used = self._used
        self._used = used + nbytes
        return memoryview(self._buf)[used:used + nbytes]

    def rewind(self, nbytes: int) -> None:
        """Give back the last ``nbytes`` committed bytes (no view of them may be kept)."""
        self._used -= nbytes
