"""A deterministic simulator of Raft groups (``cluster.raft``) with the invariants checked as it runs.

Every message goes through the wire codec (``cluster.raft.codec``). One seeded ``random.Random``
drives everything: message latency, loss, duplication, reordering,
disk latency (an ``AppendLog`` is durable only after a simulated fsync), crashes that lose what was
not synced, restarts from ``MemoryStorage``, partitions given as a set of blocked *directed* links
(symmetric splits, one-way links, rings), and clock skew (each node's clock runs at its own rate
from its own offset). Time is a float in ms of the simulation's global clock.

Invariants (``InvariantError`` at the first violation):
- election safety: at most one leader per term;
- an (index, term) names one entry everywhere (every entry ever appended by anybody is recorded);
- log matching: two live logs agreeing on (index, term) agree on every entry before it;
- leader completeness: a new leader holds every entry reported committed before;
- state machine safety: every node applies the same entry at the same index, in order, once,
  reaching the same state (its machine's ``snapshot()`` bytes after each index are compared) and
  returning the same result; a snapshot restores exactly the state other nodes had at its index,
  and the machine's ``snapshot()`` right after ``restore`` gives those bytes back;
- check-quorum: a node cut off from a majority of its configuration by partitions or crashes is
  no leader two check-quorum periods (plus message delays, scaled by clock skew) after the last
  change of topology or of its configuration;
- durability (``check_converged``): every command whose commit a leader reported is applied, at the
  index it was given, by every member once faults stop, whatever crashed in between.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from cluster.raft import actions as a
from cluster.raft import codec
from cluster.raft.messages import EntryKind, Message
from cluster.raft.node import RaftNode
from cluster.raft.storage import MemoryStorage


class InvariantError(AssertionError):
    """A Raft safety property failed in the simulation."""


@dataclass
class Net:
    """Network and disk behaviour. Latencies in ms; probabilities per message."""

    latency: tuple[float, float] = (1.0, 6.0)
    loss: float = 0.0
    dup: float = 0.0
    fifo: bool = False           # False: messages on a link may overtake each other
    disk: tuple[float, float] = (0.2, 3.0)


SIM_TIMING = a.Timing(election_ms=150, heartbeat_ms=30, max_batch_entries=8, max_inflight=4,
                      snapshot_keep=4, catchup_rounds=10)


def digest(prev: bytes, index: int, data: bytes) -> bytes:
    """One link of ``HashChain``: the hash of the previous state, the index and the data."""
    return hashlib.blake2b(prev + index.to_bytes(8, "big") + data, digest_size=12).digest()


class SimMachine(Protocol):
    """The state machine each replica of a simulation runs (one instance per incarnation)."""

    def apply(self, index: int, kind: EntryKind, data: bytes) -> object:
        """Apply the committed entry at ``index`` (every kind: COMMAND, NOOP, CONFIG); returns
        its result (what a client would be answered), compared across replicas."""
        ...

    def snapshot(self) -> bytes:
        """The whole state, canonical: replicas in the same state give the same bytes."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the state with a ``snapshot()``'s."""
        ...


class HashChain:
    """The default state machine: a hash chain over every applied entry's data."""

    def __init__(self) -> None:
        self.state = b""

    def apply(self, index: int, kind: EntryKind, data: bytes) -> None:
        """Chain ``data`` (of any kind) at ``index`` into the state; no result."""
        self.state = digest(self.state, index, data)

    def snapshot(self) -> bytes:
        """The chain's head (12 bytes; b"" before any entry)."""
        return self.state

    def restore(self, data: bytes) -> None:
        """Take ``data``, a ``snapshot()``, as the chain's head."""
        self.state = data


@dataclass
class Replica:
    """One incarnation of one node: the core, its storage (survives crashes), its state machine
    (``sm``, a ``HashChain`` unless the simulation was given another), its clock
    (local = offset + rate * global)."""

    node: RaftNode
    storage: MemoryStorage
    rate: float
    offset: float
    sm: SimMachine = field(default_factory=HashChain)
    applied: int = 0
    tick_at: float = -1.0
    tick_local: float = 0.0
    commit_seen: int = 0
    sync_at: float = -1.0
    incarnation: int = 0

    def local(self, t: float) -> int:
        """The replica's clock in whole ms (the core takes ``now_ms`` as an int: compiled by
        mypyc, it refuses a float)."""
        return math.floor(self.offset + self.rate * t)

    def global_time(self, local: float) -> float:
        return (local - self.offset) / self.rate


