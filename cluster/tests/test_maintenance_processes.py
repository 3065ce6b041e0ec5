"""Maintenance mode and rebalancing with 3 real brokers and ``amqp-broker ctl`` (issue 26), as
RabbitMQ's ``rabbitmq-upgrade drain`` / ``revive`` and ``rabbitmq-queues rebalance quorum``:

- ``ctl drain`` on one broker: its client connection is closed with 320 CONNECTION_FORCED "Node
  was put into maintenance mode" (RabbitMQ's text), a new client is refused with 320, the quorum
  queues it led are led by the others (as every member sees it), every member's ``/api/nodes``
  shows it ``being_drained`` (and the others not), publishing and getting through another
  member go on, and a quorum queue declared meanwhile is led by another member;
- ``ctl revive``: clients are served again, every member's ``/api/nodes`` shows none
  ``being_drained``, the broker leads nothing until
- ``ctl rebalance``: the three queues' leaderships end one per broker, as the table it prints says,
  and each broker's ``/metrics`` reports the queue it leads only (the sums count each once);
- the health check ``node-is-quorum-critical`` and ``ctl await_online_quorum_plus_one`` /
  ``check_if_node_is_quorum_critical``: ok with three brokers up; once one is killed, a survivor
  is critical for every queue (503, the queues listed; ctl exits 1).
"""

from __future__ import annotations

import urllib.request

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amqp_broker.management import ctl
from cluster.tests.processes import Cluster, Member, api_get, free_port, wait_for
from cluster.tests.quorum_scenarios import declare

pytestmark = pytest.mark.timeout(240)

QUEUES = [f"mq{i}" for i in range(3)]


def _leaders(url: str, *names: str) -> dict[str, str | None]:
    """Queue name -> its leader (of ``QUEUES``, or of ``names``), as the broker at ``url``
    shows them (empty when it does not answer)."""
    queues = api_get(url, "/queues/%2F") or []
    assert isinstance(queues, list)
    return {q["name"]: q.get("leader") for q in queues if q["name"] in (names or QUEUES)}


