"""Publisher-confirm bookkeeping for one channel: ``Confirmation`` per publish, ``ConfirmTracker``
keyed by delivery tag.

Owns the rule of RabbitMQ's publisher confirms: tags count from 1 per channel after
Confirm.Select; Basic.Ack/Nack with ``multiple`` settle every unsettled tag up to it; a mandatory
message that cannot be routed gets Basic.Return *before* its Ack, so a return is matched to the
oldest unsettled mandatory publish with the same exchange and routing key. No per-message task,
event or future: a ``Confirmation`` makes its event only when someone waits on it.
A publish whose answer was lost with the connection (or channel) fails with that error and is
never re-sent by the client (as in aio-pika: re-sending is the caller's choice, ideally with the
same message id); the tracker keeps such failures until ``Channel.wait_for_confirms`` reported
them, across reconnects. ``wait_all``/``failure_of`` sum up a batch of confirmations in one error.
Must not know: sockets, frames.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import anyio

from .errors import ChannelClosed, ConfirmsLost, ConnectionClosed, MessageReturned, PublishNacked

__all__ = ["Confirmation", "ConfirmTracker", "wait_all", "failure_of"]


class Confirmation:
    """The broker's answer to one confirm-mode publish. ``await c.wait(timeout)`` returns when it
    was acked and raises ``PublishNacked`` (Basic.Nack), ``MessageReturned`` (mandatory, 312
    NO_ROUTE), ``ConnectionClosed``/``ChannelClosed`` (lost before the answer: the broker may or
    may not have the message; a reconnect does not change that, the publish is not re-sent) or
    ``TimeoutError``. ``done``: answered (or failed) already; ``error``: the failure, None when
    acked or not answered yet; ``delivery_tag``: its tag on the connection it was sent on;
    ``reported``: its failure was already raised to the caller (by ``wait``, ``wait_all``,
    ``Channel.wait_for_confirms``...), so ``wait_for_confirms`` does not report it again."""

    __slots__ = ("delivery_tag", "error", "done", "reported", "_event")

    def __init__(self, delivery_tag: int) -> None:
        self.delivery_tag = delivery_tag
        self.error: BaseException | None = None
        self.done = False
        self.reported = False
        self._event: anyio.Event | None = None

    def _settle(self, error: BaseException | None) -> None:
        if self.done:
            return
        if self.error is None:
            self.error = error
        self.done = True
        if self._event is not None:
            self._event.set()

    async def _answered(self) -> None:
        if not self.done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds; None: forever) for the answer; see class doc."""
        if not self.done:
            with anyio.fail_after(timeout):
                await self._answered()
        if self.error is not None:
            self.reported = True
            raise self.error


def failure_of(confirmations: Iterable[Confirmation | None]) -> BaseException | None:
    """The one error that sums up the failed ones among ``confirmations`` (None entries and
    unanswered or acked ones are skipped), or None when none failed; marks them ``reported``.

    In this order: the ``ChannelClosed`` that failed one (the channel is gone, e.g. 404 for a
    missing exchange); ``ConfirmsLost`` counting those lost with the connection; ``PublishNacked``
    with every nacked tag; the first ``MessageReturned``."""
    failed = [c for c in confirmations if c is not None and c.error is not None]
    if not failed:
        return None
    for c in failed:
        c.reported = True
    lost: list[Confirmation] = []
    nacked: list[int] = []
    returned: BaseException | None = None
    for c in failed:
        error = c.error
        if isinstance(error, ChannelClosed):
            return error
        if isinstance(error, ConnectionClosed):
            lost.append(c)
        elif isinstance(error, PublishNacked):
            nacked.extend(error.delivery_tags)
        elif returned is None:
            returned = error
    if lost:
        return ConfirmsLost(len(lost), lost[0].error,  # type: ignore[arg-type]
                            [c.delivery_tag for c in lost[:1000]])
    if nacked:
        return PublishNacked(nacked)
    return returned


async def wait_all(confirmations: Iterable[Confirmation | None],
                   timeout: float | None = None) -> None:
    """Wait until every one of ``confirmations`` is answered (all within ``timeout`` seconds;
    None: no limit; ``TimeoutError``), then raise ``failure_of`` them if any failed (see there:
    ``ChannelClosed``, ``ConfirmsLost``, ``PublishNacked``, ``MessageReturned``). None entries
    (publishes outside confirm mode) are skipped."""
    items = [c for c in confirmations if c is not None]
    if any(not c.done for c in items):
        with anyio.fail_after(timeout):
            for c in items:
                if not c.done:
                    await c._answered()
    error = failure_of(items)
    if error is not None:
        raise error


class ConfirmTracker:
    """Unsettled publishes of one confirm-mode channel (see module docstring), and the failures
    (nacked, or lost with the connection or channel) not yet reported by ``wait_all``: those
    survive ``reset`` (a reconnect), so a lost publish is never forgotten silently."""

    def __init__(self) -> None:
        self.failed: list[Confirmation] = []
        self.batch_returned: list[Any] = []
        self.all_done: anyio.Event | None = None
        self.reset()

    def reset(self) -> None:
        """Start over at tag 1 (new channel after a reconnect); unreported failures are kept."""
        self.next_tag = 1
        self.pending: dict[int, Confirmation] = {}
        self.lowest = 1
        self.mandatory: deque[tuple[int, str, str]] = deque()
        self.returned: dict[int, MessageReturned] = {}

    def _record_failed(self, confirmations: Iterable[Confirmation]) -> None:
        failed = self.failed
        failed.extend(confirmations)
        if len(failed) > 4096:  # callers that only ever wait per message: forget what they saw
            self.failed = [c for c in failed if not c.reported]

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
                confirmation._settle(PublishNacked([t]))
                self._record_failed((confirmation,))
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
        self._record_failed(pending.values())
        self.mandatory.clear()
        self.returned.clear()
        if self.all_done is not None:
            self.all_done.set()

    async def wait_all(self, timeout: float) -> tuple[list[Confirmation], list[Any]]:
        """Wait (``timeout`` seconds, ``TimeoutError``) until nothing is unsettled; returns and
        clears (failed confirmations not reported yet: nacked or lost, returned messages) since
        the last call."""
        with anyio.fail_after(timeout):
            while self.pending:
                self.all_done = anyio.Event()
                await self.all_done.wait()
        self.all_done = None
        failed, self.failed = self.failed, []
        returned, self.batch_returned = self.batch_returned, []
        return [c for c in failed if not c.reported], returned
