"""Targeted tests of the Raft core (``cluster.raft.node``): elections, durability before commit,
log conflicts, pre-vote, check-quorum, snapshots, leadership transfer, membership changes."""

from __future__ import annotations

import ast
import random
from pathlib import Path

from cluster.raft import actions as a
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    PersistentState,
    RequestVote,
    RequestVoteReply,
    Snapshot,
    encode_members,
)
from cluster.raft.node import RaftNode
from cluster.tests.raft_sim import SIM_TIMING, Net, RaftSim

T = SIM_TIMING
E = T.election_ms


def ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def sends(actions: list[a.Action], kind: type | None = None) -> list[a.Send]:
    return [x for x in actions if isinstance(x, a.Send)
            and (kind is None or isinstance(x.message, kind))]


def node(node_id: str = "n0", members: tuple[str, ...] = ("n0", "n1", "n2"),
         entries: tuple[Entry, ...] = (), term: int = 0) -> RaftNode:
    config = Entry(1, 0, EntryKind.CONFIG, encode_members(members))
    state = PersistentState(term, None, entries=(config, *entries))
    return RaftNode(node_id, state, 0, T, random.Random(1))


def stable_sim(n: int, seed: int = 1, **kw: object) -> RaftSim:
    sim = RaftSim(ids(n), seed=seed, net=Net(latency=(1, 3)), **kw)  # type: ignore[arg-type]
    sim.run_until(3 * E * 2)
    assert sim.leader() is not None
    return sim


# ---------------------------------------------------------------- elections
def test_single_node_elects_itself_and_commits_after_its_own_persist() -> None:
    n = RaftNode("solo", PersistentState(), 0, T, random.Random(0), bootstrap=("solo",))
    first = n.tick(0)
    assert isinstance(first[0], a.AppendLog) and first[0].entries[0].kind is EntryKind.CONFIG
    n.tick(2 * E)
    assert n.is_leader and n.term == 1
    res, acts = n.propose(b"x")
    assert res == a.Proposed(3, 1)
    assert not any(isinstance(x, a.CommitAdvanced) for x in acts)     # not durable yet
    acts = n.persisted(3, 1)
    assert a.CommitAdvanced(3) in acts
    applied = [e.data for x in acts if isinstance(x, a.Apply) for e in x.entries]
    assert applied[-1] == b"x"


def test_three_nodes_elect_exactly_one_leader_and_followers_know_it() -> None:
    for seed in range(5):
        sim = stable_sim(3, seed)
        leader = sim.leader()
        terms = {rep.node.term for rep in sim.replicas.values()}
        assert len(terms) == 1
        assert all(rep.node.leader == leader for rep in sim.replicas.values())


def test_vote_is_persisted_before_the_reply_and_given_once_per_term() -> None:
    n = node("n1")
    acts = n.receive("n0", RequestVote(1, "n0", 1, 0), 0)
    kinds = [type(x) for x in acts]
    assert kinds.index(a.PersistState) < kinds.index(a.Send)
    assert a.PersistState(1, "n0") in acts
    assert sends(acts)[0].message == RequestVoteReply(1, True)
    again = n.receive("n2", RequestVote(1, "n2", 1, 0), 0)
    assert sends(again)[0].message == RequestVoteReply(1, False)


def test_vote_refused_to_a_less_up_to_date_log() -> None:
    n = node("n1", entries=(Entry(2, 1, EntryKind.NOOP, b""),), term=1)
    acts = n.receive("n0", RequestVote(2, "n0", 5, 0), 0)   # longer log, older last term
    assert sends(acts)[0].message == RequestVoteReply(2, False)


