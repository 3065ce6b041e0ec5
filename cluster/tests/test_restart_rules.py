"""Unit tests of a restarted member's durable vote, one rule at a time (``cluster.durable``,
``cluster.restart``, the ``rejoining`` rules of ``cluster.rounds``, the runtime's vote file); the
simulations in ``test_membership_restart_sim`` cover them together."""

from __future__ import annotations

import pytest

from amqp_broker.clustering.runtime import VOTE_FILE, load_vote, save_vote
from cluster import actions as a
from cluster.codec import Vote
from cluster.durable import DurableVote, decode, encode
from cluster.membership import Node, Status
from cluster.rounds import Decision, Round, decide
from cluster.tests.test_membership import ABC, V, member, sends


def restarted(name: str, grant: tuple[int, str] | None = None, now: float = 0.0) -> Node:
    node = Node(name, dict(ABC)[name], "prod", durable=DurableVote(V, ABC, grant))
    node.join([], now)   # no seed given: the durable view's other members are the seeds
    return node


def test_restarted_member_joins_through_its_view_and_grants_after_persisting() -> None:
    b = restarted("b")
    assert b.status is Status.JOINING and b.members == ()
    out = b.receive("a", Vote(V, "a", 1, True), 0.1)
    assert out == [a.Persist(DurableVote(V, ABC, (V, "a"))),   # durable before the answer
                   a.Send("a", "h1:1", Vote(V, "a", 1, False, True, True))]


def test_restarted_member_keeps_the_grant_it_made_before_the_crash() -> None:
    b = restarted("b", grant=(V, "c"))
    assert sends(b.receive("a", Vote(V, "a", 1, True), 0.5)) == [
        ("a", Vote(V, "a", 1, False, False, True))]   # the lease restarts with the process
    assert sends(b.receive("a", Vote(V, "a", 2, True), 1.5)) == [
        ("a", Vote(V, "a", 2, False, True, True))]


def test_fresh_or_lost_disk_node_has_no_vote() -> None:
    b = Node("b", "h2:1", "prod")
    b.join([("", "h1:1")], 0.0)
    assert b.receive("a", Vote(V, "a", 1, True), 0.1) == []


def test_serving_member_never_grants_a_recovery() -> None:
    b = member("b")
    out = b.receive("c", Vote(V, "c", 1, True, False, True), 1.0)
    assert sends(out, Vote) == [("c", Vote(V, "c", 1, False, False))]


def test_restarted_member_prefers_a_serving_survivor() -> None:
    b = restarted("b")
    b.receive("a", Vote(V, "a", 1, True), 0.1)       # the serving leader spoke to us
    recovery = Vote(V, "c", 1, True, False, True)
    assert sends(b.receive("c", recovery, 2.0)) == [("c", Vote(V, "c", 1, False, False, True))]
    takeover = Vote(V, "c", 2, True)
    assert sends(b.receive("c", takeover, 2.1)) == [("c", Vote(V, "c", 2, False, False, True))]
    # the leader silent for recover_after: a takeover may have our vote (the lease to a lapsed)
    assert sends(b.receive("c", takeover, 4.2)) == [("c", Vote(V, "c", 2, False, True, True))]


def test_restarted_answers_are_left_out_and_do_not_prove_the_leader_alive() -> None:
    r = Round(1, V, ABC, 1.0, {}, frozenset(), "a")
    assert not r.answer("a", True, "c", rejoining=True)   # the round goes on
    r.answer("b", True, "c", rejoining=True)
    out = decide(r, "c")
    assert out.decision is Decision.ANNOUNCE and out.members == (("c", "h3:1"),)


def test_recovery_round_fails_when_a_serving_member_answers() -> None:
    r = Round(1, V, ABC, 1.0, {}, frozenset(), None, recovery=True)
    assert r.answer("a", False, "b")
    assert decide(r, "b").decision is Decision.LEADER_ALIVE


def test_lone_restarted_member_recovers_only_with_a_majority() -> None:
    b = restarted("b")
    b.tick(4.1)   # nobody serving for recover_after: a recovery round
    out = b.tick(4.5)   # nobody answered
    assert b.status is Status.JOINING and not [x for x in out if isinstance(x, a.ViewInstalled)]
    c = restarted("c")
    req = [m for to, m in sends(b.tick(5.6), Vote) if to == "c"]
    assert req and req[0].rejoining and req[0].request
    (to, answer), = sends(c.receive("b", req[0], 5.61), Vote)   # c heard nobody serving either
    assert answer.granted and answer.rejoining
    assert b.receive("c", answer, 5.62) == []   # a may still answer, until the round's deadline
    out = b.tick(5.9)
    installed = [x for x in out if isinstance(x, a.ViewInstalled)]
    assert installed and installed[0].members == (("b", "h2:1"),) and b.is_leader
    assert a.AcceptClients(b.view) in out and isinstance(out[0], a.Persist)


def test_vote_file_round_trip_and_bad_file(tmp_path) -> None:
    assert load_vote(tmp_path) is None
    vote = DurableVote(V, ABC, (V, "a"))
    save_vote(tmp_path, vote)
    assert load_vote(tmp_path) == vote == decode(encode(vote))
    (tmp_path / VOTE_FILE).write_text('{"version": 1, "view": "x"}')
    assert load_vote(tmp_path) is None   # unreadable: no vote (safe), logged
    with pytest.raises(ValueError):
        decode(b"\xff")
