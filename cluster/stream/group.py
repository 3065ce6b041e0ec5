"""One broker's part in one replicated stream's Raft group: a replica (``RaftNode`` +
``StreamMachine``) and the ``Outbox`` of the publishes this broker sent. Pure: inputs in, actions
out, with the interface of ``cluster.quorum.group.QuorumGroup`` that the quorum queues' I/O
(``amqp_broker.clustering.quorum``) drives, so that streams share its Raft traffic, timers and
group commit.

Owns: routing Appends to the leader (proposed here when leading, else forwarded; re-sent to a new
leader, after a gap and after ``RESEND_MS`` without progress: idempotent thanks to the machine's
per-origin seqs), applying committed entries (effects for the queue object: records to write to
this replica's segments, retention, this origin's confirms), the leader's retention proposals
(``retain``) and snapshots once the segments hold what they cover (``durable``).
Must not know: sockets, files, the broker core, clocks.
Sources: Raft paper §5.3, §7, §8; RabbitMQ "Streams".
"""

from __future__ import annotations

from collections.abc import Iterable

from cluster.quorum.group import RESEND_MS, Action, Forward
from cluster.quorum.machine import Applied, Gap
from cluster.quorum.outbox import Outbox
from cluster.raft import actions as ra
from cluster.raft.messages import Entry, EntryKind, Message
from cluster.raft.node import RaftNode

from .machine import Effect, StreamMachine, encode_retain

__all__ = ["StreamGroup", "SNAPSHOT_MIN_ENTRIES", "RETAIN_RETRY_MS"]

#: A snapshot is taken once this many entries were applied (and their records synced to the
#: segment files) since the last one: the Raft log in RAM stays below about this many messages.
SNAPSHOT_MIN_ENTRIES = 4096
#: The leader proposes the same retention point again at most this often (ms).
RETAIN_RETRY_MS = 1000


class StreamGroup:
    """Member ``me`` (origin ``origin``) of a stream's group whose replica is ``node``."""

    #: This member holds a replica.
    holds_replica = True
    #: Not computed for streams (management shows null).
    in_sync = None

    def __init__(self, me: str, origin: str, node: RaftNode, machine: StreamMachine) -> None:
        self.me = me
        self.origin = origin
        self.node = node
        self.machine = machine
        self.outbox = Outbox(origin)
        self.machine_index = node.snapshot.index
        if node.snapshot.index:
            machine.restore(node.snapshot.data)
        self._retain_sent = (0, -RETAIN_RETRY_MS)   # (first offset, when)

    # ------------------------------------------------------------------ queries
    @property
    def leader(self) -> str | None:
        """The leader this replica knows (None: unknown)."""
        return self.node.leader

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads."""
        return self.node.is_leader

    @property
    def members(self) -> tuple[str, ...]:
        """The group's members (the replica's current configuration)."""
        return self.node.members

    @property
    def applied(self) -> int:
        """This origin's Appends are applied (committed) up to this seq: the confirm counter."""
        return self.outbox.applied

    # ------------------------------------------------------------------ this broker's publishes
    def submit(self, command: bytes) -> int:
        """Queue an Append body (``machine.encode_append``); returns its seq."""
        return self.outbox.add(command)

    def flush(self, now_ms: int) -> list[Action]:
        """Send what ``submit`` queued: proposed here when leading, else forwarded."""
        envs = self.outbox.take_unsent(now_ms)
        return self._route(envs) if envs else []

    def _route(self, envs: list[bytes]) -> list[Action]:
        node = self.node
        if node.is_leader:
            _results, actions = node.propose_batch(envs)
            return list(actions)
        leader = node.leader
        if leader is not None and leader != self.me:
            return [Forward(leader, tuple(envs))]
        return []   # no leader known: re-sent once one is

    def resend(self, now_ms: int) -> list[Action]:
        """Send every unapplied Append again."""
        envs = self.outbox.all_pending(now_ms)
        return self._route(envs) if envs else []

    # ------------------------------------------------------------------ inputs
    def receive(self, frm: str, msg: Message, now_ms: int) -> list[Action]:
        """A Raft message from member ``frm``."""
        return list(self.node.receive(frm, msg, now_ms))

    def forwarded(self, frm: str, envs: Iterable[bytes]) -> list[Action]:
        """Appends another member forwarded: proposed when leading, passed once to the leader we
        know when it is neither us nor the sender, else dropped (the sender re-sends)."""
        node = self.node
        envs = list(envs)
        if node.is_leader:
            _results, actions = node.propose_batch(envs)
            return list(actions)
        leader = node.leader
        if leader is not None and leader not in (self.me, frm):
            return [Forward(leader, tuple(envs))]
        return []

    def holding(self, frm: str, payload: bytes) -> list[Action]:
        """Quorum queues' consumers outside the group: none for streams."""
        return []

    def status(self, frm: str, payload: bytes) -> None:
        """Quorum queues' in-sync report: not used by streams."""

    def persisted(self, index: int, term: int) -> list[Action]:
        """Storage made the Raft log durable up to (``index``, ``term``)."""
        return list(self.node.persisted(index, term))

    def tick(self, now_ms: int) -> list[Action]:
        """Raft timers, and a re-send of Appends that made no progress for ``RESEND_MS``."""
        out: list[Action] = list(self.node.tick(now_ms))
        if self.outbox.stale(now_ms, RESEND_MS):
            out += self.resend(now_ms)
        return out

    def leader_duties(self, now_ms: int, wall_ms: int, view: set[str] | None) -> list[Action]:
        """Nothing timed: retention is proposed by the queue object (``retain``)."""
        return []

    def state_changed(self, change: ra.StateChanged, now_ms: int) -> list[Action]:
        """A newly known leader gets every unapplied Append again (duplicates drop)."""
        if change.leader is not None and self.outbox.pending:
            return self.resend(now_ms)
        return []

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
