"""Per-channel content assembly: Basic.Publish -> content header -> body frames -> one message.

Owns the order rule of AMQP 0-9-1 §4.2.6: after a content-bearing method, the next frames on that
channel must be its content header and then exactly body-size bytes of body frames. A frame out of
that order is a 505 UNEXPECTED_FRAME connection exception; a header for another class than basic, or a
body overrunning the declared size, is 505 as well (RabbitMQ's choice). A body larger than the
assembler's ``max_size`` (RabbitMQ's ``max_message_size``) is a 406 PRECONDITION_FAILED channel
exception with RabbitMQ's text, raised as soon as the content header declares it (RabbitMQ 3.10
checks once the body has arrived: the client sees the same Channel.Close). Modelled on RabbitMQ's
``rabbit_command_assembler`` (a pure ``process(frame, state)``) and ``rabbit_channel:check_msg_size``.
A body's frames are held as they came (bytes, or views of the reads) and joined once; past
``FIRST_BUFFER`` bytes the body goes into one buffer (``io.BytesIO``) instead, the frames so far
and every later one written into it as it arrives and then let go, and the finished buffer is
the body (``getvalue`` hands over the buffer, not a copy). Holding every frame of a large body
until one join kept two copies of it at its last frame: 2.06x a 64 MiB body in RSS above idle,
against issue 28's aim of 2x at most (benchmarks/RESULTS.md).
Must not know: routing, queues.
"""

from __future__ import annotations

import io
from typing import Final, Generic, TypeVar

from . import constants as c
from .errors import ChannelException, ConnectionException

__all__ = ["ContentAssembler", "MAX_MESSAGE_SIZE", "NO_LIMIT", "too_large"]

#: The highest ``max_message_size`` RabbitMQ accepts, bytes (512 MiB, its ``?MAX_MSG_SIZE``).
MAX_MESSAGE_SIZE: Final = 536870912
#: ``max_size`` of an assembler without a limit (cluster peer links carry batches of messages).
NO_LIMIT: Final = 1 << 62
#: Bytes of a body held as its frames came (and joined once); a larger body goes into one buffer
#: of what has arrived, grown as more arrives (BytesIO's own growth, by an eighth: memory held is
#: never much more than what arrived, and a client declaring a large body and sending little of
#: it does not make us allocate it). 4 MiB: glibc serves a block this large with its own mapping
#: (``server.malloc_tuning``), which grows and shrinks by ``mremap``, without a copy.
FIRST_BUFFER: Final = 4 * 1024 * 1024


def too_large(size: int, max_size: int) -> ChannelException:
    """The 406 PRECONDITION_FAILED for a ``size``-byte body over ``max_size`` bytes, with
    RabbitMQ's text ("configured max size" unless the limit is ``MAX_MESSAGE_SIZE`` itself;
    ``rabbit_channel:check_msg_size``), on Basic.Publish (60, 40)."""
    which = "max size" if max_size == MAX_MESSAGE_SIZE else "configured max size"
    return ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - message size {size} "
                            f"is larger than {which} {max_size}", c.CLASS_BASIC, 40)

#: What ``start`` is given and the finished tuple hands back: the broker's ``Publish``, the
#: client's ``Message`` (the assembler only holds it).
M = TypeVar("M")


