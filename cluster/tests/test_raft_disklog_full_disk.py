"""A full disk (ENOSPC) under a Raft log, on a real tmpfs that a filler file fills: a group
commit whose write runs out of space leaves the segment as it was, ``flush()`` raises, reports
nothing durable and keeps the buffer; once space is back the next ``sync()`` writes it whole and
reports it, and a reopen finds every entry and no loss. Before ``fds.append_all``, the part of the
batch that fitted stayed in the segment and the retry wrote the batch again after it: the reopen
cut the log at that torn record, losing entries a sync had reported durable (a replica that had
acknowledged them). Needs root (mount)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from cluster.raft.disklog import DiskLog
from cluster.raft.messages import Entry, EntryKind
from queues.store.tests.small_fs import UNAVAILABLE, fill, free, small_fs

pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def test_a_batch_that_runs_out_of_space_is_undone_and_written_whole_later(tmp_path: Path
                                                                           ) -> None:
    with small_fs(tmp_path / "fs") as fs:
        log = DiskLog(fs / "replica")
        log.append(1, tuple(Entry(i, 1, EntryKind.COMMAND, b"cmd%d" % i) for i in range(1, 6)))
        assert log.sync() == (5, 1)
        (segment,) = sorted((fs / "replica").glob("*.seg"))
        size = segment.stat().st_size
        fill(fs)
        big = Entry(6, 1, EntryKind.COMMAND, b"x" * 20_000)   # more than the page's slack
        log.append(6, (big,))
        with pytest.raises(OSError) as failed:
            log.flush()
        assert failed.value.errno == errno.ENOSPC
        assert segment.stat().st_size == size        # nothing of the batch on disk
        free(fs)
        assert log.sync() == (6, 1)                  # reported once it is written
        log.close()
        again = DiskLog(fs / "replica")
        try:
            assert again.lost is None
            assert [e.index for e in again.load().entries] == [1, 2, 3, 4, 5, 6]
            assert again.load().entries[-1] == big
        finally:
            again.close()
