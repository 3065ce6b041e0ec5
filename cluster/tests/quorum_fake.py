"""A fake transport for unit tests of ``cluster.quorum``: members of one quorum queue's group
(``QuorumGroup`` over ``MemoryStorage`` + ``QuorumQueue``) exchanging Raft messages and forwarded
entries through an in-memory network with a simulated clock (and a wall clock far ahead of it,
as on a broker), kills, restarts, partitions, and a member leaving the group (``Net.leave``).
No sockets, no threads, no real time."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from cluster.quorum.group import Forward, Notify, QuorumGroup, Status
from cluster.quorum.machine import QuorumMachine
from cluster.quorum.queue import QuorumQueue
from cluster.quorum.remote import RemoteGroup
from cluster.quorum.shipping import Holding, Ship
from cluster.raft import actions as ra
from cluster.raft.fifo import FifoConfig
from cluster.raft.node import RaftNode
from cluster.raft.storage import MemoryStorage
from queues.arguments import QueueSettings
from queues.message import Message

TIMING = ra.Timing(election_ms=100, heartbeat_ms=20)
#: The clock commands carry (wall, ms since the epoch) is this far ahead of the Raft clock
#: (``Net.now``: monotonic, ms since the start), as on a real broker, so that a part reading the
#: wrong one shows.
WALL_OFFSET_MS = 1_790_000_000_000


@dataclass
class FakeChannel:
    prefetch: int = 0
    global_prefetch: int = 0


@dataclass
class FakeConsumer:
    """A core consumer stand-in: always has credit unless ``blocked``; records deliveries."""

    tag: str = "c"
    no_ack: bool = False
    prefetch: int = 0
    priority: int = 0
    blocked: bool = False
    channel: FakeChannel = field(default_factory=FakeChannel)
    got: list[Any] = field(default_factory=list)

    def can_deliver(self) -> bool:
        return not self.blocked

    def deliver(self, queue: Any, entry: Any) -> None:
        self.got.append(entry)


class Waiter:
    """A publisher channel stand-in: records the highest safe token."""

    def __init__(self) -> None:
        self.safe = 0
        self.failed: set[int] = set()

    def advance_safe(self, source: object, up_to: int, failed: Any = ()) -> bool:
        self.safe = max(self.safe, up_to)
        self.failed |= {t for t in failed if t <= up_to}
        return False


class Member:
    """One broker's replica and queue object."""

    def __init__(self, net: Net, name: str, members: tuple[str, ...], incarnation: int = 1,
                 storage: MemoryStorage | None = None, config: FifoConfig | None = None,
                 dead_letters: list | None = None) -> None:
        self.net = net
        self.name = name
        self.storage = storage or MemoryStorage()
        state = self.storage.load()
        node = RaftNode(name, state, net.now, TIMING, random.Random(hash((name, incarnation))),
                        bootstrap=members if not state.entries and not state.snapshot.index
                        else ())
        self.group = QuorumGroup(name, f"{name}#{incarnation}", node,
                                 QuorumMachine(config or FifoConfig()))
        self.dead_letters = dead_letters if dead_letters is not None else []
        self.queue = QuorumQueue("q", QueueSettings(), {}, self.group, execute=self.run,
                                 wake=lambda q: net.woken.add(self.name), wall_ms=net.wall,
                                 now_ms=lambda: net.now,
                                 dead_letter=lambda m, r: self.dead_letters.append((m, r)))
        self.dirty = False
        self.run(node.tick(net.now))

    def run(self, actions: list[Any]) -> None:
        todo = list(actions)
        while todo:
            act = todo.pop(0)
            if isinstance(act, ra.Send):
                self.net.send(self.name, act.to, ("raft", act.message))
            elif isinstance(act, Forward):
                self.net.send(self.name, act.to, ("fwd", act.envelopes))
            elif isinstance(act, Notify):
                self.net.send(self.name, act.to, ("notify", (act.applied, act.resend)))
            elif isinstance(act, Ship):
                self.net.send(self.name, act.to, ("ship", act.payload))
            elif isinstance(act, Holding):
                self.net.send(self.name, act.to, ("holding", act.payload))
            elif isinstance(act, Status):
                self.net.send(self.name, act.to, ("status", act.payload))
            elif isinstance(act, ra.AppendLog):
                self.storage.append(act.first_index, act.entries)
                self.dirty = True
            elif isinstance(act, ra.PersistState):
                self.storage.save_state(act.term, act.voted_for)
            elif isinstance(act, ra.PersistSnapshot):
                self.storage.save_snapshot(act.snapshot, act.discard_log)
                self.dirty = True
            elif isinstance(act, ra.Apply):
                effects, more = self.group.apply(act.entries, self.net.now)
                self.queue.on_effects(effects)
                todo += more
            elif isinstance(act, ra.StateChanged):
                todo += self.group.state_changed(act, self.net.now)
            elif isinstance(act, ra.Restore):
                self.group.restore(act.snapshot.index, act.snapshot.data)

    def publish(self, body: str) -> int:
        msg = Message.build("", "q", body.encode())
        self.queue.publish(msg)
        return self.queue.publish_wait()[1]


