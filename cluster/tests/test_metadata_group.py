"""``cluster.metadata.group.MetadataGroup`` and ``sessions``: one member's replica of the metadata
log, driven by hand (a group of one on the real ``RaftNode``, no I/O).

What is checked is what a client would see: a command forwarded twice (re-sent after a leader
change, Raft paper §8) is applied once and keeps its first outcome; a command of an older
incarnation of a member is not applied; a gap makes the proposer re-send; the leader's
configuration follows the cluster view; a snapshot carries the sessions, so a restored replica
still drops a duplicate.
"""

from __future__ import annotations

import random

from cluster.metadata import commands as m
from cluster.metadata.codec import encode
from cluster.metadata.group import ALIGN_AFTER_MS, Committed, MetadataGroup, decode_applied
from cluster.metadata.outcomes import Declared, Refused
from cluster.metadata.sessions import APPLY, DUPLICATE, GAP, STALE, Sessions
from cluster.quorum.group import Forward, Status
from cluster.quorum.machine import envelope
from cluster.raft import actions as ra
from cluster.raft.messages import AppendEntriesReply, PersistentState, TimeoutNow
from cluster.raft.node import RaftNode


def _leader(me: str = "a", view: tuple[str, ...] = ("a",)) -> tuple[MetadataGroup, list]:
    """A bootstrapped group of one that leads, with vhost "/" applied."""
    node = RaftNode(me, PersistentState(), 0, ra.Timing(), random.Random(1), bootstrap=(me,))
    group = MetadataGroup(me, f"{me}#1", node)
    out: list = []
    run(group, node.tick(10_000), out)   # elected alone
    assert group.is_leader
    group.submit(m.AddVhost("/"))
    run(group, group.flush(10_000), out)
    return group, out


def run(group: MetadataGroup, actions: list, out: list) -> None:
    """Run ``actions`` as the I/O driver would (storage durable at once); committed commands and
    the other actions are appended to ``out``."""
    todo = list(actions)
    while todo:
        act = todo.pop(0)
        if isinstance(act, ra.AppendLog):
            last = act.entries[-1] if act.entries else None
            if last is not None:
                todo += group.persisted(last.index, last.term)
        elif isinstance(act, ra.Apply):
            done, more = group.apply(act.entries, 10_000)
            out += done
            todo += more
        else:
            out.append(act)


def _committed(out: list) -> list[Committed]:
    return [c for c in out if isinstance(c, Committed)]


def test_a_duplicate_forward_keeps_the_first_outcome():
    group, out = _leader()
    first = envelope("b#5", 1, encode(m.DeclareQueue("/", "q", arguments={"x-max-length": 10})))
    other = envelope("c#5", 1, encode(m.DeclareQueue("/", "q", arguments={"x-max-length": 20})))
    run(group, group.forwarded("b", [first]), out)
    run(group, group.forwarded("c", [other]), out)
    run(group, group.forwarded("b", [first]), out)   # re-sent after a leader change
    done = [c for c in _committed(out) if isinstance(c.command, m.DeclareQueue)]
    assert [(c.origin, c.seq) for c in done] == [("b#5", 1), ("c#5", 1)]
    assert done[0].outcome == Declared("q", True)
    assert isinstance(done[1].outcome, Refused) and done[1].outcome.code == 406
    assert group.machine.state.vhosts["/"].queues["q"].arguments == {"x-max-length": 10}


def test_sessions_drop_duplicates_gaps_and_older_incarnations():
    s = Sessions()
    assert s.admit("b#5", 1) == APPLY
    assert s.admit("b#5", 1) == DUPLICATE
    assert s.admit("b#5", 3) == GAP
    assert s.admit("b#6", 1) == APPLY        # b restarted: its new incarnation counts anew
    assert s.admit("b#5", 2) == STALE
    assert s.admit("", 0) == APPLY and s.admit("", 0) == APPLY   # the leader's own
    again = Sessions.decode(s.encode())
    assert again.admit("b#6", 1) == DUPLICATE and again.admit("b#5", 2) == STALE


