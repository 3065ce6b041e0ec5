"""A broker outside a quorum queue's group: it forwards its commands to a group member and hears
back from the leader when they are applied. Pure: inputs in, ``Forward`` actions out.

Owns: the forwarding side of a member that holds no replica (a cluster larger than
``x-quorum-initial-group-size``): publishes (and their confirms) through any broker. The target is
the leader last heard from, else the group's members in turn; commands with no news for
``RESEND_MS`` are re-sent to the next member (a member that is not the leader passes them once to
its leader; duplicates are dropped by the machine's per-origin seqs). The leader tells this member
how far its commands were applied (``notified``), which releases the publisher confirms.
Consumers are not served here (no replica to deliver from; ``serves_consumers`` is False).
Must not know: sockets, files, clocks. Sources: RabbitMQ "Quorum Queues" (clients may connect
to any node); Raft paper §8 (clients retry at another server).
"""

from __future__ import annotations

from cluster.raft import fifo as f

from .group import RESEND_MS, Action, Forward
from .machine import QuorumMachine
from .outbox import Outbox

__all__ = ["RemoteGroup"]


class RemoteGroup:
    """Member ``me`` (origin ``origin``) forwarding to the group ``members``; ``machine`` stays
    empty (counts read 0 here)."""

    is_leader = False
    serves_consumers = False

    def __init__(self, me: str, origin: str, members: tuple[str, ...],
                 machine: QuorumMachine) -> None:
        self.me = me
        self.origin = origin
        self.members = members
        self.machine = machine
        self.outbox = Outbox(origin)
        self.leader: str | None = None
        self._turn = 0

    @property
    def applied(self) -> int:
        """This origin's commands are applied up to this seq."""
        return self.outbox.applied

    def _target(self) -> str:
        return self.leader or self.members[self._turn % len(self.members)]

    def submit(self, command: f.Command) -> int:
        """Queue ``command``; returns its seq."""
        return self.outbox.add(f.encode(command))

    def flush(self, now_ms: int) -> list[Action]:
        """Forward what ``submit`` queued."""
        envs = self.outbox.take_unsent(now_ms)
        return [Forward(self._target(), tuple(envs))] if envs else []

    def tick(self, now_ms: int) -> list[Action]:
        """No news for ``RESEND_MS``: forget the leader, re-send everything to the next member."""
        if not self.outbox.stale(now_ms, RESEND_MS):
            return []
        self.leader = None
        self._turn += 1
        envs = self.outbox.all_pending(now_ms)
        return [Forward(self._target(), tuple(envs))] if envs else []

    def notified(self, frm: str, applied: int, resend: bool, now_ms: int) -> list[Action]:
        """The leader ``frm`` applied our commands up to ``applied`` (``resend``: it saw a gap
        after it): forget those, and re-send the rest when asked."""
        self.leader = frm
        self.outbox.applied_up_to(applied)
        if resend:
            envs = self.outbox.all_pending(now_ms)
            return [Forward(frm, tuple(envs))] if envs else []
        return []