class ContentAssembler(Generic[M]):
    """Collects one message's content on one channel.

    Usage: ``start(publish)`` after a Basic.Publish; then ``header(payload)`` and ``body(payload)``
    return the finished ``(publish, header_payload, body)`` once complete, else None.
    ``expecting_content`` is True between ``start`` and completion; the caller sends every other
    frame type to ``unexpected`` while it is. ``max_size``: the largest body accepted, bytes
    (``NO_LIMIT`` by default). Raises ``ConnectionException`` 505 UNEXPECTED_FRAME (order or size
    violated) and 502 SYNTAX_ERROR (header shorter than 14 bytes), ``ChannelException`` 406
    PRECONDITION_FAILED from ``header`` for a body over ``max_size`` (``too_large``; the message is
    dropped). Source: AMQP 0-9-1 §4.2.6, §2.3.5.2; RabbitMQ ``max_message_size``.
    """

    __slots__ = ("_publish", "_header", "_size", "_parts", "_buf", "_got", "max_size")

    def __init__(self, max_size: int = NO_LIMIT) -> None:
        self.max_size = max_size
        self._publish: M | None = None
        self._header: bytes | None = None
        self._size = 0
        #: A body's frames so far, up to ``FIRST_BUFFER`` bytes: bytes, or views of read chunks.
        self._parts: list[bytes | memoryview] = []
        #: A body past ``FIRST_BUFFER`` bytes (module docstring); else None.
        self._buf: io.BytesIO | None = None
        self._got = 0

    @property
    def expecting_content(self) -> bool:
        """True while a started message still lacks its header or part of its body."""
        return self._publish is not None

    def start(self, publish: M) -> None:
        """Begin a message; raises 505 when one is already being assembled."""
        if self._publish is not None:
            raise self.unexpected("method frame")
        self._publish = publish
        self._header = None

    def header(self, payload: bytes) -> tuple[M, bytes, bytes] | None:
        """Accept the content header payload; returns the message when its body size is 0."""
        publish = self._publish
        if publish is None or self._header is not None:
            raise self.unexpected("content header")
        if len(payload) < 14:
            raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - truncated content header",
                                      c.CLASS_BASIC, 40)
        # class-id u16, weight u16, body-size u64 (read byte by byte: native ints when compiled)
        class_id = (payload[0] << 8) | payload[1]
        size = (((payload[4] << 24) | (payload[5] << 16) | (payload[6] << 8) | payload[7]) << 32
                | (payload[8] << 24) | (payload[9] << 16) | (payload[10] << 8) | payload[11])
        if class_id != c.CLASS_BASIC:
            raise ConnectionException(c.UNEXPECTED_FRAME,
                                      f"UNEXPECTED_FRAME - content header for class {class_id}",
                                      c.CLASS_BASIC, 40)
        if size == 0:
            self._publish = None
            return publish, payload, b""
        if size > self.max_size:
            self._publish = None
            raise too_large(size, self.max_size)
        self._header = payload
        self._size = size
        self._got = 0  # (no ``_parts``, ``_buf`` None: ``body`` and ``reset`` leave them so)
        return None

    def body(self, payload: bytes) -> tuple[M, bytes, bytes] | None:
        """Accept one body frame payload; returns the message once body-size bytes arrived."""
        publish = self._publish
        header = self._header
        if publish is None or header is None:
            raise self.unexpected("content body")
        got = self._got + len(payload)
        if got > self._size:
            raise self._overrun(got)
        if got == self._size and not self._parts and self._buf is None:   # one frame
            self._publish = None
            self._header = None
            return publish, header, payload
        body = self._write(payload, got)
        return None if body is None else (publish, header, body)

    def body_view(self, view: memoryview) -> tuple[M, bytes, bytes] | None:
        """``body`` for a body frame's payload as a view of the chunk it was read in
        (``FrameSplitter`` body views): kept until the body's one join, or, past ``FIRST_BUFFER``,
        copied into its buffer at once and let go, so the body is copied once in all (the same
        errors as ``body``)."""
        publish = self._publish
        header = self._header
        if publish is None or header is None:
            raise self.unexpected("content body")
        got = self._got + len(view)
        if got > self._size:
            raise self._overrun(got)
        if got == self._size and not self._parts and self._buf is None:
            self._publish = None
            self._header = None
            return publish, header, bytes(view)
        body = self._write(view, got)
        return None if body is None else (publish, header, body)

    def _write(self, payload: bytes | memoryview, got: int) -> bytes | None:
        """Add a frame's ``payload`` to the body (``got``: bytes of body with it, at most its
        size); the body once complete (the assembler then ready for the next), else None."""
        buf = self._buf
        if buf is None:
            if got <= FIRST_BUFFER:
                parts = self._parts
                parts.append(payload)
                if got < self._size:
                    self._got = got
                    return None
                body = b"".join(parts)
                self._parts = []
                self._publish = None
                self._header = None
                return body
            # past FIRST_BUFFER: the buffer is made the size of what arrived (writing its last
            # byte first makes BytesIO allocate exactly that, zeroing the gap), the frames held
            # so far are written into it once and let go, and later frames are appended
            buf = self._buf = io.BytesIO()
            buf.seek(got - 1)
            buf.write(b"\0")
            buf.seek(0)
            for part in self._parts:
                buf.write(part)
            self._parts = []
        buf.write(payload)
        if got < self._size:
            self._got = got
            return None
        body = buf.getvalue()
        self._buf = None
        self._publish = None
        self._header = None
        return body

    def _overrun(self, got: int) -> ConnectionException:
        return ConnectionException(
            c.UNEXPECTED_FRAME,
            f"UNEXPECTED_FRAME - body of {got} bytes exceeds declared size {self._size}",
            c.CLASS_BASIC, 40)

    def unexpected(self, what: str) -> ConnectionException:
        """The 505 for a frame that arrived out of order (to be raised by the caller)."""
        waiting = ("nothing" if self._publish is None
                   else "content header" if self._header is None else "content body")
        return ConnectionException(
            c.UNEXPECTED_FRAME, f"UNEXPECTED_FRAME - expected {waiting}, got {what}",
            c.CLASS_BASIC, 40 if self._publish is not None else 0)

    def reset(self) -> None:
        """Drop any partial message (channel closed)."""
        self._publish = None
        self._header = None
        self._parts = []
        self._buf = None
        self._got = 0
