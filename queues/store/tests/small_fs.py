"""A real, small file system for tests of what a full disk does: a tmpfs mounted on a test's
directory (``mount -t tmpfs -o size=N``; root only: :data:`UNAVAILABLE` says why not), filled to
the last byte by a filler file, freed by deleting it. Used by the message store's, the Raft
log's and the broker's full-disk tests; the fault harness's ``disk-full`` nemesis does the same
on ext4 loop devices (``interop_tests/faults/loopdisk.py``)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["FILLER", "UNAVAILABLE", "fill", "free", "small_fs"]

FILLER = "filler"
UNAVAILABLE: str | None = (
    "mounting a tmpfs needs root" if os.geteuid() != 0
    else "mount is not installed" if shutil.which("mount") is None else None)


@contextmanager
def small_fs(directory: Path, size: int = 1 << 20) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` bytes on ``directory`` (made when missing) for the ``with``
    block; yields ``directory``. Raises ``subprocess.CalledProcessError`` when mount fails."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True,
                          timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


def fill(directory: Path) -> int:
    """Write a filler file in ``directory`` until the file system is full (ENOSPC); returns its
    size in bytes. Bounded: at most 1 GiB in 64 KiB writes, then single bytes."""
    written = 0
    with open(directory / FILLER, "ab", buffering=0) as f:
        for chunk in (b"\0" * 65536, b"\0"):
            for _ in range((1 << 30) // len(chunk) if len(chunk) > 1 else 65536):
                try:
                    n = f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n or 0
    return written


def free(directory: Path) -> None:
    """Delete the filler file: the space comes back."""
    (directory / FILLER).unlink(missing_ok=True)
