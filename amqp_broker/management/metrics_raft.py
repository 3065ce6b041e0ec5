"""The ``rabbitmq_raft_*`` metric families of ``/metrics`` and ``/metrics/per-object``, as
rabbitmq_prometheus 3.10 emits them from Ra's ``ra_metrics`` table: one row per Raft replica on
this node (here: each quorum queue this broker holds a replica of).

- ``/metrics`` (aggregated, ``per_object=False``): one unlabelled sample per name, the sum over
  the replicas here of rabbitmq_raft_term_total (counter), rabbitmq_raft_log_snapshot_index,
  rabbitmq_raft_log_last_applied_index, rabbitmq_raft_log_commit_index,
  rabbitmq_raft_log_last_written_index (gauges), and rabbitmq_raft_entry_commit_latency_seconds,
  the average over the replicas here that lead (gauge, seconds: only a leader measures it); all
  zero when there is no replica (RabbitMQ emits them then too). The Grafana dashboard "RabbitMQ-Quorum-Queues-Raft" (id 11340) reads these.
- ``/metrics/per-object``: the same names per replica with labels ``vhost`` and ``queue``, plus
  ours: rabbitmq_raft_leader_info{vhost, queue, leader} (the replica leading the queue, as this
  node knows it) and, on the leader, rabbitmq_raft_follower_lag_entries{vhost, queue, member}
  (log entries the member's replica lacks: last written index minus its Raft match index).

Commit latency: the group's ``commit_latency_ms`` (``cluster.quorum.group``: on the leader, the
time from proposing an entry to applying it, sampled one entry at a time, as Ra's
``commit_latency``); 0 on a replica that has not measured one. Source: rabbitmq-server
``deps/rabbitmq_prometheus/src/collectors/prometheus_rabbitmq_core_metrics_collector.erl``
(v3.10.8: ``ra_metrics``, ``get_data`` summing each column and averaging the latency) and
rabbitmq_prometheus "metrics.md".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..core.broker import Broker

__all__ = ["raft_families", "replicas"]

#: (name, documentation) of the per-replica gauges, in RabbitMQ's order.
_GAUGES = (("rabbitmq_raft_log_snapshot_index", "Raft log snapshot index"),
           ("rabbitmq_raft_log_last_applied_index", "Raft log last applied index"),
           ("rabbitmq_raft_log_commit_index", "Raft log commit index"),
           ("rabbitmq_raft_log_last_written_index", "Raft log last written index"),
           ("rabbitmq_raft_entry_commit_latency_seconds",
            "Time taken for a log entry to be committed"))


def replicas(broker: Broker) -> Iterator[tuple[str, Any, Any]]:
    """(vhost, queue, Raft node) of every replicated queue with a replica on this broker."""
    for vname, vhost in list(broker.vhosts.items()):
        for q in list(vhost.queues.values()):
            group = getattr(q, "group", None)
            node = getattr(group, "node", None)
            if node is None or not getattr(q.capabilities, "replicated", False):
                continue
            yield vname, q, node


def _values(q: Any, node: Any) -> tuple[float, ...]:
    """The gauges of ``_GAUGES`` for one replica (latency in seconds)."""
    latency_ms = getattr(q.group, "commit_latency_ms", 0) or 0
    return (node.snapshot.index, node.applied_index, node.commit_index, node.log.last_index,
            latency_ms / 1000)


def raft_families(broker: Broker, per_object: bool) -> Iterator[Metric]:
    """The Raft families (module docstring), aggregated or per object."""
    labels = ["vhost", "queue"] if per_object else []
    term = CounterMetricFamily("rabbitmq_raft_term", "Current Raft term number", labels=labels)
    gauges = [GaugeMetricFamily(name, doc, labels=labels) for name, doc in _GAUGES]
    rows = list(replicas(broker))
    if not per_object:
        sums = [0.0] * len(_GAUGES)
        term_sum = leaders = 0
        for _, q, node in rows:
            term_sum += node.term
            values = _values(q, node)
            for i, value in enumerate(values[:-1]):
                sums[i] += value
            if node.is_leader:
                leaders += 1
                sums[-1] += values[-1]
        if leaders:
            sums[-1] /= leaders  # the latency is an average, as RabbitMQ's
        term.add_metric([], term_sum)
        for fam, value in zip(gauges, sums, strict=True):
            fam.add_metric([], value)
        yield term
        yield from gauges
        return
    leader = GaugeMetricFamily("rabbitmq_raft_leader_info", "The replica leading a replicated "
                               "queue, as this node knows it", labels=[*labels, "leader"])
    lag = GaugeMetricFamily("rabbitmq_raft_follower_lag_entries", "Log entries a member's "
                            "replica lacks (on the leader)", labels=[*labels, "member"])
    for vname, q, node in rows:
        key = [vname, q.name]
        term.add_metric(key, node.term)
        for fam, value in zip(gauges, _values(q, node), strict=True):
            fam.add_metric(key, value)
        if node.leader is not None:
            leader.add_metric([*key, node.leader], 1)
        if node.is_leader:
            last = node.log.last_index
            for member, pr in sorted(node.progress.items()):
                lag.add_metric([*key, member], max(0, last - pr.match_index))
    yield term
    yield from gauges
    yield from (leader, lag)