# ---------------------------------------------------------------- durability
def test_leader_commits_only_what_a_majority_persisted() -> None:
    n = node("n0")
    n.tick(2 * E)                      # pre-vote
    n.receive("n1", RequestVoteReply(1, True, pre_vote=True), 2 * E)
    n.receive("n1", RequestVoteReply(1, True), 2 * E)
    assert n.is_leader
    n.propose(b"x")                    # entries 2 (no-op) and 3
    n.receive("n1", AppendEntriesReply(1, True, match_index=3), 2 * E)
    assert n.commit_index == 0         # n1 stored it; the leader's own write is pending
    acts = n.persisted(3, 1)
    assert n.commit_index == 3 and a.CommitAdvanced(3) in acts


def test_leader_does_not_count_itself_before_its_persist() -> None:
    n = node("n0", members=("n0", "n1", "n2", "n3", "n4"))
    n.tick(2 * E)
    for p in ("n1", "n2"):
        n.receive(p, RequestVoteReply(1, True, pre_vote=True), 2 * E)
    for p in ("n1", "n2"):
        n.receive(p, RequestVoteReply(1, True), 2 * E)
    assert n.is_leader
    n.propose(b"x")
    n.receive("n1", AppendEntriesReply(1, True, match_index=3), 2 * E)
    n.receive("n2", AppendEntriesReply(1, True, match_index=3), 2 * E)
    assert n.commit_index == 0          # 2 followers of 5, the leader's own write pending
    acts = n.persisted(3, 1)
    assert n.commit_index == 3 and a.CommitAdvanced(3) in acts


def test_follower_acknowledges_only_after_persist() -> None:
    n = node("n1")
    entries = (Entry(2, 1, EntryKind.NOOP, b""), Entry(3, 1, EntryKind.COMMAND, b"x"))
    acts = n.receive("n0", AppendEntries(1, "n0", 1, 0, entries, 1), 0)
    replies = [s.message for s in sends(acts, AppendEntriesReply)]
    assert replies == [AppendEntriesReply(1, True, match_index=1)]
    acts = n.persisted(3, 1)
    assert [s.message for s in sends(acts)] == [AppendEntriesReply(1, True, match_index=3)]


def test_stale_persist_notice_after_truncation_is_ignored() -> None:
    old = (Entry(2, 1, EntryKind.COMMAND, b"a"), Entry(3, 1, EntryKind.COMMAND, b"b"))
    n = node("n1", entries=old, term=1)
    n.persisted_index = 1
    new = (Entry(2, 2, EntryKind.COMMAND, b"c"),)
    n.receive("n0", AppendEntries(2, "n0", 1, 0, new, 0), 0)
    assert n.log.last_index == 2 and n.persisted_index == 1
    n.persisted(3, 1)                   # the old write of entry 3 finishing late
    n.persisted(2, 1)                   # and of the old entry 2
    assert n.persisted_index == 1
    n.persisted(2, 2)
    assert n.persisted_index == 2


# ---------------------------------------------------------------- log conflicts
def test_conflicting_suffix_is_replaced_and_hint_skips_a_whole_term() -> None:
    follower_log = tuple(Entry(i, 2, EntryKind.COMMAND, b"old%d" % i) for i in range(2, 30))
    f = node("n1", entries=follower_log, term=2)
    # the leader of term 3 has entries 2..10 of term 1 and 11..40 of term 3
    msg = AppendEntries(3, "n0", 39, 3, (Entry(40, 3, EntryKind.COMMAND, b"x"),), 1)
    reply = sends(f.receive("n0", msg, 0))[0].message
    assert isinstance(reply, AppendEntriesReply) and not reply.success
    assert (reply.hint_index, reply.hint_term) == (30, 0)      # our log ends at 29
    msg = AppendEntries(3, "n0", 29, 3, (), 1)
    reply = sends(f.receive("n0", msg, 0))[0].message
    assert isinstance(reply, AppendEntriesReply)
    assert (reply.hint_index, reply.hint_term) == (2, 2)       # the whole term-2 run
    fixed = tuple(Entry(i, 1, EntryKind.COMMAND, b"new%d" % i) for i in range(2, 11))
    acts = f.receive("n0", AppendEntries(3, "n0", 1, 0, fixed, 1), 0)
    append = [x for x in acts if isinstance(x, a.AppendLog)][0]
    assert append.first_index == 2 and f.log.last_index == 10
    assert f.log.entry(10).data == b"new10"