def test_own_commands_after_a_gap_are_sent_again():
    group, out = _leader()
    group.submit(m.DeclareExchange("/", "x1"))
    group.submit(m.DeclareExchange("/", "x2"))
    envs = group.outbox.take_unsent(10_000)   # as if the first was lost on the way
    out.clear()
    run(group, group.node.propose_batch([envs[1]])[1], out)
    names = [c.command.name for c in _committed(out) if isinstance(c.command, m.DeclareExchange)]
    assert names == ["x1", "x2"]   # the gap re-sent both, in order, once each
    assert group.outbox.pending == {}


def test_the_configuration_follows_the_view_and_applied_is_reported():
    group, out = _leader()
    out.clear()
    actions = group.leader_duties(20_000, 0, {"a", "b"})
    assert "b" in group.node.learners   # added as a learner first (thesis §4.2.1)
    run(group, actions, out)
    reports = [a for a in out if isinstance(a, Status)]
    assert not reports or all(decode_applied(r.payload) >= 1 for r in reports)
    group.status("b", Status("a", b"\x00" * 7 + b"\x05").payload)
    assert group.applied_count(5, ["a", "b"]) == 1


def test_a_driver_that_follows_later_reports_what_it_followed():
    """``report_on_apply`` False: ``apply`` sends no ``Status``; ``report(upto)`` tells the
    others of ``upto`` (at most the applied index), once."""
    group, out = _leader("a", ("a", "b"))
    run(group, group.leader_duties(20_000, 0, {"a", "b"}), out)
    group.report_on_apply = False
    out.clear()
    for name in ("x", "y"):
        group.submit(m.DeclareExchange("/", name))
        run(group, group.flush(20_000), out)
    assert len(_committed(out)) == 2 and not [a for a in out if isinstance(a, Status)]
    applied = group.machine_index
    first = group.report(applied - 1)
    assert first and {decode_applied(s.payload) for s in first} == {applied - 1}
    assert [decode_applied(s.payload) for s in group.report(applied + 5)] == [applied] * len(first)
    assert group.report() == []


def test_a_follower_forwards_and_a_snapshot_keeps_the_sessions():
    group, out = _leader()
    run(group, group.forwarded("b", [envelope("b#1", 1, encode(m.DeclareExchange("/", "x")))]),
        out)
    image = group.snapshot()
    node = RaftNode("f", PersistentState(), 0, ra.Timing(), random.Random(2))
    follower = MetadataGroup("f", "f#1", node)
    follower.restore(group.machine_index, image)
    assert follower.machine.state.vhosts["/"].routing.get_exchange("x") is not None
    assert follower.sessions.admit("b#1", 1) == DUPLICATE
    node.leader = "a"
    follower.submit(m.DeleteExchange("/", "x"))
    assert follower.flush(0) == [Forward("a", tuple(follower.outbox.pending.values()))]


def test_a_joiner_votes_only_once_it_caught_up():
    leader, _out = _leader()
    for name in ("x", "y"):
        leader.submit(m.DeclareExchange("/", name))
    run(leader, leader.flush(10_000), [])
    node = RaftNode("f", PersistentState(), 0, ra.Timing(), random.Random(3), vote_floor=1 << 62)
    joiner = MetadataGroup("f", "f#1", node)
    groups = {"a": leader, "f": joiner}
    inbox: list[tuple[str, str, object]] = []

    def step(me: str, actions: list) -> None:
        out: list = []
        run(groups[me], actions, out)
        inbox.extend((me, a.to, a.message) for a in out if isinstance(a, ra.Send))

    step("a", leader.leader_duties(10_000, 0, {"a", "f"}))
    floors = [node.vote_floor]
    for now in range(10_100, 12_000, 100):   # heartbeats; bounded
        step("a", leader.tick(now))
        for _ in range(50):   # deliver until quiet (bounded)
            if not inbox:
                break
            frm, to, msg = inbox.pop(0)
            step(to, groups[to].receive(frm, msg, now))
            floors.append(node.vote_floor)
    assert floors[0] == 1 << 62   # empty: no vote yet
    assert joiner.machine.state.vhosts["/"].routing.get_exchange("y") is not None
    assert "f" in leader.members and node.vote_floor <= node.commit_index


