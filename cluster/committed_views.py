"""Views installed in one agreed order: the half of ``cluster.membership.Node`` that takes a
round's decision to the cluster metadata log and installs the view only once the log committed
it (issue 23, "One agreed order for everything the cluster shares").

Why: a round's grants are leases, not a commit. A member cut off after it granted a change, and
before the announcement reached it, could grant a change of the same view on the other side of
a partition: two lines of views (the old "Known limit" of ``membership``). With
``Node.commit_views`` set (by the driver of a broker that has the metadata log), a round that
decided a new view emits ``ProposeView(base, view, members)``; the log's state machine accepts
it only when ``base`` is still the last committed view (compare-and-set, ``cluster.metadata.views``),
so of two rounds from the same view only the first committed counts, on every member, and only
committed views are ever installed or announced (Cluster.Membership: to the joiner, which is not
in the log yet, and as before to the members, who may also learn it from the log first). Until the
proposal commits (or is refused, or times out) the node starts no other round. Without
``commit_views`` (the simulators, a broker whose log replica is not open yet: a cluster
upgraded from the broadcast design agrees its first view so, and that view's leader founds the
log) a round installs its view at once, as the Qpid proposal describes. With it a round needs
no majority of grants (``rounds.decide``, ``by_log``): the log's commit is the decision.

Must not know: the metadata log, sockets, time (``now`` is given, seconds).
Sources: Raft paper §5 (a change is in force once committed), Qpid ClusteringHA "Cluster
Management"; RabbitMQ "Metadata store" (Khepri: membership changes in the Raft log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import actions as a
from .codec import Membership
from .durable import view_key
from .views import IN_VIEW, Status

__all__ = ["CommittedViews"]


class CommittedViews:
    """Mixin of ``cluster.membership.Node``: ``commit_views``, the proposal in flight, and
    ``view_committed`` / ``view_refused`` (the driver's answers to ``ProposeView``)."""

    if TYPE_CHECKING:
        from .restart import Restarted

        name: str
        status: Status
        view: int
        members: a.Members
        timing: a.Timing
        _restored: Restarted | None
        _next_round: float
        _addresses: dict[str, str]

        def _install(self, view: int, members: a.Members, now: float) -> None: ...
        def _broadcast(self, method: Membership, targets: set[str]) -> None: ...
        def _emit(self, action: a.Action) -> None: ...
        def _take(self, now: float) -> list[a.Action]: ...

    #: Set by the driver when the metadata log carries the views (module docstring).
    commit_views: bool = False
    #: The view proposed and not yet committed or refused: (view, members, Membership targets).
    _proposed: tuple[int, a.Members, frozenset[str]] | None = None

    def known_addresses(self) -> dict[str, str]:
        """Every peer address this node learned (Join, Membership, its views), by name: the
        metadata log must reach a member the view left out (a restarted member re-joining)
        to commit the view that admits it again."""
        return dict(self._addresses)

    def _propose(self, base: int, view: int, members: a.Members, targets: set[str],
                 left: frozenset[str], now: float) -> bool:
        """A round decided ``view`` (``left``: members it drops on their Cluster.Leave): with
        ``commit_views`` propose it (True: the caller installs nothing now); False: install it
        at once, as without the log."""
        if not self.commit_views:
            return False
        self._proposed = (view, members, frozenset(targets))
        self._emit(a.ProposeView(base, view, members, tuple(sorted(left))))
        return True

    def view_committed(self, view: int, members: a.Members, now: float) -> list[a.Action]:
        """The metadata log committed ``view`` (``members``, leader first): the proposer
        announces it (Cluster.Membership to its members and joiner) and installs it; any other
        member installs it when it comes after its own (a member that missed the announcement),
        and a restarted member still out of every view moves its durable view to it when it is
        listed (as for a Membership it missed). Returns the actions to run."""
        proposed = self._proposed
        mine = proposed is not None and proposed[0] == view and proposed[1] == members
        if mine:
            assert proposed is not None
            self._proposed = None
            self._broadcast(Membership(view, members), set(proposed[2]))
        newer = view_key(view, members) > view_key(self.view, self.members)
        rv = self._restored
        if mine and (newer or self.status is Status.JOINING):
            self._install(view, members, now)
        elif self.status in IN_VIEW and newer:
            self._install(view, members, now)
        elif (self.status is Status.JOINING and rv is not None and self.name in dict(members)
              and rv.newer(view, members)):
            rv.view, rv.members = view, members
        return self._take(now)

    def view_refused(self, view: int, members: a.Members, now: float) -> list[a.Action]:
        """The proposal of ``view`` was refused (another view committed first from the same
        base) or timed out (no metadata leader): the round failed; another may start after
        ``Timing.retry`` (joiners, leavers and suspicions ask again)."""
        proposed = self._proposed
        if proposed is not None and proposed[0] == view and proposed[1] == members:
            self._proposed = None
            self._next_round = now + self.timing.retry
        return self._take(now)