def test_reordered_old_append_does_not_truncate_newer_entries() -> None:
    f = node("n1", term=1)
    e = [Entry(i, 1, EntryKind.COMMAND, b"%d" % i) for i in range(2, 8)]
    f.receive("n0", AppendEntries(1, "n0", 1, 0, tuple(e), 1), 0)
    f.receive("n0", AppendEntries(1, "n0", 1, 0, tuple(e[:2]), 1), 0)   # late duplicate
    assert f.log.last_index == 7


def test_divergent_logs_converge_in_simulation() -> None:
    sim = stable_sim(5, seed=3)
    leader = sim.leader()
    assert leader is not None
    sim.split({leader}, set(sim.ids) - {leader})
    for _ in range(20):
        sim.propose(leader)                     # never committed: a minority
        sim.run_until(sim.now + 5)
    sim.run_until(sim.now + 6 * E)
    for _ in range(20):
        sim.propose()
        sim.run_until(sim.now + 5)
    sim.heal()
    assert sim.converge()
    sim.check_converged()
    old = sim.replicas[leader].node
    assert old.log.last_index == sim.replicas[sim.leader() or ""].node.log.last_index


# ---------------------------------------------------------------- pre-vote, check-quorum
def test_prevote_keeps_a_rejoining_node_from_disrupting_the_leader() -> None:
    sim = stable_sim(3, seed=2)
    leader = sim.leader()
    assert leader is not None
    other = next(i for i in sim.ids if i != leader)
    term = sim.replicas[leader].node.term
    sim.split({other}, set(sim.ids) - {other})
    sim.run_until(sim.now + 20 * E)
    assert sim.replicas[other].node.term == term           # pre-votes never raised its term
    sim.heal()
    sim.run_until(sim.now + 10 * E)
    assert sim.leader() == leader and sim.replicas[leader].node.term == term


def test_check_quorum_isolated_leader_steps_down_and_minority_never_commits() -> None:
    sim = stable_sim(5, seed=4)
    leader = sim.leader()
    assert leader is not None
    buddy = next(i for i in sim.ids if i != leader)
    sim.split({leader, buddy}, set(sim.ids) - {leader, buddy})
    t0 = sim.now
    results = sim.propose(leader, count=3)
    assert all(isinstance(r, a.Proposed) for r in results)
    old = sim.replicas[leader].node
    while old.is_leader and sim.now < t0 + 10 * E:
        sim.run_until(sim.now + 5)
    assert not old.is_leader and sim.now - t0 <= 2 * E + 10
    commit = old.commit_index
    assert all(r.index > commit for r in results if isinstance(r, a.Proposed))
    sim.run_until(sim.now + 5 * E)
    new = sim.leader()
    assert new is not None and new not in (leader, buddy)
    assert old.commit_index == commit
    sim.heal()
    assert sim.converge()
    assert not set(sim.acked) & {b"c0", b"c1", b"c2"}        # never confirmed
    sim.check_converged()


# ---------------------------------------------------------------- snapshots
def test_lagging_follower_catches_up_by_install_snapshot() -> None:
    sim = stable_sim(3, seed=5, snapshot_every=5)
    sim.trace = True
    leader = sim.leader()
    lagging = next(i for i in sim.ids if i != leader)
    sim.crash(lagging)
    for _ in range(60):
        sim.propose(count=2)
        sim.run_until(sim.now + 5)
    sim.restart(lagging)
    assert sim.converge()
    sim.check_converged()
    restored = [act for _, n, act in sim.log if n == lagging and isinstance(act, a.Restore)]
    assert restored and restored[0].snapshot.index > 20
    assert sim.replicas[leader or ""].node.log.snapshot.index > 0


