"""What every Raft group's glue shares: one broker's replica (a ``RaftNode``) and the ``Outbox`` of
the commands this broker sends to the group, routed to the leader. Pure: inputs in, actions out.

Extended by the quorum queues' group (``cluster.quorum.group.QuorumGroup``) and the replicated
streams' (``cluster.stream.group.StreamGroup``) as ``RaftGroup``, and by the cluster metadata
log's (``cluster.metadata.group.MetadataGroup``) as ``RaftGroupBase``: all of it but the
``holding`` hook (the metadata log takes no holding report: the driver, which asks ``hasattr``,
drops one with a warning).
Owns: the routing rule of entries on their way to the leader (``to_leader``: proposed when this
replica leads, else one ``Forward`` to the leader it knows; re-sent to a new leader and after
``RESEND_MS`` without progress -- idempotent thanks to the machines' per-origin seqs), the wire
form of ``Forward`` (``encode_forward`` / ``decode_forward``), the queries the drivers ask
(``leader``, ``is_leader``, ``members``, ``applied``), the Raft inputs every group passes
straight to its node (``receive``, ``persisted``, ``tick``, ``state_changed``), and the
driver's hooks a group without them leaves empty (``status``, ``holding``, ``leader_duties``).
Must not know: sockets, files, the broker core, clocks (``now_ms`` comes in), any state machine.

The driver (``amqp_broker.clustering.quorum``) runs what every method returns, in order: the
actions of ``cluster.raft.actions`` plus ``Forward`` and ``Status`` (and a subclass's own).
Sources: Raft paper §5.3 (the leader takes every entry), §8 (clients re-send; duplicates are
detected by a serial number per client); RabbitMQ "Quorum Queues", "Streams".
``Forward`` has an explicit ``__init__`` and is not frozen, for mypyc (``cluster.raft.fifo``,
"Speed"); both group classes allow interpreted subclasses (the stream and metadata groups are
not compiled).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from cluster.quorum.outbox import Outbox
from cluster.raft import actions as ra
from cluster.raft.messages import Message
from cluster.raft.node import RaftNode

__all__ = ["RaftGroup", "RaftGroupBase", "Forward", "Status", "to_leader", "encode_forward",
           "decode_forward", "RESEND_MS"]

#: A command not applied this long after it was (re)sent is sent again (ms).
RESEND_MS = 2000


@dataclass(slots=True, init=False, unsafe_hash=True)
class Forward:
    """Send ``envelopes`` (machine entries) to member ``to`` for its leader to propose."""

    to: str
    envelopes: tuple[bytes, ...]

    def __init__(self, to: str, envelopes: tuple[bytes, ...]) -> None:
        self.to = to
        self.envelopes = envelopes


@dataclass(frozen=True, slots=True)
class Status:
    """Tell member ``to`` a group's status report: ``payload`` is the group's own encoding
    (quorum queues: the leader's in-sync members, ``cluster.quorum.group.encode_status``; the
    metadata log: how far a replica applied the log)."""

    to: str
    payload: bytes


def to_leader(node: RaftNode, me: str, envs: list[bytes], frm: str | None = None
              ) -> tuple[bool, list[Any]]:
    """Entries ``envs`` of member ``me`` (or forwarded to it by ``frm``) on their way to the
    group's leader: proposed when ``node`` leads (True: proposed; refused during a transfer, they
    are re-sent on the leader change), else one ``Forward`` to the leader it knows when that is
    neither ``me`` nor ``frm``, else nothing (no leader known: the sender re-sends). Shared by
    every Raft group's glue: the actions are ``cluster.raft`` actions and ``Forward`` (``Any``,
    so that each glue's wider ``Action`` list takes them)."""
    if node.is_leader:
        _results, actions = node.propose_batch(envs)
        return True, list(actions)
    leader = node.leader
    if leader is not None and leader != me and leader != frm:
        return False, [Forward(leader, tuple(envs))]
    return False, []


