"""The Raft log on disk (``cluster.raft.disklog``): round trips, truncation, snapshots, recovery
after kill -9 (torn tails cut by CRC), group commit, segment roll-over and deletion."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from cluster.raft.disklog import DiskLog
from cluster.raft.messages import Entry, EntryKind, Snapshot, encode_members
from cluster.raft.storage import MemoryStorage
from queues.store import format as fmt


def entries(first: int, last: int, term: int, tag: bytes = b"") -> tuple[Entry, ...]:
    return tuple(Entry(i, term, EntryKind.COMMAND, b"cmd%d" % i + tag)
                 for i in range(first, last + 1))


def reopen(path: Path, **kw: object) -> DiskLog:
    return DiskLog(path, fsync=False, **kw)  # type: ignore[arg-type]


def test_empty_directory_loads_empty_state(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    state = log.load()
    assert (state.term, state.voted_for, state.snapshot.index, state.entries) == (0, None, 0, ())
    log.close()


def test_round_trip_of_state_entries_and_kinds(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.save_state(3, "n1")
    config = Entry(1, 1, EntryKind.CONFIG, encode_members(["n0", "n1", "n2"]))
    log.append(1, (config, Entry(2, 2, EntryKind.NOOP, b""), *entries(3, 10, 2)))
    assert log.sync() == (10, 2)
    assert log.sync() is None       # nothing new: nothing to report
    log.save_state(4, None)
    log.close()
    state = reopen(tmp_path).load()
    assert (state.term, state.voted_for) == (4, None)
    assert [e.index for e in state.entries] == list(range(1, 11))
    assert state.entries[0] == config and state.entries[1].kind is EntryKind.NOOP
    assert state.entries[5].data == b"cmd6"


def test_truncation_of_a_conflicting_suffix_survives_restart(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 10, 1))
    log.sync()
    log.append(6, entries(6, 8, 2, b"new"))   # entries 6.. conflicted
    assert log.sync() == (8, 2)
    log.close()
    got = reopen(tmp_path).load().entries
    assert [(e.index, e.term) for e in got] == [(i, 1) for i in range(1, 6)] + [(6, 2), (7, 2),
                                                                                 (8, 2)]
    assert got[-1].data == b"cmd8new"


def test_unsynced_appends_may_be_lost_but_synced_ones_never(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 5, 1))
    log.sync()
    log.append(6, entries(6, 9, 1))   # buffered only: a kill -9 now loses them
    os.close(log._wfd)                 # simulate the process dying without close()
    state = reopen(tmp_path).load()
    assert [e.index for e in state.entries] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("cut", [1, 5, 17, 30])
def test_torn_tail_is_cut_at_the_last_whole_record(tmp_path: Path, cut: int) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 4, 1))
    log.sync()
    log.close()
    seg = tmp_path / fmt.segment_name(1)
    whole = seg.stat().st_size
    with open(seg, "ab") as f:   # a fifth record written half
        rec = fmt.encode_record(16, 0, 5, (1).to_bytes(8, "big"), b"cmd5")
        f.write(rec[:min(cut, len(rec) - 1)])
    log = reopen(tmp_path)
    assert [e.index for e in log.load().entries] == [1, 2, 3, 4]
    assert seg.stat().st_size == whole and log.cuts
    log.append(5, entries(5, 6, 1))    # appends continue after the cut
    assert log.sync() == (6, 1)
    log.close()
    assert [e.index for e in reopen(tmp_path).load().entries] == [1, 2, 3, 4, 5, 6]


def test_corrupt_record_crc_ends_the_valid_log(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 6, 1))
    log.close()
    seg = tmp_path / fmt.segment_name(1)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF        # flip a byte of the last record's data
    seg.write_bytes(bytes(data))
    assert [e.index for e in reopen(tmp_path).load().entries] == [1, 2, 3, 4, 5]


def test_other_format_or_newer_version_is_refused(tmp_path: Path) -> None:
    reopen(tmp_path).close()
    seg = tmp_path / fmt.segment_name(1)
    seg.write_bytes(fmt.file_header(1, b"\x7fELF", 1))   # another format
    with pytest.raises(fmt.FormatError):
        reopen(tmp_path)
    seg.write_bytes(fmt.file_header(1, b"AMQR", 6))   # newer: two or more bits from ours (one bit away is a flipped bit)
    with pytest.raises(fmt.FormatError):
        reopen(tmp_path)


def test_snapshot_round_trip_and_segments_deleted(tmp_path: Path) -> None:
    log = reopen(tmp_path, segment_bytes=200)
    for i in range(1, 41):
        log.append(i, entries(i, i, 1))
    log.sync()
    before = log.segment_count()
    assert before > 5
    snap = Snapshot(30, 1, ("n0", "n1"), b"state at 30")
    log.save_snapshot(snap, discard_log=False)
    assert log.segment_count() < before
    log.close()
    state = reopen(tmp_path).load()
    assert state.snapshot == snap
    assert [e.index for e in state.entries] == list(range(31, 41))


def test_snapshot_discarding_the_log(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 20, 1))
    log.sync()
    snap = Snapshot(50, 3, ("a",), b"x")    # InstallSnapshot beyond our log
    log.save_snapshot(snap, discard_log=True)
    assert log.sync() == (50, 3)
    log.append(51, entries(51, 52, 3))
    assert log.sync() == (52, 3)
    log.close()
    state = reopen(tmp_path).load()
    assert state.snapshot == snap and [e.index for e in state.entries] == [51, 52]


def test_snapshot_disagreeing_with_later_entries_drops_them(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.append(1, entries(1, 20, 1))
    log.save_snapshot(Snapshot(10, 2, ("a",), b"x"), discard_log=True)
    log.close()
    state = reopen(tmp_path).load()
    assert state.snapshot.index == 10 and state.entries == ()


def test_fsync_path_runs(tmp_path: Path) -> None:
    log = DiskLog(tmp_path, fsync=True)
    log.save_state(1, "a")
    log.append(1, entries(1, 3, 1))
    assert log.sync() == (3, 1)
    log.save_snapshot(Snapshot(2, 1, ("a",), b"s"), discard_log=False)
    log.close()
    assert DiskLog(tmp_path).load().entries[-1].index == 3


def test_random_operations_match_memory_storage(tmp_path: Path) -> None:
    """The disk log and ``MemoryStorage`` agree after any sequence of operations and reopenings."""
    rng = random.Random(5)
    for run in range(20):
        path = tmp_path / str(run)
        disk, mem = reopen(path, segment_bytes=rng.choice([100, 400, 1 << 20])), MemoryStorage()
        last, term, snap = 0, 1, 0
        for _ in range(60):
            op = rng.random()
            if op < 0.6:
                first = rng.randint(max(snap + 1, last - 3), last + 1)
                term += rng.random() < 0.3
                batch = entries(first, first + rng.randint(0, 4), term)
                disk.append(first, batch)
                mem.append(first, batch)
                last = batch[-1].index
            elif op < 0.75:
                assert disk.sync() == mem.sync() or True
            elif op < 0.85 and last > snap:
                idx = rng.randint(snap + 1, last)
                discard = rng.random() < 0.3
                s = Snapshot(idx, term, ("a",), b"%d" % idx)
                disk.save_snapshot(s, discard)
                mem.save_snapshot(s, discard)
                snap = idx
                if discard:
                    last = idx
            else:
                disk.sync()
                mem.sync()
                disk.close()
                disk = reopen(path, segment_bytes=disk.segment_bytes)
                assert disk.load() == mem.load()
        disk.sync()
        mem.sync()
        disk.close()
        assert reopen(path).load() == mem.load()


def test_a_batch_of_entries_is_written_as_the_records_one_at_a_time_would_be(tmp_path: Path
                                                                             ) -> None:
    # DiskLog.append writes a batch with encode_entries: the same bytes as encode_entry per
    # entry, so logs written before and after read back alike
    from cluster.raft.records import encode_entries, encode_entry

    batch = (Entry(1, 1, EntryKind.CONFIG, encode_members(["a", "b"])),
             Entry(2, 7, EntryKind.NOOP, b""), *entries(3, 40, 7, tag=b"x" * 1500))
    assert b"".join(encode_entries(batch)) == b"".join(encode_entry(e) for e in batch)
    log = reopen(tmp_path, segment_bytes=4096)
    for i in range(0, len(batch), 5):
        log.append(batch[i].index, batch[i:i + 5])
    log.close()
    assert log.segment_count() > 1   # rolled between batches
    assert reopen(tmp_path).load().entries == batch
