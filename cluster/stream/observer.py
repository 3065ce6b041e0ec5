"""A broker outside a replicated stream's members (``x-initial-cluster-size`` smaller than the
cluster): no replica in the Raft group, but a copy of the segments that it reads from a member
(``STREAM_FETCH``, as an Osiris replica reader would) and a way to publish. Pure.

Owns: this broker's publishes to the stream (an ``Outbox``: each Append forwarded to the leader
the members named, else to a member in turn, which passes it to its leader; re-sent after
``RESEND_MS`` without progress, applied once thanks to the per-origin seqs), and what the members
told about the stream in their fetch answers (``Tail``: its offsets, the leader, how far this
broker's Appends were applied -- the confirms). Has the part of ``StreamGroup``'s interface the
queue object uses (``machine`` counters, ``submit``/``flush``/``applied``, ``is_leader`` False).
Must not know: sockets, files, clocks (``now_ms`` comes in).
Source: RabbitMQ "Streams" (a client on a node without a replica is served by a remote member).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cluster.quorum.group import RESEND_MS, Action, Forward
from cluster.quorum.outbox import Outbox

from .machine import StreamMachine

__all__ = ["ObserverGroup", "Tail", "encode_tail", "decode_tail", "TAIL_SIZE"]

_TAIL = struct.Struct(">QQQB")


@dataclass(frozen=True, slots=True)
class Tail:
    """A member's view of the stream in a fetch answer: ``next_offset`` and ``first_offset`` as
    its replica applied them, ``applied`` (the asking broker's Appends applied up to this seq),
    ``leader`` ("" when unknown)."""

    next_offset: int
    first_offset: int
    applied: int
    leader: str


def encode_tail(tail: Tail) -> bytes:
    """``next`` u64, ``first`` u64, ``applied`` u64, leader (u8 length + utf-8)."""
    raw = tail.leader.encode()[:255]
    return _TAIL.pack(tail.next_offset, tail.first_offset, tail.applied, len(raw)) + raw


def decode_tail(data: bytes, pos: int = 0) -> tuple[Tail, int]:
    """(tail, position after it). Raises ``ValueError`` when malformed."""
    try:
        nxt, first, applied, n = _TAIL.unpack_from(data, pos)
        end = pos + _TAIL.size + n
        leader = bytes(data[pos + _TAIL.size:end]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"bad stream tail: {exc}") from exc
    return Tail(nxt, first, applied, leader), end


#: Bytes of a ``Tail`` with an empty leader.
TAIL_SIZE = _TAIL.size


class ObserverGroup:
    """Broker ``me`` (origin ``origin``) outside the stream's ``members`` (see module doc)."""

    holds_replica = False
    in_sync = None
    is_leader = False

    def __init__(self, me: str, origin: str, members: tuple[str, ...]) -> None:
        self.me = me
        self.origin = origin
        self.members = members
        self.outbox = Outbox(origin)
        #: The stream's counters as the members last told (``told``).
        self.machine = StreamMachine()
        self.machine_index = 0
        self.leader: str | None = None
        self._turn = 0
        #: A member has answered since this broker started (``told``): before, the stream's
        #: end is not known here.
        self.informed = False

    @property
    def applied(self) -> int:
        """This broker's Appends are applied up to this seq (the confirm counter)."""
        return self.outbox.applied

    def submit(self, command: bytes) -> int:
        """Queue an Append body; returns its seq."""
        return self.outbox.add(command)

    def target(self) -> str:
        """Where to send: the leader the members named, else each member in turn."""
        if self.leader and self.leader in self.members:
            return self.leader
        self._turn += 1
        return self.members[self._turn % len(self.members)]

    def flush(self, now_ms: int) -> list[Action]:
        """Forward what ``submit`` queued."""
        envs = self.outbox.take_unsent(now_ms)
        return [Forward(self.target(), tuple(envs))] if envs else []

    def tick(self, now_ms: int) -> list[Action]:
        """Every unapplied Append again after ``RESEND_MS`` without progress (to another member
        when no leader is known)."""
        if not self.outbox.stale(now_ms, RESEND_MS):
            return []
        self.leader = None   # it may be gone: ask the members in turn until one answers
        envs = self.outbox.all_pending(now_ms)
        return [Forward(self.target(), tuple(envs))] if envs else []

    def told(self, tail: Tail) -> None:
        """A member's fetch answer: the stream's counters, its leader, our confirms."""
        self.informed = True
        machine = self.machine
        if tail.next_offset >= machine.next_offset:
            machine.next_offset = tail.next_offset
            machine.first_offset = max(machine.first_offset, tail.first_offset)
        self.leader = tail.leader or self.leader
        self.outbox.applied_up_to(tail.applied)

    def durable(self, index: int, data: bytes) -> list[Action]:
        """No Raft log to compact here."""
        return []

    def retain(self, first: int, now_ms: int) -> list[Action]:
        """Retention is the leader's."""
        return []