def _counts(leaders: dict[str, str | None]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for leader in leaders.values():
        out[leader] = out.get(leader, 0) + 1
    return out


def _gauge(url: str, name: str) -> float:
    """The unlabelled sample ``name`` of the ``/metrics`` at ``url``."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return next(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                if s.name == name and not s.labels)


def _connect(member: Member) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(
        member.uri + "?connection_attempts=1&socket_timeout=5"))


def test_drain_revive_and_rebalance(cluster: Cluster, capsys):
    ports = {o: free_port(f"127.0.0.{o}") for o in (2, 3, 4)}
    proms = {o: free_port(f"127.0.0.{o}") for o in (2, 3, 4)}
    urls = {f"n{o}": f"http://127.0.0.{o}:{p}" for o, p in ports.items()}
    metrics = {f"n{o}": f"http://127.0.0.{o}:{p}/metrics" for o, p in proms.items()}

    def start(octet: int, seed: Member | None) -> Member:
        return cluster.start(octet, seed, "--management-port", str(ports[octet]),
                             "--prometheus-port", str(proms[octet]))

    n2 = start(2, None)
    n3 = start(3, n2)
    n4 = start(4, n2)
    view = [n2.address, n3.address, n4.address]
    wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 20, "no agreed view")
    for name in QUEUES:
        declare(n2, name)
    everyone = {"n2", "n3", "n4"}
    wait_for(lambda: all(set(_leaders(u).values()) <= everyone and len(_leaders(u)) == 3
                         for u in urls.values()), 30, "not every queue has a leader")
    # drain the broker that leads the most (it leads at least one of the three)
    target = max(everyone, key=lambda n: _counts(_leaders(urls["n3"])).get(n, 0))
    member = cluster.members[target]
    others = sorted(everyone - {target})
    client = _connect(member)
    capsys.readouterr()
    assert ctl.main(["--url", urls[target], "drain"]) == 0
    out = capsys.readouterr().out
    assert "maintenance mode" in out and "0 still here" in out, out
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        client.process_data_events(2)
        client.channel()
    assert closed.value.reply_code == 320
    assert closed.value.reply_text == "CONNECTION_FORCED - Node was put into maintenance mode"
    # refused at Connection.Open: pika reports a close during its handshake this way
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        _connect(member)
    assert "(320) 'CONNECTION_FORCED - this node is in maintenance mode" in str(refused.value)
    for other in others:   # every member sees the leaders elsewhere
        wait_for(lambda o=other: target not in _leaders(urls[o]).values()
                 and len(_leaders(urls[o])) == 3, 15, f"{target} still leads, per {other}")
    for url in urls.values():   # every member shows which one is drained
        nodes = api_get(url, "/nodes")
        assert isinstance(nodes, list)
        assert {n["name"]: n["being_drained"] for n in nodes} == {
            n: n == target for n in everyone}, url
    served = cluster.members[others[0]]
    conn = _connect(served)
    ch = conn.channel()
    ch.confirm_delivery()
    for name in QUEUES:
        ch.basic_publish("", name, b"during maintenance")
    assert ch.basic_get(QUEUES[0], auto_ack=True)[2] == b"during maintenance"
    conn.close()
    declare(served, "mq-new")   # a group made during maintenance: the drained member leads not
    wait_for(lambda: _leaders(urls[others[0]], "mq-new").get("mq-new") in others, 15,
             f"mq-new led by {target} while drained")
    conn = _connect(served)
    conn.channel().queue_delete("mq-new")
    conn.close()

    assert ctl.main(["--url", urls[target], "revive"]) == 0
    _connect(member).close()
    for url in urls.values():
        nodes = api_get(url, "/nodes")
        assert isinstance(nodes, list)
        assert {n["name"]: n["being_drained"] for n in nodes} == dict.fromkeys(everyone, False)
    assert target not in _leaders(urls[target]).values()   # nothing moves back by itself

    capsys.readouterr()
    assert ctl.main(["--url", urls[others[0]], "rebalance", "quorum"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split("\t") == ["Node name", "Number of quorum queues"]
    assert sorted(lines[2:]) == [f"{n}\t1" for n in sorted(everyone)]
    for url in urls.values():
        wait_for(lambda u=url: _counts(_leaders(u)) == {n: 1 for n in everyone}, 15,
                 f"leaders not spread as {url} sees them: {_leaders(url)}")
    # Prometheus: each quorum queue is reported by its leader's broker only, as RabbitMQ's, so
    # the dashboards' sums over the brokers count each queue and message once (3 queues, one
    # message each was published during maintenance and one of them got)
    wait_for(lambda: [sum(_gauge(u, name) for u in metrics.values())
                      for name in ("rabbitmq_queues", "rabbitmq_queue_messages_ready")]
             == [3, 2], 15, "the leaders' metrics do not add up")
    assert all(_gauge(u, "rabbitmq_queues") == 1 for u in metrics.values())

    # all three up: stopping one leaves each queue its quorum
    survivor, gone = others[0], cluster.members[others[1]]
    assert api_get(urls[survivor], "/health/checks/node-is-quorum-critical") == {"status": "ok"}
    assert ctl.main(["--url", urls[survivor], "await_online_quorum_plus_one"]) == 0
    cluster.kill(gone)   # now stopping another would leave every queue without its quorum
    wait_for(lambda: api_get(urls[survivor], "/health/checks/node-is-quorum-critical") is None,
             15, "never quorum-critical")
    capsys.readouterr()
    assert ctl.main(["--url", urls[survivor], "check_if_node_is_quorum_critical"]) == 1
    captured = capsys.readouterr()
    assert sorted(line.split("\t")[1] for line in captured.out.splitlines()[1:]) == QUEUES
    assert "would lose their quorum" in captured.err
    assert ctl.main(["--url", urls[survivor], "await_online_quorum_plus_one", "--wait", "1"]) == 1
    assert "time is up" in capsys.readouterr().err
