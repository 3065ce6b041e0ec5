"""One broker's part in one replicated stream's Raft group: a replica (``RaftNode`` +
``StreamMachine``) and the ``Outbox`` of the publishes this broker sent. Pure: inputs in, actions
out, a ``cluster.raftgroup.RaftGroup`` as ``cluster.quorum.group.QuorumGroup`` is: the interface
the quorum queues' I/O (``amqp_broker.clustering.quorum``) drives, so that streams share its Raft
traffic, timers and group commit.

Owns: routing Appends to the leader (proposed here when leading, else forwarded; re-sent to a new
leader, after a gap and after ``RESEND_MS`` without progress: idempotent thanks to the machine's
per-origin seqs), applying committed entries (effects for the queue object: records to write to
this replica's segments, retention, this origin's confirms), the leader's retention proposals
(``retain``) and snapshots once the segments hold what they cover (``durable``).
Must not know: sockets, files, the broker core, clocks.
Sources: Raft paper §5.3, §7, §8; RabbitMQ "Streams".
"""

from __future__ import annotations

from cluster.quorum.group import Action
from cluster.quorum.machine import Applied, Gap
from cluster.raft.messages import Entry, EntryKind
from cluster.raft.node import RaftNode
from cluster.raftgroup import RaftGroup

from .machine import Effect, StreamMachine, encode_retain

__all__ = ["StreamGroup", "SNAPSHOT_MIN_ENTRIES", "RETAIN_RETRY_MS"]

#: A snapshot is taken once this many entries were applied (and their records synced to the
#: segment files) since the last one: the Raft log in RAM stays below about this many messages.
SNAPSHOT_MIN_ENTRIES = 4096
#: The leader proposes the same retention point again at most this often (ms).
RETAIN_RETRY_MS = 1000


class StreamGroup(RaftGroup):
    """Member ``me`` (origin ``origin``) of a stream's group whose replica is ``node``. Routing
    (``to_leader``), the queries (``leader``, ``is_leader``, ``members``, ``applied``: the
    confirm counter), the Raft inputs and the empty driver hooks (``status``, ``holding``,
    ``leader_duties``: retention is proposed by the queue object, ``retain``) are
    ``cluster.raftgroup.RaftGroup``'s."""

    #: Not computed for streams (management shows null).
    in_sync = None

    def __init__(self, me: str, origin: str, node: RaftNode, machine: StreamMachine) -> None:
        super().__init__(me, origin, node)
        self.machine = machine
        if node.snapshot.index:
            machine.restore(node.snapshot.data)
        self._retain_sent = (0, -RETAIN_RETRY_MS)   # (first offset, when)

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
