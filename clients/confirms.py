"""Publisher-confirm bookkeeping for one channel: ``Confirmation`` per publish, ``ConfirmTracker``
keyed by delivery tag.

Owns the rule of RabbitMQ's publisher confirms: tags count from 1 per channel after
Confirm.Select; Basic.Ack/Nack with ``multiple`` settle every unsettled tag up to it; a mandatory
message that cannot be routed gets Basic.Return *before* its Ack, so a return is matched to the
oldest unsettled mandatory publish with the same exchange and routing key. No per-message task,
event or future: a ``Confirmation`` makes its event only when someone waits on it.
Must not know: sockets, frames.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio

from .errors import MessageReturned, PublishNacked

__all__ = ["Confirmation", "ConfirmTracker"]


class Confirmation:
    """The broker's answer to one confirm-mode publish. ``await c.wait(timeout)`` returns when it
    was acked and raises ``PublishNacked`` (Basic.Nack), ``MessageReturned`` (mandatory, 312
    NO_ROUTE), ``ConnectionClosed``/``ChannelClosed`` (lost before the answer: the broker may or
    may not have the message) or ``TimeoutError``. ``done``: answered (or failed) already."""

    __slots__ = ("delivery_tag", "error", "done", "_event")

    def __init__(self, delivery_tag: int) -> None:
        self.delivery_tag = delivery_tag
        self.error: BaseException | None = None
        self.done = False
        self._event: anyio.Event | None = None

    def _settle(self, error: BaseException | None) -> None:
        if self.done:
            return
        if self.error is None:
            self.error = error
        self.done = True
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds; None: forever) for the answer; see class doc."""
        if not self.done:
            if self._event is None:
                self._event = anyio.Event()
            with anyio.fail_after(timeout):
                await self._event.wait()
        if self.error is not None:
            raise self.error


class ConfirmTracker:
    """Unsettled publishes of one confirm-mode channel (see module docstring)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start over at tag 1 (new channel after a reconnect)."""
        self.next_tag = 1
        self.pending: dict[int, Confirmation] = {}
        self.lowest = 1
        self.nacked: list[int] = []
        self.batch_returned: list[Any] = []
        self.mandatory: deque[tuple[int, str, str]] = deque()
        self.returned: dict[int, MessageReturned] = {}
        self.all_done: anyio.Event | None = None

    def add(self, mandatory: bool, exchange: str, routing_key: str) -> Confirmation:
        """Register the publish just sent; returns its ``Confirmation``."""
        tag = self.next_tag
        self.next_tag = tag + 1
        confirmation = Confirmation(tag)
        self.pending[tag] = confirmation
        if mandatory:
            self.mandatory.append((tag, exchange, routing_key))
        return confirmation

    def on_return(self, msg: Any) -> None:
        """A Basic.Return: mark the matching unsettled mandatory publish as returned."""
        for i, (tag, exchange, rkey) in enumerate(self.mandatory):
            if exchange == msg.exchange and rkey == msg.routing_key and tag in self.pending:
                del self.mandatory[i]
                self.returned[tag] = MessageReturned(msg.reply_code, msg.reply_text, msg)
                self.batch_returned.append(msg)
                return

    def on_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        """Basic.Ack (``ack``) or Basic.Nack for ``tag`` (and all before it when ``multiple``)."""
        pending = self.pending
        if multiple:
            tags: Any = range(self.lowest, tag + 1)
            self.lowest = tag + 1
        else:
            tags = (tag,)
        returned = self.returned
        for t in tags:
            confirmation = pending.pop(t, None)
            if confirmation is None:
                continue
            if not ack:
                self.nacked.append(t)
                confirmation._settle(PublishNacked([t]))
            elif returned and t in returned:
                confirmation._settle(returned.pop(t))
            else:
                confirmation._settle(None)
        while self.lowest < self.next_tag and self.lowest not in pending:
            self.lowest += 1
        while self.mandatory and self.mandatory[0][0] not in pending:
            self.mandatory.popleft()
        if not pending and self.all_done is not None:
            self.all_done.set()

    def fail(self, error: BaseException) -> None:
        """Settle every unsettled publish with ``error`` (channel or connection lost)."""
        pending, self.pending = self.pending, {}
        for confirmation in pending.values():
            confirmation._settle(error)
        self.mandatory.clear()
        self.returned.clear()
        if self.all_done is not None:
            self.all_done.set()

    async def wait_all(self, timeout: float) -> tuple[list[int], list[Any]]:
        """Wait (``timeout`` seconds, ``TimeoutError``) until nothing is unsettled; returns and
        clears (nacked tags, returned messages) since the last call."""
        with anyio.fail_after(timeout):
            while self.pending:
                self.all_done = anyio.Event()
                await self.all_done.wait()
        self.all_done = None
        nacked, self.nacked = self.nacked, []
        returned, self.batch_returned = self.batch_returned, []
        return nacked, returned
