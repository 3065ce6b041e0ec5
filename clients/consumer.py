"""``Consumer``: one Basic.Consume subscription as an async iterator of messages.

Owns the buffer between the connection's reader task and the consuming task (an unbounded anyio
memory stream: the reader never blocks on a slow consumer; prefetch bounds it) and how iteration
ends (cancel, broker-side cancel, channel closed). Must not know: sockets, frames.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import anyio

from .errors import ChannelClosed, ConnectionClosed
from .message import Message

if TYPE_CHECKING:
    from .channel import Channel

__all__ = ["Consumer"]


class Consumer:
    """A Basic.Consume subscription; iterate it (``async for message in consumer``) to receive
    ``Message`` objects, ack them with ``await message.ack()`` unless ``no_ack``. Iteration ends
    when the consumer is cancelled (by us or by the broker, e.g. its queue was deleted:
    ``cancelled_by_broker``) and raises ``ChannelClosed``/``ConnectionClosed`` when its channel
    is gone for good. Across reconnects it is re-registered and iteration simply continues.
    As an async context manager it cancels itself on exit. Deliveries are buffered without bound
    in memory: bound them with ``basic_qos(prefetch_count)`` (unacked deliveries only)."""

    def __init__(self, channel: Channel, queue: str, tag: str, no_ack: bool, exclusive: bool,
                 arguments: dict | None) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.arguments = arguments
        self.cancelled_by_broker = False
        self._error: BaseException | None = None  # met by take_nowait, raised by __anext__
        self._send, self._recv = anyio.create_memory_object_stream[Any](math.inf)

    def _deliver(self, item: Any) -> None:
        try:
            self._send.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def _end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self._deliver(error)
        self._send.close()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        try:
            item = await self._recv.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            raise item
        return item

    def take_nowait(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages already buffered, without waiting (an empty list when none
        is): a batch for one pass, e.g. to publish them with one socket write. Where the
        buffer holds the end of iteration or an error it stops; the next ``__anext__`` ends
        or raises it."""
        taken: list[Message] = []
        receive = self._recv.receive_nowait
        while len(taken) < limit and self._error is None:
            try:
                item = receive()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            if isinstance(item, BaseException):
                self._error = item
            else:
                taken.append(item)
        return taken

    async def get(self, timeout: float | None = None) -> Message | None:
        """Next message, or None when none came within ``timeout`` seconds or iteration ended."""
        with anyio.move_on_after(timeout):
            try:
                return await self.__anext__()
            except StopAsyncIteration:
                return None
        return None

    async def cancel(self) -> None:
        """Basic.Cancel (idempotent); iteration ends after the messages already buffered."""
        await self.channel.basic_cancel(self.tag)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.cancel()
            except (ChannelClosed, ConnectionClosed, TimeoutError):
                pass
