"""View-change rounds: the majority rule that keeps a minority side from changing membership.

Owns the pure part of a round (see ``membership`` for when rounds run): a proposer of a new view (the
leader, or a broker taking over from a suspected leader) asks every member of the current view with
Cluster.Vote; ``Round`` collects the answers and ``decide`` turns them into an ``Outcome``. A member
grants one proposer per view per lease (``Grants``); the leader never grants a takeover. This is our
addition to the Qpid proposal, whose leader "verifies the failure" and whose next broker "assumes
leadership" with no quorum rule. A restarted member (``rejoining``) still votes with the grant
ledger it kept on disk, but is left out of the view its vote helps make: it re-joins and gets a
replay. A restarted member may itself run a ``recovery`` round (nobody serving answered). Must not
know: sockets, timers, the wire format.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .actions import Members

__all__ = ["Round", "Outcome", "Decision", "decide", "Grants", "majority"]


def majority(size: int) -> int:
    """The smallest number of members that is more than half of ``size``."""
    return size // 2 + 1


@dataclass
class Round:
    """One proposer's round on ``view`` (``members``): ``joins`` to add (at most one), ``leaves``
    to drop, ``takeover_of`` the suspected leader when the proposer is not the leader;
    ``recovery``: the proposer is a restarted member that found nobody serving (it will be the
    only member of the new view). ``rejoining``: the answerers that restarted."""

    number: int
    view: int
    members: Members
    deadline: float
    joins: dict[str, str]
    leaves: frozenset[str]
    takeover_of: str | None
    responded: set[str] = field(default_factory=set)
    granted: set[str] = field(default_factory=set)
    recovery: bool = False
    rejoining: set[str] = field(default_factory=set)

    def answer(self, sender: str, granted: bool, me: str, rejoining: bool = False) -> bool:
        """Record an answer; True when the round can end now (all answered, or the suspected
        leader answered: it is alive; a restarted member answering proves nothing of the kind)."""
        self.responded.add(sender)
        if granted:
            self.granted.add(sender)
        if rejoining:
            self.rejoining.add(sender)
        elif sender == self.takeover_of or self.recovery:
            return True
        return self.responded >= {n for n, _ in self.members} - {me}


class Decision(enum.Enum):
    """LEADER_ALIVE: a takeover found the leader answering. ANNOUNCE: a majority granted and the
    view changes. UNCHANGED: a majority granted, nobody goes or comes (suspects all answered).
    MINORITY: fewer than a majority answered: change nothing. SPLIT: enough answered but grants
    went to another proposer: retry later."""

    LEADER_ALIVE = "leader-alive"
    ANNOUNCE = "announce"
    UNCHANGED = "unchanged"
    MINORITY = "minority"
    SPLIT = "split"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a round decided; ``members`` is the new view (ANNOUNCE), ``joined`` who was added."""

    decision: Decision
    members: Members = ()
    joined: tuple[str, ...] = ()


def decide(r: Round, me: str, by_log: bool = False) -> Outcome:
    """The outcome of round ``r`` run by ``me`` (the proposer counts as granting and answering).

    ``by_log`` (a broker whose metadata log commits every view, ``committed_views``): the round
    only verifies who answers; it needs no majority of grants (never MINORITY or SPLIT), since
    the log's commit, by a majority of the metadata log's configuration, is the decision. A
    view whose majority died can so still shrink while the log has a majority (Raft §6: the
    configuration, not the view, counts).

    The new view keeps, in order, the members that answered, less the leavers and any joiner that
    is already a member (a restarted broker: removed now, added by the next round so that every
    member sees it go and come back and replays to it) or that answered as restarted, then the new
    joiner at the end. A recovery round (or a takeover) that a serving member answered is
    LEADER_ALIVE: that member, not the restarted proposer, re-admits the others.
    """
    names = [n for n, _ in r.members]
    need = majority(len(names))
    serving = r.responded - r.rejoining
    if (r.takeover_of is not None and r.takeover_of in serving) or (r.recovery and serving):
        return Outcome(Decision.LEADER_ALIVE)
    if not by_log and len(r.granted) + 1 < need:
        return Outcome(Decision.MINORITY if len(r.responded) + 1 < need else Decision.SPLIT)
    keep = [(n, ad) for n, ad in r.members
            if (n == me or n in serving) and n not in r.leaves and n not in r.joins]
    joins = tuple((n, ad) for n, ad in r.joins.items() if n not in names)
    new = tuple(keep) + joins
    if new == r.members and not r.recovery:
        return Outcome(Decision.UNCHANGED, r.members)
    return Outcome(Decision.ANNOUNCE, new, tuple(n for n, _ in joins))


class Grants:
    """A member's grant ledger: one proposer per view at a time, for ``lease`` seconds."""

    def __init__(self) -> None:
        self._held: tuple[int, str, float] | None = None   # view, candidate, until

    def grant(self, view: int, candidate: str, now: float, lease: float) -> bool:
        """Grant ``candidate`` for ``view`` unless another holds an unexpired grant for it."""
        h = self._held
        if h is not None and h[0] == view and h[2] > now and h[1] != candidate:
            return False
        self._held = (view, candidate, now + lease)
        return True

    def restore(self, grant: tuple[int, str] | None, now: float, lease: float) -> None:
        """A restarted member's last grant (from its data dir) holds for a whole ``lease`` from
        ``now``: it may have been made just before the crash."""
        self._held = (grant[0], grant[1], now + lease) if grant is not None else None

    @property
    def last(self) -> tuple[int, str] | None:
        """The last grant made (view, candidate), expired or not: what ``cluster.durable`` keeps."""
        return (self._held[0], self._held[1]) if self._held is not None else None

    def free_at(self, now: float) -> float:
        """When the current grant lapses (``now`` when there is none)."""
        return self._held[2] if self._held is not None else now
