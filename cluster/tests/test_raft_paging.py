"""Reading a quorum queue's bodies back from its Raft log (issue 25): ``DiskLog.read`` by index
(from the write buffer, from segments, after a truncation, after a restart with ``lazy``), the
segments a snapshot keeps for live paged messages (``retain_from``), a log cut by an
InstallSnapshot that disagrees reading nothing below it, and the state machine's paged
snapshots (no body inside; ``hydrate`` puts them back for a follower).
Sources: RabbitMQ "Quorum Queues" (memory usage: bodies in the log segments, truncated only up to
the oldest live message); rabbitmq/ra ``ra_log``."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from cluster.quorum.machine import QuorumMachine, enqueue_message, envelope, snapshot_floor
from cluster.raft import fifo as f
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import EMPTY_SNAPSHOT, DryLog, Entry, EntryKind, Snapshot
from cluster.raft.raftlog import RaftLog


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
    # no object per entry: a run of terms (13..17, term 1), the data left on disk
    assert state.entries == () and state.dry == DryLog(17, ((13, 1, EntryKind.COMMAND),), ())
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

    def read(index: int) -> tuple[bytes, bytes]:
        return enqueue_message(log[index])

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


def test_a_dry_log_keeps_only_runs_of_terms_and_answers_as_a_full_one() -> None:
    """Entries taken out of memory (``RaftLog.dry``) leave no ``Entry`` objects behind, only
    runs of (first index, term, kind); the log answers every question as one that kept them."""
    data: dict[int, bytes] = {}
    full = RaftLog(EMPTY_SNAPSHOT, [])
    dry = RaftLog(EMPTY_SNAPSHOT, [])
    dry.reader = data.__getitem__
    index = 0
    for term in (1, 2, 2, 5):   # a NOOP, a CONFIG and commands in each term
        batch = []
        for kind in (EntryKind.NOOP, EntryKind.CONFIG, *[EntryKind.COMMAND] * 30):
            index += 1
            data[index] = (b"" if kind is EntryKind.NOOP else b"n1\nn2" if kind is
                           EntryKind.CONFIG else b"cmd %d" % index)
            batch.append(Entry(index, term, kind, data[index]))
        full.append(batch)
        dry.append(batch)
    dry.dry(120)
    assert dry.dry_to == 120 and len(dry.entries) == 8 and len(dry._runs) <= 12
    for i in range(0, 130):
        assert dry.term_at(i) == full.term_at(i)
    for i in range(1, 129):
        assert dry.entry(i) == full.entry(i)
        assert dry.first_index_of_term(i) == full.first_index_of_term(i)
        assert all(dry.last_index_of_term(t, i) == full.last_index_of_term(t, i)
                   for t in range(0, 7))
    assert dry.slice(60, 125, 100) == full.slice(60, 125, 100)
    assert [(e.index, e.term, e.kind) for e in dry.held(100, 128)] == \
        [(e.index, e.term, e.kind) for e in full.held(100, 128)]
    dry.compact(Snapshot(70, 2, ("n1", "n2"), b""), keep=5)
    full.compact(Snapshot(70, 2, ("n1", "n2"), b""), keep=5)
    assert dry.snapshot == full.snapshot and dry.term_at(66) == full.term_at(66) == 2
    dry.truncate_from(100)
    full.truncate_from(100)
    assert (dry.last_index, dry.last_term, dry.configs) == (full.last_index, full.last_term,
                                                            full.configs)


def test_a_paged_backlog_is_integers_in_the_machine_and_comes_back_whole() -> None:
    """Issue 25 (at most 64 bytes of RAM a ready message; RabbitMQ 4's quorum queues keep
    about 32 bytes of metadata a message): a backlog published while the queue pages costs the
    state machine under 32 bytes a message (traced allocations: Raft index, size, expiry in
    arrays; header and body stay in the log), and every message comes back with its header,
    body, expiry and priority, also after a snapshot and restore."""
    n = 6000
    log = {i: (b"props of %d" % i, b"body %d " % i * 30) for i in range(1, n + 1)}
    cmds = [f.Enqueue("p", i, None, *log[i], 0, high=i % 3 == 0, ttl_ms=-1 if i % 2 else 10 ** 9)
            for i in range(1, n + 1)]
    q = f.FifoQueue(f.FifoConfig())
    q.read = log.__getitem__
    q.page_bytes = 0
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, cmd in enumerate(cmds, 1):
            q.apply_command(i, cmd)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert q.message_count() == n and grown / n < 32, grown / n
    again = f.FifoQueue(f.FifoConfig())
    again.read = q.read
    again.restore(q.snapshot())
    for queue in (q, again):
        got = [d for d in queue.apply_command(n + 1, f.Checkout("c", 0, 0))
               if isinstance(d, f.Deliver)]
        assert sorted((d.msg_id, d.header, d.body) for d in got) == \
            [(i, *log[i]) for i in range(1, n + 1)]
        held = queue.consumers["c"].out
        assert [held[i].expires_at for i in (1, 2)] == [None, 10 ** 9]
        # RabbitMQ 4's two priorities: high ones (every third) go 2 for 1 normal
        assert [d.msg_id % 3 == 0 for d in got[:6]] == [True, True, False] * 2


def test_a_lazy_open_gives_runs_of_terms_that_answer_as_the_entries_would(tmp_path: Path) -> None:
    """A log opened ``lazy`` (a quorum queue's restart) holds runs of terms instead of an entry
    object each, CONFIG entries and a truncated suffix included; a ``RaftLog`` built on them
    answers as one built on the entries, and the batch to apply reads back the same entries."""
    log = DiskLog(tmp_path, fsync=False, segment_bytes=2000)
    entries = [Entry(1, 1, EntryKind.CONFIG, b"n1\nn2"), Entry(2, 1, EntryKind.NOOP, b"")]
    entries += [cmd(i) for i in range(3, 30)]
    log.append(1, tuple(entries[:10]))
    log.append(11, tuple(entries[10:]))
    # a new leader (term 3) rewrote the suffix from 20 on, with a configuration
    rewritten = [Entry(20, 3, EntryKind.NOOP, b""), Entry(21, 3, EntryKind.CONFIG, b"n1")]
    rewritten += [Entry(i, 3, EntryKind.COMMAND, b"new %d" % i) for i in range(22, 26)]
    log.append(20, tuple(rewritten))
    log.close()
    full_state = DiskLog(tmp_path, fsync=False).load()
    lazy = DiskLog(tmp_path, fsync=False, lazy=True)
    state = lazy.load()
    assert state.entries == () and state.dry is not None and len(state.dry.runs) == 6
    full = RaftLog(state.snapshot, list(full_state.entries))
    dry = RaftLog(state.snapshot, [], state.dry)
    dry.reader = lazy.read
    assert (dry.last_index, dry.last_term, dry.configs) == (full.last_index, full.last_term,
                                                            full.configs) == \
        (25, 3, [(0, ()), (1, ("n1", "n2")), (21, ("n1",))])
    assert [dry.term_at(i) for i in range(27)] == [full.term_at(i) for i in range(27)]
    batch = dry.held(1, 25)
    assert not isinstance(batch, tuple) and len(batch) == 25
    assert [(e.index, e.term, e.kind) for e in batch] == \
        [(e.index, e.term, e.kind) for e in full.held(1, 25)]
    assert (batch[-1].index, batch[3].index, [e.index for e in batch[20:22]]) == (25, 4, [21, 22])
    assert [dry.entry(i) for i in range(1, 26)] == [full.entry(i) for i in range(1, 26)]
    lazy.close()
