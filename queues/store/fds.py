"""Handing the descriptors of a group commit to whoever runs the fsync.

Owns the one rule both append-only logs (the message store and the stream logs) follow when they
flush: the writers of files rolled since the last sync, a duplicate of the active writer when bytes
were written since, and the directory when files were created or removed since. The caller owns
the returned descriptors (fdatasync / fsync, then close; any thread). Must not know: record formats.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["SyncSource", "take_sync_fds"]


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
