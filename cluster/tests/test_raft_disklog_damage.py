"""A replica's files damaged while it was down (issue 24, the ``corrupt`` nemesis): flipped bits,
truncations, older copies put back. ``DiskLog`` must tell a loss of what it had made durable
(and so acknowledged) from a torn tail that was never synced, recover term and vote from their
second copy, and carry a recovery floor (``load().floor``) until it has caught up."""

from __future__ import annotations

import shutil
from pathlib import Path

from cluster.raft.disklog import DiskLog
from cluster.raft.marks import MARKS
from cluster.raft.messages import Entry, EntryKind, Snapshot
from queues.store import format as fmt


def entries(first: int, last: int, term: int) -> tuple[Entry, ...]:
    return tuple(Entry(i, term, EntryKind.COMMAND, b"cmd%d" % i) for i in range(first, last + 1))


def open_log(path: Path) -> DiskLog:
    return DiskLog(path, fsync=False)


def written(path: Path, last: int = 20, term: int = 2) -> Path:
    """A replica with entries 1..``last`` synced (acknowledged), term 3 and a vote; closed."""
    log = open_log(path)
    log.save_state(3, "n2")
    log.append(1, entries(1, last, term))
    assert log.sync() == (last, term)
    log.close()
    return path / fmt.segment_name(1)


def test_an_intact_replica_opens_without_a_floor(tmp_path: Path) -> None:
    written(tmp_path)
    log = open_log(tmp_path)
    state = log.load()
    assert (log.lost, state.floor, state.term, state.voted_for) == (None, 0, 3, "n2")
    assert state.entries[-1].index == 20


def test_an_unsynced_torn_tail_is_no_loss(tmp_path: Path) -> None:
    seg = written(tmp_path)
    log = open_log(tmp_path)
    log.append(21, entries(21, 25, 2))
    log.flush()            # written to the OS, never synced: killed before the fsync returned
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 7)      # and the last record torn
    log = open_log(tmp_path)
    assert log.lost is None and log.load().floor == 0
    assert log.load().entries[-1].index == 24


def test_a_truncated_synced_segment_is_a_loss_with_a_floor(tmp_path: Path) -> None:
    seg = written(tmp_path)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size // 2)
    log = open_log(tmp_path)
    state = log.load()
    assert log.lost and "no longer holds" in log.lost
    assert state.floor == 20 and state.entries[-1].index < 20
    log.close()
    again = open_log(tmp_path)                 # the floor stays until it has caught up
    assert again.load().floor == 20


def test_the_floor_clears_once_entries_up_to_it_are_appended_and_durable(tmp_path: Path) -> None:
    seg = written(tmp_path)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size // 2)
    log = open_log(tmp_path)
    last = log.load().entries[-1].index
    log.append(last + 1, entries(last + 1, 19, 2))
    log.sync()
    log.close()
    assert open_log(tmp_path).load().floor == 20       # 19 is not enough
    log = open_log(tmp_path)
    log.append(20, entries(20, 22, 3))
    log.sync()
    log.close()
    assert open_log(tmp_path).load().floor == 0


