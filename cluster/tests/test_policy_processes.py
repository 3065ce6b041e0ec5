"""Policies on a real 3-broker cluster (issue 12, "Turn on classic mirroring by policy"): a policy
set on n2 with ``amqp-broker ctl set_policy`` reaches n3, n4 and a later joiner; a plain durable
queue declared on n3 that matches ``ha-mode: all`` becomes a mirrored queue served by the quorum
engine (replicas on every member), a client on another member redeclares it plainly without a
406, and ``kill -9`` of one broker loses none of its confirmed messages. Source: RabbitMQ
"Policies", "Classic Queue Mirroring"."""

from __future__ import annotations

import pytest

from amqp_broker.management import ctl
from cluster.tests.processes import api_get, start_managed, wait_for
from cluster.tests.quorum_scenarios import Publisher, drain, wait_leader

pytestmark = pytest.mark.timeout(180)
_start = start_managed
_get = api_get


def _policies(url: str) -> list:
    try:
        return [p["name"] for p in _get(url, "/policies")]  # type: ignore[union-attr]
    except OSError:
        return []


def test_ha_policy_set_on_one_member_mirrors_a_queue_declared_on_another(cluster, capsys):
    n2, url2 = _start(cluster, 2, None)
    n3, url3 = _start(cluster, 3, n2)
    n4, url4 = _start(cluster, 4, n2)
    view = [n2.address, n3.address, n4.address]
    wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 15, "no agreed view")

    assert ctl.main(["--url", url2, "set_policy", "ha-all", r"^ha\.",
                     '{"ha-mode":"all","message-ttl":60000}', "--priority", "1"]) == 0
    assert ctl.main(["--url", url2, "set_policy", "bad", ".*", '{"ha-mode":"some"}']) == 1
    assert "not a valid ha-mode value" in capsys.readouterr().err
    wait_for(lambda: _policies(url3) == ["ha-all"] and _policies(url4) == ["ha-all"], 10,
             "the policy did not reach n3 and n4")

    conn = n3.connect()
    conn.channel().queue_declare("ha.orders", durable=True)   # a plain classic declaration
    conn.close()
    conn = n4.connect()   # the same plain declaration on another member: equivalent, no 406
    conn.channel().queue_declare("ha.orders", durable=True)
    conn.close()
    q = _get(url2, "/queues/%2F/ha.orders")
    assert isinstance(q, dict)
    assert q["policy"] == "ha-all" and q["type"] == "quorum", q
    assert q["effective_policy_definition"] == {"ha-mode": "all", "message-ttl": 60000}
    assert sorted(q["members"]) == ["n2", "n3", "n4"] and q["arguments"] == {}

    # ha-mode nodes (the named members in the view) and exactly (N replicas)
    assert ctl.main(["--url", url2, "set_policy", "ha-nodes", r"^nodes\.",
                     '{"ha-mode":"nodes","ha-params":["n2","n4","n9"]}']) == 0
    assert ctl.main(["--url", url2, "set_policy", "ha-two", r"^two\.",
                     '{"ha-mode":"exactly","ha-params":2}']) == 0
    wait_for(lambda: len(_policies(url3)) == 3, 10, "the policies did not reach n3")
    conn = n3.connect()
    conn.channel().queue_declare("nodes.q", durable=True)
    conn.channel().queue_declare("two.q", durable=True)
    conn.close()
    nodes_q = _get(url4, "/queues/%2F/nodes.q")
    assert isinstance(nodes_q, dict) and nodes_q["members"] == ["n2", "n4"], nodes_q
    two_q = _get(url4, "/queues/%2F/two.q")
    assert isinstance(two_q, dict) and len(two_q["members"]) == 2 and two_q["type"] == "quorum"
    wait_leader(cluster, "nodes.q")
    for name in ("ha-nodes", "ha-two"):
        assert ctl.main(["--url", url3, "clear_policy", name]) == 0

    leader = wait_leader(cluster, "ha.orders")
    publish_on = n3 if leader is not n3 else n4
    pub = Publisher(publish_on, "ha.orders", 300)
    pub.join(90)
    assert pub.error is None, pub.error
    assert len(pub.confirmed) == 300
    cluster.kill(leader)
    survivor = n2 if leader is not n2 else n4
    got = drain(survivor, "ha.orders", quiet=3.0, timeout=60)
    assert set(pub.confirmed) <= set(got), f"lost {len(set(pub.confirmed) - set(got))}"

    # a joiner gets the policies in the replay
    n5, url5 = _start(cluster, 5, survivor)
    wait_for(lambda: _policies(url5) == ["ha-all"], 15, "the joiner has no policy")
    assert ctl.main(["--url", url5, "clear_policy", "ha-all"]) == 0
    wait_for(lambda: _policies(url2 if leader is not n2 else url3) == [], 10,
             "the clear did not reach the other members")