@dataclass
class RaftSim:
    ids: list[str]
    seed: int = 0
    timing: a.Timing = SIM_TIMING
    net: Net = field(default_factory=Net)
    skew: float = 0.0                # clock rates in [1 - skew, 1 + skew]
    snapshot_every: int = 0          # take a snapshot every N applied entries (0: never)
    machine: Callable[[], SimMachine] = HashChain   # each replica incarnation's state machine
    #: called as ``on_apply(node, index, term, result)`` after each entry a replica applies
    on_apply: Callable[[str, int, int, object], None] | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.now = 0.0
        self.queue: list[tuple[float, int, str, tuple]] = []
        self._seq = itertools.count()
        self.replicas: dict[str, Replica] = {}
        self.storages: dict[str, MemoryStorage] = {}
        self.crashed: set[str] = set()
        self.blocked: set[tuple[str, str]] = set()
        self.cut_since: dict[str, float] = {}
        self.leaders: dict[int, str] = {}
        self.entries: dict[tuple[int, int], tuple[EntryKind, bytes]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}      # index -> (term, data)
        self.applied: dict[int, tuple[int, bytes, bytes]] = {}  # index -> (term, data, state)
        self.results: dict[int, object] = {}                    # index -> what apply returned
        self.acked: dict[bytes, int] = {}                       # command -> index confirmed
        self.pending: dict[str, dict[int, tuple[int, bytes]]] = {}  # leader -> index -> (term, cmd)
        self.log: list[tuple[float, str, object]] = []          # (time, node, action) when traced
        self.trace = False
        self.counter = itertools.count()
        self.incarnations = itertools.count(1)
        self.max_delay = self.net.latency[1]
        self.vote_floors: dict[str, int] = {}
        for node_id in self.ids:
            self.storages[node_id] = MemoryStorage()
            self._start(node_id, bootstrap=tuple(self.ids))

    # ------------------------------------------------------------------ lifecycle
    def _start(self, node_id: str, bootstrap: tuple[str, ...] = ()) -> None:
        storage = self.storages[node_id]
        rate = 1.0 + self.rng.uniform(-self.skew, self.skew)
        offset = self.rng.uniform(0, 10_000)
        state = storage.load()
        node = RaftNode(node_id, state, math.floor(offset + rate * self.now), self.timing,
                        random.Random(self.rng.random()), bootstrap=bootstrap,
                        vote_floor=self.vote_floors.get(node_id, 0))
        rep = Replica(node, storage, rate, offset, self.machine(),
                      incarnation=next(self.incarnations))
        if state.snapshot.index:
            self._restore(node_id, rep, state.snapshot.index, state.snapshot.data)
        self.replicas[node_id] = rep
        self._execute(node_id, node.tick(rep.local(self.now)))

    def add_node(self, node_id: str) -> None:
        """A new, empty replica (not yet a member: a leader must ``add_member`` it)."""
        self.ids.append(node_id)
        self.storages[node_id] = MemoryStorage()
        self._start(node_id)

    def recreate(self, node_id: str, term: int, vote_floor: int = 0) -> None:
        """A broker's ``delete_member`` then ``add_member`` of the same node: the old replica
        (running or crashed) and its files are gone; a fresh, empty one starts with ``term``, the
        term of the leader that asked (as the runtime starts a joining replica), voting only
        once its log reaches ``vote_floor`` (that leader's commit index), not yet a member again
        (a leader must ``add_member`` it)."""
        self.vote_floors[node_id] = vote_floor
        self.replicas.pop(node_id, None)
        self.crashed.discard(node_id)
        self.pending.pop(node_id, None)
        storage = self.storages[node_id] = MemoryStorage()
        storage.save_state(term, None)
        self._start(node_id)
        self._topology_changed()

    def crash(self, node_id: str) -> None:
        """kill -9: the process and whatever was not synced are gone; storage keeps the rest."""
        if node_id in self.crashed:
            return
        self.crashed.add(node_id)
        self.storages[node_id].crash()
        del self.replicas[node_id]
        self.pending.pop(node_id, None)
        self._topology_changed()

    def restart(self, node_id: str) -> None:
        if node_id not in self.crashed:
            return
        self.crashed.discard(node_id)
        self._start(node_id)
        self._topology_changed()

    def set_blocked(self, links: set[tuple[str, str]]) -> None:
        """Drop every message on these directed links (a partition); empty: heal."""
        self.blocked = set(links)
        self._topology_changed()

    def split(self, *groups: set[str]) -> None:
        """A symmetric partition into ``groups`` (nodes in no group are cut from everybody)."""
        self.set_blocked({(x, y) for x in self.ids for y in self.ids if x != y
                          and not any(x in g and y in g for g in groups)})

    def ring(self, order: list[str]) -> None:
        """Each node reaches only its two neighbours in ``order`` (a ring partition)."""
        n = len(order)
        near = {(order[i], order[(i + d) % n]) for i in range(n) for d in (1, -1)}
        self.set_blocked({(x, y) for x in self.ids for y in self.ids
                          if x != y and (x, y) not in near})

    def heal(self) -> None:
        self.set_blocked(set())

    # ------------------------------------------------------------------ running
    def _at(self, when: float, kind: str, args: tuple) -> None:
        heapq.heappush(self.queue, (when, next(self._seq), kind, args))

    def run_until(self, t: float, max_events: int = 2_000_000) -> None:
        for _ in range(max_events):
            if not self.queue or self.queue[0][0] > t:
                break
            when, _, kind, args = heapq.heappop(self.queue)
            self.now = when
            getattr(self, "_do_" + kind)(*args)
        else:
            raise RuntimeError("event budget exhausted")
        self.now = t

    def live(self, node_id: str, incarnation: int) -> Replica | None:
        rep = self.replicas.get(node_id)
        return rep if rep is not None and rep.incarnation == incarnation else None

    def _do_tick(self, node_id: str, incarnation: int) -> None:
        rep = self.live(node_id, incarnation)
        if rep is None or rep.tick_at != self.now:
            return
        rep.tick_at = -1.0
        # the tick was set for the local deadline: float rounding must not make it early
        self._execute(node_id, rep.node.tick(max(rep.local(self.now), rep.tick_local)))

    def _do_deliver(self, src: str, dst: str, msg: Message) -> None:
        rep = self.replicas.get(dst)
        if rep is None or (src, dst) in self.blocked:
            return
        self._execute(dst, rep.node.receive(src, msg, rep.local(self.now)))

    def _do_sync(self, node_id: str, incarnation: int) -> None:
        rep = self.live(node_id, incarnation)
        if rep is None:
            return
        rep.sync_at = -1.0
        done = rep.storage.sync()
        if done is not None:
            self._execute(node_id, rep.node.persisted(*done))

    def _do_call(self, fn: object, args: tuple) -> None:
        fn(*args)  # type: ignore[operator]

    def call_at(self, when: float, fn: object, *args: object) -> None:
        """Run ``fn(*args)`` at simulated time ``when`` (fault and client schedules)."""
        self._at(when, "call", (fn, args))

    def _send(self, src: str, dst: str, msg: Message) -> None:
        net = self.net
        if (src, dst) in self.blocked or dst in self.crashed or self.rng.random() < net.loss:
            return
        copies = 2 if self.rng.random() < net.dup else 1
        wire = codec.decode(codec.encode(msg))   # every message through the wire codec
        if wire != msg:
            raise InvariantError(f"codec round trip changed {msg}")
        for _ in range(copies):
            delay = self.rng.uniform(*net.latency)
            self._at(self.now + delay, "deliver", (src, dst, wire))

    # ------------------------------------------------------------------ actions
    def _execute(self, node_id: str, actions: list[a.Action]) -> None:
        rep = self.replicas[node_id]
        node = rep.node
        for act in actions:
            if self.trace:
                self.log.append((self.now, node_id, act))
            if isinstance(act, a.Send):
                self._send(node_id, act.to, act.message)
            elif isinstance(act, a.PersistState):
                rep.storage.save_state(act.term, act.voted_for)
            elif isinstance(act, a.AppendLog):
                for e in act.entries:
                    known = self.entries.setdefault((e.index, e.term), (e.kind, e.data))
                    if known != (e.kind, e.data):
                        raise InvariantError(f"two entries at ({e.index}, {e.term})")
                rep.storage.append(act.first_index, act.entries)
                if rep.sync_at < 0:
                    rep.sync_at = self.now + self.rng.uniform(*self.net.disk)
                    self._at(rep.sync_at, "sync", (node_id, rep.incarnation))
            elif isinstance(act, a.PersistSnapshot):
                rep.storage.save_snapshot(act.snapshot, act.discard_log)
            elif isinstance(act, a.Apply):
                for e in act.entries:
                    self._apply(node_id, rep, e.index, e.term, e.kind, e.data)
                if self.snapshot_every and rep.applied - node.snapshot.index >= self.snapshot_every:
                    self._execute(node_id, node.snapshot_taken(rep.applied, rep.sm.snapshot()))
            elif isinstance(act, a.Restore):
                self._restore(node_id, rep, act.snapshot.index, act.snapshot.data)
            elif isinstance(act, a.CommitAdvanced):
                self._committed(node_id, rep, act.commit_index)
            elif isinstance(act, a.StateChanged):
                if act.role is a.Role.LEADER:
                    self._became_leader(node_id, node)
            elif isinstance(act, a.MembershipChanged):
                # a new configuration has another majority: check-quorum counts from now
                if self._reaches_majority(node_id, act.members):
                    self.cut_since.pop(node_id, None)
                else:
                    self.cut_since[node_id] = self.now
        deadline = node.next_deadline()
        want = max(rep.global_time(deadline), self.now)
        if rep.tick_at < 0 or want < rep.tick_at or rep.tick_at < self.now:
            rep.tick_at = want
            rep.tick_local = deadline
            self._at(want, "tick", (node_id, rep.incarnation))
        elif want > rep.tick_at:
            pass   # the earlier tick runs, finds nothing due, and schedules the next one

    def _apply(self, node_id: str, rep: Replica, index: int, term: int, kind: EntryKind,
               data: bytes) -> None:
        if index != rep.applied + 1:
            raise InvariantError(f"{node_id} applied {index} after {rep.applied}")
        rep.applied = index
        result = rep.sm.apply(index, kind, data)
        state = rep.sm.snapshot()
        known = self.applied.setdefault(index, (term, data, state))
        if known[:2] != (term, data):
            raise InvariantError(f"{node_id} applied {(term, data)} at {index}, others {known[:2]}")
        if known[2] != state:
            raise InvariantError(f"{node_id}'s state after {index} differs from another's")
        if self.results.setdefault(index, result) != result:
            raise InvariantError(f"{node_id} got {result!r} at {index}, another "
                                 f"{self.results[index]!r}")
        if self.on_apply is not None:
            self.on_apply(node_id, index, term, result)

    def _restore(self, node_id: str, rep: Replica, index: int, data: bytes) -> None:
        known = self.applied.get(index)
        if known is not None and known[2] != data:
            raise InvariantError(f"{node_id} restored a snapshot at {index} unlike the applied state")
        rep.applied = index
        rep.sm.restore(data)
        if rep.sm.snapshot() != data:
            raise InvariantError(f"{node_id}'s machine does not give back the snapshot at {index}")

    def _committed(self, node_id: str, rep: Replica, commit: int) -> None:
        node = rep.node
        start = max(node.log.snapshot.index + 1, rep.commit_seen + 1)
        rep.commit_seen = commit
        for i in range(start, commit + 1):
            e = node.log.entry(i)
            known = self.committed.setdefault(i, (e.term, e.data))
            if known != (e.term, e.data):
                raise InvariantError(f"{node_id} committed {(e.term, e.data)} at {i}, "
                                     f"before {known}")
        if node.is_leader:
            mine = self.pending.get(node_id, {})
            for i in [i for i in mine if i <= commit]:
                term, cmd = mine.pop(i)
                if node.log.term_at(i) == term:
                    self.acked[cmd] = i

    def _became_leader(self, node_id: str, node: RaftNode) -> None:
        other = self.leaders.setdefault(node.term, node_id)
        if other != node_id:
            raise InvariantError(f"two leaders in term {node.term}: {other} and {node_id}")
        self.pending[node_id] = {}
        base = node.log.snapshot.index
        for i, (term, data) in self.committed.items():
            if i > base and (node.log.term_at(i) != term or node.log.entry(i).data != data):
                raise InvariantError(f"leader {node_id} (term {node.term}) lacks committed {i}")

    # ------------------------------------------------------------------ clients
    def leader(self) -> str | None:
        """The live leader of the highest term, if any."""
        best = None
        for node_id, rep in self.replicas.items():
            if rep.node.is_leader and (best is None or rep.node.term > best[0]):
                best = (rep.node.term, node_id)
        return best[1] if best else None

    def propose(self, node_id: str | None = None, count: int = 1,
                commands: list[bytes] | None = None) -> list[a.ProposeResult]:
        """Propose ``commands`` (default: ``count`` fresh ones) at ``node_id`` (default: the
        leader); [] when there is no such live node."""
        node_id = node_id or self.leader()
        if node_id is None or node_id not in self.replicas:
            return []
        cmds = commands if commands is not None else [b"c%d" % next(self.counter)
                                                      for _ in range(count)]
        results, actions = self.replicas[node_id].node.propose_batch(cmds)
        for cmd, res in zip(cmds, results, strict=True):
            if isinstance(res, a.Proposed):
                self.pending.setdefault(node_id, {})[res.index] = (res.term, cmd)
        self._execute(node_id, actions)
        return results

    # ------------------------------------------------------------------ checks
    def _topology_changed(self) -> None:
        for node_id, rep in self.replicas.items():
            cut = not self._reaches_majority(node_id, rep.node.members)
            if cut:   # measured from the last change: the majority heard before may differ
                self.cut_since[node_id] = self.now
            else:
                self.cut_since.pop(node_id, None)

    def _reaches_majority(self, node_id: str, members: tuple[str, ...]) -> bool:
        both = sum(1 for m in members if m == node_id or (
            m not in self.crashed and (node_id, m) not in self.blocked
            and (m, node_id) not in self.blocked))
        return both * 2 > len(members)

    def check(self, full: bool = True) -> None:
        """The continuous invariants that are not checked per action: log matching over every
        pair of live logs (``full=False``: the 16 entries below their newest agreement only), and
        check-quorum (cut-off nodes are no leaders)."""
        reps = list(self.replicas.items())
        for i, (x, rx) in enumerate(reps):
            for y, ry in reps[i + 1:]:
                self._check_pair(x, rx.node, y, ry.node, None if full else 16)
        slowest = 1.0 - self.skew
        bound = (2 * self.timing.election_ms / slowest) + 4 * self.max_delay
        for node_id, since in self.cut_since.items():
            rep = self.replicas.get(node_id)
            if (rep is not None and rep.node.is_leader and self.now - since > bound
                    and not self._reaches_majority(node_id, rep.node.members)):
                raise InvariantError(f"{node_id} still leads {self.now - since:.0f} ms after "
                                     f"being cut from a majority")

    @staticmethod
    def _check_pair(x: str, nx: RaftNode, y: str, ny: RaftNode, depth: int | None) -> None:
        lx, ly = nx.log, ny.log
        lo = max(lx.snapshot.index, ly.snapshot.index)
        hi = min(lx.last_index, ly.last_index)
        agreed = hi
        while agreed > lo and lx.term_at(agreed) != ly.term_at(agreed):
            agreed -= 1
        if agreed <= lo:
            return
        start = lo + 1 if depth is None else max(lo + 1, agreed - depth)
        ex = lx.entries[start - lx.snapshot.index - 1:agreed - lx.snapshot.index]
        ey = ly.entries[start - ly.snapshot.index - 1:agreed - ly.snapshot.index]
        if ex != ey:
            raise InvariantError(f"logs of {x} and {y} agree at {agreed} but differ below it")

    def converge(self, within: float = 20_000.0, step: float = 50.0) -> bool:
        """Run until every member of the leader's configuration applied every acknowledged
        command and the commit of the newest term. True when it happened within ``within`` ms."""
        end = self.now + within
        while self.now < end:
            self.run_until(self.now + step)
            if self._converged():
                return True
        return False

    def _converged(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        lnode = self.replicas[leader].node
        if lnode.commit_index < lnode.log.last_index:
            return False
        target = max([lnode.commit_index, *self.acked.values()])
        return all(m in self.replicas and self.replicas[m].applied >= target
                   for m in lnode.members)

    def check_converged(self) -> None:
        """Durability: every acknowledged command is applied at its index by every member."""
        if not self._converged():
            raise InvariantError(f"did not converge: {self.describe()}")
        self.check()
        for cmd, index in self.acked.items():
            term_data = self.applied.get(index)
            if term_data is None or term_data[1] != cmd:
                raise InvariantError(f"acknowledged {cmd!r} at {index} lost: {term_data}")

    def describe(self) -> str:
        parts = []
        for node_id in self.ids:
            rep = self.replicas.get(node_id)
            if rep is None:
                parts.append(f"{node_id}:CRASHED")
                continue
            n = rep.node
            parts.append(f"{node_id}:{n.role.value} t={n.term} last={n.log.last_index} "
                         f"commit={n.commit_index} applied={rep.applied} members={n.members}")
        return "; ".join(parts) + f"; blocked={sorted(self.blocked)}"
