"""A consumer resuming at the offset after the last one it read, on a stream member that
restarted and has not applied its own Raft log yet (issue 25). Real parts: the member's segment
files (``queues.stream.log.StreamLog``), its Raft node holding committed-elsewhere entries it has
not applied, ``StreamGroup``, ``ReplicatedStream``.

Found by the fault harness (``--queue-type stream``, ``membership`` nemesis, a kill -9 of the
member a reader was on): the reader resumed at ``x-stream-offset: 227`` and was delivered 218
first. The member's segments had lost the records it had buffered but not yet handed to the OS
(218-226, applied and delivered before the kill); back up, they were behind the Raft log, and
until its entries were applied again the replica took its segments' end for the stream's end and
clamped the offset asked for down to it: the reader got 218-226 twice, offsets going back. What
must hold: while the replica has entries in its Raft log it has not applied, the stream's end is
not known here, and an offset past its segments is where the consumer starts (it waits for the
records to be applied); a caught-up replica clamps as RabbitMQ does (``StreamQueue``).
Source: RabbitMQ "Streams" (x-stream-offset), Raft paper §5.3."""

from __future__ import annotations

import random

from amqp_broker.clustering.stream_queue import ReplicatedStream
from cluster.quorum.machine import envelope
from cluster.raft import actions as ra
from cluster.raft.messages import Entry, EntryKind, PersistentState, encode_members
from cluster.raft.node import RaftNode
from cluster.stream.group import StreamGroup
from cluster.stream.machine import StreamMachine, encode_append
from cluster.stream.observer import ObserverGroup, Tail
from queues.arguments import QueueSettings
from queues.message import Message
from queues.stream.manager import StreamManager
from queues.stream.queue import OffsetSpec, stream_settings

TIMING = ra.Timing(election_ms=600, heartbeat_ms=100, max_batch_entries=512,
                   max_batch_bytes=1 << 20, max_inflight=8, snapshot_keep=256)


def _replica(tmp_path, held: int, logged: int) -> ReplicatedStream:
    """A member whose segments hold ``held`` records and whose Raft log holds ``logged``
    Appends (after its configuration entry), none applied yet (just restarted); ``logged`` 0:
    nothing left to apply (caught up)."""
    manager = StreamManager(tmp_path / "streams")
    log = manager.open_log("/", "s", segment_bytes=1 << 20, max_bytes=None, max_age_ms=None)
    for i in range(held):
        log.append(Message.build("", "s", b"m%d" % i, None), 1000 + i)
    entries = [Entry(1, 1, EntryKind.CONFIG, encode_members(("n1", "n2", "n3")))]
    entries += [Entry(2 + i, 1, EntryKind.COMMAND,
                      envelope("n2#1", 1 + i, encode_append(1000 + i, b"\x00\x01s", b"", b"x")))
                for i in range(logged)]
    node = RaftNode("n1", PersistentState(term=1, entries=tuple(entries) if logged else ()), 0,
                    TIMING,
                    random.Random(1))
    group = StreamGroup("n1", "n1#1", node, StreamMachine())
    return ReplicatedStream("/", "s", QueueSettings(), log, group, stream_settings({}),
                            arguments={}, manager=manager, execute=lambda _a: None,
                            wake=lambda _q: None, now_ms=lambda: 0, wall_ms=lambda: 0,
                            fetch=lambda _o: None)


def test_a_resumed_offset_past_a_restarted_members_segments_is_kept(tmp_path):
    stream = _replica(tmp_path / "behind", held=218, logged=227)
    assert stream.start_offset(OffsetSpec("offset", 227)) == 227
    assert stream.start_offset(OffsetSpec("offset", 100)) == 100
    assert stream.start_offset(OffsetSpec("first")) == 0


def test_a_caught_up_member_clamps_an_offset_past_the_end(tmp_path):
    stream = _replica(tmp_path / "caught-up", held=5, logged=0)
    assert stream.start_offset(OffsetSpec("offset", 227)) == 5   # RabbitMQ: clamped to the end
    assert stream.start_offset(OffsetSpec("next")) == 5


def test_a_resumed_offset_on_a_restarted_broker_outside_the_members_is_kept(tmp_path):
    """The same on a broker outside the members (``x-initial-cluster-size``): its segments
    are a fetched copy, and until a member answers it the stream's end is not known there."""
    manager = StreamManager(tmp_path / "streams")
    log = manager.open_log("/", "s", segment_bytes=1 << 20, max_bytes=None, max_age_ms=None)
    for i in range(218):
        log.append(Message.build("", "s", b"m%d" % i, None), 1000 + i)
    group = ObserverGroup("n3", "n3#1", ("n1", "n2"))
    stream = ReplicatedStream("/", "s", QueueSettings(), log, group, stream_settings({}),
                              arguments={}, manager=manager, execute=lambda _a: None,
                              wake=lambda _q: None, now_ms=lambda: 0, wall_ms=lambda: 0,
                              fetch=lambda _o: None)
    assert stream.start_offset(OffsetSpec("offset", 227)) == 227
    group.told(Tail(218, 0, 0, "n1"))   # a member answered: the end is known, RabbitMQ clamps
    assert stream.start_offset(OffsetSpec("offset", 227)) == 218