def test_a_flipped_bit_in_a_synced_record_is_a_loss(tmp_path: Path) -> None:
    seg = written(tmp_path)
    data = bytearray(seg.read_bytes())
    data[len(data) // 3] ^= 0x10
    seg.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert log.lost and log.load().floor == 20


def test_an_older_copy_of_the_segment_is_a_loss(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(1, entries(1, 10, 1))
    log.sync()
    shutil.copy(tmp_path / fmt.segment_name(1), tmp_path / "old")
    log.append(11, entries(11, 15, 1))
    log.sync()
    log.close()
    shutil.copy(tmp_path / "old", tmp_path / fmt.segment_name(1))
    log = open_log(tmp_path)
    assert log.lost and log.load().floor == 15 and log.load().entries[-1].index == 10


def test_a_truncate_record_written_but_not_synced_is_no_loss(tmp_path: Path) -> None:
    """A follower replaced a conflicting suffix (TRUNCATE + new entries) and was killed -9 before
    the fsync: its log now ends below the marked entry, but every byte that was durable is still
    there: not a loss (no false alarm after an ordinary kill)."""
    written(tmp_path, last=20, term=2)
    log = open_log(tmp_path)
    log.append(15, entries(15, 15, 4))
    log.flush()
    log = open_log(tmp_path)
    assert log.lost is None and log.load().entries[-1].index == 15


def test_an_older_copy_of_the_state_file_is_outvoted_by_its_copy_in_marks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.save_state(1, None)
    shutil.copy(tmp_path / "state", tmp_path / "old")
    log.save_state(4, "n1")      # voted in term 4
    log.close()
    shutil.copy(tmp_path / "old", tmp_path / "state")
    state = open_log(tmp_path).load()
    assert (state.term, state.voted_for, state.floor) == (4, "n1", 0)


def test_a_damaged_state_file_is_rebuilt_from_marks(tmp_path: Path) -> None:
    written(tmp_path)
    (tmp_path / "state").write_bytes(b"garbage")
    log = open_log(tmp_path)
    assert (log.load().term, log.load().voted_for, log.lost) == (3, "n2", None)
    log.close()
    assert (tmp_path / "state").read_bytes()[:4] == b"AMQR"


def test_damaged_marks_on_a_replica_with_entries_is_a_loss_of_unknown_extent(tmp_path: Path
                                                                              ) -> None:
    written(tmp_path)
    marks = tmp_path / MARKS
    marks.write_bytes(marks.read_bytes()[:40])
    log = open_log(tmp_path)
    assert log.lost and log.load().floor == 21   # one past its log: a leader's entry it needs
    assert log.load().term == 3 and log.load().voted_for == "n2"


def test_a_damaged_snapshot_is_set_aside_and_the_replica_catches_up(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(1, entries(1, 30, 1))
    log.sync()
    log.save_snapshot(Snapshot(25, 1, ("a", "b"), b"state at 25"), discard_log=False)
    log.close()
    snap = tmp_path / "snapshot"
    data = bytearray(snap.read_bytes())
    data[-2] ^= 1
    snap.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert log.lost and "snapshot" in log.lost and log.load().floor >= 25
    assert log.load().snapshot.index == 0 and (tmp_path / "snapshot.damaged").exists()


def test_an_older_copy_of_the_snapshot_is_a_loss(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(1, entries(1, 30, 1))
    log.sync()
    log.save_snapshot(Snapshot(10, 1, ("a",), b"at 10"), discard_log=False)
    shutil.copy(tmp_path / "snapshot", tmp_path / "old")
    log.save_snapshot(Snapshot(25, 1, ("a",), b"at 25"), discard_log=True)   # a leader's
    log.close()
    shutil.copy(tmp_path / "old", tmp_path / "snapshot")
    log = open_log(tmp_path)
    assert log.lost and "older" in log.lost and log.load().floor >= 25


def test_a_directory_without_marks_is_trusted_and_gets_them(tmp_path: Path) -> None:
    written(tmp_path)
    (tmp_path / MARKS).unlink()
    log = open_log(tmp_path)
    assert log.lost is None and log.load().floor == 0
    log.close()
    assert (tmp_path / MARKS).exists()
    seg = tmp_path / fmt.segment_name(1)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 100)
    assert open_log(tmp_path).lost


def test_marks_cut_short_but_with_a_whole_slot_are_no_loss_and_made_whole(tmp_path: Path
                                                                          ) -> None:
    written(tmp_path)
    marks = tmp_path / MARKS
    log = open_log(tmp_path)
    log.append(21, entries(21, 22, 2))
    log.sync()                      # the newest mark now in the second slot, the older in the first
    log.close()
    marks.write_bytes(marks.read_bytes()[:300])     # the second slot gone, the first whole
    log = open_log(tmp_path)
    assert log.lost is None and log.load().entries[-1].index == 22
    log.append(23, entries(23, 23, 2))
    log.sync()
    log.close()
    assert marks.stat().st_size == 16 + 2 * 512 and open_log(tmp_path).lost is None


def test_a_flipped_bit_in_a_segment_header_is_repaired_without_a_loss(tmp_path: Path) -> None:
    """It used to stop the replica from opening (FormatError: bad segment magic)."""
    seg = written(tmp_path)
    data = bytearray(seg.read_bytes())
    data[1] ^= 0x04
    seg.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert log.lost is None and log.load().entries[-1].index == 20
    assert seg.read_bytes()[:4] == b"AMQR"
