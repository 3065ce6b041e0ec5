"""TCP listener and the broker's periodic tasks (tick and memory watch, disk watch).

``run_broker`` serves until cancelled; each accepted plain socket gets ``serve_plain`` (each TLS
one ``serve_connection``, see ``amqps``). The ticker runs ``Broker.tick`` every 100 ms while the
broker is busy, less often while it is idle (``Broker.tick_delay``). The memory watch, on every
tick, raises the core's memory alarm while the message memory held by queues is above the
configured high watermark (RabbitMQ "Memory Alarms"; see ``Broker.message_memory``). The disk
watch raises the disk alarm while the data directory's file system has less free space than
``disk_free_limit`` (RabbitMQ "Disk Alarms": checked periodically, publishers blocked).
``rss_bytes`` reads the process RSS from /proc for logs and tests. Source: DESIGN.md §2 (server
layer).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from ..core.broker import TICK_SECONDS, Broker
from . import bind_errors
from .amqps import TlsServer, listen_tls
from .connection_io import serve_plain
from .group_commit import WriteRetry
from .plain_socket import PlainSocket, listen_plain
from .read_pacing import ReadPacer

__all__ = ["run_broker", "rss_bytes"]

log = logging.getLogger(__name__)

DISK_CHECK_SECONDS = 1.0
#: Seconds the ticker wakes after a deadline it was woken for (the loop's clock counts in ms).
WAKE_MARGIN = 0.002


def rss_bytes() -> int:
    """Resident set size of this process in bytes (0 when /proc is not available)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _TickTimer:
    """The ticker's sleep: until a moment on the loop's clock, brought forward by ``wake``
    (``Broker.on_wake``) when the broker wants its tick sooner."""

    __slots__ = ("loop", "clock", "at", "handle", "waiter")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.loop = asyncio.get_running_loop()
        self.clock = clock
        self.at = 0.0
        self.handle: asyncio.TimerHandle | None = None
        self.waiter: asyncio.Future[None] | None = None

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (or less, see ``wake``)."""
        self.waiter = self.loop.create_future()
        self.at = self.loop.time() + seconds
        self.handle = self.loop.call_at(self.at, self._ring)
        try:
            await self.waiter
        finally:
            self.handle.cancel()
            self.waiter = None

    def wake(self, when: float) -> None:
        """End the sleep by ``when`` (broker ``clock`` s; a little after, so the deadline that
        asked for it has passed when the tick looks)."""
        if self.waiter is None or self.handle is None:
            return
        at = self.loop.time() + max(0.0, when - self.clock()) + WAKE_MARGIN
        if at < self.at:
            self.at = at
            self.handle.cancel()
            self.handle = self.loop.call_at(at, self._ring)

    def _ring(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _ticker(broker: Broker) -> None:
    """``Broker.tick`` then the memory watch (one wake-up for both), every ``tick_delay`` s:
    every ``TICK_SECONDS`` while the broker is busy, up to ``IDLE_TICK_SECONDS`` while idle."""
    limit = broker.settings.memory_high_watermark_bytes
    timer = _TickTimer(broker.clock)
    broker.on_wake = timer.wake
    delay = TICK_SECONDS
    try:
        while True:
            await timer.sleep(delay)
            broker.tick()
            if limit:
                broker.set_memory_alarm(broker.message_memory() > limit)
            delay = broker.tick_delay(broker.clock())
    finally:
        broker.on_wake = None


async def _store_syncer(broker: Broker) -> None:
    """Group commit: whenever the message store has writes, flush them to the OS (this thread),
    fsync in a worker thread while the loop keeps accepting publishes, then release the confirms
    the sync covers. One fsync serves every message appended since the previous one. A write
    that fails (ENOSPC: a full disk, before the disk alarm stopped the publishers) leaves the
    store's files whole and its buffer kept (``queues.store.store``): no confirm goes out for
    it, and the write is tried again every ``group_commit.RETRY_SECONDS`` until it succeeds. A failed
    fsync stops the broker (fail-stop, see below)."""
    durability = broker.durability
    store = durability.store
    assert store is not None
    wake = anyio.Event()

    def on_dirty() -> None:
        wake.set()

    durability.on_dirty = on_dirty
    if durability.dirty:
        wake.set()
    writes = WriteRetry("message store")
    try:
        while True:
            await wake.wait()
            wake = anyio.Event()
            durability.begin_sync()
            pending = await writes.flush(store.flush)
            if pending is None:
                wake.set()
                continue
            await writes.fsync(pending.run)
            durable_id = store.synced(pending)
            durability.synced(durable_id)
            broker.run_dispatch()
    finally:
        durability.on_dirty = None


def disk_free_bytes(path: str | Path) -> int | None:
    """Free bytes available on the file system holding ``path``; None when it cannot be read."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def check_disk(broker: Broker, path: str | Path, limit: int) -> None:
    """Raise or clear the disk alarm for ``path`` against ``limit`` free bytes (an unreadable
    file system leaves the alarm as it is)."""
    free = disk_free_bytes(path)
    if free is not None:
        broker.set_alarm("disk", free < limit)


