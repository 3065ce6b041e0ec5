"""One broker's part in one replicated stream's Raft group: a replica (``RaftNode`` +
``StreamMachine``) and the ``Outbox`` of the publishes this broker sent. Pure: inputs in, actions
out, a ``cluster.raftgroup.RaftGroup`` as ``cluster.quorum.group.QuorumGroup`` is: the interface
the quorum queues' I/O (``amqp_broker.clustering.quorum``) drives, so that streams share its Raft
traffic, timers and group commit.

Owns: routing Appends to the leader (proposed here when leading, else forwarded; re-sent to a new
leader, after a gap and after ``RESEND_MS`` without progress: idempotent thanks to the machine's
per-origin seqs), applying committed entries (effects for the queue object: records to write to
this replica's segments, retention, this origin's confirms), the leader's retention proposals
(``retain``) and snapshots once the segments hold what they cover (``durable``); replica
changes (``change``: RabbitMQ's ``rabbitmq-streams add_replica`` / ``delete_replica``, one server
at a time as a quorum queue's, ``cluster.quorum.members``) and, on the leader, the members notices
that tell every broker of the view who holds a replica (``leader_duties``: on a change, to a broker
not told yet, and every ``NOTICE_REPEAT_MS`` to all), which ``amqp_broker.clustering.stream_members``
acts on.
Must not know: sockets, files, the broker core, clocks.
Sources: Raft paper §5.3, §7, §8; Ongaro's thesis §4.1-§4.2; RabbitMQ "Streams", rabbitmq-streams(8).
"""

from __future__ import annotations

from dataclasses import replace

from cluster.quorum.group import Action, Change, Members
from cluster.quorum.machine import Applied, Gap
from cluster.quorum.members import (
    ADD,
    CHANGE_IN_PROGRESS,
    NO_LEADER,
    MembersNotice,
    encode_change,
    encode_notice,
)
from cluster.quorum.outbox import Outbox
from cluster.raft.messages import Entry, EntryKind
from cluster.raft.node import RaftNode
from cluster.raftgroup import RaftGroup

from .machine import Effect, StreamMachine, encode_retain

__all__ = ["StreamGroup", "SNAPSHOT_MIN_ENTRIES", "RETAIN_RETRY_MS", "NOTICE_REPEAT_MS"]

#: A snapshot is taken once this many entries were applied (and their records synced to the
#: segment files) since the last one: the Raft log in RAM stays below about this many messages.
SNAPSHOT_MIN_ENTRIES = 4096
#: The leader proposes the same retention point again at most this often (ms).
RETAIN_RETRY_MS = 1000
#: The leader tells every broker of the view the members again this often (a lost notice, a
#: broker that missed a change while away) (ms).
NOTICE_REPEAT_MS = 5000