def _trio_leader() -> tuple[MetadataGroup, list]:
    """Leader "a" of a configuration (a, b, c) whose log holds a committed entry of its term
    (b and c acknowledge everything, durably)."""
    group, out = _leader()
    node = group.node
    for name in ("b", "c"):
        run(group, group.leader_duties(20_000, 0, {"a", name} | set(node.members)), out)
        index = node.log.last_index
        for _ in range(5):   # the learner catches up, its CONFIG entry is appended (bounded)
            run(group, node.receive(name, AppendEntriesReply(node.term, True, index), 20_000), out)
            if name in node.members:
                break
            index = node.log.last_index
        for peer in [p for p in node.members if p != "a"]:
            run(group, node.receive(peer, AppendEntriesReply(node.term, True,
                                                             node.log.last_index), 20_000), out)
    assert node.members == ("a", "b", "c") and node.committed_config[1] == ("a", "b", "c")
    return group, out


def _periods(group: MetadataGroup, out: list, answering: tuple[str, ...], start: int) -> int:
    """Two check-quorum periods (``Timing.election_ms``) pass on the leader, ticked every
    heartbeat; only the members ``answering`` reply to its AppendEntries. Returns the time."""
    node, now = group.node, start
    for _ in range(12):
        now += 100
        run(group, node.tick(now), out)
        for peer in answering:
            run(group, node.receive(peer, AppendEntriesReply(node.term, True,
                                                             node.log.last_index), now), out)
    return now


def test_a_member_missing_from_the_view_is_removed_only_once_the_view_lost_it():
    """After a power loss the first view is a restarted member's alone: the others are absent,
    not gone, and stay in the configuration (removing them one at a time could leave a
    configuration whose majority is down); a member the view lost while the leader was in it
    (a verified suspicion, a Leave) and that no longer answers is removed."""
    group, out = _trio_leader()
    node = group.node
    now = _periods(group, out, ("b",), 20_000)
    run(group, group.leader_duties(now, 0, {"a"}), out)
    assert node.members == ("a", "b", "c")
    group.departed.add("c")
    run(group, group.leader_duties(now, 0, {"a"}), out)
    assert node.members == ("a", "b")


def test_a_departed_member_that_still_answers_stays():
    """The view can lag a broker that was killed and restarted: it left the view, but it already
    answers the leader's Raft messages (it may just have voted for it). It stays a member."""
    group, out = _trio_leader()
    node = group.node
    now = _periods(group, out, ("b", "c"), 20_000)
    group.departed |= {"b", "c"}
    run(group, group.leader_duties(now, 0, {"a"}), out)
    assert node.is_leader and node.members == ("a", "b", "c")
    now = _periods(group, out, ("b",), now)     # c falls silent: it goes, b stays
    run(group, group.leader_duties(now, 0, {"a"}), out)
    assert node.members == ("a", "b")


def test_a_member_that_left_in_order_is_removed_while_it_still_answers():
    """Cluster.Leave: the leaving member waits for its removal before it stops (else a
    configuration of two would keep a member that is gone, and the other alone has no
    majority); a departed member that did not leave in order and still answers stays."""
    group, out = _trio_leader()
    node = group.node
    now = _periods(group, out, ("b", "c"), 20_000)
    group.departed |= {"b", "c"}
    group.leaving.add("c")
    run(group, group.leader_duties(now, 0, {"a"}), out)
    assert node.members == ("a", "b")


