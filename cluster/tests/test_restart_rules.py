"""Unit tests of a restarted member's durable view, one rule at a time (``cluster.durable``,
``cluster.restart``, the ``rejoining`` rules of ``cluster.rounds``, the runtime's vote file); the
simulations in ``test_membership_restart_sim`` cover them together."""

from __future__ import annotations

import json

import pytest

from amqp_broker.clustering.runtime import VOTE_FILE, load_vote, save_vote
from cluster import actions as a
from cluster.codec import Vote
from cluster.durable import DurableVote, decode, encode
from cluster.membership import Node, Status, next_view
from cluster.rounds import Decision, Round, decide
from cluster.tests.test_membership import ABC, V, member, sends


def restarted(name: str, now: float = 0.0, log: bool = False) -> Node:
    node = Node(name, dict(ABC)[name], "prod", durable=DurableVote(V, ABC))
    node.commit_views = log
    node.join([], now)   # no seed given: the durable view's other members are the seeds
    return node


def test_restarted_member_joins_through_its_view_and_answers_rounds_on_it() -> None:
    b = restarted("b")
    assert b.status is Status.JOINING and b.members == ()
    out = b.receive("a", Vote(V, "a", 1, True), 0.1)
    assert out == [a.Send("a", "h1:1", Vote(V, "a", 1, False, True, True))]   # as restarted


def test_restarted_member_answers_only_rounds_on_its_durable_view() -> None:
    b = restarted("b")
    assert b.receive("a", Vote(next_view(V, 0), "a", 1, True), 0.1) == []
    assert b.receive("d", Vote(V, "d", 1, True), 0.2) == []   # not a member of that view


def test_fresh_or_lost_disk_node_has_no_vote() -> None:
    b = Node("b", "h2:1", "prod")
    b.join([("", "h1:1")], 0.0)
    assert b.receive("a", Vote(V, "a", 1, True), 0.1) == []


def test_serving_member_answers_a_recovery_as_serving_so_it_fails() -> None:
    b = member("b")
    out = b.receive("c", Vote(V, "c", 1, True, False, True), 1.0)
    assert sends(out, Vote) == [("c", Vote(V, "c", 1, False, True))]   # not rejoining
    r = Round(1, V, ABC, 1.0, {}, frozenset(), None, recovery=True)
    r.answer("b", True, "c")
    assert decide(r, "c", by_log=True).decision is Decision.LEADER_ALIVE


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


def test_with_the_log_only_its_leader_recovers_and_the_log_decides() -> None:
    b, c = restarted("b", log=True), restarted("c", log=True)
    c.may_recover = lambda: False   # not the metadata log's leader
    assert sends(c.tick(4.1), Vote) == []
    b.may_recover = lambda: True    # elected by a majority of the log's last configuration
    assert sends(b.tick(4.1), Vote) == [("a", Vote(V, "b", 1, True, False, True)),
                                        ("c", Vote(V, "b", 1, True, False, True))]
    out = b.tick(4.5)   # nobody answered
    nv = next_view(V, 1)
    assert [x for x in out if isinstance(x, a.ProposeView)] == [a.ProposeView(V, nv, ABC[1:2], ())]
    out = b.view_committed(nv, ABC[1:2], 4.6)
    assert b.is_leader and a.AcceptClients(nv) in out


def test_without_a_log_only_the_durable_leader_recovers_with_a_majority() -> None:
    """A cluster upgraded from the broadcast design: no metadata log anywhere yet."""
    b = restarted("b")
    assert sends(b.tick(4.1), Vote) == [] and sends(b.tick(9.0), Vote) == []   # not its leader
    lead = restarted("a")
    lead.tick(4.1)      # nobody serving for recover_after: a recovery round
    out = lead.tick(4.5)   # nobody answered: 1 of 3
    assert lead.status is Status.JOINING and not [x for x in out if isinstance(x, a.ViewInstalled)]
    req = [m for to, m in sends(lead.tick(5.6), Vote) if to == "b"]
    assert req and req[0].rejoining and req[0].request
    (to, answer), = sends(b.receive("a", req[0], 5.61), Vote)
    assert answer.granted and answer.rejoining
    assert lead.receive("b", answer, 5.62) == []   # c may still answer, until the deadline
    out = lead.tick(5.9)
    installed = [x for x in out if isinstance(x, a.ViewInstalled)]
    assert installed and installed[0].members == (("a", "h1:1"),) and lead.is_leader
    assert a.AcceptClients(lead.view) in out and isinstance(out[0], a.Persist)


def test_vote_file_round_trip_and_bad_file(tmp_path) -> None:
    assert load_vote(tmp_path) is None
    vote = DurableVote(V, ABC)
    save_vote(tmp_path, vote)
    assert load_vote(tmp_path) == vote == decode(encode(vote))
    # a file of the version before, with the grant the rounds kept then: read, grant ignored
    old = {"version": 1, "view": V, "members": [list(m) for m in ABC], "grant": [V, "a"]}
    (tmp_path / VOTE_FILE).write_text(json.dumps(old))
    assert load_vote(tmp_path) == vote
    (tmp_path / VOTE_FILE).write_text('{"version": 1, "view": "x"}')
    assert load_vote(tmp_path) is None   # unreadable: no vote (safe), logged
    with pytest.raises(ValueError):
        decode(b"\xff")