def test_snapshot_taken_compacts_but_keeps_a_tail() -> None:
    n = RaftNode("solo", PersistentState(), 0, T, random.Random(0), bootstrap=("solo",))
    n.tick(2 * E)
    for i in range(20):
        _, acts = n.propose(b"%d" % i)
    n.persisted(n.log.last_index, n.term)
    acts = n.snapshot_taken(15, b"state")
    assert a.PersistSnapshot(Snapshot(15, 1, ("solo",), b"state"), False) in acts
    assert n.log.snapshot.index == 15 - T.snapshot_keep and n.log.last_index == 22


# ---------------------------------------------------------------- transfer, membership
def test_leadership_transfer_hands_over_within_an_election_timeout() -> None:
    sim = stable_sim(3, seed=6)
    leader = sim.leader()
    assert leader is not None
    target = next(i for i in sim.ids if i != leader)
    sim._execute(leader, sim.replicas[leader].node.transfer_leadership(target))
    assert isinstance(sim.propose(leader)[0], a.NotLeader)       # proposals refused meanwhile
    t0 = sim.now
    while sim.leader() != target and sim.now < t0 + 5 * E:
        sim.run_until(sim.now + 2)
    assert sim.leader() == target and sim.now - t0 < E


def test_add_then_remove_members_including_the_leader() -> None:
    sim = stable_sim(3, seed=7)
    for _ in range(30):
        sim.propose()
        sim.run_until(sim.now + 3)
    leader = sim.leader()
    assert leader is not None
    sim.add_node("x3")
    ok, acts = sim.replicas[leader].node.add_member("x3")
    assert ok
    sim._execute(leader, acts)
    sim.run_until(sim.now + 5 * E)
    assert sim.replicas[leader].node.members == ("n0", "n1", "n2", "x3")
    assert sim.replicas["x3"].applied >= 30
    ok, acts = sim.replicas[leader].node.remove_member(leader)
    assert ok
    sim._execute(leader, acts)
    sim.run_until(sim.now + 5 * E)
    new = sim.leader()
    assert new is not None and new != leader
    assert leader not in sim.replicas[new].node.members
    for _ in range(10):
        sim.propose()
        sim.run_until(sim.now + 3)
    assert sim.converge()
    sim.check_converged()


def test_adding_a_server_to_a_group_with_a_member_down_does_not_stall_it() -> None:
    """Thesis §4.2.1: the new server catches up as a non-voter, so a 3-member group with one
    member down (2 of 3) keeps committing while it does, and after it joins (3 of 4)."""
    sim = stable_sim(3, seed=11, snapshot_every=10)
    leader = sim.leader()
    assert leader is not None
    lnode = sim.replicas[leader].node
    down = next(m for m in sim.ids if m != leader)
    sim.crash(down)
    for _ in range(40):
        sim.propose()
        sim.run_until(sim.now + 3)
    sim.add_node("x3")
    sim.set_blocked({(leader, "x3"), ("x3", leader)})   # the newcomer is slow to reach
    ok, acts = lnode.add_member("x3")
    assert ok
    sim._execute(leader, acts)
    acked = len(sim.acked)
    for _ in range(20):
        sim.propose()
        sim.run_until(sim.now + 3)
    sim.run_until(sim.now + 10)
    assert len(sim.acked) >= acked + 20          # committed while the newcomer catches up
    assert lnode.learners == ("x3",) and "x3" not in lnode.members
    assert lnode.committed_config[1] == tuple(sorted(sim.ids[:3]))
    sim.heal()
    sim.run_until(sim.now + 5 * E)
    assert lnode.members == ("n0", "n1", "n2", "x3") and not lnode.learners
    assert lnode.committed_config == (lnode.log.configs[-1][0], lnode.members)
    assert sim.replicas["x3"].applied >= lnode.committed_config[0]
    acked = len(sim.acked)
    for _ in range(10):                          # 3 of 4 live: still a majority
        sim.propose()
        sim.run_until(sim.now + 3)
    sim.run_until(sim.now + 10)
    assert len(sim.acked) >= acked + 10
    sim.restart(down)
    assert sim.converge()
    sim.check_converged()


