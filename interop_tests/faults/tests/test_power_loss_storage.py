"""The brokers' on-disk logs under a power cut, at the lowest level: each opened in a directory
of its own that it creates on a lazyfs mount, written and synced, then the unsynced writes and
names are dropped (:mod:`interop_tests.faults.lazyfs`) and the log is opened again.

What a sync promised must be there after the cut, new directories included: fsync(2) makes a
file's data durable, not the directory entries leading to it, so a log that creates
``quorum/<group>/`` must fsync ``quorum/`` (and the data dir) before it calls anything durable.
Found by the ``power-loss-all`` nemesis: every replica of a quorum queue came back with an empty
log (term 0, "log at index 1") and the confirmed messages were gone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.raft.disklog import DiskLog
from cluster.raft.messages import Entry, EntryKind
from interop_tests.faults.lazyfs_mount import LazyMount, unavailable_reason
from queues.store import MessageStore
from queues.store.tests.support import msg

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


def test_raft_disk_log_in_new_directories_survives_power_loss(
        mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    directory = root / "quorum" / "43768347aa1b8435"
    disk = DiskLog(directory)
    disk.save_state(3, "n2")
    disk.append(1, (Entry(1, 3, EntryKind.CONFIG, b"members"),
                    Entry(2, 3, EntryKind.COMMAND, b"enqueue 1")))
    assert disk.sync() == (2, 3)
    disk.close()
    dropped = mount.power_loss()
    reopened = DiskLog(directory)
    try:
        state = reopened.load()
        assert (state.term, state.voted_for) == (3, "n2"), dropped
        assert [(e.index, e.term, e.data) for e in state.entries] == [
            (1, 3, b"members"), (2, 3, b"enqueue 1")], dropped
    finally:
        reopened.close()


def test_message_store_in_a_new_directory_survives_power_loss(
        mnt: tuple[Path, LazyMount]) -> None:
    root, mount = mnt
    store = MessageStore(root / "messages")
    sid = store.append(["q"], msg(b"confirmed"))
    assert store.sync() >= sid
    store.close()
    dropped = mount.power_loss()
    reopened = MessageStore(root / "messages")
    try:
        recovered = reopened.recover()
        assert [r.message.body for r in recovered.get("q", [])] == [b"confirmed"], dropped
    finally:
        reopened.close()
