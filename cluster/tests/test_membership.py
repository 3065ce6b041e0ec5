"""Unit tests of the membership state machine, its rounds and the joiner's replay order, one rule
at a time (the simulation tests cover them together)."""

from __future__ import annotations

from cluster import actions as a
from cluster.codec import Join, Leave, Membership, Ping, Suspect, Synch, Vote
from cluster.durable import DurableVote
from cluster.membership import FIRST_VIEW, Node, Status, next_view, view_key
from cluster.rounds import Decision, Round, decide
from cluster.syncing import JoinSync

ABC = (("a", "h1:1"), ("b", "h2:1"), ("c", "h3:1"))
V = 5 << 16


def sends(actions: list[a.Action], kind: type | None = None) -> list[tuple[str, object]]:
    return [(x.to, x.method) for x in actions
            if isinstance(x, a.Send) and (kind is None or isinstance(x.method, kind))]


def member(name: str, members=ABC, view: int = V, now: float = 0.0) -> Node:
    """A node that is already a MEMBER of ``view`` (put there directly: a test-only shortcut),
    with the metadata log (its views are committed there: ``committed_views``)."""
    node = Node(name, dict(members)[name], "prod")
    node.commit_views = True
    node._start()
    node.status = Status.MEMBER
    node._install(view, members, now)
    node._take(now)
    return node


def test_view_numbers() -> None:
    assert next_view(FIRST_VIEW, 0) == 2 << 16
    assert next_view(V | 3, 2) == (6 << 16) | 2 > V | 3
    assert view_key(V, ABC) < view_key(V + 1, ())


def test_bootstrap_is_a_leader_of_one() -> None:
    node = Node("a", "h1:1")
    out = node.bootstrap(0.0)
    assert out == [a.Persist(DurableVote(FIRST_VIEW, (("a", "h1:1"),))),
                   a.ViewInstalled(FIRST_VIEW, (("a", "h1:1"),), (), ()),
                   a.BecameLeader(FIRST_VIEW), a.AcceptClients(FIRST_VIEW)]
    assert node.is_leader


def test_join_is_forwarded_to_the_leader_and_other_clusters_ignored() -> None:
    b = member("b")
    j = Join("d", "h4:1", "prod", "0.1")
    assert sends(b.receive("d", j, 1.0)) == [("a", j)]
    assert b.receive("d", Join("d", "h4:1", "other", "0.1"), 1.0) == []


def test_leader_adds_a_joiner_once_the_log_commits_the_view() -> None:
    lead = member("a")
    lead.receive("d", Join("d", "h4:1", "prod", "0.1"), 1.0)
    out = lead.tick(1.0)
    assert sends(out, Vote) == [("b", Vote(V, "a", 1, True)), ("c", Vote(V, "a", 1, True))]
    assert lead.receive("b", Vote(V, "a", 1, False, True), 1.01) == []
    out = lead.receive("c", Vote(V, "a", 1, False, True), 1.02)   # all answered: no wait
    new = ABC + (("d", "h4:1"),)
    nv = next_view(V, 0)
    assert out == [a.ProposeView(V, nv, new, ())] and lead.view == V   # the log decides
    out = lead.view_committed(nv, new, 1.05)
    assert sends(out, Membership) == [(n, Membership(nv, new)) for n in ("b", "c", "d")]
    assert a.ViewInstalled(nv, new, ("d",), ()) in out
    assert a.Replay("d", "h4:1", nv, True) in out


def test_joiner_applies_the_leaders_replay_first() -> None:
    d = Node("d", "h4:1", "prod")
    d.join([("b", "h2:1")], 0.0)
    new = ABC + (("d", "h4:1"),)
    assert d.receive("c", Synch(V, "c"), 0.1) == []            # overtook the Membership
    assert d.receive("b", Membership(V, new), 0.1) == []       # not from the leader: ignored
    out = d.receive("a", Membership(V, new), 0.2)
    assert d.status is Status.SYNCING and a.ViewInstalled(V, new, ("a", "b", "c"), ()) in out
    assert d.receive("b", Synch(V, "b"), 0.3) == []            # buffered behind the leader's
    out = d.receive("a", Synch(V, "a"), 0.4)
    assert out[:4] == [a.ApplyReplay("a"), a.ApplyReplay("c"), a.ApplyReplay("b"),
                       a.AcceptClients(V)]
    assert d.status is Status.MEMBER


