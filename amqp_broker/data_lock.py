"""One broker per data directory: an exclusive lock on ``<data-dir>/broker.lock``.

Two brokers on one data directory would append to one message store, one SQLite file and one
Raft log each: a newcomer meets it by running a second ``make run`` or ``amqp-broker --port 5673``
from the same checkout (both use ``data/`` there). The first broker holds an ``flock`` on
``broker.lock`` (with its pid in it) for its whole life; a second one stops at start, before it
reads anything, with exit code 1 and one line naming the directory, the holder's pid and the flag
that moves it. The kernel drops the lock when the process ends, ``kill -9`` and power loss
included, so a crashed broker never leaves a stale lock behind. RabbitMQ gets the same guarantee
from its node name (a second node of one name refuses to start: "node with name ... already
running"), its data directory being per node name; ours is per directory. Where the file system
cannot lock (``flock`` unsupported), the broker logs a warning and runs unlocked.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

__all__ = ["LOCK_NAME", "DataDirInUse", "lock", "unlock"]

log = logging.getLogger(__name__)

#: The lock file's name in the data directory (it holds the holder's pid, a decimal line).
LOCK_NAME = "broker.lock"


class DataDirInUse(OSError):
    """Another live process holds the data directory's lock (errno ``EBUSY``); the message names
    the directory, the holder's pid when it could be read, and ``--data-dir``."""


def _holder(fd: int) -> str:
    """The pid written in the lock file, "" when it cannot be read."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def lock(data_dir: Path | str) -> int:
    """Create ``data_dir`` when missing, lock ``data_dir/broker.lock`` for this process and write
    its pid there; returns the lock's file descriptor (keep it open while the broker runs, then
    ``unlock``). Raises ``DataDirInUse`` when another process holds the lock, ``OSError`` when
    the directory or the file cannot be made."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder(fd)
        os.close(fd)
        by = f"another broker (pid {pid})" if pid else "another broker"
        raise DataDirInUse(errno.EBUSY, f"data directory {directory} is in use by {by}; stop "
                           "it, or give this one its own --data-dir") from None
    except OSError as exc:   # e.g. ENOLCK/EOPNOTSUPP on a file system without flock
        log.warning("data directory %s: cannot lock %s (%s); running without the lock",
                    directory, LOCK_NAME, exc)
        return fd
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock(fd: int) -> None:
    """Release the lock taken by ``lock`` (closing its descriptor releases the ``flock``)."""
    try:
        os.close(fd)
    except OSError:
        pass
