"""The moving part of a shovel or federation link: take what the source delivered, publish it
to the destination at once, settle the source as the destination answers.

``forward`` takes every delivery already buffered by the source consumer in one go (up to
``MAX_BATCH``), publishes them all on the destination channel and wakes the writer once, so the
batch leaves in one socket write and the destination broker reads, stores and confirms it as a
batch (one group-commit fsync for many). ``Acker`` keeps the unsettled deliveries in publish
order (source delivery tag <-> the destination's ``Confirmation``, i.e. its publish sequence
number) and, whenever the destination's Basic.Ack/Nack (``multiple`` or not) settle the oldest
ones, acks the source once with ``multiple=true`` up to the highest acked one of that settled
prefix. In flight at most what the source's ``prefetch-count`` (Basic.Qos) lets it deliver
unacked: 1000 by default.

Outcomes, as RabbitMQ's amqp091 shovel (rabbit_amqp091_shovel.erl, 3.10: ``publish``,
``handle_dest``, ``confirm_to_inbound``): ``on-confirm`` acks a source message after the
destination confirmed it; a destination Basic.Nack is passed on as a Basic.Nack of that source
message (requeue: the source delivers it again) and the link goes on; both count as settled
for ``src-delete-after``. ``on-publish`` acks once the message was handed to the destination
socket, ``no-ack`` consumes without acks. A destination (connection or channel) lost before
its answer ends the run with that error: the source requeues every delivery not yet acked,
so a message may arrive twice, never be lost (at least once).
Source: RabbitMQ "Dynamic Shovels" (ack-mode, prefetch-count), "Consumer Acknowledgements and
Publisher Confirms" (multiple acks, nack).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import anyio

from clients.aio import Connection
from clients.channel import Channel, Confirmation, Consumer
from clients.errors import PublishNacked
from clients.message import Message

__all__ = ["Acker", "forward", "MAX_BATCH"]

#: deliveries taken from the source consumer's buffer and published in one socket write, at most
MAX_BATCH = 1000


class Acker:
    """Settles the source deliveries of one link in the order they were published (see the
    module docstring); counts them for ``src-delete-after``.

    ``add(tag, confirmation)``: one delivery published (``tag``: its source delivery tag, -1
    for no-ack; ``confirmation``: the destination's, None: settled as soon as it is first in
    line). ``close()``: no more will be added. ``run`` returns once ``limit`` were settled
    (``done`` is set) or after ``close`` once everything added was settled. ``acks`` /
    ``nacks`` count the Basic.Ack / Basic.Nack frames sent to the source. ``run`` raises what
    failed a confirmation other than a nack: the client's ``ConfirmsLost`` /
    ``ConnectionClosed`` / ``ChannelClosed`` (the destination went away), and the source
    channel's ``ChannelClosed`` / ``ConnectionClosed`` when the ack cannot be sent."""

    def __init__(self, src: Channel, limit: float) -> None:
        self.src = src
        self.limit = limit
        self.settled = 0
        self.acks = 0
        self.nacks = 0
        self.done = anyio.Event()
        self._pending: deque[tuple[int, Confirmation | None]] = deque()
        self._more = anyio.Event()
        self._closed = False

    def add(self, tag: int, confirmation: Confirmation | None) -> None:
        """One delivery published (see the class docstring)."""
        self._pending.append((tag, confirmation))
        if len(self._pending) == 1:
            self._more.set()

    def close(self) -> None:
        """Nothing more will be added: ``run`` returns once what was added is settled."""
        self._closed = True
        self._more.set()

    async def run(self) -> None:
        """Settle until ``limit`` or ``close`` (see the class docstring)."""
        pending = self._pending
        while True:
            if not pending:
                if self._closed:
                    return
                self._more = anyio.Event()
                await self._more.wait()
                continue
            head = pending[0][1]
            if head is not None and not head.done:
                try:
                    await head.wait()
                except PublishNacked:
                    pass   # settled below, in order
            if await self._settle_prefix():
                self.done.set()
                return

    async def _settle_prefix(self) -> bool:
        """Ack (and nack) the source for the answered deliveries at the head of the line;
        True once ``limit`` are settled."""
        pending = self._pending
        src = self.src
        last_acked = -1
        count = 0
        while pending:
            tag, conf = pending[0]
            if conf is not None:
                if not conf.done:
                    break
                error = conf.error
                if error is not None:
                    if not isinstance(error, PublishNacked):
                        conf.reported = True
                        raise error
                    conf.reported = True
                    # requeue=true, that one delivery only, as RabbitMQ's shovel does
                    await src.basic_nack(tag, multiple=False, requeue=True)
                    self.nacks += 1
                    pending.popleft()
                    count += 1
                    continue
            pending.popleft()
            count += 1
            if tag >= 0:
                last_acked = tag
        if last_acked >= 0:   # every unacked source delivery up to it (nacked ones are not)
            await src.basic_ack(last_acked, multiple=True)
            self.acks += 1
        self.settled += count
        return self.settled >= self.limit


async def forward(consumer: Consumer, dest: Connection, dest_ch: Channel, acker: Acker,
                  ack_mode: str, route: Callable[[Message], tuple[str, str, bytes] | None],
                  limit: float = math.inf) -> bool:
    """Publish each delivery of ``consumer`` through ``dest_ch`` (of ``dest``) where
    ``route(msg)`` says (exchange, routing key, encoded properties; None: drop it, settled at
    once) and hand it to ``acker`` (``ack_mode`` as a shovel's), a batch at a time (module
    docstring). Returns True after ``limit`` deliveries, False when the consumer ended
    (cancelled). Closes ``acker``. Raises the client's ``ChannelClosed`` /
    ``ConnectionClosed``. Used by the shovels and the federation links
    (``amqp_broker.federation``)."""
    received = 0
    no_ack = ack_mode == "no-ack"
    on_publish = ack_mode == "on-publish"
    try:
        async for first in consumer:
            batch = [first]
            room = min(MAX_BATCH, limit - received) - 1
            if room > 0:
                batch += consumer.take_nowait(int(room))
            tags: list[tuple[int, Confirmation | None]] = []
            for msg in batch:
                target = route(msg)
                conf = None
                if target is not None:
                    conf = dest_ch.publish_nowait(msg.body, target[0], target[1],
                                                  props_raw=target[2])
                tags.append((-1 if no_ack else msg.delivery_tag, conf))
            if on_publish:
                await dest.drain()   # written to the socket before the ack
            else:
                await dest.flush()
            for tag, conf in tags:
                acker.add(tag, conf)
            received += len(batch)
            if received >= limit:
                return True
        return False
    finally:
        acker.close()
