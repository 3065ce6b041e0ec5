"""Sans-IO cluster membership: one broker's view of who is in the cluster, in what order.

Owns the rules of the Qpid ClusteringHA proposal ("Cluster Management", "Failure Analysis"), each
view committed in the cluster metadata log (Raft) before it is installed: inputs are received Cluster methods (``receive``), clock ticks (``tick``), send
failures (``send_failed``) and commands (``bootstrap``, ``join``, ``leave``); every call takes ``now``
(seconds, the driver's monotonic clock) and returns a list of ``cluster.actions`` for the driver.
Must not know: sockets, framing, the broker core, real time.

Rules (a round's outcome is in ``rounds``, the joiner's replay order in ``syncing``):
- A view is an ordered member list, the first member its leader; older views are ignored (view
  numbers, statuses and the ring's order: ``views``).
- Join: a member forwards a Join to the leader, which adds the node at the end (one per view).
  Members that see a new node replay to it (``Replay``). A joining node is silent, and takes a view
  only from the leader announcing it last in it (not an older view that still lists a former self).
- Ring: each member pings the one before it, the leader pings the last. A peer unheard for
  ``missed * ping_interval``, or a failed send, is suspected: Suspect to the leader, or, when the
  leader is the suspect, to the first member after it that we do not suspect (if that is us, we
  take over; if it does nothing within ``retry``, we pass it over too).
- Every change (join, leave, suspicion, takeover) is a round of Vote requests to the current view
  (``rounds``: who answers); the new view is the members that answered, less leavers, plus the
  joiner, and it is proposed to the metadata log (``commit_views``), whose commit decides (a
  majority of the log's configuration, which a view whose own majority died may still have).
  A member without the log (its replica not open yet) starts no round; no grants, no leases.
- Restart: the view and its members are durable (``Persist``, first in the action list, written
  by the driver before the rest). A restarted member is JOINING but answers rounds on that view
  (``restart``) with ``rejoining`` set, and the proposer leaves it out of the new view (it re-joins
  and gets the replay). So a survivor of a majority crash re-admits the restarted members.
  With nobody serving for ``recover_after`` (power loss), a restarted member that ``may_recover``
  (the driver's rule: the metadata log's leader, elected by a majority of the last configuration)
  runs a recovery round and starts the view over with itself; the others join it (definitions
  come from the metadata log, not its disk). With no log anywhere (a cluster upgraded from the
  broadcast design) only the durable view's leader recovers, once a majority of that view
  answered, and it founds the log.
- Heartbeat: the leader pings every member each ``heartbeat_interval``; a member that has not
  had its Ping or Membership for ``leader_timeout`` suspects the leader. No lease:
  what may serve is what the Raft groups decide (the metadata log, each quorum queue's group),
  so the membership keeps no quorum lease of its own (issue 23: the home-made leases retired).
- A member that hears from a node with an older view, or not in its view, sends it its Membership
  (rate-limited); a node left out of a newer view re-joins (``Excluded``).
- One agreed order (``committed_views``): a round's view is installed, and announced, only once
  committed in the metadata log, compare-and-set on the view it replaces: a partition can no
  longer make two lines of views. ``view_key`` (number, then member list) orders views.
- Known limits of Restart: a broker that lost its data dir (or its vote file) re-joins as a new
  member. An upgrade from the broadcast design needs its last view's leader back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from . import actions as a
from .codec import ClusterMethod, Join, Leave, Membership, Ping, Suspect, Synch, Vote
from .committed_views import CommittedViews
from .durable import DurableVote, view_key
from .restart import Restarted
from .rounds import Decision, Round, decide
from .suspicion import Suspicions
from .syncing import JoinSync
from .views import FIRST_VIEW, IN_VIEW, Status, next_view, ring_target

__all__ = ["Node", "Status", "next_view", "view_key", "FIRST_VIEW", "IN_VIEW"]

log = logging.getLogger(__name__)


class Node(CommittedViews):
    """The membership state machine of node ``name`` listening for peers at ``address``."""

    def __init__(self, name: str, address: str, cluster_name: str = "", version: str = "",
                 timing: a.Timing | None = None, durable: DurableVote | None = None) -> None:
        self.name, self.address = name, address
        #: the vote last made durable (``Persist``); from the data dir when restarted
        self.stored = durable or DurableVote()
        self._restored: Restarted | None = None   # JOINING after a restart, with a vote
        self.cluster_name, self.version = cluster_name, version
        self.timing = timing or a.Timing()
        self.status = Status.IDLE
        self.view = 0
        self.members: a.Members = ()
        self.load: dict[str, int] = {}
        self.peer_load: dict[str, dict[str, int]] = {}
        self._addresses: dict[str, str] = {}
        self._out: list[a.Action] = []
        # per-view state, reset by _reset_view_state at every view change
        self._last_heard: dict[str, float] = {}
        self._suspicions = Suspicions()
        self._pending_suspects: set[str] = set()
        self._next_ping = self._next_round = self._last_confirm = self._next_heartbeat = 0.0
        self._round: Round | None = None
        self._round_number = 0
        self._pending_joins: dict[str, str] = {}
        self._pending_leaves: set[str] = set()
        self._informed: dict[str, tuple[int, float]] = {}
        self._seeds: list[tuple[str, str]] = []
        self._next_join = 0.0
        self._sync = JoinSync()
        #: Whether this restarted member may propose a recovery round (asked once nobody
        #: served for ``recover_after``): the driver's rule, the metadata log's leader only
        #: (its Raft group elected it: a majority of the last configuration is back).
        self.may_recover: Callable[[], bool] = lambda: True
        self._handlers: dict[type[ClusterMethod], Callable[[str, ClusterMethod, float], None]] = {
            Join: self._on_join, Membership: self._on_membership, Leave: self._on_leave,
            Suspect: self._on_suspect, Synch: self._on_synch, Ping: self._on_ping,
            Vote: self._on_vote,
        }

    # ----------------------------------------------------------------- queries
    @property
    def names(self) -> list[str]:
        """Member names in order (empty when not in a view)."""
        return [n for n, _ in self.members]

    @property
    def leader(self) -> str | None:
        """The first member's name, or None when not in a view."""
        return self.members[0][0] if self.members else None

    @property
    def is_leader(self) -> bool:
        """True when this node is in a view and first in it."""
        return self.status in IN_VIEW and self.leader == self.name

    def address_of(self, node: str) -> str:
        """The last known ``host:port`` of ``node``, "" when unknown."""
        return self._addresses.get(node, "")

    def set_load(self, load: dict[str, int]) -> None:
        """Our own load figures, sent in every Ping (see ``codec.Ping``)."""
        self.load = dict(load)

    # ----------------------------------------------------------------- commands
    def bootstrap(self, now: float) -> list[a.Action]:
        """Found a new cluster of one (no seed answered, or none given; allowed while JOINING).
        Its view number follows the durable vote's, if any (``FIRST_VIEW`` otherwise)."""
        self._start(allow_joining=True)
        self.status = Status.MEMBER
        self._install(next_view(max(self.stored.view, self.view), 0),
                      ((self.name, self.address),), now)
        self._emit(a.AcceptClients(self.view))
        return self._take(now)

    def join(self, seeds: Sequence[tuple[str, str]], now: float) -> list[a.Action]:
        """Join through ``seeds`` (``(name or "", "host:port")``, tried in turn every
        ``join_retry``), then through the other members of our durable vote's view: a restarted
        member keeps that vote meanwhile (see "Restart"). Raises ``ValueError`` for no seeds."""
        addresses = {ad for _, ad in seeds}
        seeds = [*seeds, *(m for m in self.stored.peers(self.name) if m[1] not in addresses)]
        if not seeds:
            raise ValueError("join needs at least one seed")
        self._start()
        self.status = Status.JOINING
        self._seeds = list(seeds)
        if self.stored.votes_in(self.name):
            self._restored = Restarted(self.stored, now)
            self._addresses.update(self.stored.members)
            self._addresses[self.name] = self.address
        self._send_join(now)
        return self._take(now)

    def leave(self, now: float) -> list[a.Action]:
        """Leave in an orderly way (proposal "Cluster.Leave"); ``Left`` follows the new view."""
        if self.status not in IN_VIEW:
            self.status = Status.LEFT
            self._restored = None
            self._emit(a.Left(self.view))
            return self._take(now)
        self.status = Status.LEAVING
        self._next_join = now + self.timing.join_retry
        if self.is_leader:
            self._pending_leaves.add(self.name)
        else:
            self._send_to_leader(Leave(self.name))
        return self._take(now)

    # ----------------------------------------------------------------- inputs
    def receive(self, sender: str, method: ClusterMethod, now: float) -> list[a.Action]:
        """A Cluster method from peer ``sender`` (the authenticated node name of the link)."""
        if self.status in (Status.IDLE, Status.LEFT):
            return []
        rejoining = isinstance(method, Vote) and method.rejoining   # from a restarted member
        if self.status is Status.JOINING:
            if self._restored is not None:
                self._restored.heard(sender, method, now)
            if not isinstance(method, (Membership, Synch)) and not (
                    isinstance(method, Vote) and self._restored is not None):
                return []   # silent until in a view (a restarted member still votes)
        handler = self._handlers.get(type(method))
        if handler is None:
            return []
        view = getattr(method, "view", None)
        if isinstance(view, int) and not isinstance(method, Membership):
            if rejoining:   # not alive as a member: never counted as heard or in a quorum check
                self._maybe_inform(sender, view, now)
                handler(sender, method, now)
                return self._take(now)
            if view == self.view:
                self._last_heard[sender] = now
            self._maybe_inform(sender, view, now)
        handler(sender, method, now)
        return self._take(now)

    def send_failed(self, peer: str, now: float) -> list[a.Action]:
        """Sending to ``peer`` failed (link down, refused): suspect it."""
        if self.status in IN_VIEW:
            self._suspect(peer, now)
        return self._take(now)

    def tick(self, now: float) -> list[a.Action]:
        """Run the timers (call every ~50 ms, or at least every ``ping_interval / 5``)."""
        t = self.timing
        if self.status is Status.JOINING:
            if now >= self._next_join:
                self._send_join(now)
            if self._restored is not None:
                self._maybe_start_round(now)
        elif self.status in IN_VIEW:
            target = self._ring_target()
            if target is not None:
                if now >= self._next_ping:
                    self._next_ping = now + t.ping_interval
                    self._send(target, Ping(True, self.view, self.load))
                if now - self._last_heard.get(target, now) >= t.suspect_after:
                    self._suspect(target, now)
            if self.is_leader:
                self._tick_heartbeat(now)
            elif now - self._last_confirm >= t.leader_timeout and self.leader is not None:
                self._suspect(self.leader, now)
            self._tick_suspicions(now)
            if self.status is Status.LEAVING and now >= self._next_join:
                self._next_join = now + t.join_retry
                if not self.is_leader:
                    self._send_to_leader(Leave(self.name))
        if self._round is not None and now >= self._round.deadline:
            self._finish_round(now)
        return self._take(now)

    # ----------------------------------------------------------------- handlers
    def _on_join(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Join)
        if m.cluster_name != self.cluster_name or self.status not in IN_VIEW or not m.node_name:
            log.info("%s: ignoring Join of %r to cluster %r", self.name, m.node_name, m.cluster_name)
            return
        self._addresses[m.node_name] = m.address
        if self.is_leader:
            self._pending_joins[m.node_name] = m.address
        else:
            self._send_to_leader(m)

    def _on_membership(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Membership)
        try:
            members = m.member_list
        except ValueError as exc:
            log.warning("%s: bad Membership from %s: %s", self.name, sender, exc)
            return
        if not members:
            return
        mine = self.name in dict(members)
        rv = self._restored
        former = rv is not None and rv.lists_former_self(m.view)
        if (self.status is Status.JOINING and rv is not None and mine and rv.newer(m.view, members)
                and (members[-1][0] != self.name or sender != members[0][0] or former)):
            rv.view, rv.members = m.view, members   # a view we missed, with us: our vote moves
            return
        if self.status is Status.JOINING and mine and (
                members[-1][0] != self.name or sender != members[0][0] or former):
            return   # only the leader's announcement of our Join, not an older view with us in it
        if view_key(m.view, members) > view_key(self.view, self.members):
            self._install(m.view, members, now)
        elif m.view == self.view and members == self.members and sender == self.leader:
            self._last_confirm = now
            self._suspicions.leader_alive(self.leader)
        elif self.status is Status.JOINING and self.name not in dict(members):
            self._seeds = [members[0], *(sd for sd in self._seeds if sd != members[0])]

    def _on_leave(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Leave)
        if self.is_leader and m.node_name in self.names:
            self._pending_leaves.add(m.node_name)
        elif self.status in IN_VIEW and not self.is_leader:
            self._send_to_leader(m)

    def _on_suspect(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Suspect)
        if m.view != self.view or self.status not in IN_VIEW:
            return
        if m.node_name == self.leader and not self.is_leader:
            self._suspicions.since.setdefault(m.node_name, now)   # asked to take over: the round verifies
            self._leader_down(now)
        else:
            self._suspect(m.node_name, now, forwarded=True)

    def _on_synch(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Synch)
        if self.status is Status.JOINING:   # it can overtake the Membership (another link)
            self._sync.early(m.from_node, m.view)
        elif self.status is Status.SYNCING:
            self._out += self._sync.synch(m.from_node)
            self._maybe_synched()

    def _on_ping(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Ping)
        self.peer_load[sender] = dict(m.load)
        if sender == self.leader and m.view == self.view and self.status in IN_VIEW:
            self._last_confirm = now   # the leader's heartbeat
            self._suspicions.leader_alive(sender)
        if m.needs_reply:
            self._send(sender, Ping(False, self.view, self.load))

    def _on_vote(self, sender: str, m: ClusterMethod, now: float) -> None:
        assert isinstance(m, Vote)
        if m.request:
            rv = self._restored
            if self.status is Status.JOINING and rv is not None:   # restarted: our durable view
                if rv.answers(m):
                    self._send(sender, Vote(rv.view, m.candidate, m.round, False, True, True))
                return
            member = (m.view == self.view and self.status in IN_VIEW
                      and m.candidate in self.names)
            self._send(sender, Vote(self.view, m.candidate, m.round, False, member))
            return
        r = self._round
        if r is None or m.candidate != self.name or m.round != r.number or m.view != r.view:
            return
        if r.answer(sender, m.granted, self.name, m.rejoining):
            self._finish_round(now)

    # ----------------------------------------------------------------- suspicion
    def _suspect(self, node: str, now: float, forwarded: bool = False) -> None:
        if node == self.name or node not in self.names or self.status not in IN_VIEW:
            return
        if not self._suspicions.act_on(node, now, self.timing.retry, forwarded):
            return
        if self.is_leader:
            self._pending_suspects.add(node)
            self._maybe_start_round(now)
        elif node == self.leader:
            self._leader_down(now)
        else:
            self._send_to_leader(Suspect(node, self.view))

    def _leader_down(self, now: float) -> None:
        """The leader is suspected: take over if we are the first unsuspected member after it,
        else pass the Suspect on to that member (proposal: "they send it to the broker next to
        the leader")."""
        leader = self.leader
        sus = self._suspicions
        candidate = sus.candidate(self.names, self.name)
        if leader is None or candidate is None:
            return
        if candidate == self.name:
            sus.want_takeover = True
            self._maybe_start_round(now)
        elif candidate not in sus.delegated:
            sus.delegated[candidate] = now
            self._send(candidate, Suspect(leader, self.view))

    def _tick_suspicions(self, now: float) -> None:
        if self._suspicions.pass_over_idle(now, self.timing.retry):   # they did nothing
            self._leader_down(now)
        if self._suspicions.want_takeover:
            self._maybe_start_round(now)
        elif self.is_leader and (self._pending_suspects or self._pending_joins
                                 or self._pending_leaves):
            self._maybe_start_round(now)

    # ----------------------------------------------------------------- rounds
    def _maybe_start_round(self, now: float) -> None:
        """Start a round when one is due: the leader's (joins, leaves, suspects), a takeover, or
        a restarted member's recovery (no serving member for ``recover_after``)."""
        rv = self._restored
        if self._round is not None or self._proposed is not None or now < self._next_round:
            return
        takeover, recovery, view, members = None, False, self.view, self.members
        if self.status is Status.JOINING and rv is not None:
            if not rv.should_recover(now, self.timing.recover_after) or not self.may_recover():
                return
            if not self.commit_views and rv.leader != self.name:
                return   # no log anywhere yet (an upgrade): the durable view's leader founds it
            recovery, view, members = True, rv.view, rv.members
        elif self.status not in IN_VIEW or not self.commit_views:
            return   # a view changes only through the log (a member whose replica is not open waits)
        elif not self.is_leader:
            if not self._suspicions.want_takeover:
                return
            takeover = self.leader
        elif not (self._pending_suspects or self._pending_joins or self._pending_leaves):
            return
        self._round_number += 1
        # one joiner per view (a joiner waits for the Synch of every member before it in the view),
        # and none while we leave (a joiner takes its view only from the leader of that view)
        plain = takeover is None and not recovery
        joins = (dict(list(self._pending_joins.items())[:1])
                 if plain and self.name not in self._pending_leaves else {})
        leaves = frozenset(self._pending_leaves) if plain else frozenset()
        self._round = r = Round(self._round_number, view, members,
                                now + self.timing.verify_timeout, joins, leaves, takeover,
                                recovery=recovery)
        for n, _ in members:
            if n != self.name:
                self._send(n, Vote(view, self.name, r.number, True, False, recovery))
        if len(members) == 1:
            self._finish_round(now)

    def _finish_round(self, now: float) -> None:
        r, self._round = self._round, None
        rv = self._restored
        if r is None or r.view != (self.view if not r.recovery else rv.view if rv else -1):
            return
        out = decide(r, self.name, self.commit_views)
        names = [n for n, _ in r.members]
        if out.decision is Decision.LEADER_ALIVE:
            self._suspicions.leader_alive(self.leader)
            self._next_round = now + self.timing.retry
        elif out.decision is Decision.MINORITY:
            self._next_round = now + self.timing.retry
        else:
            self._suspicions.want_takeover = False
            for n in out.joined:
                self._pending_joins.pop(n, None)
            self._pending_leaves -= r.leaves
            self._pending_suspects.clear()
            if out.decision is Decision.UNCHANGED:
                self._broadcast(Membership(self.view, self.members), self.names)
            else:
                view = next_view(r.view, names.index(self.name))
                if r.recovery:
                    log.warning("%s: restarted, no member serving: proposing view %#x",
                                self.name, view)
                targets = set(names) | set(out.joined)
                if not self._propose(r.view, view, out.members, targets, r.leaves, now):
                    self._broadcast(Membership(view, out.members), targets)
                    self._install(view, out.members, now)

    # ----------------------------------------------------------------- leader's heartbeat
    def _tick_heartbeat(self, now: float) -> None:
        """A Ping of the view to every member each ``heartbeat_interval``: their confirmation
        that the leader is alive and still leads this view. Not a Membership: a broker that
        restarted without its data dir takes a Membership from the leader that lists it last
        for the announcement of its Join."""
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.timing.heartbeat_interval
            self._broadcast(Ping(False, self.view, self.load), self.names)

    # ----------------------------------------------------------------- views
    def _reset_view_state(self, now: float) -> None:
        self._last_heard = {}
        self._suspicions = Suspicions()
        self._pending_suspects = set()
        self._next_ping = now
        self._next_round = now
        self._last_confirm = now
        self._next_heartbeat = now + self.timing.heartbeat_interval

    def _install(self, view: int, members: a.Members, now: float) -> None:
        old_names, old_leader = self.names, self.leader
        self.view, self.members = view, members
        self._round = None
        self._proposed = None   # superseded: a committed view came first (``committed_views``)
        self._restored = None
        self._reset_view_state(now)
        for n, ad in members:
            self._addresses[n] = ad
        names = self.names
        if self.name not in names:
            self.members = ()
            if self.status is Status.LEAVING:
                self.status = Status.LEFT
                self._emit(a.Left(view))
            else:
                self._rejoin(members, now)
            return
        self._last_heard = dict.fromkeys(names, now)
        self._pending_joins = {n: ad for n, ad in self._pending_joins.items() if n not in names}
        added = tuple(n for n in names if n not in old_names and n != self.name)
        removed = tuple(n for n in old_names if n not in names)
        self._emit(a.ViewInstalled(view, members, added, removed))
        if self.status is Status.JOINING:
            self.status = Status.SYNCING
            self._out += self._sync.begin(self.name, view, names)
        elif self.status is Status.SYNCING and self._sync.lost_leader(names):
            self._rejoin(members, now)   # the leader died before its replay was done: start over
            return
        else:
            for n in added:
                self._emit(a.Replay(n, self._addresses.get(n, ""), view, names[0] == self.name))
        if names[0] == self.name and old_leader != self.name:
            self._emit(a.BecameLeader(view))
        self._maybe_synched()

    def _rejoin(self, members: a.Members, now: float) -> None:
        self._emit(a.Excluded(self.view))
        self.members = ()
        self.status = Status.JOINING
        self._seeds = [m for m in members if m[0] != self.name] or self._seeds
        self._send_join(now)

    def _maybe_synched(self) -> None:
        if self.status is Status.SYNCING:
            last = self._sync.finish()
            if last is not None:
                self._out += last
                self.status = Status.MEMBER
                self._emit(a.AcceptClients(self.view))

    def _maybe_inform(self, sender: str, their_view: int, now: float) -> None:
        """Send our Membership to a peer that is behind, or not in our view at all."""
        if self.status not in IN_VIEW or not (their_view < self.view or sender not in self.names):
            return
        last = self._informed.get(sender)
        if last is not None and last[0] == self.view and now - last[1] < self.timing.retry:
            return
        self._informed[sender] = (self.view, now)
        self._send(sender, Membership(self.view, self.members))

    # ----------------------------------------------------------------- plumbing
    def _start(self, allow_joining: bool = False) -> None:
        if self.status is not Status.IDLE and not (allow_joining and self.status is Status.JOINING):
            raise RuntimeError(f"{self.name}: already started ({self.status.value})")
        self._addresses[self.name] = self.address

    def _ring_target(self) -> str | None:
        return ring_target(self.names, self.name)

    def _send_join(self, now: float) -> None:
        self._next_join = now + self.timing.join_retry
        if self._seeds:
            name, address = self._seeds[0]
            self._seeds = self._seeds[1:] + self._seeds[:1]
            self._emit(a.Send(name, address, Join(self.name, self.address, self.cluster_name,
                                                  self.version)))

    def _send_to_leader(self, method: ClusterMethod) -> None:
        if self.leader is not None and self.leader != self.name:
            self._send(self.leader, method)

    def _send(self, to: str, method: ClusterMethod) -> None:
        self._emit(a.Send(to, self._addresses.get(to, ""), method))

    def _broadcast(self, method: ClusterMethod, targets: Sequence[str] | set[str]) -> None:
        for n in sorted(targets) if isinstance(targets, set) else targets:
            if n != self.name:
                self._send(n, method)

    def _emit(self, action: a.Action) -> None:
        self._out.append(action)

    def _take(self, now: float) -> list[a.Action]:
        out, self._out = self._out, []
        if self.status in IN_VIEW:
            vote = DurableVote(self.view, self.members)
        elif self._restored is not None:
            vote = self._restored.vote()
        else:
            vote = DurableVote(self.view, ())
        if vote != self.stored:   # durable before anything else in this list is carried out
            self.stored = vote
            out.insert(0, a.Persist(vote))
        return out

