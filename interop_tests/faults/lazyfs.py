"""A FUSE passthrough file system that forgets, on command, what was not fsynced (power loss).

In the manner of Jepsen's LazyFS (dsrhaslab/lazyfs; nothing copied): mounted over a broker's data
dir, it passes every operation through to a *backing* directory beside it, and remembers what a
power cut would undo. On ``drop`` (the broker having been killed first) it puts the backing
directory back in the state the last fsyncs made durable; the broker then restarts on that.

What survives a power cut here (POSIX fsync(2), strictly; the Linux man page: "Calling fsync()
does not necessarily ensure that the entry in the directory containing the file has also reached
disk. For that an explicit fsync() on a file descriptor for the directory is also needed."):

* **File contents and size** (write, truncate, O_TRUNC) are durable once that file is fsynced or
  fdatasynced (the two are the same here). Writes reach the backing file at once (reads pass
  straight through); the first change to a durable byte range since the last fsync saves the
  durable bytes in memory (a per-file undo list: durable size, saved ranges), so ``drop`` writes
  them back and cuts the file to its durable size. Appends cost no memory.
* **Names** (create, mknod, mkdir, symlink, link, unlink, rmdir, rename, on both sides) are
  durable once their *parent directory* is fsynced: fsync of a new file does not make its name
  durable (ext4's ordered mode often does in practice; XFS and POSIX do not: we take the strict
  side, which is what "fsync the directory" code relies upon). The first name change in a
  directory since its last fsync snapshots its durable entries (name -> inode, is-dir); an
  unlinked or replaced file that a snapshot still names is kept in a trash directory beside the
  backing one, so ``drop`` can put it back. ``drop`` rebuilds the tree from the durable entries
  (hard links into a stage directory, then swapped in), so a renamed file can come back under its
  old name, a new one vanish, an unlinked one return, a rename seen in one directory only leave
  the file under both names.
* Attributes (chmod, chown, utimens) are durable at once (the brokers do not depend on them).

The ``drop`` command waits (at most 5 s) for the killed process's files to be released, then
answers what it undid. Everything from the mount's start counts as durable.

The process that mounts it and takes the ``drop`` command is
:mod:`interop_tests.faults.lazyfs_daemon`; the harness side is
:mod:`interop_tests.faults.lazyfs_mount`. Binding: mfusepy (ctypes over Debian's libfuse3).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["LazyFS", "Undo"]

Entries = dict[str, tuple[int, bool]]       # name -> (inode, is a directory)
F = TypeVar("F", bound=Callable[..., Any])
_MAX_DEPTH = 64                              # directory depth walked by drop (bounded)
_STAT_KEYS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_rdev", "st_blocks",
              "st_blksize")


def _locked(method: F) -> F:
    """Run a FUSE operation under the file system's lock (``drop`` runs in another thread)."""
    @functools.wraps(method)
    def wrapper(self: LazyFS, *args: Any) -> Any:
        with self._mutex:
            return method(self, *args)
    return wrapper  # type: ignore[return-value]


@dataclass
class Undo:
    """What an fsync would make durable in one file: its durable ``size`` (bytes) and the durable
    bytes since overwritten, ``saved`` as (offset, bytes), oldest first."""

    size: int
    saved: list[tuple[int, bytes]] = field(default_factory=list)


def _entries(path: str) -> Entries:
    with os.scandir(path) as it:
        return {e.name: (e.inode(), e.is_dir(follow_symlinks=False)) for e in it}