class RemoteMember:
    """A broker outside the group (``RemoteGroup``): forwards, hears notices, receives its
    consumers' deliveries."""

    def __init__(self, net: Net, name: str, members: tuple[str, ...],
                 left: Member | None = None) -> None:
        self.net = net
        self.name = name
        if left is None:
            self.group = RemoteGroup(name, f"{name}#1", members, QuorumMachine(FifoConfig()))
            self.queue = QuorumQueue("q", QueueSettings(), {}, self.group, execute=self.run,
                                     wake=lambda q: net.woken.add(self.name), wall_ms=net.wall,
                                     now_ms=lambda: net.now)
        else:   # a member whose replica was removed: same queue object and outbox
            self.group = RemoteGroup(name, left.group.origin, members,
                                     QuorumMachine(FifoConfig()), left.group.outbox)
            self.queue = left.queue
            self.group.adopt(self.queue.holdings())
            self.queue.switch(self.group)
        self.dirty = False

    def run(self, actions: list[Any]) -> None:
        for act in actions:
            if isinstance(act, Forward):
                self.net.send(self.name, act.to, ("fwd", act.envelopes))
            elif isinstance(act, Holding):
                self.net.send(self.name, act.to, ("holding", act.payload))

    def publish(self, body: str) -> int:
        self.queue.publish(Message.build("", "q", body.encode()))
        return self.queue.publish_wait()[1]


class Net:
    """The members, a message queue between them, a clock (ms)."""

    def __init__(self, names: tuple[str, ...] = ("a", "b", "c"), seed: int = 1,
                 config: FifoConfig | None = None) -> None:
        self.now = 0
        self.rng = random.Random(seed)
        self.names = names
        self.config = config
        self.inflight: list[tuple[str, str, Any]] = []
        self.woken: set[str] = set()
        self.down: set[str] = set()
        self.cut: set[frozenset[str]] = set()
        self.loss = 0.0
        self.members: dict[str, Any] = {n: Member(self, n, names, config=config)
                                        for n in names}
        self.view = set(names)

    def wall(self) -> int:
        """The clock commands carry (ms), ``WALL_OFFSET_MS`` ahead of ``now``."""
        return self.now + WALL_OFFSET_MS

    def send(self, frm: str, to: str, item: Any) -> None:
        self.inflight.append((frm, to, item))

    def step(self) -> None:
        """Deliver what is in flight, sync dirty storages, run woken queues' dispatch."""
        for _ in range(50):
            progressed = False
            batch, self.inflight = self.inflight, []
            for frm, to, (kind, payload) in batch:
                if to in self.down or frm in self.down or frozenset((frm, to)) in self.cut:
                    continue
                if self.loss and self.rng.random() < self.loss:
                    continue
                progressed = True
                m = self.members[to]
                if isinstance(m, RemoteMember):
                    if kind == "notify":
                        m.run(m.group.notified(frm, payload[0], payload[1], self.now))
                        m.queue.on_effects([])
                    elif kind == "ship":
                        m.queue.on_effects(m.group.received(frm, payload))
                    continue
                if kind == "raft":
                    m.run(m.group.receive(frm, payload, self.now))
                elif kind == "holding":
                    m.run(m.group.holding(frm, payload))
                elif kind == "status":
                    m.group.status(frm, payload)
                else:
                    m.run(m.group.forwarded(frm, payload))
            for name, m in self.members.items():
                if isinstance(m, RemoteMember):
                    continue
                if m.dirty and name not in self.down:
                    m.dirty = False
                    newest = m.storage.sync()
                    if newest is not None:
                        m.run(m.group.persisted(*newest))
                        progressed = True
            woken, self.woken = self.woken, set()
            for name in woken:
                if name not in self.down:
                    self.members[name].queue.dispatch()
                    progressed = True
            if not progressed and not self.inflight:
                return

    def advance(self, ms: int = 10, steps: int = 1) -> None:
        for _ in range(steps):
            self.now += ms
            for name, m in self.members.items():
                if name in self.down:
                    continue
                if isinstance(m, RemoteMember):
                    m.run(m.group.tick(self.now))
                    continue
                m.run(m.group.tick(self.now))
                m.run(m.group.leader_duties(self.now, self.wall(), self.view - self.down))
            self.step()

    def run_until(self, check: Any, max_ms: int = 5000) -> None:
        for _ in range(max_ms // 10):
            if check():
                return
            self.advance(10)
        raise AssertionError("condition not reached in simulated time")

    def add_remote(self, name: str) -> RemoteMember:
        """A broker outside the group."""
        m = self.members[name] = RemoteMember(self, name, self.names)
        self.view.add(name)
        return m

    def leave(self, name: str) -> RemoteMember:
        """Member ``name``'s replica was removed from the group (it is not in the leader's
        configuration): it serves the queue from outside, as the runtime's ``_leave`` does on
        the leader's members notice, and forwards to that leader."""
        old = self.members[name]
        assert isinstance(old, Member)
        leader = self.leader()
        assert leader is not None and name not in leader.group.members
        m = self.members[name] = RemoteMember(self, name, leader.group.members, left=old)
        m.run(m.group.told(leader.name, leader.group.members, self.now))
        return m

    def leader(self) -> Member | None:
        for name, m in self.members.items():
            if name not in self.down and m.group.is_leader:
                return m
        return None

    def kill(self, name: str) -> None:
        """kill -9: the member loses what was not synced."""
        self.down.add(name)
        if isinstance(self.members[name], Member):
            self.members[name].storage.crash()

    def restart(self, name: str, incarnation: int) -> Member:
        self.down.discard(name)
        old = self.members[name]
        m = Member(self, name, self.names, incarnation, storage=old.storage, config=self.config)
        self.members[name] = m
        return m