def test_joining_node_is_silent() -> None:
    d = Node("d", "h4:1", "prod")
    d.join([("b", "h2:1")], 0.0)
    assert d.receive("a", Ping(True, V), 0.1) == []
    assert d.receive("a", Vote(V, "a", 1, True), 0.1) == []


def test_older_views_are_ignored() -> None:
    b = member("b")
    assert b.receive("a", Membership(V - 1, ABC[:2]), 1.0) == []
    assert b.view == V and b.members == ABC


def test_ring_leader_pings_the_last_and_others_their_predecessor() -> None:
    for name, target in (("a", "c"), ("b", "a"), ("c", "b")):
        pings = sends(member(name).tick(0.0), Ping)
        assert pings[0] == (target, Ping(True, V)), name
        assert len(pings) == 1, name   # the ring only; the leader's heartbeat comes later


def test_silent_predecessor_is_suspected_to_the_leader() -> None:
    c = member("c")
    c.tick(0.0)
    assert sends(c.tick(1.4), Suspect) == []
    assert sends(c.tick(1.5), Suspect) == [("a", Suspect("b", V))]
    assert sends(c.tick(1.6), Suspect) == []            # rate-limited


def test_failed_send_to_the_leader_starts_a_takeover_at_the_next() -> None:
    b, c = member("b"), member("c")
    out = b.send_failed("a", 1.0)
    assert sends(out, Vote) == [("a", Vote(V, "b", 1, True)), ("c", Vote(V, "b", 1, True))]
    # c, not next after the leader, passes its suspicion on to b
    assert sends(c.send_failed("a", 1.0), Suspect) == [("b", Suspect("a", V))]
    out = b.receive("c", Vote(V, "b", 1, False, True), 1.01)
    assert out == []                                       # waits for the leader's silence
    out = b.tick(1.0 + b.timing.verify_timeout)
    nv = next_view(V, 1)
    assert a.ProposeView(V, nv, ABC[1:], ()) in out
    out = b.view_committed(nv, ABC[1:], 1.3)
    assert a.BecameLeader(nv) in out and b.members == ABC[1:]
    assert sends(out, Membership)[0] == ("a", Membership(nv, ABC[1:]))


def test_a_live_leader_aborts_a_takeover() -> None:
    lead, b = member("a"), member("b")
    b.send_failed("a", 1.0)
    answer = sends(lead.receive("b", Vote(V, "b", 1, True), 1.0), Vote)
    assert answer == [("b", Vote(V, "b", 1, False, True))]
    out = b.receive("a", answer[0][1], 1.01)
    assert not [x for x in out if isinstance(x, a.ProposeView)]
    assert b.view == V and b.members == ABC and not b.is_leader


def test_a_round_changes_nothing_until_the_log_commits_and_retries_when_refused() -> None:
    lead = member("a")
    lead.send_failed("c", 1.0)
    out = lead.tick(1.0 + lead.timing.verify_timeout)     # nobody answered: 1 of 3
    nv = next_view(V, 0)
    assert [x for x in out if isinstance(x, a.ProposeView)] == [a.ProposeView(V, nv, ABC[:1], ())]
    assert sends(out, Membership) == [] and lead.view == V
    assert lead.view_refused(nv, ABC[:1], 3.3) == [] and lead.view == V
    assert sends(lead.tick(3.3 + lead.timing.retry), Vote), "a new round after retry"


def test_a_member_without_the_log_starts_no_round() -> None:
    lead = member("a")
    lead.commit_views = False   # its metadata replica is not open yet (a joiner just admitted)
    lead.receive("d", Join("d", "h4:1", "prod", "0.1"), 1.0)
    lead.send_failed("c", 1.0)
    assert sends(lead.tick(1.0), Vote) == [] and sends(lead.tick(2.0), Vote) == []
    lead.commit_views = True    # the replica opened
    assert sends(lead.tick(2.1), Vote) == [("b", Vote(V, "a", 1, True)),
                                           ("c", Vote(V, "a", 1, True))]


