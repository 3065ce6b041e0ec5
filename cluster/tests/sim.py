"""An in-memory network of membership state machines on a simulated clock (tests only).

Every message goes through the real wire codec (``pamqp.frame.marshal``/``unmarshal``). Links are FIFO
with a random latency; a crashed node drops what it is sent and, for a "loud" crash (the host is up,
the process died: TCP answers RST), the sender learns of it after one latency; a partition drops
messages silently. Records every view each node installs and every view announcement. A node's
``Persist`` actions are its data dir: a restarted node gets the last one back (unless the test says
its disk was lost).
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from pamqp import frame

from cluster import actions as a
from cluster.codec import Membership
from cluster.durable import DurableVote
from cluster.membership import Node, Status


@dataclass
class Announcement:
    time: float
    node: str
    prev_members: tuple[str, ...]
    view: int
    members: tuple[str, ...]


@dataclass
class Sim:
    names: list[str]
    seed: int = 0
    timing: a.Timing = field(default_factory=a.Timing)
    latency: tuple[float, float] = (0.001, 0.005)
    tick_every: float = 0.05
    #: Model of the metadata log (``Node.commit_views``): a view proposal commits when its
    #: proposer reaches a majority of the log's configuration (``config``), compare-and-set on
    #: its base. The configuration follows the committed views as the metadata leader makes it
    #: (``cluster.metadata.group``): a view's new members are added; a member the view dropped
    #: is removed only while the proposer cannot reach it and reaches a majority without it.
    #: A node restarted without its disk has an empty replica: it counts toward no commit until
    #: a committed view admits it again (Raft: a wiped voter must not vote; the broker's
    #: ``vote_floor``). Every broker runs so; False only for the rounds alone.
    committed_log: bool = True

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.now = 0.0
        self.nodes: dict[str, Node] = {}
        self.crashed: set[str] = set()
        self.loud: set[str] = set()
        self.groups: list[set[str]] | None = None     # partition: nodes in different groups
        self.last_topology_change = 0.0
        self.queue: list[tuple[float, int, str, tuple]] = []
        self._seq = itertools.count()
        self._fifo: dict[tuple[str, str], float] = {}
        self.installed: dict[str, list[tuple[float, int, tuple[str, ...]]]] = {}  # name#incarnation
        self.incarnation: dict[str, int] = {}
        self.announcements: list[Announcement] = []
        self.events: dict[str, list[tuple[float, a.Action]]] = {}
        self.durable: dict[str, DurableVote] = {}
        self.log_views: list[a.ProposeView] = []   # the views the log committed, in order
        self.config: set[str] | None = None         # the log's voters (``committed_log``)
        self.wiped: set[str] = set()                # restarted without a disk: empty replicas
        for name in self.names:
            self._new_node(name)

    # -------------------------------------------------------------- setup
    def _new_node(self, name: str) -> Node:
        node = Node(name, name, "test", "0.1.0", self.timing, self.durable.get(name))
        node.commit_views = self.committed_log
        self.nodes[name] = node
        self.incarnation[name] = self.incarnation.get(name, 0) + 1
        self.installed[self._key(name)] = []
        self.events.setdefault(name, [])
        self._at(self.now + self.rng.uniform(0, self.tick_every), "tick", (name, node))
        return node

    def form(self, until: float = 30.0) -> None:
        """Bootstrap the first node, join the others one by one, run until all are members."""
        first, *rest = self.names
        self._apply(first, self.nodes[first].bootstrap(self.now))
        for name in rest:
            self._apply(name, self.nodes[name].join([(first, first)], self.now))
            self.run_until(self.now + 0.01)
        ok = self.run_while(lambda: not self.converged(set(self.names)), until)
        assert ok, f"cluster did not form: {self.describe()}"

    # -------------------------------------------------------------- faults
    def crash(self, name: str, loud: bool = True) -> None:
        self.crashed.add(name)
        if loud:
            self.loud.add(name)
        self.last_topology_change = self.now

    def restart(self, name: str, lose_disk: bool = False) -> None:
        """A crashed node comes back with its durable vote (none with ``lose_disk``) and joins
        through every other node in turn."""
        if lose_disk:
            self.durable.pop(name, None)
            self.wiped.add(name)
        self.crashed.discard(name)
        self.loud.discard(name)
        node = self._new_node(name)
        self.last_topology_change = self.now
        self._apply(name, node.join([(n, n) for n in self.names if n != name], self.now))

    def partition(self, *groups: set[str]) -> None:
        self.groups = [set(g) for g in groups]
        self.last_topology_change = self.now

    def heal(self) -> None:
        self.groups = None
        self.last_topology_change = self.now
        self._catch_up(set(self.names))

    def _catch_up(self, names: set[str]) -> None:
        """The log's followers among ``names`` learn its last committed view (Raft replication
        once they are reachable again)."""
        if self.log_views:
            last = self.log_views[-1]
            for n in sorted(names):
                self._at(self.now + self.rng.uniform(*self.latency), "log_apply",
                         (n, self.nodes[n], last))

    def connected(self, x: str, y: str) -> bool:
        if self.groups is None:
            return True
        return any(x in g and y in g for g in self.groups)

    def component(self, name: str) -> set[str]:
        return {n for n in self.names if n not in self.crashed and self.connected(name, n)}

    # -------------------------------------------------------------- running
    def _at(self, when: float, kind: str, args: tuple) -> None:
        heapq.heappush(self.queue, (when, next(self._seq), kind, args))

    def run_until(self, t: float) -> None:
        while self.queue and self.queue[0][0] <= t:
            when, _, kind, args = heapq.heappop(self.queue)
            self.now = when
            getattr(self, "_do_" + kind)(*args)
        self.now = t

    def run_while(self, cond, until: float, step: float = 0.01) -> bool:
        """Run while ``cond()`` holds, up to time ``until``; True when it stopped holding."""
        while self.now < until:
            if not cond():
                return True
            self.run_until(self.now + step)
        return not cond()

    def _do_tick(self, name: str, node: Node) -> None:
        if self.nodes.get(name) is not node or name in self.crashed:
            return  # a replaced (restarted) or dead node's ticks stop
        self._apply(name, node.tick(self.now))
        self._at(self.now + self.tick_every, "tick", (name, node))

    def _do_deliver(self, src: str, dst: str, data: bytes) -> None:
        if dst in self.crashed or src in self.crashed or not self.connected(src, dst):
            return
        _, _, method = frame.unmarshal(data)
        self._apply(dst, self.nodes[dst].receive(src, method, self.now))

    def _do_failed(self, src: str, dst: str) -> None:
        if src not in self.crashed:
            self._apply(src, self.nodes[src].send_failed(dst, self.now))

    def _do_propose(self, name: str, node: Node, act: a.ProposeView) -> None:
        """The log's answer to a view proposal (``committed_log``)."""
        if self.nodes.get(name) is not node or name in self.crashed:
            return
        last = self.log_views[-1] if self.log_views else None
        if self.config is None:   # the founder's configuration: the view it bootstrapped
            self.config = {m for m, _ in (node.members or node.stored.members)}
        voters = self.config
        reach = self.component(name) - self.wiped
        if len(reach & voters) * 2 <= len(voters):   # no majority: the proposal times out
            self._at(self.now + 2.0, "log_refused", (name, node, act))
            return
        if last is not None and last.view != act.base:
            self._at(self.now + self.rng.uniform(*self.latency), "log_refused", (name, node, act))
            return
        self.log_views.append(act)
        view = {m for m, _ in act.members}
        for gone in sorted(voters - view):
            rest = voters - {gone}
            if gone not in reach and len(rest & reach) * 2 > len(voters):
                voters.discard(gone)
        voters |= view
        self.wiped -= view   # admitted again: caught up from the log first (a learner)
        for n in sorted(reach | (view & self.component(name))):
            self._at(self.now + self.rng.uniform(*self.latency), "log_apply",
                     (n, self.nodes[n], act))

    def _do_log_apply(self, name: str, node: Node, act: a.ProposeView) -> None:
        if self.nodes.get(name) is node and name not in self.crashed:
            self._apply(name, node.view_committed(act.view, act.members, self.now))

    def _do_log_refused(self, name: str, node: Node, act: a.ProposeView) -> None:
        if self.nodes.get(name) is node and name not in self.crashed:
            self._apply(name, node.view_refused(act.view, act.members, self.now))

    def _send(self, src: str, dst: str, method) -> None:
        if dst not in self.nodes or not self.connected(src, dst):
            return  # silently lost
        delay = self.rng.uniform(*self.latency)
        if dst in self.crashed:
            if dst in self.loud:
                self._at(self.now + delay, "failed", (src, dst))
            return
        when = max(self.now + delay, self._fifo.get((src, dst), 0.0))
        self._fifo[(src, dst)] = when
        self._at(when, "deliver", (src, dst, frame.marshal(method, 0)))

    def _apply(self, name: str, actions: list[a.Action]) -> None:
        node = self.nodes[name]
        announced = {act.method.view for act in actions
                     if isinstance(act, a.Send) and isinstance(act.method, Membership)}
        prev = tuple(m for m, _ in self._prev_members(name))
        vote = self.durable.get(name)
        if not prev and vote is not None and vote.votes_in(name):
            prev = tuple(m for m, _ in vote.members)   # restarted: the view it votes in
        for act in actions:
            self.events[name].append((self.now, act))
            if isinstance(act, a.Persist):
                self.durable[name] = act.vote
            elif isinstance(act, a.Send):
                self._send(name, act.to, act.method)
            elif isinstance(act, a.ProposeView):
                self._at(self.now + self.rng.uniform(*self.latency), "propose", (name, node, act))
            elif isinstance(act, a.Replay):
                from cluster.codec import Synch
                self._send(name, act.to, Synch(act.view, name))
            elif isinstance(act, a.ViewInstalled):
                members = tuple(m for m, _ in act.members)
                self.installed[self._key(name)].append((self.now, act.view, members))
                if act.view in announced or not prev:
                    self.announcements.append(
                        Announcement(self.now, name, prev, act.view, members))
                prev = members
        assert node is self.nodes[name]

    def _key(self, name: str) -> str:
        return f"{name}#{self.incarnation[name]}"

    def _prev_members(self, name: str) -> tuple[tuple[str, str], ...]:
        hist = self.installed[self._key(name)]
        return tuple((m, m) for m in hist[-1][2]) if hist else ()

    # -------------------------------------------------------------- checks
    def converged(self, group: set[str]) -> bool:
        """All of ``group`` are members of one and the same view, whose members are ``group``."""
        views = {(self.nodes[n].view, self.nodes[n].members) for n in group}
        if len(views) != 1:
            return False
        (view, members), = views
        return ({m for m, _ in members} == group
                and all(self.nodes[n].status is Status.MEMBER for n in group))

    def describe(self) -> str:
        return "; ".join(f"{n}:{node.status.value} v={node.view:#x} {node.names}"
                         + (" CRASHED" if n in self.crashed else "")
                         for n, node in self.nodes.items())
