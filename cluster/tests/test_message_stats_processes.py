"""A queue's and an exchange's ``message_stats`` in a cluster of three real brokers are the sums
over the members, on every member's management API, as RabbitMQ's management API shows them
(each node counts its own clients; the API sums the nodes): pika publishes N to a shared classic
queue through n2 and M through n3, and consumes K with acks on n4; ``/api/queues/%2F/q`` (and
the listing, ``/api/exchanges/%2F/amq.default``, ``/api/overview``) on each member shows
publish N+M and ack K. With n3 killed, n2 and n4 still answer, without n3's figures (RabbitMQ
leaves a down node's out). Before the consumer, the queue's depth is summed too: with N on n2
and M on n3 (a shared classic queue keeps each member's part there), every member's
``/api/queues/%2F/q`` (and the listing) shows ``messages`` N+M, while a quorum queue's count
(replicated: every member holds it) is not multiplied by 3, and ``/api/overview``'s
``queue_totals`` counts both once. Source: RabbitMQ "Management HTTP API" (``message_stats``,
``messages``, ``queue_totals``).
Network: 127.0.0.0/8 only; every wait is bounded.
"""

from __future__ import annotations

import pika
import pytest

from cluster.tests.processes import api_get, wait_for
from cluster.tests.rolling import start_cluster

pytestmark = pytest.mark.timeout(120)

N, M, K, Q = 5, 3, 4, 2


def _publish(member, count: int, queue: str = "q") -> None:
    """``count`` confirmed messages to ``queue`` through ``member``."""
    conn = member.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", queue, f"{member.name}-{i}".encode(),
                         pika.BasicProperties(delivery_mode=2))
    conn.close()


def _stats(url: str, path: str) -> dict:
    got = api_get(url, path)
    return (got.get("message_stats") or {}) if isinstance(got, dict) else {}


def _listed(url: str, name: str = "q") -> dict:
    got = api_get(url, "/queues/%2F")
    items: list[dict] = got if isinstance(got, list) else []
    return next((x for x in items if x.get("name") == name), {})


def _depths(url: str) -> tuple:
    """What ``url`` shows of the queues' depths: q's and qq's ``messages`` (single object and
    listing), q's ``messages_ready`` and the overview's ``queue_totals.messages``."""
    one, qq = api_get(url, "/queues/%2F/q"), api_get(url, "/queues/%2F/qq")
    overview = api_get(url, "/overview")
    assert isinstance(one, dict) and isinstance(qq, dict) and isinstance(overview, dict)
    return (one["messages"], _listed(url)["messages"], one["messages_ready"], qq["messages"],
            _listed(url, "qq")["messages"], overview["queue_totals"]["messages"])


def test_queue_and_exchange_message_stats_are_summed_over_the_members(cluster):
    (n2, n3, n4), urls, _ = start_cluster(cluster)
    conn = n2.connect()
    conn.channel().queue_declare("q", durable=True)
    conn.channel().queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    wait_for(lambda: all(m.has_queue(x) for m in (n3, n4) for x in ("q", "qq")), 10,
             "q or qq is not on every member")
    _publish(n2, N)
    _publish(n3, M)
    _publish(n3, Q, "qq")
    # the shared classic queue's depth is the members' parts summed; the quorum queue's is not
    want = (N + M, N + M, N + M, Q, Q, N + M + Q)
    seen: dict[str, tuple] = {}

    def shows(url: str) -> bool:
        seen[url] = _depths(url)
        return seen[url] == want

    for name, url in urls.items():
        try:
            wait_for(lambda url=url: shows(url), 10)
        except AssertionError:
            raise AssertionError(f"{name}: {seen.get(url)} != {want}") from None
        own = api_get(url, "/queues/%2F/q?local=1")   # a forwarded request: its own part
        assert isinstance(own, dict) and own["messages"] < N + M, own

    conn = n4.connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    got = 0
    for method, _props, _body in ch.consume("q", inactivity_timeout=10):
        assert method is not None, f"only {got} of {K} messages reached n4's consumer"
        ch.basic_ack(method.delivery_tag)
        got += 1
        if got == K:
            break
    # its consumers are not summed: each member counts n4's once already (a relay consumer)
    for name, url in urls.items():
        wait_for(lambda url=url: api_get(url, "/queues/%2F/q").get("consumers") == 1, 10,
                 f"{name}: q's consumers are not 1")
    ch.cancel()
    conn.close()

    def summed(url: str) -> bool:
        one, listed = _stats(url, "/queues/%2F/q"), _listed(url).get("message_stats") or {}
        return all((s.get("publish"), s.get("ack")) == (N + M, K) for s in (one, listed))

    for name, url in urls.items():
        wait_for(lambda url=url: summed(url), 10,
                 f"{name}: {_stats(url, '/queues/%2F/q')} {_listed(url)}")
        assert _stats(url, "/exchanges/%2F/amq.default")["publish_in"] == N + M + Q  # and qq's
        overview = api_get(url, "/overview")
        assert isinstance(overview, dict) and overview["message_stats"]["publish"] == N + M + Q
        # a forwarded request (?local=1) is answered with the member's own figures
        assert _stats(url, "/queues/%2F/q?local=1").get("publish", 0) < N + M

    cluster.kill(n3)
    for url in (urls["n2"], urls["n4"]):
        stats = _stats(url, "/queues/%2F/q")
        assert stats["publish"] == N and stats["ack"] == K, stats
