"""What the membership state machine asks its driver to do, and the timings it runs on.

Owns the output values of ``cluster.membership.Node`` (frozen, slotted dataclasses: compare them
in tests, log them, match on them in the driver) and ``Timing``. Must not know: sockets, pamqp
framing, the broker core. Each action names the proposal section it carries out (Qpid ClusteringHA).
"""

from __future__ import annotations

from dataclasses import dataclass

from .codec import ClusterMethod
from .durable import DurableVote

__all__ = [
    "Action", "Send", "ViewInstalled", "BecameLeader", "Replay", "ApplyReplay", "AcceptClients",
    "Excluded", "Left", "Persist", "ProposeView", "Timing",
    "Members",
]

Members = tuple[tuple[str, str], ...]
"""An ordered member list: ``((name, "host:port"), ...)``; the first is the leader."""


@dataclass(frozen=True, slots=True)
class Timing:
    """Timings in seconds (the driver's clock, e.g. ``time.monotonic``).

    ``ping_interval`` and ``missed``: ring pings (issue 5: 0.5 s and 3); a peer unheard for
    ``missed * ping_interval`` is suspected. ``verify_timeout``: how long a proposer waits for the
    answers to its Vote requests (the leader's "verify").
    ``heartbeat_interval``: the leader pings every member this often (their confirmation that it
    leads the view). ``leader_timeout``: a member suspects a leader it has had no Ping or
    Membership of the view from for this long.
    ``retry``: a proposal the log refused, a round without a majority (no log yet) or a delegated
    takeover that produced nothing is retried/escalated after this. ``join_retry``: Join and Leave are re-sent this often.
    ``recover_after``: a restarted member that heard from no serving member of its last view for
    this long proposes to recover that view itself (``membership``, "Restart").
    """

    ping_interval: float = 0.5
    missed: int = 3
    verify_timeout: float = 0.25
    heartbeat_interval: float = 1.0
    leader_timeout: float = 2.5
    retry: float = 1.0
    join_retry: float = 2.0
    recover_after: float = 4.0

    @property
    def suspect_after(self) -> float:
        """Silence after which the ring predecessor is suspected (1.5 s by default)."""
        return self.ping_interval * self.missed


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``method`` to node ``to`` over the peer link to it (opened to ``address`` when none is
    open; ``address`` is "" when unknown: use the link the node came in on). A failure to send must
    come back as ``Node.send_failed(to, now)``."""

    to: str
    address: str
    method: ClusterMethod


@dataclass(frozen=True, slots=True)
class ViewInstalled:
    """A new view is in force here (proposal "Cluster.Membership"): fail pending waits on
    ``removed`` nodes, connect to ``added`` ones."""

    view: int
    members: Members
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BecameLeader:
    """This node is now first in the view: it owns shared exchanges/queues replay for joiners."""

    view: int


@dataclass(frozen=True, slots=True)
class Replay:
    """Replay our state to the new member ``to`` (proposal "Join"), then send ``Synch(view, us)``
    on the same link. ``shared``: also exchanges, shared queues and their bindings (the leader's
    part); always: our private queues, their bindings, our consumer counts on shared queues."""

    to: str
    address: str
    view: int
    shared: bool


@dataclass(frozen=True, slots=True)
class ApplyReplay:
    """(On a joining node.) Apply the methods replayed by ``from_node``, buffered until now: the
    leader's come first because private queues' bindings need its exchanges (proposal "Join")."""

    from_node: str


@dataclass(frozen=True, slots=True)
class AcceptClients:
    """Every member has sent its Synch: open the client listener (proposal "Join")."""

    view: int


@dataclass(frozen=True, slots=True)
class Excluded:
    """A view without us came in: drop replicated state; we re-join (a Join is already sent)."""

    view: int


@dataclass(frozen=True, slots=True)
class Left:
    """Our Leave took effect (or the leader announced a view without us while leaving)."""

    view: int


@dataclass(frozen=True, slots=True)
class Persist:
    """Write ``vote`` (``cluster.durable``) to stable storage (fsync) before carrying out the
    actions after it: it always comes first in a list, so no answer leaves before its grant is
    durable (Raft paper §5.2's rule for currentTerm and votedFor)."""

    vote: DurableVote


@dataclass(frozen=True, slots=True)
class ProposeView:
    """A round decided on ``view`` (``members``, the leader first), replacing view ``base``:
    propose it to the cluster metadata log (compare-and-set on ``base``: of two rounds from one
    view only the first committed counts) and tell the node ``view_committed`` once it applied
    there, or ``view_refused``. Only with ``Node.commit_views`` (issue 23: the view is installed
    in one agreed order, not on a round's grants alone)."""

    base: int
    view: int
    members: Members
    #: Members that left in order (Cluster.Leave) in this change: the metadata leader may take
    #: them out of its configuration while they still answer, before they stop.
    left: tuple[str, ...] = ()


Action = (Send | ViewInstalled | BecameLeader | Replay | ApplyReplay | AcceptClients | Excluded
          | Left | Persist | ProposeView)