def test_the_leader_heartbeats_its_view_and_a_member_suspects_a_silent_leader() -> None:
    lead = member("a")
    beats = [sends(lead.tick(t / 10), Ping) for t in range(10, 40)]
    sent = [m for beat in beats for m in beat]
    # every heartbeat_interval (1 s) a Ping of the view goes to each other member
    assert [m for m in sent if not m[1].needs_reply] == [
        ("b", Ping(False, V)), ("c", Ping(False, V))] * 3
    c = member("c")   # pings b (the ring), so only the heartbeat tells it of the leader
    c.receive("a", Ping(False, V), 1.0)
    for t in (1.0, 2.0, 3.0):
        c.receive("b", Ping(True, V), t)
        assert sends(c.tick(t + 0.4), Suspect) == []
    out = c.tick(1.0 + c.timing.leader_timeout + 0.05)
    # the first member after the silent leader is asked to take over (proposal "Failure Analysis")
    assert sends(out, Suspect) == [("b", Suspect("a", V))]


def test_leader_keeps_a_suspect_that_answers() -> None:
    lead = member("a")
    lead.receive("c", Suspect("b", V), 1.0)
    lead.receive("b", Vote(V, "a", 1, False, True), 1.01)
    out = lead.receive("c", Vote(V, "a", 1, False, True), 1.02)
    assert sends(out, Membership) == [("b", Membership(V, ABC)), ("c", Membership(V, ABC))]
    assert lead.view == V


def test_leave_goes_through_the_leader() -> None:
    c, lead = member("c"), member("a")
    assert sends(c.leave(1.0)) == [("a", Leave("c"))]
    lead.receive("c", Leave("c"), 1.0)
    lead.tick(1.0)
    lead.receive("b", Vote(V, "a", 1, False, True), 1.01)
    out = lead.receive("c", Vote(V, "a", 1, False, True), 1.02)
    (propose,) = [x for x in out if isinstance(x, a.ProposeView)]
    assert propose.left == ("c",)
    (to, m), *_ = sends(lead.view_committed(propose.view, propose.members, 1.05), Membership)
    assert lead.members == ABC[:2] and isinstance(m, Membership)
    assert c.receive("a", m, 1.03) == [a.Persist(DurableVote(m.view, ())), a.Left(m.view)]
    assert c.status is Status.LEFT   # and no vote any more: a restart joins afresh


def test_excluded_member_rejoins_through_the_new_leader() -> None:
    c = member("c")
    out = c.receive("b", Membership(next_view(V, 1), ABC[:2]), 1.0)
    assert out[:2] == [a.Persist(DurableVote(next_view(V, 1), ())), a.Excluded(next_view(V, 1))]
    assert c.status is Status.JOINING
    assert sends(out, Join) == [("a", Join("c", "h3:1", "prod", ""))]


def test_stale_peer_is_sent_our_membership() -> None:
    b = member("b")
    out = b.receive("a", Ping(True, V - 1), 1.0)
    assert ("a", Membership(V, ABC)) in sends(out)


def test_decide() -> None:
    r = Round(1, V, ABC, 1.0, {"d": "h4:1"}, frozenset(), None)
    assert decide(r, "a").decision is Decision.MINORITY      # without the log: 1 of 3
    assert decide(r, "a", by_log=True).decision is Decision.ANNOUNCE   # the log decides
    r.answer("b", False, "a")                                # b is not in that view
    assert decide(r, "a").decision is Decision.MINORITY
    r.answer("b", True, "a")
    out = decide(r, "a")
    assert out.decision is Decision.ANNOUNCE and out.joined == ("d",)
    assert out.members == (ABC[0], ABC[1], ("d", "h4:1"))        # c did not answer
    rejoin = Round(2, V, ABC, 1.0, {"c": "h3:1"}, frozenset(), None)
    assert rejoin.answer("b", True, "a") is False and rejoin.answer("c", True, "a") is True
    assert decide(rejoin, "a").members == ABC[:2]                  # out now, back next round
    takeover = Round(3, V, ABC, 1.0, {}, frozenset(), "a")
    assert takeover.answer("a", False, "b") is True
    assert decide(takeover, "b").decision is Decision.LEADER_ALIVE


def test_join_sync_waits_for_survivors_only() -> None:
    s = JoinSync()
    s.begin("d", V, ["a", "b", "d"])
    assert s.synch("b") == [] and s.finish() is None
    assert s.lost_leader(["b", "d"]) is True               # leader gone before its replay
    s = JoinSync()
    s.begin("d", V, ["a", "b", "c", "d"])
    assert s.synch("a") == [a.ApplyReplay("a")]
    assert s.lost_leader(["a", "b", "d"]) is False
    assert s.synch("b") == [a.ApplyReplay("b")] and s.finish() == []
