"""A restarted member's standing while it re-joins: the view it kept on disk, and whom it heard.

Owns the rules that let a majority that lost its processes at once (kill -9, power loss) come back
without giving a restarted broker more than it had before the crash (see ``membership``,
"Restart"): it answers rounds on the view it was last in (``cluster.durable``), as a frozen member
would, but is left out of the view they make (it re-joins and gets a replay); it tells a
serving survivor (which has its state intact) from a restarted proposer; and when nobody serves,
one restarted member may start its view over (a ``recovery`` round in ``rounds``: the metadata
log's leader, or without a log anywhere the durable view's leader). Must not know: sockets,
files, timers (``membership`` calls it with ``now``).
"""

from __future__ import annotations

from .actions import Members
from .codec import ClusterMethod, Membership, Ping, Vote
from .durable import DurableVote, view_key
from .views import next_view

__all__ = ["Restarted"]


class Restarted:
    """The durable view (``view``, ``members``, leader first) of a restarted member that has its
    vote there, until a view admits it again or a newer view leaves it out; ``since``: when it
    started (seconds, the driver's clock)."""

    def __init__(self, vote: DurableVote, since: float) -> None:
        self.view, self.members = vote.view, vote.members
        #: the newest view number that may list our former self without a Join of ours: the
        #: one a round on the durable view, which we may have answered before the crash, made
        self.former = next_view(vote.view, 0xFFFF)
        self.serving_heard = since              # when a serving member last spoke to us

    @property
    def leader(self) -> str:
        """The first member of the durable view."""
        return self.members[0][0]

    def heard(self, sender: str, method: ClusterMethod, now: float) -> None:
        """A method came from ``sender``: Ping, Membership and Vote (not a restarted member's)
        come from a serving member."""
        if isinstance(method, (Ping, Membership, Vote)) and not getattr(method, "rejoining", False):
            self.serving_heard = now

    def answers(self, m: Vote) -> bool:
        """Whether we answer the Vote request ``m`` (as a restarted member, ``rejoining``): only
        a round on our durable view by one of its members."""
        return m.view == self.view and m.candidate in dict(self.members)

    def should_recover(self, now: float, recover_after: float) -> bool:
        """True when no serving member spoke to us for ``recover_after`` s: propose recovery."""
        return now - self.serving_heard >= recover_after

    def lists_former_self(self, view: int) -> bool:
        """True when a view numbered ``view`` that lists us may be one our former self was in
        (not the announcement of our Join, even when it lists us last: the leader re-admits a
        restarted member in a later view, after removing it)."""
        return view <= self.former

    def newer(self, view: int, members: Members) -> bool:
        """True when ``view``/``members`` comes after the durable view (``view_key`` order)."""
        return view_key(view, members) > view_key(self.view, self.members)

    def vote(self) -> DurableVote:
        """What to keep on disk now."""
        return DurableVote(self.view, self.members)