def test_a_removed_server_readded_with_fresh_storage_catches_up() -> None:
    """delete_member then add_member of the same node (its files deleted in between): the new
    replica starts empty at the leader's term and is caught up again (snapshot + log)."""
    sim = stable_sim(3, seed=12, snapshot_every=10)
    leader = sim.leader()
    assert leader is not None
    lnode = sim.replicas[leader].node
    gone = next(m for m in sim.ids if m != leader)
    ok, acts = lnode.remove_member(gone)
    assert ok
    sim._execute(leader, acts)
    for _ in range(30):
        sim.propose()
        sim.run_until(sim.now + 3)
    sim.run_until(sim.now + 2 * E)
    assert gone not in lnode.committed_config[1]
    sim.recreate(gone, lnode.term, lnode.commit_index)
    ok, acts = lnode.add_member(gone)
    assert ok
    sim._execute(leader, acts)
    sim.run_until(sim.now + 5 * E)
    assert gone in lnode.committed_config[1]
    assert sim.replicas[gone].node.snapshot.index > 0      # caught up from a snapshot
    assert sim.converge()
    sim.check_converged()


def test_membership_change_refused_while_another_is_pending() -> None:
    sim = stable_sim(3, seed=8)
    leader = sim.leader()
    assert leader is not None
    n = sim.replicas[leader].node
    sim.add_node("x3")
    ok, acts = n.add_member("x3")
    assert ok
    ok2, _ = n.remove_member("n1" if leader != "n1" else "n2")
    assert not ok2
    sim._execute(leader, acts)


# ---------------------------------------------------------------- restart from disk
def test_node_restarts_from_its_disk_log(tmp_path: Path) -> None:
    disk = DiskLog(tmp_path, fsync=False)
    n = RaftNode("solo", disk.load(), 0, T, random.Random(0), bootstrap=("solo",))

    def run(acts: list[a.Action]) -> None:
        for x in acts:
            if isinstance(x, a.PersistState):
                disk.save_state(x.term, x.voted_for)
            elif isinstance(x, a.AppendLog):
                disk.append(x.first_index, x.entries)
            elif isinstance(x, a.PersistSnapshot):
                disk.save_snapshot(x.snapshot, x.discard_log)

    run(n.tick(2 * E))
    for i in range(10):
        _, acts = n.propose(b"%d" % i)
        run(acts)
    done = disk.sync()
    assert done is not None
    run(n.persisted(*done))
    assert n.commit_index == 12
    run(n.snapshot_taken(8, b"s8"))
    disk.close()
    again = RaftNode("solo", DiskLog(tmp_path, fsync=False).load(), 0, T, random.Random(0),
                     bootstrap=("solo",))
    assert again.term == 1 and again.voted_for == "solo"
    assert again.snapshot.data == b"s8" and again.log.last_index == 12
    again.tick(3 * E)
    assert again.is_leader and again.term == 2


# ---------------------------------------------------------------- purity
def test_core_modules_import_no_io() -> None:
    core = Path(__file__).parent.parent / "raft"
    banned = {"os", "time", "socket", "asyncio", "anyio", "io", "pathlib", "threading"}
    for name in ("node", "leader", "progress", "raftlog", "messages", "actions", "storage",
                 "codec", "fifo"):
        tree = ast.parse((core / f"{name}.py").read_text())
        for stmt in ast.walk(tree):
            mods = [al.name for al in stmt.names] if isinstance(stmt, ast.Import) else \
                [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) else []
            for mod in mods:
                assert mod.split(".")[0] not in banned, f"{name} imports {mod}"
