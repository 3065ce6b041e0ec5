"""Unit tests of replica management's pure parts (``cluster.quorum.members`` and
``QuorumGroup.change`` / its members notices) over the fake transport: RabbitMQ's checks and
reasons, the payload codecs, a change started on the leader and passed on by a follower."""

from __future__ import annotations

import pytest

from cluster.quorum.group import Change, Members
from cluster.quorum.members import (
    ADD,
    CHANGE_IN_PROGRESS,
    DELETE,
    LAST_NODE,
    NODE_NOT_RUNNING,
    MembersNotice,
    check_change,
    decode_change,
    decode_notice,
    encode_change,
    encode_notice,
    grows,
)
from cluster.tests.quorum_fake import Net


def test_checks_follow_rabbitmq() -> None:
    members, running = ("a", "b", "c"), {"a", "b", "c", "d"}
    assert check_change(ADD, "d", members, running) == (True, None)
    assert check_change(ADD, "b", members, running) == (False, None)        # idempotent
    assert check_change(ADD, "zz", members, running) == (False, NODE_NOT_RUNNING)
    assert check_change(DELETE, "b", members, running) == (True, None)
    assert check_change(DELETE, "d", members, running) == (False, None)     # idempotent
    assert check_change(DELETE, "a", ("a",), running) == (False, LAST_NODE)
    assert check_change(DELETE, "gone", ("a", "gone"), running) == (True, None)  # dead: shrink


def test_grow_strategies() -> None:
    assert grows("all", "d", ("a", "b", "c"))
    assert not grows("even", "d", ("a", "b", "c"))
    assert grows("even", "d", ("a", "b"))
    assert not grows("all", "a", ("a", "b"))
    with pytest.raises(ValueError):
        grows("some", "d", ("a",))


def test_payloads_round_trip_and_refuse_garbage() -> None:
    assert decode_change(encode_change(DELETE, "n4")) == (DELETE, "n4")
    notice = MembersNotice(7, 42, ("a", "b"), ("d",), ("a", "b", "d"), 99)
    assert decode_notice(encode_notice(notice)) == notice
    for bad in (b"", b"\x09x", b"\x01"):
        with pytest.raises(ValueError):
            decode_change(bad)
    for bad in (b"", b"\x00" * 24, b"\x00" * 24 + b"a;b", b"\x00" * 24 + b"\xff;;"):
        with pytest.raises(ValueError):
            decode_notice(bad)
    with pytest.raises(ValueError):
        encode_notice(MembersNotice(1, 1, ("a;b",)))


def test_change_starts_on_the_leader_and_is_passed_on_by_a_follower() -> None:
    net = Net()
    net.run_until(lambda: net.leader() is not None)
    net.advance(50, 10)
    leader = net.leader()
    assert leader is not None
    follower = next(m for m in net.members.values() if m is not leader)
    reason, actions = follower.group.change(ADD, "d")
    assert reason is None and actions == [Change(leader.name, encode_change(ADD, "d"))]
    assert follower.group.change(ADD, "d", frm=leader.name)[0] is not None   # not back to it
    reason, actions = leader.group.change(ADD, "d")
    assert reason is None and leader.group.node.learners == ("d",)
    leader.run(actions)
    assert leader.group.change(ADD, "d") == (None, [])              # already catching up
    assert leader.group.change(DELETE, "b")[0] == CHANGE_IN_PROGRESS  # one change at a time
    # the leader tells every broker of the view, the learner too, who it is catching up
    notices = [a for a in leader.group.leader_duties(net.now, net.now, {"a", "b", "c", "d"})
               if isinstance(a, Members)]
    assert sorted(n.to for n in notices) == sorted({"a", "b", "c", "d"} - {leader.name})
    told = decode_notice(notices[0].payload)
    assert told.members == ("a", "b", "c") and told.learners == ("d",)
    assert told.term == leader.group.node.term and told.commit == leader.group.node.commit_index
    assert not [a for a in leader.group.leader_duties(net.now, net.now, {"a", "b", "c", "d"})
                if isinstance(a, Members)]   # told once (repeated every few status rounds)