class LazyFS:
    """The mfusepy ``Operations`` of the mount (duck-typed: mfusepy reads the methods defined).

    ``backing``: the directory served; ``state``: trash and stage directories (same file system).
    Raises ``OSError`` (answered to the caller as its errno) like the system calls it passes on."""

    use_ns = True               # utimens times in ns

    def __init__(self, backing: str, state: str) -> None:
        self.root = os.path.abspath(backing)
        self.root_ino = os.lstat(self.root).st_ino
        self.trash = os.path.join(state, "trash")
        self.stage = os.path.join(state, "stage")
        for d in (self.trash, self.stage):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        self._mutex = threading.RLock()
        self.fds: dict[int, tuple[int, bool]] = {}     # fd -> (inode, opened O_APPEND)
        self.undo: dict[int, Undo] = {}                # inode -> what its fsync would keep
        self.snaps: dict[int, Entries] = {}            # dir inode -> its durable entries
        self.refs: Counter[int] = Counter()            # inode -> names in snaps
        self.trashed: dict[str, int] = {}              # trash name -> inode
        self._serial = 0
        self.on_ready: Callable[[], None] | None = None

    # ----- helpers -----

    def _b(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def _parent(self, path: str) -> str:
        return self._b(os.path.dirname(path))

    def _touch_dir(self, directory: str) -> None:
        """A name in ``directory`` is about to change: snapshot its durable entries if it was
        clean (its entries durable as they are)."""
        ino = os.lstat(directory).st_ino
        if ino not in self.snaps:
            entries = _entries(directory)
            self.snaps[ino] = entries
            self.refs.update(i for i, _ in entries.values())

    def _forget(self, ino: int) -> None:
        if ino not in {i for i, _ in self.fds.values()}:
            self.undo.pop(ino, None)

    def _discard(self, path: str) -> None:
        """Remove ``path`` (file or empty directory), keeping it in the trash while a snapshot
        names its inode (a power cut may bring it back)."""
        st = os.lstat(path)
        if self.refs[st.st_ino] > 0:
            self._serial += 1
            name = f"{st.st_ino}-{self._serial}"
            os.rename(path, os.path.join(self.trash, name))
            self.trashed[name] = st.st_ino
            return
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)
            if st.st_nlink <= 1:
                self._forget(st.st_ino)

    def _collect(self) -> None:
        """Empty the trash of what no snapshot names any more."""
        for name, ino in list(self.trashed.items()):
            if self.refs[ino] <= 0:
                path = os.path.join(self.trash, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
                    self._forget(ino)
                del self.trashed[name]

    def _undo_for(self, ino: int, fd: int) -> Undo:
        u = self.undo.get(ino)
        if u is None:
            u = self.undo[ino] = Undo(os.fstat(fd).st_size)
        return u

    def _save(self, fd: int, u: Undo, offset: int, end: int) -> None:
        """Keep the durable bytes of ``[offset, end)`` before they change."""
        end = min(end, u.size)
        if offset < end:
            u.saved.append((offset, os.pread(fd, end - offset, offset)))

    def _register(self, fd: int, flags: int) -> int:
        self.fds[fd] = (os.fstat(fd).st_ino, bool(flags & os.O_APPEND))
        return fd

    @staticmethod
    def _backing_flags(flags: int) -> int:
        # read-write always (the undo reads what a write replaces); appends placed by us;
        # O_TRUNC done by us (libfuse3 passes it on: atomic_o_trunc) so that it saves the undo
        return (flags & ~(os.O_ACCMODE | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_TRUNC)
                | os.O_RDWR)

    def _opened(self, fd: int, flags: int) -> int:
        self._register(fd, flags)
        if flags & os.O_TRUNC:
            self.truncate(None, 0, fd)
        return fd

    # ----- FUSE operations: metadata -----

    def init(self, path: str) -> None:
        """Mounted: tell whoever waits."""
        if self.on_ready is not None:
            self.on_ready()

    @_locked
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        """stat(2) of the backing file (by handle when given)."""
        st = os.fstat(fh) if fh is not None else os.lstat(self._b(path or "/"))
        attrs: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        """access(2) on the backing path."""
        if not os.access(self._b(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def readlink(self, path: str) -> str:
        """readlink(2)."""
        return os.readlink(self._b(path))

    @_locked
    def readdir(self, path: str | None, fh: int) -> list[str]:
        """The backing directory's names (read through opendir's descriptor)."""
        return [".", "..", *os.listdir(fh)]

    def opendir(self, path: str) -> int:
        """A descriptor of the backing directory (fsyncdir finds its inode by it)."""
        return os.open(self._b(path), os.O_RDONLY | os.O_DIRECTORY)

    def releasedir(self, path: str | None, fh: int) -> int:
        """Close the directory's descriptor."""
        os.close(fh)
        return 0

    @_locked
    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        """The directory's names as they are now are durable."""
        entries = self.snaps.pop(os.fstat(fh).st_ino, None)
        if entries is not None:
            self.refs.subtract(i for i, _ in entries.values())
            self._collect()
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        """statvfs(3) of the backing file system."""
        sv = os.statvfs(self._b(path))
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                            "f_bavail", "f_files", "f_ffree", "f_favail",
                                            "f_flag", "f_namemax")}

    def chmod(self, path: str, mode: int) -> int:
        """chmod(2), durable at once."""
        os.chmod(self._b(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        """lchown(2), durable at once."""
        os.lchown(self._b(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        """utimensat(2) in ns, durable at once."""
        if times is None:
            os.utime(self._b(path), follow_symlinks=False)
        else:
            os.utime(self._b(path), ns=times, follow_symlinks=False)
        return 0

    # ----- names: durable when the parent directory is fsynced -----

    @_locked
    def mkdir(self, path: str, mode: int) -> int:
        """mkdir(2)."""
        self._touch_dir(self._parent(path))
        os.mkdir(self._b(path), mode)
        return 0

    @_locked
    def mknod(self, path: str, mode: int, dev: int) -> int:
        """mknod(2)."""
        self._touch_dir(self._parent(path))
        os.mknod(self._b(path), mode, dev)
        return 0

    @_locked
    def symlink(self, target: str, source: str) -> int:
        """A symbolic link at ``target`` whose text is ``source``."""
        self._touch_dir(self._parent(target))
        os.symlink(source, self._b(target))
        return 0

    @_locked
    def link(self, target: str, source: str) -> int:
        """A hard link at ``target`` to ``source``."""
        self._touch_dir(self._parent(target))
        os.link(self._b(source), self._b(target))
        return 0

    @_locked
    def unlink(self, path: str) -> int:
        """unlink(2); kept in the trash while a durable name points at it."""
        self._touch_dir(self._parent(path))
        if os.path.isdir(self._b(path)) and not os.path.islink(self._b(path)):
            raise OSError(errno.EISDIR, "unlink")
        self._discard(self._b(path))
        return 0

    @_locked
    def rmdir(self, path: str) -> int:
        """rmdir(2) (ENOTEMPTY as rmdir)."""
        b = self._b(path)
        self._touch_dir(self._parent(path))
        if not os.path.isdir(b) or os.path.islink(b):
            raise OSError(errno.ENOTDIR, "rmdir")
        if os.listdir(b):
            raise OSError(errno.ENOTEMPTY, "rmdir")
        self._discard(b)
        return 0

    @_locked
    def rename(self, old: str, new: str) -> int:
        """rename(2), replacing ``new`` (a replaced file stays in the trash while durable)."""
        src, dst = self._b(old), self._b(new)
        self._touch_dir(self._parent(old))
        self._touch_dir(self._parent(new))
        s = os.lstat(src)
        try:
            d = os.lstat(dst)
        except FileNotFoundError:
            d = None
        if d is not None:
            if d.st_ino == s.st_ino:
                return 0                        # POSIX: two links of one file: nothing happens
            if stat.S_ISDIR(d.st_mode):
                if not stat.S_ISDIR(s.st_mode):
                    raise OSError(errno.EISDIR, "rename")
                if os.listdir(dst):
                    raise OSError(errno.ENOTEMPTY, "rename")
            elif stat.S_ISDIR(s.st_mode):
                raise OSError(errno.ENOTDIR, "rename")
            self._discard(dst)
        os.rename(src, dst)
        return 0

    # ----- contents: durable when the file is fsynced -----

    @_locked
    def create(self, path: str, mode: int, flags: int) -> int:
        """open(2) with O_CREAT; the new name waits for its directory's fsync."""
        b = self._b(path)
        self._touch_dir(self._parent(path))
        fd = os.open(b, self._backing_flags(flags) | os.O_CREAT | (flags & os.O_EXCL), mode)
        return self._opened(fd, flags)

    @_locked
    def open(self, path: str, flags: int) -> int:
        """open(2) of the backing file (read-write underneath; the kernel checked access)."""
        return self._opened(os.open(self._b(path), self._backing_flags(flags)), flags)

    @_locked
    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        """pread(2)."""
        return os.pread(fh, size, offset)

    @_locked
    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        """pwrite(2) (at the end for an O_APPEND handle), saving durable bytes it replaces."""
        ino, append = self.fds[fh]
        if append:
            offset = os.fstat(fh).st_size
        u = self._undo_for(ino, fh)
        self._save(fh, u, offset, offset + len(data))
        return os.pwrite(fh, data, offset)

    @_locked
    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        """truncate(2) / ftruncate(2), saving the durable bytes it cuts."""
        fd = fh if fh is not None else os.open(self._b(path or "/"), os.O_RDWR)
        try:
            u = self._undo_for(os.fstat(fd).st_ino, fd)
            self._save(fd, u, length, os.fstat(fd).st_size)
            os.ftruncate(fd, length)
        finally:
            if fh is None:
                os.close(fd)
        return 0

    @_locked
    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        """fsync(2) / fdatasync(2): the file's contents are durable (not its name)."""
        self.undo.pop(self.fds[fh][0], None)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        """close(2) of one descriptor: nothing becomes durable."""
        return 0

    @_locked
    def release(self, path: str | None, fh: int) -> int:
        """The last descriptor closed; a file with no name left is forgotten."""
        if fh in self.fds:
            ino, _ = self.fds.pop(fh)
            if os.fstat(fh).st_nlink == 0:
                self._forget(ino)
            os.close(fh)
        return 0

    # ----- the power cut -----

    def pending(self) -> dict[str, int]:
        """What a power cut now would undo (the counts of :meth:`drop`, nothing undone)."""
        with self._mutex:
            where = self._where()
            return {"files": len(self.undo), "bytes": self._unsynced_bytes(where),
                    "dirs": len(self.snaps), "missing": 0}

    def _where(self) -> dict[int, str]:
        where: dict[int, str] = {self.root_ino: self.root}
        self._walk(self.root, where, 0)
        self._walk(self.trash, where, 0)
        return where

    def _unsynced_bytes(self, where: dict[int, str]) -> int:
        total = 0
        for ino, u in self.undo.items():
            path = where.get(ino)
            if path is not None and os.path.isfile(path) and not os.path.islink(path):
                total += max(0, os.lstat(path).st_size - u.size)
                total += sum(len(old) for _, old in u.saved)
        return total

    def drop(self, wait_s: float = 5.0) -> dict[str, Any]:
        """Undo everything not durable (see the module docstring); returns the counts."""
        deadline = time.monotonic() + wait_s
        while self.fds and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._mutex:
            for fd in list(self.fds):
                os.close(fd)
            self.fds.clear()
            where = self._where()
            lost = self._unsynced_bytes(where)
            for ino, u in self.undo.items():
                path = where.get(ino)
                if path is None or not os.path.isfile(path) or os.path.islink(path):
                    continue
                fd = os.open(path, os.O_RDWR)
                try:
                    for offset, old in reversed(u.saved):
                        os.pwrite(fd, old, offset)
                    os.ftruncate(fd, u.size)
                finally:
                    os.close(fd)
            names = self._undone_names(where)
            counts: dict[str, Any] = {
                "files": len(self.undo), "bytes": lost, "dirs": len(self.snaps),
                "missing": self._rebuild(where) if self.snaps else 0, "names": names}
            self.undo.clear()
            self.snaps.clear()
            self.refs.clear()
            self.trashed.clear()
            shutil.rmtree(self.trash, ignore_errors=True)
            os.makedirs(self.trash)
            return counts

    def _walk(self, path: str, where: dict[int, str], depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        with os.scandir(path) as it:
            for e in it:
                where.setdefault(e.inode(), e.path)
                if e.is_dir(follow_symlinks=False):
                    self._walk(e.path, where, depth + 1)

    def _undone_names(self, where: dict[int, str], limit: int = 20) -> list[str]:
        """The names a rebuild undoes, as ``+dir/name`` (comes back) and ``-dir/name`` (goes),
        at most ``limit``, relative to the root (``~`` for the trash)."""
        out: list[str] = []
        for ino, durable in self.snaps.items():
            path = where.get(ino)
            live = _entries(path) if path is not None and os.path.isdir(path) else {}
            rel = "?" if path is None else os.path.relpath(path, self.root)
            if path is not None and path.startswith(self.trash):
                rel = "~"
            changed = [f"-{name}" for name in sorted(live) if durable.get(name) != live[name]]
            changed += [f"+{name}" for name in sorted(durable) if live.get(name) != durable[name]]
            out += [f"{c[0]}{os.path.normpath(os.path.join(rel, c[1:]))}" for c in changed]
        return out[:limit]

    def _rebuild(self, where: dict[int, str]) -> int:
        """Make the backing tree the durable one: hard links in the stage, then swapped in.
        Returns the durable names whose inode was found nowhere."""
        shutil.rmtree(self.stage, ignore_errors=True)
        os.makedirs(self.stage)
        missing = 0
        todo = [(self.root_ino, self.root, self.stage, 0)]
        seen = {self.root_ino}
        while todo:
            ino, current, dest, depth = todo.pop()
            entries = self.snaps.get(ino)
            if entries is None:
                entries = _entries(current)
            for name, (child, is_dir) in entries.items():
                src = where.get(child)
                if src is None:
                    missing += 1
                    continue
                target = os.path.join(dest, name)
                if is_dir:
                    if child in seen or depth >= _MAX_DEPTH:
                        continue                  # a directory durable under two names
                    seen.add(child)
                    os.mkdir(target, stat.S_IMODE(os.lstat(src).st_mode))
                    todo.append((child, src, target, depth + 1))
                else:
                    os.link(src, target, follow_symlinks=False)
        with os.scandir(self.root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path)
                else:
                    os.unlink(e.path)
        with os.scandir(self.stage) as it:
            for e in it:
                os.rename(e.path, os.path.join(self.root, e.name))
        return missing
