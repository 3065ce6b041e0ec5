"""A restarted member's standing while it re-joins: the vote it kept on disk, and whom it heard.

Owns the rules that let a majority that lost its processes at once (kill -9, power loss) re-admit
itself without giving a restarted broker more than it had before the crash (see ``membership``,
"Restart"): its durable vote (``cluster.durable``) counts in the view it was last in, as a frozen
member's would; it grants per its kept ledger; it prefers a serving survivor (which has its state
intact) over a restarted proposer; and when nobody serves, one restarted member may start its view
over (a ``recovery`` round in ``rounds``). Must not know: sockets, files, timers (``membership``
calls it with ``now``).
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
        #: durable view, or the one a round we granted before the crash may have announced
        self.former = max(vote.view, next_view(vote.grant[0], 0xFFFF) if vote.grant else 0)
        self.serving_heard = since              # when a serving member last spoke to us
        self.leader_heard = float("-inf")       # ... and when the durable view's leader did

    @property
    def leader(self) -> str:
        """The first member of the durable view."""
        return self.members[0][0]

    def heard(self, sender: str, method: ClusterMethod, now: float) -> None:
        """A method came from ``sender``: Ping, Membership and Vote (not a restarted member's)
        come from a serving member."""
        if isinstance(method, (Ping, Membership, Vote)) and not getattr(method, "rejoining", False):
            self.serving_heard = now
            if sender == self.leader:
                self.leader_heard = now

    def may_grant(self, me: str, m: Vote, now: float, recover_after: float) -> bool:
        """Whether the Vote request ``m`` may have our grant (the ledger decides next): for our
        durable view only; to another restarted member once no serving member spoke to us for
        ``recover_after`` s (a survivor re-admits us with its state intact, a restarted proposer
        would start the view over from its disk); to a takeover once the view's leader was silent
        that long (a serving leader that reaches us re-admits us; a takeover it answers fails, and
        the grants it took would block the leader's round)."""
        if m.view != self.view or m.candidate not in dict(self.members):
            return False
        if m.candidate == me:
            return True
        if m.rejoining:
            return now - self.serving_heard >= recover_after
        return m.candidate == self.leader or now - self.leader_heard >= recover_after

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

    def vote(self, grant: tuple[int, str] | None) -> DurableVote:
        """What to keep on disk now."""
        return DurableVote(self.view, self.members, grant)
