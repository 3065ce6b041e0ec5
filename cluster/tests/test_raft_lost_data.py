"""A Raft replica whose storage lost entries it had acknowledged (``PersistentState.floor``, set by
``disklog`` from its ``marks``): it must not vote, stand or count toward a commit for what it lost
(issue 24, the ``corrupt`` nemesis; the NATS 2.12.1 Jepsen analysis: a node whose truncated file
made it forget acknowledged writes voted a stale leader in), and its leader must catch it up again
although it once acknowledged more (Ra's TODO in rabbitmq/ra#508).

A small deterministic driver: three nodes, messages delivered in order, every append synced at
once, nodes taken down and restarted from what their ``MemoryStorage`` holds, minus what a test
says they lost. It checks on every step that each commit index a leader announces is durably held
by a majority."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace
from pathlib import Path

from cluster.raft import actions as a
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import (
    Entry,
    EntryKind,
    Message,
    PersistentState,
    RequestVote,
    RequestVoteReply,
    encode_members,
)
from cluster.raft.node import RaftNode
from cluster.raft.storage import MemoryStorage
from cluster.tests.raft_sim import SIM_TIMING
from queues.store import format as fmt

T = SIM_TIMING
E = T.election_ms
IDS = ("n0", "n1", "n2")


class Trio:
    """Three replicas of one group; ``down`` ones neither send nor receive."""

    def __init__(self) -> None:
        self.now = 0
        self.storage = {n: MemoryStorage() for n in IDS}
        self.nodes: dict[str, RaftNode] = {}
        self.down: set[str] = set()
        self.mail: deque[tuple[str, str, Message]] = deque()
        self.granted: list[tuple[str, str]] = []      # (voter, candidate) of real votes
        for k, n in enumerate(IDS):
            self.nodes[n] = RaftNode(n, PersistentState(), 0, T, random.Random(k), bootstrap=IDS)
            self.run(n, self.nodes[n].tick(0))

    def run(self, n: str, actions: list[a.Action]) -> None:
        node, store = self.nodes[n], self.storage[n]
        for act in actions:
            if isinstance(act, a.Send):
                self.mail.append((n, act.to, act.message))
            elif isinstance(act, a.PersistState):
                store.save_state(act.term, act.voted_for)
            elif isinstance(act, a.AppendLog):
                store.append(act.first_index, act.entries)
            elif isinstance(act, a.PersistSnapshot):
                store.save_snapshot(act.snapshot, act.discard_log)
            elif isinstance(act, a.CommitAdvanced) and node.is_leader:
                self.check_durable(n, act.commit_index)
        done = store.sync()
        if done is not None:
            self.run(n, node.persisted(*done))

    def check_durable(self, leader: str, index: int) -> None:
        term = self.nodes[leader].log.term_at(index)
        holders = [n for n, s in self.storage.items()
                   if any(e.index == index and e.term == term for e in s.entries)]
        assert len(holders) >= 2, f"{leader} committed {index} held durably by {holders} only"

    def deliver(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            if not self.mail:
                return
            frm, to, msg = self.mail.popleft()
            if frm in self.down or to in self.down:
                continue
            if isinstance(msg, RequestVoteReply) and msg.granted and not msg.pre_vote:
                self.granted.append((frm, to))
            self.run(to, self.nodes[to].receive(frm, msg, self.now))

    def advance(self, ms: int, only: tuple[str, ...] = IDS) -> None:
        """Move the clock in heartbeat steps, ticking the live nodes of ``only``."""
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + T.heartbeat_ms)
            for n in only:
                if n not in self.down:
                    self.run(n, self.nodes[n].tick(self.now))
            self.deliver()

    def elect(self, n: str) -> None:
        self.now += 2 * E
        self.run(n, self.nodes[n].tick(self.now))
        self.deliver()
        assert self.nodes[n].is_leader

    def propose(self, leader: str, count: int) -> None:
        for k in range(count):
            _, acts = self.nodes[leader].propose(b"cmd%d" % k)
            self.run(leader, acts)
            self.deliver()

    def restart_losing(self, n: str, keep: int, floor: int) -> None:
        """Restart ``n`` from its storage with only entries up to ``keep`` left (a truncated
        file), telling the node it lost what it acknowledged up to ``floor`` (0: it does not
        know: the old behaviour)."""
        store = self.storage[n]
        store.entries = [e for e in store.entries if e.index <= keep]
        state = PersistentState(store.term, store.voted_for, store.snapshot,
                                tuple(store.entries), floor)
        self.nodes[n] = RaftNode(n, state, self.now, T, random.Random(7))
        self.down.discard(n)

    def leaders(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.is_leader and n not in self.down]


def committed_then_lost(floor_known: bool) -> tuple[Trio, int]:
    """n0 leads and commits entries with n2 while n1 is down; n2 then loses every entry after
    index 3 and restarts; n0 goes down; n1 comes back (it lacks the committed entries). Returns
    the trio and the highest index n0 had committed."""
    trio = Trio()
    trio.elect("n0")
    trio.down.add("n1")
    trio.propose("n0", 10)
    committed = trio.nodes["n0"].commit_index
    assert committed >= 10 and trio.nodes["n2"].persisted_index == committed
    trio.down.add("n0")
    acked = trio.nodes["n2"].persisted_index
    trio.restart_losing("n2", keep=3, floor=acked if floor_known else 0)
    trio.down.discard("n1")
    trio.mail.clear()
    trio.granted.clear()
    return trio, committed


def test_a_replica_that_lost_acknowledged_entries_elects_nobody_without_them() -> None:
    trio, _ = committed_then_lost(floor_known=True)
    trio.advance(10 * E, only=("n1", "n2"))
    assert trio.leaders() == []                      # n1 lacks what n0 committed: no leader
    assert not any(voter == "n2" for voter, _ in trio.granted)
    assert trio.nodes["n2"].recovering_to > 0


def test_without_the_floor_the_lagging_replica_is_elected_and_commits_over_the_loss() -> None:
    """The control: the same faults when the replica does not know what it lost (floor 0):
    n1 and n2 elect one of them, which commits its own entry where n0 had committed another."""
    trio, committed = committed_then_lost(floor_known=False)
    trio.check_durable = lambda leader, index: None   # type: ignore[method-assign]
    trio.advance(10 * E, only=("n1", "n2"))
    (leader,) = trio.leaders()
    new, old = trio.nodes[leader], trio.nodes["n0"]
    at = new.commit_index
    assert 2 <= at <= committed and new.log.term_at(at) != old.log.term_at(at)


def test_after_the_loss_the_replica_catches_up_and_votes_again() -> None:
    trio, committed = committed_then_lost(floor_known=True)
    trio.down.discard("n0")
    trio.advance(6 * E)
    (leader,) = trio.leaders()
    assert leader == "n0"                          # only the replica with every entry can win
    n2 = trio.nodes["n2"]
    assert n2.recovering_to == 0 and n2.log.last_index >= committed
    assert n2.voted_for == "n0" and trio.storage["n2"].voted_for == "n0"
    assert n2.commit_index >= committed


def test_the_leader_catches_up_a_follower_that_lost_what_it_acknowledged() -> None:
    """n0 stays leader and remembers n2 matched up to 12; n2 comes back with 3 entries. An idle
    group (heartbeats only) must bring it back: the leader lowers its match index on n2's
    rejection instead of taking it for a stale answer; and a new entry commits only once a
    majority durably holds it (checked on every commit)."""
    trio = Trio()
    trio.elect("n0")
    trio.propose("n0", 10)
    leader = trio.nodes["n0"]
    assert leader.progress["n2"].match_index == leader.log.last_index
    trio.down.add("n1")
    acked = trio.nodes["n2"].persisted_index
    trio.restart_losing("n2", keep=3, floor=acked)
    trio.advance(3 * T.heartbeat_ms)
    n2 = trio.nodes["n2"]
    assert n2.log.last_index == leader.log.last_index and n2.recovering_to == 0
    assert leader.progress["n2"].match_index == leader.log.last_index
    trio.propose("n0", 1)
    assert leader.commit_index == leader.log.last_index


def test_a_replica_opened_from_a_truncated_disk_log_refuses_its_vote(tmp_path: Path) -> None:
    """Both layers: entries 1-20 synced (acknowledged) by n2's DiskLog, the segment truncated
    while it was down; the node it opens with refuses a candidate whose log is as short as its
    own now, which it would have granted had its files not told it what it lost."""
    disk = DiskLog(tmp_path, fsync=False)
    config = Entry(1, 1, EntryKind.CONFIG, encode_members(IDS))
    disk.append(1, (config, *(Entry(i, 1, EntryKind.COMMAND, b"c%d" % i) for i in range(2, 21))))
    disk.sync()
    disk.close()
    seg = tmp_path / fmt.segment_name(1)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size // 3)
    state = DiskLog(tmp_path, fsync=False).load()
    assert state.floor == 20
    node = RaftNode("n2", state, 0, T, random.Random(1))
    ask = RequestVote(2, "n1", state.entries[-1].index, 1)
    replies = [s.message for s in node.receive("n1", ask, 0) if isinstance(s, a.Send)]
    assert replies == [RequestVoteReply(2, False)]
    forgetful = RaftNode("n2", replace(state, floor=0), 0, T, random.Random(1))
    replies = [s.message for s in forgetful.receive("n1", ask, 0) if isinstance(s, a.Send)]
    assert replies == [RequestVoteReply(2, True)]
