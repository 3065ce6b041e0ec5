"""The workload of one run: declare the queue, run one publisher and one consumer per broker,
then drain every broker.

Per broker ``nK`` (0-based index ``i``): a publisher and a consumer pinned to it, one of each
library: pika publishes and aio-pika consumes on even ``i``, the other way round on odd ``i``, so
both libraries play both roles from 2 brokers up. The final drain (Jepsen's ``:drain`` phase,
after the nemesis has healed) consumes from every broker at once with pika until no delivery has
arrived for ``quiet_s`` seconds and every broker reports the queue empty (passive Queue.Declare
message count), or ``timeout`` seconds pass. A stream is drained differently (its messages stay):
one reader per broker from ``x-stream-offset: first`` until each has read as many offsets as the
stream holds there (``_unread``: the depth reported is what is left to read).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from .aio_clients import AioConsumer, AioLoop, AioPublisher
from .brokers import Brokers
from .clients_common import ClientSettings, IdSource
from .history import History
from .pika_clients import PikaConsumer, PikaPublisher, connection_parameters

__all__ = ["QueueRefused", "Workload", "declare_queue", "drain", "queue_depths", "serves_quorum"]


class QueueRefused(RuntimeError):
    """The broker refused to declare the queue (message: its reply code and text)."""


def declare_queue(url: str, settings: ClientSettings) -> None:
    """Declare the durable workload queue with ``settings.queue_args`` on broker ``url`` (and
    ``settings.exchange``, an ``x-delayed-message`` exchange bound to it, when set).
    Raises ``QueueRefused`` when the broker closes the channel (e.g. 406 for ``x-queue-type:
    quorum`` on a broker without replicated queues), ``pika.exceptions.AMQPError`` otherwise."""
    conn = pika.BlockingConnection(connection_parameters(url, 10))
    try:
        channel = conn.channel()
        try:
            channel.queue_declare(settings.queue, durable=True,
                                  arguments=dict(settings.queue_args) or None)
            if settings.exchange:   # delayed messages (issue 25): routed to it when due
                channel.exchange_declare(settings.exchange, "x-delayed-message", durable=True,
                                         arguments={"x-delayed-type": "direct"})
                channel.queue_bind(settings.queue, settings.exchange, settings.queue)
        except pika.exceptions.ChannelClosedByBroker as exc:
            raise QueueRefused(f"{exc.reply_code} {exc.reply_text}") from None
    finally:
        if conn.is_open:
            conn.close()


def serves_quorum(url: str, settings: ClientSettings) -> bool:
    """True when broker ``url`` accepts ``x-queue-type: quorum`` (a probe queue, deleted
    after). Raises ``pika.exceptions.AMQPError`` when the broker cannot be reached."""
    probe = ClientSettings(queue=f"{settings.queue}.probe", queue_args={"x-queue-type": "quorum"})
    try:
        declare_queue(url, probe)
    except QueueRefused:
        return False
    conn = pika.BlockingConnection(connection_parameters(url, 10))
    try:
        conn.channel().queue_delete(probe.queue)
    finally:
        if conn.is_open:
            conn.close()
    return True


def queue_depths(brokers: Brokers, settings: ClientSettings) -> dict[str, int | None]:
    """Each broker's message count for the queue (passive declare; None when it fails)."""
    depths: dict[str, int | None] = {}
    for b in brokers.brokers:
        try:
            conn = pika.BlockingConnection(connection_parameters(b.url, 10))
            try:
                ok = conn.channel().queue_declare(settings.queue, passive=True)
                depths[b.name] = ok.method.message_count
            finally:
                if conn.is_open:
                    conn.close()
        except (pika.exceptions.AMQPError, OSError):
            depths[b.name] = None
    return depths


@dataclass
class Workload:
    """Publishers and consumers of one run; ``start()``, ``stop_publishers()``,
    ``stop_consumers()``, ``close()`` (each bounded)."""

    brokers: Brokers
    settings: ClientSettings
    history: History
    ids: IdSource = field(default_factory=IdSource)
    publish_stop: threading.Event = field(default_factory=threading.Event)
    consume_stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    aio: AioLoop = field(default_factory=AioLoop)

    def start(self) -> None:
        """Start one publisher and one consumer per broker."""
        self.aio.start()
        s, h = self.settings, self.history
        for b in self.brokers.brokers:
            if b.index % 2 == 0:
                pub: Any = PikaPublisher(f"pub-{b.name}-pika", b.name, b.url, s, self.ids, h,
                                         self.publish_stop)
                self.threads.append(pub)
                pub.start()
                self.aio.spawn(AioConsumer(f"con-{b.name}-aio", b.name, b.url, s, h,
                                           self.consume_stop).run())
            else:
                self.aio.spawn(AioPublisher(f"pub-{b.name}-aio", b.name, b.url, s, self.ids, h,
                                            self.publish_stop).run())
                con = PikaConsumer(f"con-{b.name}-pika", b.name, b.url, s, h, self.consume_stop)
                self.threads.append(con)
                con.start()

    def stop_publishers(self) -> None:
        """Tell publishers to stop; they finish their outstanding confirms (bounded)."""
        self.publish_stop.set()

    def stop_consumers(self) -> None:
        """Tell consumers to stop."""
        self.consume_stop.set()

    def close(self, timeout: float | None = None) -> None:
        """Stop everything and wait at most ``timeout`` s (default confirm timeout + 10)."""
        self.publish_stop.set()
        self.consume_stop.set()
        limit = self.settings.confirm_timeout + 10 if timeout is None else timeout
        deadline = time.monotonic() + limit
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.aio.wait(max(0.0, deadline - time.monotonic()))
        self.aio.close()


def _unread(depths: dict[str, int | None], consumers: list[PikaConsumer],
            settings: ClientSettings) -> dict[str, int | None]:
    """For a stream (consuming does not remove its messages): per broker, the messages its
    drain reader has not read yet (the stream's length there minus the offsets it read); a
    queue's depths as they are."""
    if not settings.stream:
        return depths
    read = {c.broker: len(c.position.offsets) for c in consumers}
    return {b: None if d is None else d - read.get(b, 0) for b, d in depths.items()}


def drain(brokers: Brokers, settings: ClientSettings, history: History, quiet_s: float = 3.0,
          timeout: float = 90.0) -> dict[str, int | None]:
    """Consume from every broker at once until quiet (see the module docstring); returns the
    queue depths read at the end (``{broker: count or None}``)."""
    stop = threading.Event()
    drain_settings = ClientSettings(queue=settings.queue, queue_args=settings.queue_args,
                                    prefetch=500, reconnect_delay=0.5, max_connects=100,
                                    heartbeat=settings.heartbeat, stream=settings.stream)
    consumers = [PikaConsumer(f"drain-{b.name}", b.name, b.url, drain_settings, history, stop,
                              drain=True) for b in brokers.brokers]
    history.record("phase", phase="drain-start")
    for c in consumers:
        c.start()
    start = time.monotonic()
    depths: dict[str, int | None] = {}
    try:
        while time.monotonic() - start < timeout:
            time.sleep(0.5)
            last = max(c.last_delivery for c in consumers)
            if time.monotonic() - last < quiet_s:
                continue
            depths = _unread(queue_depths(brokers, settings), consumers, settings)
            if all(d == 0 for d in depths.values()):
                break
    finally:
        stop.set()
        for c in consumers:
            c.join(10)
    depths = _unread(queue_depths(brokers, settings), consumers, settings)
    history.record("phase", phase="drain-end", depths=depths,
                   deliveries=sum(c.deliveries for c in consumers))
    return depths