def test_a_log_leader_that_left_in_order_removes_itself_and_steps_down():
    """Cluster.Leave of the log's own leader when its hand-over failed (its transfer target was
    killed at that moment; seen in the membership nemesis): the leader takes itself out of the
    configuration (Raft thesis §4.2.2) and steps down once that commits, telling the up-to-date
    member to stand at once. Before, it only removed others and stopped while still named in
    the configuration: the member left could never be a majority (no commit, for good)."""
    group, out = _trio_leader()
    node = group.node
    group.departed.add("b")                        # b was killed: the view lost it
    now = _periods(group, out, ("c",), 20_000)
    run(group, group.leader_duties(now, 0, {"a", "c"}), out)
    run(group, node.receive("c", AppendEntriesReply(node.term, True, node.log.last_index),
                            now), out)
    assert node.members == ("a", "c") and node.committed_config[1] == ("a", "c")
    group.departed.add("a")                        # then "a" leaves: the view is (c)
    group.leaving.add("a")
    out.clear()
    run(group, group.leader_duties(now + 100, 0, {"c"}), out)
    assert node.members == ("c",) and node.is_leader   # appended, not committed yet
    run(group, node.receive("c", AppendEntriesReply(node.term, True, node.log.last_index),
                            now + 150), out)
    assert not node.is_leader and node.committed_config[1] == ("c",)
    assert [x.to for x in out if isinstance(x, ra.Send)
            and isinstance(x.message, TimeoutNow)] == ["c"]


def test_force_configuration_lets_a_lone_member_of_three_commit():
    """``ctl force_boot``: a member of (a, b, c) whose peers are gone appends a configuration
    of itself alone, is elected by itself and commits."""
    group, out = _trio_leader()
    state = PersistentState(term=group.node.term, voted_for="a",
                            entries=tuple(group.node.log.entries))
    node = RaftNode("a", state, 0, ra.Timing(), random.Random(4))
    lone = MetadataGroup("a", "a#2", node)
    assert node.members == ("a", "b", "c")
    out = []
    run(lone, node.tick(100_000), out)
    assert not node.is_leader   # one of three: no majority
    run(lone, node.force_configuration(("a",)), out)
    run(lone, node.tick(200_000), out)
    assert node.is_leader and node.members == ("a",)
    lone.submit(m.DeclareExchange("/", "after-force"))
    run(lone, lone.flush(200_000), out)
    assert lone.machine.state.vhosts["/"].routing.get_exchange("after-force") is not None


def test_the_log_leader_hands_its_leadership_to_the_view_leader():
    """The cluster view's first member leads the metadata log too (issue 23: one leader): the
    log's leader transfers its leadership to the view's leader once that one has been another
    voter for ``ALIGN_AFTER_MS`` (Raft thesis §3.10: TimeoutNow once it holds every entry), and
    again after each attempt; never to a member outside the view or not a voter."""
    group, out = _trio_leader()
    node = group.node
    view = {"a", "b", "c"}
    group.view_leader = "d"                       # not a voter: nothing
    assert _timeouts(group, view, 20_000, 20_000 + ALIGN_AFTER_MS + 100) == []
    group.view_leader = "a"                       # ourselves: nothing
    assert _timeouts(group, view, 30_000, 30_000 + ALIGN_AFTER_MS + 100) == []
    group.view_leader = "b"
    now = 40_000
    assert _timeouts(group, view, now, now + ALIGN_AFTER_MS - 100) == []   # not yet
    run(group, node.receive("b", AppendEntriesReply(node.term, True, node.log.last_index),
                            now + ALIGN_AFTER_MS), out)
    sent = _timeouts(group, view, now + ALIGN_AFTER_MS, now + ALIGN_AFTER_MS + 100)
    assert sent == [("b", TimeoutNow(node.term, "a"))]


def _timeouts(group: MetadataGroup, view: set[str], start: int, end: int) -> list:
    """Run ``leader_duties`` every 100 ms from ``start`` to ``end`` (ms); the TimeoutNow sent."""
    out: list = []
    for now in range(start, end + 1, 100):   # bounded
        group.node.now = now
        run(group, group.leader_duties(now, 0, view), out)
    return [(x.to, x.message) for x in out
            if isinstance(x, ra.Send) and isinstance(x.message, TimeoutNow)]
