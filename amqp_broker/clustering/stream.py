"""Replicated streams' I/O: ``broker.queue_types["stream"]`` for a clustered broker, each stream a
Raft group (``cluster.stream``) hosted by the quorum queues' runtime (``quorum.QuorumRuntime``:
the same Raft traffic on the peer links, timers, group commit of the Raft logs in a worker
thread), plus the catch-up of a replica's segment files from another member's.

Why Raft and not an Osiris-like leader/follower log: the brief wants one consensus engine, and an
Osiris-like data path would still need Raft to choose its leader *and* a second protocol to
decide which follower's log is the longest and to truncate the others after a leader change
(Osiris's epochs, what ``rabbit_stream_coordinator`` does on Ra). With the records in the Raft
log, the commit rule (a majority holds it), the election restriction (a new leader has every
committed record), re-sending to a new leader (per-origin seqs) and a returning member's catch-up
(AppendEntries, or a snapshot plus ``STREAM_FETCH``) come from the engine quorum queues already
trust. The cost: each record is written twice per member (Raft log, then segment file), and the
Raft log in RAM holds up to ``cluster.stream.group.SNAPSHOT_MIN_ENTRIES`` records before a
snapshot compacts it -- the stream's bodies live in the segments on disk.

A stream declared on a clustered broker is replicated on the members of the view at declare time
(``x-initial-cluster-size`` of them; default all, as RabbitMQ), chosen as quorum queues' groups
are (``cluster.quorum.config``; the same hidden arguments travel with the declaration); a stream
declared on a broker that is not clustered stays a local ``queues.stream.StreamQueue`` (no Raft
cost). A broker outside a stream's members (``x-initial-cluster-size`` smaller than the cluster)
holds no replica in the group: it forwards its publishes to the leader and keeps a copy of the
segments that it fetches from the members (``cluster.stream.observer``), which its consumers read;
its confirms come with the fetch answers.

Catch-up: a replica whose segments lack records its group applied (a snapshot installed past
them, segment files lost) sends ``STREAM_FETCH`` (u64 offset) to the leader (else another
member); the answer ``STREAM_RECORDS`` carries up to ``stream_queue.FETCH_BYTES`` of records in
their segment-file encoding, or a reset to the answerer's first offset when the asker is behind
its retention. Consumers there wait for the records meanwhile; the stream goes on elsewhere.

Replicas added and deleted (``rabbitmq-streams add_replica`` / ``delete_replica``):
``stream_members`` (``StreamReplicas.members``); a broker's ``members.json`` in the group's
directory, when present, says which members the group has now (not those declared).
Sources: RabbitMQ "Streams" and "Stream Plugin" (replication, x-initial-cluster-size, leader
locator), rabbitmq/osiris (README: replication reads the leader's segment files), Raft paper.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable
from typing import Any

from cluster.codec import QUORUM_MEMBERS, STREAM_FETCH, STREAM_RECORDS, Quorum
from cluster.quorum import config as qconfig
from cluster.raft.disklog import DiskLog
from cluster.raft.node import RaftNode
from cluster.stream.group import StreamGroup
from cluster.stream.machine import StreamMachine
from cluster.stream.observer import ObserverGroup
from queues.stream.queue import stream_settings

from ..protocol.methods import encode_method
from .quorum import QuorumRuntime, _Replica
from .quorum_members import has_log, read_members
from .stream_members import StreamMembers
from .stream_queue import ReplicatedStream

__all__ = ["StreamReplicas", "install"]

log = logging.getLogger(__name__)

_U64 = struct.Struct(">Q")


class StreamReplicas:
    """``broker.queue_types["stream"]``: replicated streams on ``runtime`` (see module doc);
    ``members``: their replica management (``stream_members``)."""

    def __init__(self, broker: Any, runtime: QuorumRuntime) -> None:
        self.broker = broker
        self.runtime = runtime
        self.members = StreamMembers(runtime)

    def check_arguments(self, arguments: dict) -> None:
        """``queues.stream.queue.stream_settings``'s checks (the core makes them before a stream
        declaration anyway; ``x-initial-cluster-size`` is checked by ``parse_arguments``).
        Raises ``InvalidArgument``."""
        stream_settings(arguments)

    def replicates(self, arguments: dict | None) -> bool:
        """Whether a stream with ``arguments`` is replicated here: declared with its group (a
        member's declaration, or recovery of a replicated stream), or declared now on a
        clustered broker."""
        return qconfig.GROUP_ARG in (arguments or {}) or self.broker.cluster_hooks is not None

    def create(self, vhost: Any, name: str, settings: Any, *, arguments: dict) -> Any:
        """Open (or found) this broker's replica of stream ``name``: its Raft log under
        ``<data-dir>/quorum/<group id>/``, its segments under ``<data-dir>/streams/``. A new
        declaration gets its group (hidden arguments added to ``arguments``). Raises
        ``InvalidArgument``, ``OSError`` / ``StreamFormatError`` / ``FormatError``."""
        rt = self.runtime
        ss = stream_settings(arguments)
        members_arg = arguments.get(qconfig.MEMBERS_ARG)
        known = next((r for r in rt.replicas.values() if r.vhost == vhost.name and
                      r.name == name and not r.closed), None)
        if isinstance(members_arg, str) and members_arg and qconfig.GROUP_ARG in arguments:
            members = tuple(sorted(members_arg.split(",")))
            uid = str(arguments[qconfig.GROUP_ARG])
        elif known is not None:   # declared again without its group (a definitions replay)
            members, uid = known.members, known.uid
            arguments[qconfig.MEMBERS_ARG] = ",".join(members)
            arguments[qconfig.GROUP_ARG] = uid
        else:
            # RabbitMQ's default leader locator (client-local): the declaring broker is one
            size = int(arguments.get("x-initial-cluster-size") or len(rt.view))
            others = rt.view - {rt.me}
            members = tuple(sorted((rt.me, *(qconfig.choose_members(
                others, size - 1, vhost.name, name) if others and size > 1 else ()))))
            uid = qconfig.group_id(vhost.name, name, members, rt.view_number)
            arguments[qconfig.MEMBERS_ARG] = ",".join(members)
            arguments[qconfig.GROUP_ARG] = uid
        manager = vhost.stream_manager()
        old = rt.replicas.get(uid)
        if old is not None:   # declared again (recovery, a replay): one replica per group
            rt._close(old, delete_files=False)
        directory = rt.root / uid
        saved = read_members(directory)   # replicas added or deleted since the declaration
        if saved is not None:
            members = saved[1]
        rep = _Replica(uid, vhost.name, name, members, directory, None)  # type: ignore[arg-type]
        for kind in (STREAM_FETCH, STREAM_RECORDS):
            rep.prefix[kind] = encode_method(1, Quorum(vhost.name, name, uid, kind))[7:-1]
        group: StreamGroup | ObserverGroup
        node: RaftNode | None = None
        # a replica: files here, or a new group (declared now, this broker not joining); while
        # joining, a member with no files is one whose disk was wiped and must not vote with an
        # empty log: it reads from the members until the leader names it (``stream_members``)
        logged = has_log(directory)
        accepting = bool(getattr(self.broker, "accepting_clients", True))
        if rt.me in members and (logged or (saved is None and accepting)):
            disk = DiskLog(directory, fsync=rt.fsync)
            state = disk.load()
            fresh = saved is None and accepting and (
                not logged or (not state.entries and not state.snapshot.index))
            node = RaftNode(rt.me, state, rt.now_ms(), rt.timing, random.Random(),
                            bootstrap=members if fresh else ())
            group = StreamGroup(rt.me, rt.origin, node, StreamMachine())
            rep.raft = group   # type: ignore[assignment]
            rep.log = disk
        else:   # outside the members: a copy of the segments, fetched (cluster.stream.observer)
            group = ObserverGroup(rt.me, rt.origin, tuple(m for m in members if m != rt.me))
        rep.group = group   # type: ignore[assignment]
        log_ = manager.open_log(vhost.name, name, segment_bytes=ss.segment_bytes,
                                max_bytes=None, max_age_ms=None)
        rep.queue = ReplicatedStream(  # type: ignore[assignment]
            vhost.name, name, settings, log_, group, ss, arguments=arguments, manager=manager,
            execute=lambda actions: rt.execute(rep, actions), wake=rt._wake,  # type: ignore[arg-type]
            now_ms=rt.now_ms, wall_ms=rt.wall_ms, fetch=self._fetcher(rep),
            on_delete=lambda _q: rt._close(rep, delete_files=True))
        rt.replicas[uid] = rep
        if node is None:
            log.info("stream %r of vhost %r: no replica here, reading group %s (%s) from its "
                     "members; segments at offsets %d..%d", name, vhost.name, uid,
                     ", ".join(members), log_.first_offset, log_.next_offset)
            return rep.queue
        rt.ticker_wanted()
        rt.execute(rep, node.tick(rt.now_ms()))
        log.info("stream %r of vhost %r: replica of group %s (%s), Raft log at index %d, "
                 "segments at offsets %d..%d", name, vhost.name, uid, ", ".join(members),
                 node.log.last_index, log_.first_offset, log_.next_offset)
        return rep.queue

    def _fetcher(self, rep: _Replica) -> Callable[[int], None]:
        rt = self.runtime
        turn = [0]

        def fetch(offset: int) -> None:
            group = rep.group
            if group is None or rep.closed:
                return
            others = [m for m in group.members if m != rt.me]
            if not others:
                return
            # the leader every other time (it has applied the most), else the others in turn
            # (a leader that lacks the records too, or none known)
            turn[0] += 1
            leader = group.leader
            if leader is None or leader == rt.me or turn[0] % 2:
                leader = others[(turn[0] // 2) % len(others)]
            rt._send(rep, leader, STREAM_FETCH, _U64.pack(offset) + rt.origin.encode())

        return fetch

    def on_peer_content(self, channel: Any, method: Any, body: bytes) -> bool:
        """A ``STREAM_FETCH`` / ``STREAM_RECORDS`` for a replica here: answered or appended; a
        members notice (``QUORUM_MEMBERS``) for a stream here: ``StreamMembers.on_notice``.
        False when ``method`` is not one of those (the quorum runtime takes it)."""
        if not isinstance(method, Quorum) or method.kind not in (STREAM_FETCH, STREAM_RECORDS,
                                                                 QUORUM_MEMBERS):
            return False
        rt = self.runtime
        rep = rt.replicas.get(method.group)
        queue = rep.queue if rep is not None and not rep.closed else None
        if method.kind == QUORUM_MEMBERS:
            if not isinstance(queue, ReplicatedStream):
                return False   # a quorum queue's
            self.members.on_notice(rep, channel.connection.peer_node, body)  # type: ignore[arg-type]
            return True
        if not isinstance(queue, ReplicatedStream):
            return True
        if method.kind == STREAM_FETCH:
            if len(body) >= _U64.size:
                origin = bytes(body[_U64.size:]).decode(errors="replace")
                answer = queue.records_from(_U64.unpack_from(body)[0], origin)
                if answer is not None:
                    rt._send(rep, channel.connection.peer_node, STREAM_RECORDS, answer)
        else:
            queue.on_records(body)
            self.broker.run_dispatch()
        return True


def install(broker: Any, runtime: QuorumRuntime) -> StreamReplicas:
    """Make ``broker`` replicate the streams declared while it is clustered (before recovery,
    so recovered replicated streams open their replicas): the ``stream`` factory, and the
    stream kinds of Cluster.Quorum ahead of the quorum runtime's content sink."""
    streams = StreamReplicas(broker, runtime)
    broker.queue_types["stream"] = streams
    quorum_content = broker.peer_content

    def peer_content(channel: Any, method: Any, body: bytes) -> None:
        if not streams.on_peer_content(channel, method, body):
            quorum_content(channel, method, body)

    broker.peer_content = peer_content
    return streams
