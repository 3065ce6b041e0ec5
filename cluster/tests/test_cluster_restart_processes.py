"""A majority of the cluster restarts: real broker processes and pika clients (DESIGN.md §4).

Covers: of three brokers, two are killed (kill -9) at once, the leader's or two members while the
leader survives; the survivor, a minority, keeps its view; the two restart with the same data dirs,
names and addresses, seeding from the survivor, and all three agree on one view again; a queue
declared afterwards on one broker is there on the others, and a quorum queue declared before the
crash serves again with every confirmed message. Then a full-cluster power loss (kill -9 of all
three) with the brokers restarted one by one: the first alone does not serve (a minority of its
last view), the second makes a majority and one view forms, the third joins it.
Source: issue "cluster recovery after a majority restart"; Raft paper §5.2 (durable vote).
"""

from __future__ import annotations

import time

import pytest

from cluster.tests.processes import Cluster, Member, server_properties, wait_for
from cluster.tests.quorum_scenarios import Publisher, declare, drain, wait_leader

pytestmark = pytest.mark.timeout(240)

AGREE_WITHIN = 40.0   # seconds: the bound of every wait for one view


def view_of(member: Member) -> tuple[int, list[str]] | None:
    """(view number, member names) from Connection.Start; None when it does not answer."""
    try:
        props = server_properties(member.host, member.port, timeout=1.0)
    except OSError:
        return None
    names = [n.decode() if isinstance(n, bytes) else n
             for n in props.get("cluster_member_names", [])]
    return props.get("cluster_view", 0), names


def agree(members: list[Member]) -> bool:
    """All of ``members`` report the same view, made of exactly them."""
    views = [view_of(m) for m in members]
    return (all(v is not None for v in views) and len({(v[0], tuple(v[1])) for v in views}) == 1
            and sorted(views[0][1]) == sorted(m.name for m in members))


def publish_confirmed(member: Member, queue: str, count: int) -> list[str]:
    pub = Publisher(member, queue, count)
    pub.join(60)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == count
    return pub.confirmed


def check_served_everywhere(members: list[Member], confirmed: list[str]) -> None:
    """A queue declared now on one is visible on all; the quorum queue gives back ``confirmed``."""
    for m in members:   # in one view, and synced (a member still syncing refuses clients)
        wait_for(m.serving, 20, f"{m.name} never served a client:\n{m.log_tail()}")
    ch = members[-1].connect().channel()
    ch.queue_declare("declared-after-recovery", durable=True)
    for m in members:
        wait_for(lambda m=m: m.has_queue("declared-after-recovery"), 15,
                 f"{m.name} does not have the queue:\n{m.log_tail()}")
    assert sorted(drain(members[0], "qq")) == sorted(confirmed)


@pytest.mark.parametrize("survivor", ["leader", "member"])
def test_two_of_three_killed_and_restarted_agree_again(cluster: Cluster, survivor: str) -> None:
    n2, n3, n4 = cluster.start_three()   # n2 leads
    declare(n2, "qq")
    wait_leader(cluster, "qq")
    confirmed = publish_confirmed(n3, "qq", 50)
    alive = n2 if survivor == "leader" else n4
    victims = [m for m in (n2, n3, n4) if m is not alive]
    before = view_of(alive)
    cluster.kill_together(victims)
    time.sleep(2.0)   # eight ping intervals: any suspicion has acted by now
    assert view_of(alive) == before   # a minority changes nothing
    for v in victims:
        cluster.start(int(v.host.rsplit(".", 1)[1]), alive)   # same name, address, data dir
    wait_for(lambda: agree([n2, n3, n4]), AGREE_WITHIN,
             "no agreed view after the restart:\n" + "\n".join(
                 f"{m.name}: {view_of(m)}\n{m.log_tail(15)}" for m in (n2, n3, n4)))
    assert view_of(alive)[1][0] == alive.name   # the survivor, with its state, leads
    check_served_everywhere([n2, n3, n4], confirmed)


def test_full_cluster_power_loss_then_restart_one_by_one(cluster: Cluster) -> None:
    n2, n3, n4 = cluster.start_three()
    ch = n2.connect().channel()
    ch.queue_declare("kept", durable=True)
    declare(n3, "qq")
    wait_leader(cluster, "qq")
    confirmed = publish_confirmed(n4, "qq", 50)
    cluster.kill_together([n2, n3, n4])
    cluster.start(2)   # as first started: no seed (its data dir knows the others)
    time.sleep(3.0)
    assert view_of(n2) == (0, [])   # alone, a minority of its last view: in no view, no clients
    assert not n2.has_queue("kept")
    cluster.start(3, n2)
    wait_for(lambda: agree([n2, n3]), AGREE_WITHIN,
             f"n2 and n3 did not agree: {view_of(n2)} {view_of(n3)}\n{n2.log_tail(15)}")
    cluster.start(4, n2)
    wait_for(lambda: agree([n2, n3, n4]), AGREE_WITHIN,
             f"n4 did not join: {[view_of(m) for m in (n2, n3, n4)]}\n{n4.log_tail(15)}")
    for m in (n2, n3, n4):
        wait_for(lambda m=m: m.has_queue("kept"), 15, f"{m.name} lost the durable queue")
    check_served_everywhere([n2, n3, n4], confirmed)
