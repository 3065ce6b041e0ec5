"""Handing the descriptors of a group commit to whoever runs the fsync.

Owns the one rule both append-only logs (the message store and the stream logs) follow when they
flush: the writers of files rolled since the last sync, a duplicate of the active writer when bytes
were written since, and the directory when files were created or removed since. The caller owns
the returned descriptors (fdatasync / fsync, then close; any thread); and how their buffers go to
the OS (:func:`append_all`): whole, or not at all when a write fails (a full disk: ENOSPC), so the
writer may try again later with the same buffer. Must not know: record formats.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["SyncSource", "append_all", "take_sync_fds"]


class SyncSource(Protocol):
    """A segment writer: rolled writers awaiting a sync, the active writer, dirty flags."""

    @property
    def directory(self) -> os.PathLike[str]:
        """The directory holding the segment files."""
        ...

    _rolled_fds: list[int]
    _wfd: int
    _dirty: bool
    _dir_dirty: bool


def take_sync_fds(writer: SyncSource) -> tuple[list[int], int]:
    """(file descriptors to fdatasync, directory descriptor to fsync or -1); clears the flags.
    Call after the writer's buffer went to the OS. Raises ``OSError`` from ``dup``/``open``."""
    fds, writer._rolled_fds = writer._rolled_fds, []
    if writer._dirty:
        fds.append(os.dup(writer._wfd))
        writer._dirty = False
    dir_fd = -1
    if writer._dir_dirty:
        dir_fd = os.open(writer.directory, os.O_RDONLY)
        writer._dir_dirty = False
    return fds, dir_fd


def append_all(fd: int, data: bytes | bytearray, size: int) -> None:
    """Write all of ``data`` to ``fd`` (opened ``O_APPEND``; it holds ``size`` bytes now), or
    none of it: when a ``write`` fails (ENOSPC on a full disk, EDQUOT, EIO) after part of ``data``
    went out, the file is cut back to ``size`` bytes and the ``OSError`` is raised, so the file
    holds no partial record and the caller, whose buffer is untouched, may try again once space is
    back (``write(2)``: a write that runs out of space writes less, then fails with ENOSPC).
    A write error is not an fsync error: nothing written earlier is in doubt, and no data was
    dropped from the page cache (unlike a failed fsync, after which a writer must stop)."""
    with memoryview(data) as view:
        done = 0
        try:
            while done < len(view):
                done += os.write(fd, view[done:])
        except OSError:
            if done:
                os.ftruncate(fd, size)
            raise
