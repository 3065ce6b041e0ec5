"""What a group commit does when its writes fail, shared by the message store's syncer
(``listener._store_syncer``) and the stream logs' (``app._stream_syncer``).

A write that fails (ENOSPC: a full disk, before the disk alarm stopped the publishers) leaves the
files whole and the writer's buffer kept (``fds.append_all``, ``StreamLog._write_out``): nothing
is confirmed for it, and the write is tried again every ``RETRY_SECONDS`` until it succeeds, logged
once when it starts failing and once when it works again. A failed fsync stops the broker
(fail-stop: after a failed fsync the page cache is not to be trusted, so no further confirm may go
out). Source: fsync(2); PostgreSQL's "fsyncgate" (2018) for why a failed fsync is not retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["RETRY_SECONDS", "WriteRetry"]

log = logging.getLogger(__name__)

#: Seconds between tries to write a buffer while its writes fail (ENOSPC).
RETRY_SECONDS = 0.5

T = TypeVar("T")


class WriteRetry:
    """The failing state of one group commit (``what``: its name in the log lines)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing = False

    async def flush(self, flush: Callable[[], T]) -> T | None:
        """``flush()`` (hand the buffers to the OS; returns the fsync to do). On ``OSError``:
        logged (once while it keeps failing), ``RETRY_SECONDS`` waited, None returned: the caller
        tries again."""
        try:
            result = flush()
        except OSError as exc:
            if not self.failing:
                log.error("%s: cannot write (%s); confirms wait, trying again every %g s",
                          self.what, exc, RETRY_SECONDS)
            self.failing = True
            await anyio.sleep(RETRY_SECONDS)
            return None
        if self.failing:
            log.warning("%s: writing again", self.what)
            self.failing = False
        return result

    async def fsync(self, run: Callable[[], object]) -> None:
        """``run()`` (the fsyncs) in a worker thread. Raises its ``OSError`` after a critical log
        line: the broker stops."""
        try:
            await anyio.to_thread.run_sync(run)
        except OSError as exc:
            log.critical("%s: write/fsync failed: %s; stopping the broker", self.what, exc)
            raise
