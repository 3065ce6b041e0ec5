"""A full disk (ENOSPC) under the message store, on a real tmpfs that a filler file fills: a
write that runs out of space leaves no partial record behind, ``flush()`` raises and keeps the
buffer, and once space is back the same buffer is written and synced, and every message comes
back after a reopen. Before ``fds.append_all``, the part of a record that fitted stayed in the
file and the retry wrote the whole buffer after it: recovery then cut the file at that torn
record, losing the retried messages that had been synced (and confirmed). Needs root (mount)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from queues.store import MessageStore

from .small_fs import UNAVAILABLE, fill, free, small_fs
from .support import bodies, msg, segment_files

pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def test_a_write_that_runs_out_of_space_is_undone_and_retried_whole(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs") as fs:
        store = MessageStore(fs / "store")
        store.append("q", msg("before"))
        durable = store.sync()
        (segment,) = segment_files(store.directory)
        size = segment.stat().st_size
        fill(fs)
        big = b"x" * 20_000      # more than the slack of the segment's last page: a short write
        sid = store.append("q", msg(big))
        with pytest.raises(OSError) as failed:
            store.flush()
        assert failed.value.errno == errno.ENOSPC
        assert segment.stat().st_size == size       # nothing of the record on disk
        assert store.durable_id == durable
        free(fs)
        assert store.sync() >= sid
        store.close()
        again = MessageStore(fs / "store")
        try:
            assert again.cuts == []
            assert bodies(again.recover(), "q") == [b"before", big]
        finally:
            again.close()
