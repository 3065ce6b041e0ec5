"""Which replicas of a quorum queue lead, are online and are in sync, as the management API and
``amqp-broker ctl`` show them (issue 12), with 3 real brokers: kill -9 of a follower's broker ->
``online`` and ``members_in_sync`` shrink on the others; restarted -> back online and in sync.
The leader's ``/metrics/per-object`` (issue 13) shows the same: the leader, and the dead
follower's lag in log entries growing with what was published without it, back to 0 once it
caught up.
``ctl list_queues name type leader members online members_in_sync`` and ``ctl cluster_status``
list them. Sources: rabbitmqctl(8) list_queues columns; RabbitMQ management queue objects
(``leader``, ``members``, ``online``; 3.x mirrored queues ``synchronised_slave_nodes``)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amqp_broker.management import ctl
from cluster.tests.processes import Cluster, Member, free_port, wait_for
from cluster.tests.quorum_scenarios import Publisher, declare, wait_leader

pytestmark = pytest.mark.timeout(180)


PROMETHEUS: dict[str, int] = {}   # node name -> its --prometheus-port


def _start(cluster: Cluster, octet: int, seed: Member | None, port: int) -> Member:
    prom = PROMETHEUS.setdefault(f"n{octet}", free_port(f"127.0.0.{octet}"))
    return cluster.start(octet, seed, "--management-port", str(port),
                         "--prometheus-port", str(prom))


def _raft(member: Member, queue: str) -> dict:
    """The Raft series of ``queue`` on ``member``'s /metrics/per-object: name -> {extra label
    value (leader or member name, "" for none): value}."""
    url = f"http://{member.host}:{PROMETHEUS[member.name]}/metrics/per-object"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name.startswith("rabbitmq_raft_") and smp.labels.get("queue") == queue:
                extra = smp.labels.get("leader") or smp.labels.get("member") or ""
                out.setdefault(smp.name, {})[extra] = smp.value
    return out


def _queue(url: str, name: str) -> dict:
    try:
        queues = ctl.Api(url, "guest", "guest", timeout=5).request("GET", "/queues/%2F/" + name)
    except ctl.ApiError:
        return {}
    return queues or {}


def test_online_and_in_sync_replicas_follow_a_kill_and_a_restart(cluster: Cluster, capsys):
    ports = {o: free_port(f"127.0.0.{o}") for o in (2, 3, 4)}
    urls = {f"n{o}": f"http://127.0.0.{o}:{p}" for o, p in ports.items()}
    n2 = _start(cluster, 2, None, ports[2])
    n3 = _start(cluster, 3, n2, ports[3])
    n4 = _start(cluster, 4, n2, ports[4])
    view = [n2.address, n3.address, n4.address]
    wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 15, "no agreed view")
    declare(n2, "orders")
    leader = wait_leader(cluster, "orders")
    everyone = ["n2", "n3", "n4"]
    wait_for(lambda: all(_queue(u, "orders").get("members_in_sync") == everyone
                         for u in urls.values()), 20, "not all in sync")
    shown = _queue(urls["n3"], "orders")
    assert shown["leader"] == leader.name and shown["members"] == everyone
    assert shown["online"] == everyone
    assert sorted(shown["synchronised_slave_nodes"]) == sorted(set(everyone) - {leader.name})

    assert ctl.main(["--url", urls[leader.name], "list_queues", "name", "type", "leader",
                     "members", "online", "members_in_sync"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["name", "type", "leader", "members", "online",
                                    "members_in_sync"]
    assert lines[1].split("\t") == ["orders", "quorum", leader.name, "[n2, n3, n4]",
                                    "[n2, n3, n4]", "[n2, n3, n4]"]

    follower = next(m for m in (n2, n3, n4) if m is not leader)
    other = next(m for m in (n2, n3, n4) if m not in (leader, follower))
    cluster.kill(follower)
    pub = Publisher(other, "orders", 50)   # the commit index moves on without it
    pub.join(60)
    assert pub.error is None and len(pub.confirmed) == 50, pub.error
    rest = [n for n in everyone if n != follower.name]
    for m in (leader, other):
        wait_for(lambda m=m: _queue(urls[m.name], "orders").get("online") == rest and
                 _queue(urls[m.name], "orders").get("members_in_sync") == rest, 20,
                 f"{m.name}: {_queue(urls[m.name], 'orders')}")
    assert _queue(urls[other.name], "orders")["members"] == everyone   # still a member
    raft = _raft(leader, "orders")
    assert raft["rabbitmq_raft_leader_info"] == {leader.name: 1}
    assert raft["rabbitmq_raft_follower_lag_entries"][follower.name] >= 50   # it missed them
    assert raft["rabbitmq_raft_log_commit_index"][""] >= 50
    assert raft["rabbitmq_raft_term_total"][""] >= 1

    octet = int(follower.host.rsplit(".", 1)[1])
    _start(cluster, octet, leader, ports[octet])
    for url in urls.values():
        wait_for(lambda url=url: _queue(url, "orders").get("online") == everyone and
                 _queue(url, "orders").get("members_in_sync") == everyone, 30,
                 f"{url}: {_queue(url, 'orders')}")
    assert _queue(urls[follower.name], "orders")["messages"] == 50   # caught up
    wait_for(lambda: _raft(leader, "orders")["rabbitmq_raft_follower_lag_entries"] ==
             {follower.name: 0, other.name: 0}, 20, f"lag: {_raft(leader, 'orders')}")

    capsys.readouterr()
    assert ctl.main(["--url", urls[other.name], "cluster_status", "--formatter", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["replicated_queues"] == [{
        "vhost": "/", "name": "orders", "type": "quorum", "leader": leader.name,
        "members": everyone, "online": everyone, "members_in_sync": everyone}]
