"""Values the message store hands out: recovered messages, statistics, the fsync half of a group
commit, and its error type. Must not know: files other than the descriptors a PendingSync owns."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..message import Message

__all__ = ["StoreError", "RecoveredMessage", "StoreStats", "PendingSync"]

_fdatasync = getattr(os, "fdatasync", os.fsync)


class StoreError(Exception):
    """The store cannot serve a request: closed, unknown message, or a record failed its checksum."""


@dataclass(frozen=True, slots=True)
class RecoveredMessage:
    """One message a queue held when the store was last open.

    ``message.store_id`` equals ``store_id``. When ``body_loaded`` is False the body was left on disk
    (``message.body`` is ``b""``; page it in with ``MessageStore.read_body(store_id)``); the content
    header, and so the body size, is always there.
    """

    store_id: int
    message: Message
    redelivered: bool
    body_loaded: bool = True


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Figures for metrics. Bytes, counts; ``durable_id``: highest id covered by a sync."""

    files: int
    disk_bytes: int
    buffered_bytes: int
    live_messages: int
    live_bytes: int
    queues: int
    next_id: int
    durable_id: int


class PendingSync:
    """The fsync half of a group commit, made by ``MessageStore.flush()``.

    ``run()`` fdatasyncs the file descriptors it owns (duplicates, so a concurrent roll-over cannot
    close them) and fsyncs the directory when files were created; it touches no store state and
    may run in a worker thread. Then the store's thread calls ``MessageStore.synced(pending)``.
    ``durable_id`` is the highest store id this sync makes durable.
    """

    __slots__ = ("durable_id", "lsn", "_fds", "_dir_fd", "_fsync", "done")

    def __init__(self, durable_id: int, lsn: int, fds: list[int], dir_fd: int,
                 fsync: bool) -> None:
        self.durable_id = durable_id
        self.lsn = lsn
        self._fds = fds
        self._dir_fd = dir_fd  # -1: none
        self._fsync = fsync
        self.done = False

    def run(self) -> None:
        """fdatasync (skipped under policy "none") and close every owned descriptor. Idempotent;
        raises ``OSError`` when the disk refuses (the data is then not durable)."""
        if self.done:
            return
        fds, self._fds = self._fds, []
        dir_fd, self._dir_fd = self._dir_fd, -1
        try:
            if self._fsync:
                for fd in fds:
                    _fdatasync(fd)
                if dir_fd >= 0:
                    os.fsync(dir_fd)
        finally:
            for fd in fds:
                os.close(fd)
            if dir_fd >= 0:
                os.close(dir_fd)
        self.done = True
