"""All stream logs of one broker: where they live on disk, and their shared group commit.

Owns: the streams directory (``<data_dir>/streams/<vhost>/<queue>/``, names escaped so that any
AMQP name is one safe path component), opening and forgetting logs, and group commit for every
stream at once: ``flush()`` hands all buffered records to the OS and returns a ``StreamSync``
(the fsync half, runnable in a worker thread); ``synced(sync)`` marks that group commit's
generation safe and tells the publishers watching (the manager is a ``queues.queue_type.SafeSource``
whose tokens are generations: a stream publish is safe once the commit after it synced).
Must not know: channels, confirms, event loops (the broker's I/O layer drives ``flush``/``synced``).

Sync policies (as the message store's ``--sync-policy``): "batch" and "always" fdatasync in the
sync; "none" only hands data to the OS (survives kill -9, not power loss).
Source: DESIGN.md section 5 (group commit, confirms after the fsync); "RabbitMQ: Streams" (a
confirm means the message is persisted).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ..queue_type import SafeWaiter
from .log import StreamLog

__all__ = ["StreamManager", "StreamSync", "escape_name"]

log = logging.getLogger(__name__)

_fdatasync = getattr(os, "fdatasync", os.fsync)


def escape_name(name: str) -> str:
    """``name`` as one path component: percent-encoded (``.`` too, so "." and ".." are safe); a
    result longer than 200 characters is cut and suffixed with a sha1 of the name."""
    escaped = urllib.parse.quote(name, safe="").replace(".", "%2E") or "%00"
    if len(escaped) > 200:
        digest = hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()
        escaped = f"{escaped[:150]}~{digest}"
    return escaped


class StreamSync:
    """The fsync half of a stream group commit (from ``StreamManager.flush``). ``run()`` may run in
    a worker thread: it fdatasyncs the owned descriptors, fsyncs the directories, closes them all;
    raises ``OSError`` when the disk refuses (the data is then not durable). Idempotent."""

    __slots__ = ("fds", "dir_fds", "generation", "fsync", "done")

    def __init__(self, fds: list[int], dir_fds: list[int], generation: int,
                 fsync: bool) -> None:
        self.fds = fds
        self.dir_fds = dir_fds
        #: Which group commit this is (1, 2, ...): appends made before its flush are durable
        #: once it ran.
        self.generation = generation
        self.fsync = fsync
        self.done = False

    def run(self) -> None:
        """fdatasync / fsync (skipped under policy "none") and close every owned descriptor."""
        if self.done:
            return
        fds, self.fds = self.fds, []
        dir_fds, self.dir_fds = self.dir_fds, []
        try:
            if self.fsync:
                for fd in fds:
                    _fdatasync(fd)
                for fd in dir_fds:
                    os.fsync(fd)
        finally:
            for fd in fds + dir_fds:
                os.close(fd)
        self.done = True


class StreamManager:
    """The stream logs of one broker under ``directory`` (see module doc).

    ``sync``: "batch" | "always" | "none". ``on_dirty()`` (set by the I/O layer's syncer) is called
    when there is something to flush; ``syncing`` is True while such a syncer runs -- without one
    the core confirms stream publishes at once (as it does for a broker without a message store).
    """

    def __init__(self, directory: Path | str, *, sync: str = "batch",
                 wall_clock: Callable[[], float] = time.time, cache_bytes: int = 4 << 20) -> None:
        self.directory = Path(directory)
        self.sync_policy = sync
        self.wall_clock = wall_clock
        self.cache_bytes = cache_bytes
        self.logs: dict[tuple[str, str], StreamLog] = {}
        self.on_dirty: Callable[[], None] | None = None
        self.syncing = False
        self.dirty = False
        self._generation = 0  # group commits started (flush calls)
        #: The last group commit that finished: appends made before its flush are durable.
        self.safe_generation = 0
        self._watchers: set[SafeWaiter] = set()
        self._new_dirs: set[Path] = set()

    def path_of(self, vhost: str, queue: str) -> Path:
        """The directory of stream ``queue`` in ``vhost``."""
        return self.directory / escape_name(vhost) / escape_name(queue)

    def open_log(self, vhost: str, queue: str, *, segment_bytes: int, max_bytes: int | None,
                 max_age_ms: int | None) -> StreamLog:
        """Open (recovering) or create the log of ``queue`` in ``vhost``; retention as given.
        Raises ``StreamFormatError`` / ``OSError``."""
        key = (vhost, queue)
        existing = self.logs.get(key)
        if existing is not None:
            existing.close()
        path = self.path_of(vhost, queue)
        if not path.exists():
            path.mkdir(parents=True, exist_ok=True)
            self._new_dirs.update((path.parent, self.directory, self.directory.parent))
        stream = StreamLog(path, max_segment_bytes=segment_bytes, max_bytes=max_bytes,
                           max_age_ms=max_age_ms, wall_clock=self.wall_clock,
                           cache_bytes=self.cache_bytes, on_dirty=self._mark_dirty)
        self.logs[key] = stream
        return stream

    def forget(self, vhost: str, queue: str) -> None:
        """The stream was deleted (its log already removed its files)."""
        self.logs.pop((vhost, queue), None)
        self._new_dirs.add(self.path_of(vhost, queue).parent)
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        if not self.dirty:
            self.dirty = True
            if self.on_dirty is not None:
                self.on_dirty()

    @property
    def next_generation(self) -> int:
        """The group commit that will cover an append made now (the safe-later token of a
        stream publish, ``queues.queue_type.SafeSource``)."""
        return self._generation + 1

    def watch(self, waiter: SafeWaiter) -> None:
        """Report group commits to ``waiter`` (``advance_safe(self, generation)``) until it
        says nothing waits any more; a flush is due."""
        self._watchers.add(waiter)
        self._mark_dirty()

    def flush(self) -> StreamSync:
        """Hand every log's buffered records to the OS; returns the fsync to do. Waiters registered
        so far ride on it. Raises ``OSError``: when a write fails (ENOSPC) every log keeps what it
        did not write and nothing is marked synced, so the next call covers it all."""
        for stream in self.logs.values():   # a write that fails (ENOSPC) takes nothing yet
            stream.write_out()
        self.dirty = False
        fds: list[int] = []
        dir_fds: list[int] = []
        try:
            for stream in self.logs.values():
                log_fds, dir_fd = stream.flush()
                fds += log_fds
                if dir_fd >= 0:
                    dir_fds.append(dir_fd)
            for path in self._new_dirs:
                try:
                    dir_fds.append(os.open(path, os.O_RDONLY))
                except FileNotFoundError:
                    pass
            self._new_dirs.clear()
        except BaseException:
            for fd in fds + dir_fds:
                os.close(fd)
            raise
        self._generation += 1
        return StreamSync(fds, dir_fds, self._generation, self.sync_policy != "none")

    def synced(self, sync: StreamSync) -> int:
        """``sync.run()`` finished: appends before its flush are durable. Tells the watchers;
        returns the generation now safe."""
        if not sync.done:
            raise RuntimeError("synced() before StreamSync.run() finished")
        if sync.generation > self.safe_generation:
            self.safe_generation = sync.generation
        for waiter in list(self._watchers):
            if waiter.advance_safe(self, self.safe_generation):
                self._watchers.discard(waiter)
        return self.safe_generation

    def sync_now(self) -> int:
        """flush + fsync in this thread + synced (tests, shutdown)."""
        sync = self.flush()
        sync.run()
        return self.synced(sync)

    def close(self) -> None:
        """Shutdown: flush, fsync and close every log (files kept)."""
        for key, stream in list(self.logs.items()):
            try:
                stream.close(fsync=self.sync_policy != "none")
            except OSError as exc:
                log.error("stream %s/%s: close failed: %s", key[0], key[1], exc)
        self.logs.clear()
