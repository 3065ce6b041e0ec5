"""Replica management of quorum queues with real brokers, ``amqp-broker ctl`` and pika (issue 12,
RabbitMQ "Quorum Queues", "Replica management"): on a 4-broker cluster a quorum queue of 3 is
moved to the fourth broker (``add_member``, then ``delete_member`` of an original member) under a
confirming publisher; the new replica shows in members and in sync; kill -9 of two of the
original three brokers leaves the queue served, and ``shrink`` of a dead broker removes it from
every group; no confirmed message is lost. RabbitMQ's errors for an unknown node and the last
member."""

from __future__ import annotations

import os

import pytest

from amqp_broker.management import ctl
from cluster.tests.processes import Member, api_get, start_with_api, wait_for
from cluster.tests.quorum_scenarios import Publisher, declare, drain

pytestmark = pytest.mark.timeout(300)


def _queue(url: str, name: str) -> dict:
    got = api_get(url, f"/queues/%2F/{name}")  # None while the API does not answer
    return got if isinstance(got, dict) else {}


def _replica_files(member: Member) -> list[str]:
    """Names of the files in ``member``'s quorum queue replica directories."""
    root = member.data_dir / "quorum"
    return [n for d in (root.iterdir() if root.exists() else []) for n in os.listdir(d)]


def test_move_a_quorum_queue_to_a_new_broker_then_lose_two_of_the_original_three(cluster,
                                                                                   capsys):
    n2, url2 = start_with_api(cluster, 2, None)
    others = [start_with_api(cluster, octet, n2) for octet in (3, 4, 5)]
    brokers = {m.name: (m, url) for m, url in [(n2, url2), *others]}
    view = sorted(m.address for m, _ in brokers.values())
    wait_for(lambda: all(sorted(m.members() or []) == view for m, _ in brokers.values()), 20,
             "the four brokers did not agree on one view")
    declare(n2, "orders", **{"x-quorum-initial-group-size": 3})
    wait_for(lambda: len(_queue(url2, "orders").get("members") or []) == 3, 10, "no group")
    a, b, c = _queue(url2, "orders")["members"]
    (d,) = set(brokers) - {a, b, c}
    (ma, urla), (mb, _), (mc, urlc), (md, urld) = (brokers[x] for x in (a, b, c, d))
    wait_for(lambda: _queue(urld, "orders").get("members") == [a, b, c], 10, "not declared on d")

    pub = Publisher(mc, "orders", 100_000)   # on a member that stays up, throughout
    wait_for(lambda: len(pub.confirmed) >= 200, 60, f"only {len(pub.confirmed)} confirmed")

    # errors as RabbitMQ's; adding a member again is a no-op (RabbitMQ: idempotent)
    assert ctl.main(["--url", urla, "add_member", "orders", "nosuch"]) == 1
    assert "node_not_running" in capsys.readouterr().err
    assert ctl.main(["--url", urla, "add_member", "orders", b]) == 0
    assert ctl.main(["--url", urla, "add_member", "-p", "/", "nosuchqueue", d]) == 1
    assert "Not Found" in capsys.readouterr().err

    # add the fourth broker (asked on a broker that is not the leader, maybe): caught up, in sync
    assert ctl.main(["--url", urla, "add_member", "orders", d]) == 0
    assert sorted(_queue(urla, "orders")["members"]) == sorted([a, b, c, d])
    wait_for(lambda: d in (_queue(urld, "orders").get("members_in_sync") or []), 20,
             f"{d} not in sync: {_queue(urld, 'orders')}")
    assert sorted(_queue(urld, "orders")["members"]) == sorted([a, b, c, d])
    assert any(n.endswith(".seg") for n in _replica_files(md))

    # move off a: delete_member, then its broker holds no replica files
    assert ctl.main(["--url", urld, "delete_member", "orders", a]) == 0
    wait_for(lambda: sorted(_queue(urla, "orders").get("members") or []) == sorted([b, c, d]),
             10, f"a did not learn it left: {_queue(urla, 'orders')}")
    wait_for(lambda: _replica_files(ma) == ["members.json"], 10,
             f"a still holds {_replica_files(ma)}")
    before = len(pub.confirmed)
    wait_for(lambda: len(pub.confirmed) >= before + 100, 30, "publishing stalled after the move")

    # kill -9 two of the original three (a, no longer a member, and b): c and d are 2 of 3
    cluster.kill(ma)
    cluster.kill(mb)
    before = len(pub.confirmed)
    wait_for(lambda: len(pub.confirmed) >= before + 200, 60,
             f"the queue is not served after losing {a} and {b}: "
             f"{len(pub.confirmed) - before} confirmed")

    # shrink the dead b: removed from every group it was in
    assert ctl.main(["--url", urlc, "shrink", b]) == 0
    out = capsys.readouterr().out
    assert "orders" in out and "ok" in out
    wait_for(lambda: sorted(_queue(urld, "orders").get("members") or []) == sorted([c, d]), 10,
             f"{b} still a member: {_queue(urld, 'orders')}")
    before = len(pub.confirmed)
    wait_for(lambda: len(pub.confirmed) >= before + 100, 30, "publishing stalled after shrink")
    pub.stop()
    assert pub.error is None, pub.error
    received = drain(md, "orders", quiet=3.0, timeout=120)
    lost = set(pub.confirmed) - set(received)
    assert not lost, f"{len(lost)} of {len(pub.confirmed)} confirmed messages lost"


def test_the_last_member_cannot_be_deleted(cluster, capsys):
    n2, url2 = start_with_api(cluster, 2, None)
    n3, _url3 = start_with_api(cluster, 3, n2)
    wait_for(lambda: sorted(n2.members() or []) == sorted([n2.address, n3.address]), 15,
             "no view of two")
    declare(n2, "solo", **{"x-quorum-initial-group-size": 1})
    wait_for(lambda: len(_queue(url2, "solo").get("members") or []) == 1, 10, "no group")
    (only,) = _queue(url2, "solo")["members"]
    assert ctl.main(["--url", url2, "delete_member", "solo", only]) == 1
    assert "last_node" in capsys.readouterr().err
    other = n3.name if only == n2.name else n2.name
    assert ctl.main(["--url", url2, "delete_member", "solo", other]) == 0   # not a member: no-op
    # grow even: a group of one (odd) is left alone; all: it grows
    assert ctl.main(["--url", url2, "grow", other, "even"]) == 0
    assert _queue(url2, "solo")["members"] == [only]
    assert ctl.main(["--url", url2, "grow", other, "all"]) == 0
    assert sorted(_queue(url2, "solo")["members"]) == sorted([only, other])
    conn = n3.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "solo", b"x")
    conn.close()
    assert drain(n2, "solo", quiet=1.0) == ["x"]
