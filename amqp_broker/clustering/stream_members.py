"""Replica management of replicated streams on one broker: RabbitMQ's ``rabbitmq-streams
add_replica`` / ``delete_replica`` (``amqp-broker ctl add_replica`` / ``delete_replica``, the
management API's ``/api/queues/stream/{vhost}/{name}/replicas/add|delete``).

Owns: taking a change request to the stream group's leader (``StreamGroup.change``: a new replica
is caught up as a non-voter before its configuration entry, Raft thesis §4.2.1) and waiting until
the committed configuration shows it; the leader's members notices (``QUORUM_MEMBERS``, sent by
``StreamGroup.leader_duties``) as a broker takes them for a stream: a broker named that holds no
replica (it read the stream from outside the members, ``cluster.stream.observer``) opens an empty
Raft replica at the leader's term that votes only once its log reaches the leader's commit index
(``RaftNode`` ``vote_floor``) and is caught up by the leader, keeping the segments it already
fetched (records the group applies again are skipped, missing ones fetched); a broker with a
replica that the notice leaves out closes its Raft log, deletes its files and reads the stream
from outside the members again (its segments stay, fetched onwards from the members). Brokers
outside learn which members to read from and forward to.

Files: ``<data-dir>/quorum/<group id>/members.json`` (``quorum_members.write_members``): the newest
committed configuration this broker was told; at start, a stream's replica is opened from it
rather than from the declared members (``StreamReplicas.create``), and a group is bootstrapped
only when that file is absent (a broker removed from the group never bootstraps the declared one).
Errors (``quorum_members.MemberError.reason``) as RabbitMQ's quorum queues' (``not_found``,
``node_not_running``, ``last_node``) and ``timeout``; adding a member or deleting a non-member is a
no-op, as ``rabbitmq-queues add_member`` (our choice for streams too: idempotent).
Sources: rabbitmq-streams(8) (add_replica, delete_replica); RabbitMQ "Streams" (replication);
Ongaro's thesis §4.1-§4.2.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from typing import Any

import anyio

from cluster.codec import QUORUM_CHANGE
from cluster.quorum.members import MembersNotice, decode_notice, encode_change
from cluster.raft import actions as ra
from cluster.raft.disklog import DiskLog
from cluster.raft.node import RaftNode
from cluster.stream.group import StreamGroup
from cluster.stream.machine import StreamMachine
from cluster.stream.observer import ObserverGroup

from .quorum import QuorumRuntime, _Replica
from .quorum_members import MemberError, ReplicaManagement, delete_log, write_members
from .stream_queue import ReplicatedStream

__all__ = ["StreamMembers"]

log = logging.getLogger(__name__)


class StreamMembers(ReplicaManagement):
    """The replica management of the replicated streams hosted by ``runtime`` (see the module
    docstring): ``change_member`` (``add_replica`` / ``delete_replica``) is
    ``quorum_members.ReplicaManagement``'s over this class's ``find``, ``members_of`` and
    ``_request``; the notices are taken here (``on_notice``)."""

    def __init__(self, runtime: QuorumRuntime) -> None:
        self.runtime = runtime
        self.me = runtime.me

    @property   # type: ignore[misc]
    def view(self) -> set[str]:   # type: ignore[override]
        """The cluster view's member names (the runtime's)."""
        return self.runtime.view

    # ------------------------------------------------------------------ queries
    def find(self, vhost: str, name: str) -> _Replica:
        """Stream ``name`` of ``vhost`` here. Raises ``MemberError("not_found")``."""
        for rep in list(self.runtime.replicas.values()):
            if not rep.closed and rep.vhost == vhost and rep.name == name and \
                    isinstance(rep.queue, ReplicatedStream):
                return rep
        raise MemberError("not_found")

    def members_of(self, rep: _Replica) -> tuple[str, ...]:
        """The stream group's committed members as this broker knows them."""
        raft: Any = rep.raft
        if isinstance(raft, StreamGroup):
            return tuple(raft.node.committed_config[1])
        return tuple(rep.members)

    def _request(self, rep: _Replica, op: int, node: str) -> None:
        """Start the change on the leader here, else pass it to the leader (or every member)."""
        rt = self.runtime
        raft: Any = rep.raft
        if isinstance(raft, StreamGroup) and raft.is_leader:
            _reason, actions = raft.change(op, node)
            rt.execute(rep, actions)
            return
        group: Any = rep.group
        leader = group.leader if group is not None else None
        payload = encode_change(op, node)
        for to in ([leader] if leader and leader != rt.me else
                   [m for m in self.members_of(rep) if m != rt.me]):
            rt._send(rep, to, QUORUM_CHANGE, payload)

    # ------------------------------------------------------------------ the leader's notices
    def on_notice(self, rep: _Replica, frm: str, body: bytes) -> None:
        """A members notice of leader ``frm`` for stream replica ``rep`` (see the module
        docstring); older ones than the newest taken, and any while the replica waits for a
        worker thread, are dropped (the leader repeats them)."""
        try:
            notice = decode_notice(body)
        except ValueError:
            return
        raft: Any = rep.raft
        if rep.blocked or rep.closed or notice.key < rep.notice_key or \
                (raft is not None and notice.term < raft.node.term):
            return
        rep.notice_key = notice.key
        me = self.runtime.me
        if rep.members != notice.members:
            rep.members = notice.members
            try:
                write_members(rep.directory, notice.index, notice.members)
            except OSError as exc:
                log.error("stream %r: writing its members: %s", rep.name, exc)
        named = me in notice.members or me in notice.learners or me in notice.latest
        if raft is None and named:
            self._join(rep, notice)
        elif raft is not None and not named:
            self._leave(rep, notice)
        elif raft is None and isinstance(rep.group, ObserverGroup):
            rep.group.members = notice.members
            rep.group.leader = frm

    def _join(self, rep: _Replica, notice: MembersNotice) -> None:
        rt = self.runtime
        queue = rep.queue
        observer: Any = rep.group
        if not isinstance(queue, ReplicatedStream) or not isinstance(observer, ObserverGroup):
            return
        delete_log(rep.directory)   # members.json stays: no bootstrap at the next start
        disk = DiskLog(rep.directory, fsync=rt.fsync)
        state = disk.load()
        raised = notice.term > state.term
        if raised:
            state = replace(state, term=notice.term, voted_for=None)
        node = RaftNode(rt.me, state, rt.now_ms(), rt.timing, random.Random(), bootstrap=(),
                        vote_floor=notice.commit)
        group = StreamGroup(rt.me, rt.origin, node, StreamMachine(), observer.outbox)
        rep.raft, rep.log, rep.group = group, disk, group   # type: ignore[assignment]
        queue.group = group
        log.info("stream %r: starting a replica here (group %s, leader term %d), catching up "
                 "from segment offset %d", rep.name, ", ".join(notice.members), notice.term,
                 queue.log.next_offset)
        rt.ticker_wanted()
        rt.execute(rep, [*([ra.PersistState(notice.term, None)] if raised else []),
                         *node.tick(rt.now_ms())])

    def _leave(self, rep: _Replica, notice: MembersNotice) -> None:
        rt = self.runtime
        raft: Any = rep.raft
        disk = rep.log
        queue = rep.queue
        rep.raft = rep.log = None
        rt._dirty.discard(rep)
        if rep in rt._syncing and rt._tg is not None:   # never close fds under a running fsync
            rt._tg.start_soon(self._drop_log_after_sync, rep, disk)
        else:
            self._drop_log(rep, disk)
        observer = ObserverGroup(rt.me, rt.origin, notice.members)
        observer.outbox = raft.outbox
        observer.machine.restore(raft.machine.snapshot())
        rep.group = observer   # type: ignore[assignment]
        if isinstance(queue, ReplicatedStream):
            queue.group = observer
        log.info("stream %r: this broker left its group (%s); Raft log deleted, segments kept "
                 "and read from the members", rep.name, ", ".join(notice.members))

    def _drop_log(self, rep: _Replica, disk: DiskLog | None) -> None:
        """Close a left replica's Raft log and delete its files (``members.json`` stays)."""
        if disk is not None:
            try:
                disk.close()
            except OSError as exc:
                log.error("stream %r: closing its Raft log: %s", rep.name, exc)
        if rep.raft is None:   # not joined again meanwhile
            delete_log(rep.directory)

    async def _drop_log_after_sync(self, rep: _Replica, disk: DiskLog | None) -> None:
        for _ in range(3000):   # a group commit's fsyncs: bounded wait (30 s)
            if rep not in self.runtime._syncing:
                break
            await anyio.sleep(0.01)
        self._drop_log(rep, disk)
