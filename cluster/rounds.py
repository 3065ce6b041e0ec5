"""View-change rounds: a proposer learns which members of a view answer (Cluster.Vote).

Owns the pure part of a round (see ``membership`` for when rounds run): a proposer of a new view (the
leader, a broker taking over from a suspected leader, or a restarted member that found nobody
serving) asks every member of the view with Cluster.Vote; ``Round`` collects the answers and
``decide`` turns them into an ``Outcome``: the members that answered, less leavers, plus a joiner.
The round decides nothing by itself: the new view is proposed to the cluster metadata log, whose
commit (a majority of its configuration, compare-and-set on the view it replaces) is the decision
(``committed_views``; issue 23 retired the grant ledger and leases the rounds once needed).
Only a cluster upgraded from the broadcast design, with no log anywhere yet, installs a round's view
without it: its durable view's leader recovers once a majority of that view answered. A restarted
member (``rejoining``) answers for the view it kept on disk, but is left out of the view its answer
helps make: it re-joins and gets a replay. This is the Qpid proposal's "verify the failure" step.
Must not know: sockets, timers, the wire format.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .actions import Members

__all__ = ["Round", "Outcome", "Decision", "decide", "majority"]


def majority(size: int) -> int:
    """The smallest number of members that is more than half of ``size``."""
    return size // 2 + 1


@dataclass
class Round:
    """One proposer's round on ``view`` (``members``): ``joins`` to add (at most one), ``leaves``
    to drop, ``takeover_of`` the suspected leader when the proposer is not the leader;
    ``recovery``: the proposer is a restarted member that found nobody serving (it will be the
    only member of the new view). ``granted``: the answerers that are members of ``view`` (serving
    or restarted with it on disk); ``rejoining``: the answerers that restarted."""

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
    """LEADER_ALIVE: a takeover or recovery found a serving member answering. ANNOUNCE: the view
    changes (to be committed in the metadata log). UNCHANGED: nobody goes or comes (suspects all
    answered). MINORITY: without the log (an upgrade's first view), fewer than a majority of the
    view answered: change nothing."""

    LEADER_ALIVE = "leader-alive"
    ANNOUNCE = "announce"
    UNCHANGED = "unchanged"
    MINORITY = "minority"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a round decided; ``members`` is the new view (ANNOUNCE), ``joined`` who was added."""

    decision: Decision
    members: Members = ()
    joined: tuple[str, ...] = ()


def decide(r: Round, me: str, by_log: bool = False) -> Outcome:
    """The outcome of round ``r`` run by ``me`` (the proposer counts as a member answering).

    ``by_log`` (a broker whose metadata log commits every view, ``committed_views``): the round
    only verifies who answers (never MINORITY), since the log's commit, by a majority of the
    metadata log's configuration, is the decision. A view whose majority died can so still
    shrink while the log has a majority (Raft §6: the configuration, not the view, counts).
    Without it (an upgrade's first view) a majority of ``r``'s view must have answered.

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
        return Outcome(Decision.MINORITY)
    keep = [(n, ad) for n, ad in r.members
            if (n == me or n in serving) and n not in r.leaves and n not in r.joins]
    joins = tuple((n, ad) for n, ad in r.joins.items() if n not in names)
    new = tuple(keep) + joins
    if new == r.members and not r.recovery:
        return Outcome(Decision.UNCHANGED, r.members)
    return Outcome(Decision.ANNOUNCE, new, tuple(n for n, _ in joins))
