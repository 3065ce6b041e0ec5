"""A broker outside a quorum queue's group: it forwards its commands to a group member, hears back
from the leader when they are applied, and receives from the leader the deliveries of its
consumers. Pure: inputs in, actions and effects out.

Owns: the side of a member that holds no replica (a cluster larger than
``x-quorum-initial-group-size``). Commands (publishes, and its consumers' Checkout / Settle /
Return / Discard / Cancel) go to the leader last heard from, else the group's members in turn;
commands with no news for ``RESEND_MS`` are re-sent to the next member (a member that is not the
leader passes them once to its leader; duplicates are dropped by the machine's per-origin seqs).
The leader tells this member how far its commands were applied (``notified``: publisher confirms)
and ships the deliveries its replica checks out to this member's consumers (``received``, see
``shipping``): a delivery already received (same msg id and delivery count) is dropped, so the
re-ships of a new leader and the answers to this member's ``Holding`` reports (every
``HOLDING_MS`` while it has consumers) deliver nothing twice. A delivery stays "held" until the
settle that names it is applied (then it is remembered for a while as released). Basic.Get is not
served here (no replica to read from; ``holds_replica`` is False).
Must not know: sockets, files, clocks. Sources: RabbitMQ "Quorum Queues" (clients may connect
to any node); ``rabbit_fifo`` (the leader delivers to consumers on any node); Raft paper §8
(clients retry at another server).
"""

from __future__ import annotations

from collections import OrderedDict

from cluster.raft import fifo as f

from .group import RESEND_MS, Action, Forward
from .machine import Cancelled, Effect, QuorumMachine
from .outbox import Outbox
from .shipping import HOLDING_MS, Holding, decode_ship, encode_holding

__all__ = ["RemoteGroup", "RELEASED_KEPT"]

#: How many settled deliveries (msg id, delivery count) are remembered to drop late re-ships.
RELEASED_KEPT = 16384


