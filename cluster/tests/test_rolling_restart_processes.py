"""A rolling restart of 3 real brokers under a confirmed load loses nothing (issue 26): pika
clients publish persistent messages with confirms to a quorum queue and consume them with
acks, each over the list of every member, while each member in turn is checked safe to stop
(``ctl await_online_quorum_plus_one``), drained (``ctl drain``: its clients closed with 320 go
to the others), stopped (SIGTERM), started again with its data and ``ctl revive``d
(``cluster.tests.rolling``). Every confirmed message reaches the consumer, and both clients
reconnected and went on. By default one member is restarted (the one the publisher talks to,
so its connection is drained); AMQP_ROLLING_ALL=1 restarts all three, as
``benchmarks/rolling_restart.py`` does with the figures (time per member, longest time
without a confirm, messages lost: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os

import pytest

from cluster.tests.rolling import roll, start_cluster

pytestmark = pytest.mark.timeout(300)


def test_rolling_restart_under_confirmed_load_loses_nothing(cluster):
    members, urls, ports = start_cluster(cluster)
    order = members if os.environ.get("AMQP_ROLLING_ALL") == "1" else members[:1]
    result = roll(cluster, members, urls, ports, order=order)
    print(f"\nrolling restart: {result}")
    assert result.lost == [], f"{len(result.lost)} confirmed messages lost: {result.lost[:5]}"
    assert result.confirmed > 0 and set(result.per_member) == {m.name for m in order}
    assert result.publisher_connects >= 2, "the publisher never had to reconnect"
    assert result.consumer_connects >= 1
