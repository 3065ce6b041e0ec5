"""Reading a quorum queue's bodies back from its Raft log (issue 25): ``DiskLog.read`` by index
(from the write buffer, from segments, after a truncation, after a restart with ``lazy``), the
segments a snapshot keeps for live paged messages (``retain_from``), a log cut by an
InstallSnapshot that disagrees reading nothing below it, and the state machine's paged
snapshots (no body inside; ``hydrate`` puts them back for a follower).
Sources: RabbitMQ "Quorum Queues" (memory usage: bodies in the log segments, truncated only up to
the oldest live message); rabbitmq/ra ``ra_log``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.quorum.machine import QuorumMachine, envelope, snapshot_floor
from cluster.raft import fifo as f
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import Entry, EntryKind, Snapshot


def cmd(i: int, tag: bytes = b"") -> Entry:
    return Entry(i, 1, EntryKind.COMMAND, b"body %d " % i * 40 + tag)


def test_entries_read_back_from_buffer_segments_truncation_and_a_lazy_restart(
        tmp_path: Path) -> None:
    log = DiskLog(tmp_path, fsync=False, segment_bytes=1000)   # a segment every few entries
    for i in range(1, 21, 2):   # a batch never straddles two segments
        log.append(i, (cmd(i), cmd(i + 1)))
    assert log.read(20) == cmd(20).data          # still in the write buffer
    log.sync()
    assert log.segment_count() >= 4
    assert [log.read(i) for i in range(1, 21)] == [cmd(i).data for i in range(1, 21)]
    log.append(15, tuple(cmd(i, b"new") for i in range(15, 18)))   # a conflicting suffix
    log.sync()
    assert log.read(16) == cmd(16, b"new").data
    with pytest.raises(LookupError):
        log.read(18)                              # truncated, not rewritten
    log.retain_from = 5                           # the oldest live paged message
    log.save_snapshot(Snapshot(12, 1, ("n1",), b""), False)
    assert log.read(5) == cmd(5).data             # its segment is kept
    with pytest.raises(LookupError):
        log.read(1)                               # older segments went
    log.close()
    again = DiskLog(tmp_path, fsync=False, segment_bytes=1000, lazy=True)
    state = again.load()
    assert [e.index for e in state.entries] == [13, 14, 15, 16, 17]
    assert all(e.data == b"" for e in state.entries)   # left on disk
    assert again.read(5) == cmd(5).data and again.read(17) == cmd(17, b"new").data
    again.close()


def test_a_snapshot_that_disagrees_leaves_nothing_below_it_to_read(tmp_path: Path) -> None:
    log = DiskLog(tmp_path, fsync=False)
    log.append(1, tuple(cmd(i) for i in range(1, 6)))
    log.sync()
    log.save_snapshot(Snapshot(8, 3, ("n1",), b""), True)   # InstallSnapshot, other history
    for i in range(1, 6):
        with pytest.raises(LookupError):
            log.read(i)
    log.close()


def _enqueue(i: int) -> bytes:
    return envelope("n1#1", i, f.encode(f.Enqueue("p", i, None, b"h", b"body %d" % i, 0)))


def test_paged_snapshots_hold_no_body_and_a_hydrated_one_holds_them_all() -> None:
    log: dict[int, bytes] = {}

    def read(index: int) -> bytes:
        return f.decode(log[index][len(envelope("n1#1", 0, b"")):]).body   # type: ignore[union-attr]

    leader = QuorumMachine(f.FifoConfig())
    leader.fifo.read = read
    leader.fifo.page_bytes = 0        # every body paged out
    for i in range(1, 6):
        log[i] = _enqueue(i)
        leader.apply(i, log[i])
    image = leader.snapshot()
    assert b"body" not in image and snapshot_floor(image) == 1
    follower = QuorumMachine(f.FifoConfig())   # no log of those entries
    follower.restore(leader.hydrate(image))
    effects = follower.apply(6, envelope("n2#1", 1, f.encode(f.Checkout("n2#1/1", 0, 0))))
    assert [e.body for e in effects if isinstance(e, f.Deliver)] == \
        [b"body %d" % i for i in range(1, 6)]
    same = QuorumMachine(f.FifoConfig())       # a restart from its own log and snapshot
    same.fifo.read = read
    same.restore(image)
    effects = same.apply(6, envelope("n2#1", 1, f.encode(f.Checkout("n2#1/1", 0, 0))))
    assert [e.body for e in effects if isinstance(e, f.Deliver)] == \
        [b"body %d" % i for i in range(1, 6)]