class RemoteGroup:
    """Member ``me`` (origin ``origin``) forwarding to the group ``members``; ``machine`` stays
    empty (ready counts read 0 here)."""

    is_leader = False
    holds_replica = False
    #: Which members are in sync is not known outside the group.
    in_sync = None

    def __init__(self, me: str, origin: str, members: tuple[str, ...],
                 machine: QuorumMachine, outbox: Outbox | None = None) -> None:
        self.me = me
        self.origin = origin
        self.members = members
        self.machine = machine
        self.outbox = outbox or Outbox(origin)
        self.leader: str | None = None
        self._turn = 0
        #: this member's consumers (not cancelled here) -> seq of their latest Checkout
        self.checkouts: dict[str, int] = {}
        #: consumer -> msg id -> delivery count: received, settle not applied yet
        self.holding: dict[str, dict[int, int]] = {}
        self._settling: dict[int, tuple[str, tuple[tuple[int, int], ...]]] = {}
        self._released: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._holding_ms = -HOLDING_MS
        self._answered = True

    @property
    def applied(self) -> int:
        """This origin's commands are applied up to this seq."""
        return self.outbox.applied

    def _target(self) -> str:
        return self.leader or self.members[self._turn % len(self.members)]

    def submit(self, command: f.Command) -> int:
        """Queue ``command``; returns its seq. Checkouts, cancels and settles of this member's
        consumers are tracked (what is held, see the module docstring)."""
        seq = self.outbox.add(f.encode(command))
        if isinstance(command, f.Checkout):
            self.checkouts[command.consumer] = seq
        elif isinstance(command, f.Cancel):
            self.checkouts.pop(command.consumer, None)
            self._release(self.holding.pop(command.consumer, {}).items())
        elif isinstance(command, f.Settle | f.Return | f.Discard):
            held = self.holding.get(command.consumer, {})
            self._settling[seq] = (command.consumer, tuple(
                (i, held[i]) for i in command.msg_ids if i in held))
        return seq

    def _release(self, pairs: object) -> None:
        released = self._released
        for pair in pairs:  # type: ignore[attr-defined]
            released[pair] = None
        while len(released) > RELEASED_KEPT:
            released.popitem(last=False)

    def flush(self, now_ms: int) -> list[Action]:
        """Forward what ``submit`` queued."""
        envs = self.outbox.take_unsent(now_ms)
        return [Forward(self._target(), tuple(envs))] if envs else []

    def tick(self, now_ms: int) -> list[Action]:
        """No news for ``RESEND_MS``: forget the leader, re-send everything to the next member.
        Every ``HOLDING_MS`` while consumers are checked out: a ``Holding`` report (to the next
        member when the last one got no answer)."""
        out: list[Action] = []
        if self.outbox.stale(now_ms, RESEND_MS):
            self.leader = None
            self._turn += 1
            envs = self.outbox.all_pending(now_ms)
            if envs:
                out.append(Forward(self._target(), tuple(envs)))
        applied = self.outbox.applied
        live = [cid for cid, seq in self.checkouts.items() if seq <= applied]
        if live and now_ms - self._holding_ms >= HOLDING_MS:
            if not self._answered:
                self.leader = None
                self._turn += 1
            self._answered = False
            self._holding_ms = now_ms
            out.append(Holding(self._target(), encode_holding(
                self.origin, {cid: self.holding.get(cid, {}).items() for cid in live})))
        return out

    def told(self, leader: str, members: tuple[str, ...], now_ms: int) -> list[Action]:
        """A members notice of ``leader`` (``members.MembersNotice``, sent by the leader only):
        the group is ``members`` and commands go to ``leader``; to a new leader every unapplied
        command is sent again at once (those forwarded to the old one, or proposed by this
        broker's replica before it was removed, may be lost with it; Raft thesis §6.3: retried,
        and applied once thanks to the per-origin seqs) rather than after ``RESEND_MS``."""
        self.members = members
        if leader == self.leader:
            return []
        self.leader = leader
        envs = self.outbox.all_pending(now_ms)
        return [Forward(leader, tuple(envs))] if envs else []

    def adopt(self, holdings: dict[str, dict[int, int]]) -> None:
        """This broker just left the group (its replica was removed): its consumers (consumer id
        -> msg id -> delivery count they hold unsettled) are served from outside from now on;
        the next ``Holding`` report asks the leader for what is checked out to them and not
        held yet."""
        for cid, held in holdings.items():
            self.checkouts.setdefault(cid, 0)
            self.holding.setdefault(cid, {}).update(held)
        self._holding_ms = -HOLDING_MS

    def notified(self, frm: str, applied: int, resend: bool, now_ms: int) -> list[Action]:
        """The leader ``frm`` applied our commands up to ``applied`` (``resend``: it saw a gap
        after it): forget those (and the deliveries their settles name), and re-send the rest
        when asked."""
        self.leader = frm
        self._answered = True
        self.outbox.applied_up_to(applied)
        settling = self._settling
        while settling:
            seq = next(iter(settling))
            if seq > applied:
                break
            cid, pairs = settling.pop(seq)
            held = self.holding.get(cid)
            if held is not None:
                for i, n in pairs:
                    if held.get(i) == n:
                        del held[i]
            self._release(pairs)
        if resend:
            envs = self.outbox.all_pending(now_ms)
            return [Forward(frm, tuple(envs))] if envs else []
        return []

    def received(self, frm: str, payload: bytes) -> list[Effect]:
        """A ``shipping.Ship`` from the leader ``frm``: the deliveries not received before (for
        consumers not cancelled here) and ``Cancelled`` for consumers the group cancelled, as
        effects for the queue object (which re-checks those out). A malformed payload: nothing."""
        self.leader = frm
        self._answered = True
        try:
            deliveries, cancelled = decode_ship(payload)
        except ValueError:
            return []
        out: list[Effect] = []
        released = self._released
        for d in deliveries:
            if d.consumer not in self.checkouts:
                continue
            held = self.holding.get(d.consumer)
            if held is None:
                held = self.holding[d.consumer] = {}
            if held.get(d.msg_id) == d.delivery_count or (d.msg_id, d.delivery_count) in released:
                continue
            held[d.msg_id] = d.delivery_count
            out.append(d)
        for cid in cancelled:
            if cid in self.checkouts:
                del self.checkouts[cid]   # until the queue checks it out again
                self._release(self.holding.pop(cid, {}).items())
                out.append(Cancelled(cid))
        return out
