"""Creating a log's directory so that a power cut cannot take it away.

Owns one rule: ``mkdir -p`` of a directory that holds durable files, then an fsync of the parent
of every directory it created, top down. fsync(2) of a file (or of the directory holding it) does
not make the directory entries *leading to* that directory durable (Linux fsync(2): "Calling
fsync() does not necessarily ensure that the entry in the directory containing the file has also
reached disk. For that an explicit fsync() on a file descriptor for the directory is also
needed."), so a log created in a new ``quorum/<group>/`` could lose the whole directory, synced
entries and all, at a power cut. Found by the fault harness's ``power-loss-all`` nemesis
(issue 24). Must not know: what the files are.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "make_durable_dirs"]


def fsync_dir(directory: Path | str) -> None:
    """fsync ``directory`` (its entries become durable). Raises ``OSError``."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable_dirs(directory: Path, fsync: bool = True) -> list[Path]:
    """Create ``directory`` and its missing parents; with ``fsync``, fsync the parent of each one
    created (outermost first) before returning. Returns the directories created, outermost first
    (empty when it existed). Raises ``OSError`` (``NotADirectoryError`` when a part is a file)."""
    missing: list[Path] = []
    path = Path(directory)
    while not path.is_dir() and path != path.parent:
        missing.append(path)
        path = path.parent
    missing.reverse()
    for d in missing:
        d.mkdir(exist_ok=True)
    if fsync:
        for d in missing:
            fsync_dir(d.parent)
    return missing