async def _disk_watch(broker: Broker, path: str | Path, limit: int) -> None:
    while True:
        check_disk(broker, path, limit)
        await anyio.sleep(DISK_CHECK_SECONDS)


async def run_broker(broker: Broker, host: str, port: int,
                     ready: Callable[[int], None] | None = None,
                     data_dir: str | Path | None = None, tls: TlsServer | None = None,
                     tls_port: int = 0, tls_ready: Callable[[int], None] | None = None) -> None:
    """Listen on ``host``:``port`` (0: any free port) and serve until cancelled; ``ready(port)`` is
    called once listening. With ``data_dir`` and a ``disk_free_limit_bytes`` setting, the disk
    alarm watches that directory's file system (checked once before listening). With ``tls``,
    the AMQPS listener is on ``tls_port`` too (bound before ``ready``; ``tls_ready(port)``
    before ``ready``). A listener that cannot bind raises ``bind_errors.BindError`` (an
    ``OSError`` naming the listener, its address and the flag to set)."""

    pacer = ReadPacer()
    group: list[TaskGroup] = []   # the task group serving, once it runs

    async def handle(sock: PlainSocket) -> None:
        try:
            await serve_plain(broker, sock, pacer=pacer)
        except Exception:
            log.exception("connection task failed")

    def on_open(sock: PlainSocket) -> None:
        if not group:
            sock.close()   # not serving any more
            return
        group[0].start_soon(handle, sock)

    with bind_errors.naming(bind_errors.AMQP, host, port):
        listener = await listen_plain(host, port, on_open)
    bound = listener.sockets[0].getsockname()[1]
    log.info("listening on %s:%s", host, bound)
    tls_listener = None
    if tls is not None:
        try:
            with bind_errors.naming(bind_errors.AMQPS, host, tls_port):
                tls_listener = await listen_tls(host, tls_port)
        except OSError:
            listener.close()
            raise
        tls_bound = tls_listener.extra(anyio.abc.SocketAttribute.local_port)
        log.info("TLS (amqps) listening on %s:%s", host, tls_bound)
    try:
        async with anyio.create_task_group() as tg:
            group.append(tg)
            await listener.start_serving()
            tg.start_soon(_ticker, broker)
            if broker.durability.store is not None:
                tg.start_soon(_store_syncer, broker)
            disk_limit = broker.settings.disk_free_limit_bytes
            if data_dir is not None and disk_limit:
                check_disk(broker, data_dir, disk_limit)
                tg.start_soon(_disk_watch, broker, data_dir, disk_limit)
            if tls is not None and tls_listener is not None:
                tg.start_soon(tls_listener.serve, tls.handle, tg)
                if tls_ready is not None:
                    tls_ready(tls_bound)
            if ready is not None:
                ready(bound)
            await anyio.sleep_forever()
    finally:
        group.clear()
        listener.close()