@mypyc_attr(allow_interpreted_subclasses=True)
class RaftGroupBase:
    """Member ``me`` (origin ``origin``: ``"<me>#<incarnation>"``) of a group whose replica is
    ``node``; ``outbox``: this broker's commands so far, default a new one. ``machine_index``
    (the log index the subclass's machine applied) starts at the node's snapshot: the subclass
    restores its machine from ``node.snapshot.data`` when that index is not 0. Every driver hook
    but ``holding`` (``RaftGroup``'s)."""

    #: This member holds a replica (the quorum driver's timers ask; Basic.Get reads it).
    holds_replica = True

    def __init__(self, me: str, origin: str, node: RaftNode, outbox: Outbox | None = None) -> None:
        self.me = me
        self.origin = origin
        self.node = node
        self.outbox = outbox or Outbox(origin)
        self.machine_index = node.snapshot.index

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
        """This origin's commands are applied (committed) up to this seq: the confirm counter."""
        return self.outbox.applied

    # ------------------------------------------------------------------ commands of this broker
    def flush(self, now_ms: int) -> list[Any]:
        """Send what the subclass's ``submit`` queued: proposed here when leading, else
        forwarded (``to_leader``)."""
        envs = self.outbox.take_unsent(now_ms)
        return self._route(envs) if envs else []

    def resend(self, now_ms: int, from_seq: int = 0) -> list[Any]:
        """Send every unapplied command again (from seq ``from_seq``)."""
        envs = self.outbox.all_pending(now_ms, from_seq)
        return self._route(envs) if envs else []

    def _route(self, envs: list[bytes]) -> list[Any]:
        proposed, actions = to_leader(self.node, self.me, envs)
        if proposed:
            self._proposed()
        return actions

    def _proposed(self) -> None:
        """Entries were just proposed on this replica (a subclass times them)."""

    # ------------------------------------------------------------------ inputs
    def receive(self, frm: str, msg: Message, now_ms: int) -> list[Any]:
        """A Raft message from member ``frm``."""
        return list(self.node.receive(frm, msg, now_ms))

    def forwarded(self, frm: str, envs: Iterable[bytes]) -> list[Any]:
        """Entries another member forwarded: proposed when leading, passed once to the leader
        we know when it is neither us nor the sender, else dropped (the sender re-sends)."""
        proposed, actions = to_leader(self.node, self.me, list(envs), frm)
        if proposed:
            self._proposed()
        return actions

    def persisted(self, index: int, term: int) -> list[Any]:
        """Storage made the Raft log durable up to (``index``, ``term``)."""
        return list(self.node.persisted(index, term))

    def tick(self, now_ms: int) -> list[Any]:
        """Raft timers, and a re-send of commands that made no progress for ``RESEND_MS``."""
        out: list[Any] = list(self.node.tick(now_ms))
        if self.outbox.stale(now_ms, RESEND_MS):
            out += self.resend(now_ms)
        return out

    def state_changed(self, change: ra.StateChanged, now_ms: int) -> list[Any]:
        """The node's role or leader changed: a newly known leader gets every unapplied
        command again (entries the old one never committed are re-proposed; duplicates drop)."""
        if change.leader is not None and self.outbox.pending:
            return self.resend(now_ms)
        return []

    # ------------------------------------------------------------------ hooks of the driver
    def status(self, frm: str, payload: bytes) -> None:
        """A ``Status`` report from member ``frm``: none by default (dropped)."""

    def leader_duties(self, now_ms: int, wall_ms: int, view: set[str] | None) -> list[Any]:
        """The leader's timed duties (``view``: the cluster view's member names, None: not
        known; ``wall_ms``: the wall clock in ms): none by default."""
        return []


@mypyc_attr(allow_interpreted_subclasses=True)
class RaftGroup(RaftGroupBase):
    """A ``RaftGroupBase`` that takes a quorum queue's ``Holding`` report (a queue's or a
    stream's group: the quorum driver hands it one when ``hasattr(group, "holding")``)."""

    def holding(self, frm: str, payload: bytes) -> list[Any]:
        """A quorum queue's ``Holding`` report from outside the group: none by default."""
        return []


_U32 = struct.Struct(">I")


def encode_forward(envelopes: Iterable[bytes]) -> bytes:
    """The body of a ``Forward`` on the wire (Cluster.Quorum ``QUORUM_FORWARD``): each envelope
    as a u32 length (bytes) and its bytes."""
    parts = []
    for env in envelopes:   # one copy of each entry: the join
        parts.append(_U32.pack(len(env)))
        parts.append(env)
    return b"".join(parts)


def decode_forward(body: bytes) -> list[bytes]:
    """The envelopes of an ``encode_forward`` body. Raises ``ValueError`` when a length runs
    past the end or bytes trail the last envelope (nothing of such a body is proposed)."""
    envs = []
    pos, end = 0, len(body)
    while pos < end:
        if pos + 4 > end:
            raise ValueError(f"forwarded entries: {end - pos} bytes trail the last one")
        (n,) = _U32.unpack_from(body, pos)
        if pos + 4 + n > end:
            raise ValueError(f"forwarded entry of {n} bytes at {pos}: only {end - pos - 4} left")
        envs.append(body[pos + 4:pos + 4 + n])
        pos += 4 + n
    return envs
