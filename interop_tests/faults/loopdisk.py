"""A small file system of its own under a broker's data dir, that the ``disk-full`` nemesis fills.

A :class:`LoopDisk` is an ext4 file system made with ``mkfs.ext4`` in an image file (a sparse file
of ``size`` bytes beside the data dir), attached to a free loop device (``losetup --find
--show``) and mounted on the data dir, on the host's mount namespace before the broker first
starts (``ip netns exec`` gives each broker a copy of it at start, as with
:mod:`interop_tests.faults.lazyfs_mount`), kept across the broker's restarts, unmounted and
detached at the end. ``-m 0``: no blocks reserved for root (the broker runs as root here, and
reserved blocks would hide a full disk from it).

:meth:`fill` takes space with a filler file (``posix_fallocate`` in chunks, then single blocks)
until at most ``leave`` bytes are free (``statvfs`` ``f_bavail``, what the broker's disk alarm
reads through ``shutil.disk_usage``); :meth:`free` deletes it. Both are bounded loops. Needs root,
``losetup``, ``mkfs.ext4``, ``mount`` and a loop device; :func:`unavailable_reason` says what is
missing. Errors: :class:`LoopDiskError` (a command failed; its stderr), ``OSError``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["FILLER", "LoopDisk", "LoopDiskError", "unavailable_reason"]

#: The filler file's name, in the file system's root (the broker's data dir).
FILLER = ".disk-full-filler"
_CHUNK = 1 << 20
_BLOCK = 4096


class LoopDiskError(RuntimeError):
    """A losetup/mkfs/mount command failed (message: the command and its stderr)."""


def _run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise LoopDiskError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout.strip()


def unavailable_reason() -> str | None:
    """Why a loop-mounted file system cannot be made here (None when it can): root,
    ``losetup``, ``mkfs.ext4``, ``mount`` and ``/dev/loop-control``."""
    if os.geteuid() != 0:
        return "loop devices and mounts need root"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control (loop devices)"
    return None


class LoopDisk:
    """An ext4 file system of ``size`` bytes in ``image``, mounted on ``mountpoint``
    (see the module docstring). ``start()`` / ``stop()`` (idempotent; stop never raises),
    ``fill(leave)`` / ``free()`` while mounted."""

    def __init__(self, mountpoint: Path, image: Path, size: int) -> None:
        self.mountpoint = mountpoint
        self.image = image
        self.size = size
        self.device: str | None = None

    @property
    def mounted(self) -> bool:
        """True between start() and stop()."""
        return self.device is not None

    def start(self) -> None:
        """Make the file system (a new image of ``size`` bytes), attach and mount it on
        ``mountpoint`` (made when missing; anything in it is hidden). Raises
        ``LoopDiskError``."""
        if self.mounted:
            return
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", str(self.image))
        device = _run("losetup", "--find", "--show", str(self.image))
        try:
            _run("mount", "-t", "ext4", device, str(self.mountpoint))
        except LoopDiskError:
            _run("losetup", "-d", device)
            raise
        self.device = device

    def free_bytes(self) -> int:
        """Bytes free for the broker now (``f_bavail`` × ``f_frsize``)."""
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> int:
        """Grow the filler file until at most ``leave`` bytes are free (0: as full as it gets:
        the next write of the broker fails with ENOSPC). Returns the filler's size in bytes.
        Raises ``OSError`` other than ENOSPC."""
        path = self.mountpoint / FILLER
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            cap = _CHUNK
            for _ in range(self.size // _CHUNK + 64):
                want = self.free_bytes() - leave
                if want <= 0:
                    break
                step = max(_BLOCK, min(cap, want) // _BLOCK * _BLOCK)
                try:
                    os.posix_fallocate(fd, size, step)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if step == _BLOCK:
                        break
                    cap = step // 2      # metadata took some: ask for less
                    continue
                size += step
            return size
        finally:
            os.close(fd)

    def free(self) -> None:
        """Delete the filler file (nothing when there is none)."""
        (self.mountpoint / FILLER).unlink(missing_ok=True)

    def stop(self) -> None:
        """Unmount (lazily, when busy) and detach the loop device; never raises. The image file
        stays (the caller's run directory removes it)."""
        device, self.device = self.device, None
        if device is None:
            return
        for cmd in (["umount", str(self.mountpoint)], ["umount", "-l", str(self.mountpoint)]):
            if subprocess.run(cmd, capture_output=True, check=False, timeout=60).returncode == 0:
                break
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False, timeout=60)