class StreamGroup(RaftGroup):
    """Member ``me`` (origin ``origin``) of a stream's group whose replica is ``node``. Routing
    (``to_leader``), the queries (``leader``, ``is_leader``, ``members``, ``applied``: the
    confirm counter), the Raft inputs and the empty driver hooks (``status``, ``holding``,
    ``leader_duties``: retention is proposed by the queue object, ``retain``) are
    ``cluster.raftgroup.RaftGroup``'s."""

    #: Not computed for streams (management shows null).
    in_sync = None

    def __init__(self, me: str, origin: str, node: RaftNode, machine: StreamMachine,
                 outbox: Outbox | None = None) -> None:
        super().__init__(me, origin, node, outbox)
        self.machine = machine
        if node.snapshot.index:
            machine.restore(node.snapshot.data)
        self._retain_sent = (0, -RETAIN_RETRY_MS)   # (first offset, when)
        self._notice: MembersNotice | None = None
        self._noticed: set[str] = set()
        self._noticed_ms = -NOTICE_REPEAT_MS

    # ------------------------------------------------------------------ replica changes
    def change(self, op: int, node_id: str, frm: str | None = None
               ) -> tuple[str | None, list[Action]]:
        """``ADD`` / ``DELETE`` of ``node_id``'s replica (checked before with
        ``cluster.quorum.members.check_change``): started here when leading (``RaftNode.add_member``:
        caught up as a non-voter first, thesis §4.2.1; ``remove_member``), else passed once to the
        leader we know (not back to ``frm``). Returns (None, actions) when started, passed on or
        not needed; (``CHANGE_IN_PROGRESS``, []) when the leader cannot take it now;
        (``NO_LEADER``, []) when no leader is known."""
        node = self.node
        if not node.is_leader:
            leader = node.leader
            if leader is None or leader == self.me or leader == frm:
                return NO_LEADER, []
            return None, [Change(leader, encode_change(op, node_id))]
        if op == ADD:
            if node_id in node.members or node_id in node.learners:
                return None, []
            ok, actions = node.add_member(node_id)
        else:
            if node_id not in node.members:
                return None, []
            ok, actions = node.remove_member(node_id)
        return (None if ok else CHANGE_IN_PROGRESS), list(actions)

    def leader_duties(self, now_ms: int, wall_ms: int, view: set[str] | None) -> list[Action]:
        """On the leader (once its term's first entry is committed): members notices
        (``cluster.quorum.members.MembersNotice``) to every broker of ``view`` and every member
        and learner, when the configuration or the learners changed, to brokers not told yet,
        and to all every ``NOTICE_REPEAT_MS``."""
        node = self.node
        if not node.is_leader or node.commit_index < node.term_start_index:
            return []
        index, members = node.committed_config
        notice = MembersNotice(node.term, index, members, node.learners, node.members)
        targets = set(view or ()) | set(members) | set(node.members) | set(notice.learners)
        targets.discard(self.me)
        if notice != self._notice or now_ms - self._noticed_ms >= NOTICE_REPEAT_MS:
            self._notice, self._noticed, self._noticed_ms = notice, set(), now_ms
        new = targets - self._noticed
        if not new:
            return []
        self._noticed |= new
        payload = encode_notice(replace(notice, commit=node.commit_index))
        return [Members(to, payload) for to in sorted(new)]

    # ------------------------------------------------------------------ this broker's publishes
    def submit(self, command: bytes) -> int:
        """Queue an Append body (``machine.encode_append``); returns its seq."""
        return self.outbox.add(command)

    # ------------------------------------------------------------------ the leader's retention
    def retain(self, first: int, now_ms: int) -> list[Action]:
        """On the leader: propose dropping the head segments before offset ``first`` (its own
        log's retention point); nothing when not leading, not past the current first offset,
        or the same point was proposed less than ``RETAIN_RETRY_MS`` ago."""
        node = self.node
        if not node.is_leader or first <= self.machine.first_offset:
            return []
        sent, when = self._retain_sent
        if sent == first and now_ms - when < RETAIN_RETRY_MS:
            return []
        self._retain_sent = (first, now_ms)
        _results, actions = node.propose_batch([encode_retain(first)])
        return list(actions)

    # ------------------------------------------------------------------ applying
    def apply(self, entries: tuple[Entry, ...], now_ms: int) -> tuple[list[Effect], list[Action]]:
        """Apply committed ``entries``: (effects for the queue object, actions to run)."""
        machine = self.machine
        effects: list[Effect] = []
        mine = self.origin
        gap = False
        for e in entries:
            self.machine_index = e.index
            if e.kind is not EntryKind.COMMAND:
                continue
            for eff in machine.apply(e.index, e.data):
                if isinstance(eff, Applied):
                    if eff.origin == mine:
                        self.outbox.applied_up_to(eff.seq)
                    continue
                if isinstance(eff, Gap):
                    gap = gap or eff.origin == mine
                    continue
                effects.append(eff)
        return effects, (self.resend(now_ms) if gap else [])

    def durable(self, index: int, data: bytes) -> list[Action]:
        """The records of every entry up to ``index`` are synced in this replica's segment files
        and ``data`` is the machine's snapshot at ``index``: compact the Raft log there once
        ``SNAPSHOT_MIN_ENTRIES`` were applied since the last snapshot."""
        node = self.node
        if index - node.snapshot.index < SNAPSHOT_MIN_ENTRIES or index > node.applied_index:
            return []
        return list(node.snapshot_taken(index, data))

    def restore(self, snapshot_index: int, data: bytes) -> None:
        """Run a ``Restore`` action: the machine becomes the leader's snapshot."""
        self.machine.restore(data)
        self.machine_index = snapshot_index
