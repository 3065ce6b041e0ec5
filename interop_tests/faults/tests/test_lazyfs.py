"""lazyfs, the power-loss file system: a real FUSE mount (Debian's libfuse3 through mfusepy) in a
temporary directory, used with ordinary file calls, then a ``drop`` (the power cut).

Semantics checked (see :mod:`interop_tests.faults.lazyfs`): contents survive when their file was
fsynced (or fdatasynced), names when their directory was; a rename, unlink, new file or new
directory entry whose directory was not fsynced is undone; a truncate or overwrite not fsynced
is undone; SQLite in WAL mode (the definitions store's settings) keeps a committed row and loses
nothing it committed. Skipped where FUSE cannot run (no /dev/fuse, fuse3 or mfusepy; not root).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from interop_tests.faults.lazyfs_mount import LazyMount, unavailable_reason

REASON = unavailable_reason() or (None if os.geteuid() == 0 else "not root")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"lazyfs unavailable: {REASON}")


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[tuple[Path, LazyMount]]:
    mount = LazyMount(tmp_path / "data", tmp_path / "data.disk", tmp_path / "data.lazyfs",
                      tmp_path / "lazyfs.log")
    mount.start()
    try:
        yield tmp_path / "data", mount
    finally:
        mount.stop()


def _write(path: Path, data: bytes, *, sync: bool, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_reads_back_what_was_written_and_passes_through(mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    _write(root / "a", b"hello", sync=False)
    _write(root / "a", b" world", sync=False, mode="ab")
    with open(root / "a", "r+b") as f:
        f.seek(1)
        f.write(b"E")
    assert (root / "a").read_bytes() == b"hEllo world"
    assert (root / "a").stat().st_size == 11
    assert (mount.backing / "a").read_bytes() == b"hEllo world"
    (root / "d").mkdir()
    os.rename(root / "a", root / "d" / "b")
    assert sorted(os.listdir(root)) == ["d"] and os.listdir(root / "d") == ["b"]
    assert mount.command("pending")["files"] == 1


def test_fsynced_data_and_names_survive_the_rest_is_dropped(
        mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    _write(root / "log", b"synced|", sync=True)
    _sync_dir(root)
    _write(root / "log", b"not synced", sync=False, mode="ab")
    _write(root / "new-synced-file", b"x", sync=True)       # its name: the directory's fsync
    dropped = mount.power_loss()
    assert (root / "log").read_bytes() == b"synced|"
    assert sorted(os.listdir(root)) == ["log"]
    assert dropped["files"] >= 1 and dropped["dirs"] == 1 and dropped["missing"] == 0
    assert dropped["bytes"] >= len(b"not synced")
    assert dropped["names"] == ["-new-synced-file"]


def test_fdatasync_keeps_data_and_a_second_power_loss_keeps_it(
        mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    with open(root / "seg", "wb") as f:
        f.write(b"one")
        f.flush()
        os.fdatasync(f.fileno())
        f.write(b"two")
    _sync_dir(root)
    mount.power_loss()
    assert (root / "seg").read_bytes() == b"one"
    _write(root / "seg", b"three", sync=True, mode="ab")
    mount.power_loss()
    assert (root / "seg").read_bytes() == b"onethree"


def test_overwrite_and_truncate_not_synced_are_undone(mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    _write(root / "f", b"0123456789", sync=True)
    _write(root / "g", b"abcdef", sync=True)
    _sync_dir(root)
    with open(root / "f", "r+b") as f:
        f.seek(2)
        f.write(b"XY")
        f.truncate(6)
        f.write(b"more")           # at 4 after the XY: "01XYmore"
    _write(root / "g", b"", sync=False)      # O_TRUNC, not synced
    assert (root / "f").read_bytes() == b"01XYmore" and (root / "g").read_bytes() == b""
    mount.power_loss()
    assert (root / "f").read_bytes() == b"0123456789"
    assert (root / "g").read_bytes() == b"abcdef"


def test_rename_without_directory_fsync_brings_the_old_file_back(
        mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    _write(root / "state", b"old", sync=True)
    _sync_dir(root)
    _write(root / "state.tmp", b"new", sync=True)
    os.replace(root / "state.tmp", root / "state")          # no directory fsync
    assert (root / "state").read_bytes() == b"new"
    mount.power_loss()
    assert sorted(os.listdir(root)) == ["state"]
    assert (root / "state").read_bytes() == b"old"
    _write(root / "state.tmp", b"newer", sync=True)
    os.replace(root / "state.tmp", root / "state")
    _sync_dir(root)                                         # the documented recipe
    mount.power_loss()
    assert sorted(os.listdir(root)) == ["state"]
    assert (root / "state").read_bytes() == b"newer"


def test_unlink_and_rename_across_directories(mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    (root / "a").mkdir()
    (root / "b").mkdir()
    _write(root / "a" / "f", b"f", sync=True)
    _write(root / "a" / "gone", b"g", sync=True)
    for d in (root / "a", root / "b", root):
        _sync_dir(d)
    (root / "a" / "gone").unlink()
    os.rename(root / "a" / "f", root / "b" / "f")
    _sync_dir(root / "b")             # b has the new name; a still has the old one
    mount.power_loss()
    assert sorted(os.listdir(root / "a")) == ["f", "gone"]      # unlink undone, rename too
    assert os.listdir(root / "b") == ["f"]
    assert (root / "a" / "f").read_bytes() == (root / "b" / "f").read_bytes() == b"f"
    assert (root / "a" / "gone").read_bytes() == b"g"
    (root / "a" / "gone").unlink()
    _sync_dir(root / "a")
    mount.power_loss()
    assert os.listdir(root / "a") == ["f"]


def test_new_directory_needs_its_own_fsync_for_its_entries(mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    (root / "q1").mkdir()
    _write(root / "q1" / "00000001.log", b"entries", sync=True)
    _sync_dir(root)                    # q1 is durable, its entry 00000001.log is not
    (root / "q2").mkdir()              # not durable at all
    mount.power_loss()
    assert sorted(os.listdir(root)) == ["q1"]
    assert os.listdir(root / "q1") == []


def test_sqlite_wal_keeps_committed_rows(mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    db = sqlite3.connect(root / "definitions.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE q (name TEXT)")
    db.execute("INSERT INTO q VALUES ('kept')")
    db.commit()
    db.close()
    mount.power_loss()
    db = sqlite3.connect(root / "definitions.db")
    try:
        assert db.execute("SELECT name FROM q").fetchall() == [("kept",)]
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
