"""The pure parts of maintenance mode and rebalancing (issue 26): a Raft node in standby stands
for no election (nor on a TimeoutNow) but keeps voting; a TRANSFER change request, passed from a
follower to the leader as add / delete member requests are, hands the leadership over; the
rebalance plan moves leaderships as RabbitMQ's ``rabbit_amqqueue:rebalance/3`` does. Over the
fake network of ``quorum_fake`` (no sockets, no real time)."""

from __future__ import annotations

from cluster.quorum.group import Change
from cluster.quorum.members import TRANSFER, decode_change, encode_change
from cluster.quorum.rebalance import Move, Rebalance
from cluster.tests.quorum_fake import Net


def started(seed: int = 1) -> Net:
    net = Net(seed=seed)
    net.run_until(lambda: net.leader() is not None)
    return net


def test_a_standby_member_is_never_elected_but_votes():
    net = started()
    leader = net.leader()
    assert leader is not None
    standby, other = (net.members[n] for n in net.names if n != leader.name)
    standby.group.node.standby = True
    # a hand-over to the standby member: it does not stand, the leader keeps leading
    leader.run(leader.group.node.transfer_leadership(standby.name))
    net.advance(10, 100)
    assert net.leader() is leader
    # the leader dies: only the other member can be elected, with the standby member's vote
    net.kill(leader.name)
    net.run_until(lambda: net.leader() is not None, 5000)
    assert net.leader() is other
    net.advance(10, 100)
    assert not standby.group.is_leader
    standby.group.node.standby = False   # revived: it may lead again
    other.run(other.group.node.transfer_leadership(standby.name))
    net.run_until(lambda: net.leader() is standby, 2000)


def test_a_transfer_request_reaches_the_leader_through_a_follower():
    assert decode_change(encode_change(TRANSFER, "b")) == (TRANSFER, "b")
    net = started(seed=2)
    leader = net.leader()
    assert leader is not None
    follower, target = (net.members[n] for n in net.names if n != leader.name)
    reason, actions = follower.group.change(TRANSFER, target.name)
    assert reason is None and [type(a) for a in actions] == [Change]
    assert actions[0].to == leader.name   # passed on to the leader (QUORUM_CHANGE)
    op, node = decode_change(actions[0].payload)
    reason, started_ = leader.group.change(op, node, follower.name)
    assert reason is None
    leader.run(started_)
    net.run_until(lambda: net.leader() is target, 2000)
    assert target.group.change(TRANSFER, target.name) == (None, [])   # already there


def test_rebalance_moves_leaders_from_the_busiest_member_as_rabbitmq():
    members = ("n1", "n2", "n3")
    queues = [(f"q{i}", "n1", members, i) for i in range(6)]
    plan = Rebalance(queues, members)
    moves = []
    for _ in range(20):
        move = plan.next_move()
        if move is None:
            break
        moves.append(move)
        plan.done(move, True)
    # shortest queues first, each to the member leading fewest (first by name on a tie)
    assert moves == [Move("q0", "n1", "n2"), Move("q1", "n1", "n3"), Move("q2", "n1", "n2"),
                     Move("q3", "n1", "n3")]
    assert plan.summary() == [{"Node name": n, "Number of quorum queues": 2} for n in members]


def test_rebalance_skips_members_not_running_and_failed_moves_stay():
    queues = [("a", "n1", ("n1", "n2"), 0), ("b", "n1", ("n1", "n2", "n3"), 5),
              ("c", "n1", ("n1", "n3"), 9)]
    plan = Rebalance(queues, ("n1", "n2"))   # n3 in maintenance
    move = plan.next_move()
    assert move == Move("a", "n1", "n2")
    plan.done(move, False)   # the transfer timed out: "a" stays, tried
    move = plan.next_move()
    assert move == Move("b", "n1", "n2")
    plan.done(move, True)
    assert plan.next_move() is None   # "c" can go nowhere but n3; "a" was tried
    assert plan.summary() == [{"Node name": "n1", "Number of quorum queues": 2},
                              {"Node name": "n2", "Number of quorum queues": 1}]
