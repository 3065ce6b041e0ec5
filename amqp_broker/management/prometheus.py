"""``/metrics`` in rabbitmq_prometheus's names (so the Grafana "RabbitMQ-Overview" dashboard,
id 10991, fills in), exposed with ``prometheus_client``; a custom collector reads the broker's
state at scrape time (nothing is kept between scrapes).

``/metrics`` is aggregated as RabbitMQ's default endpoint (``rabbitmq_queue_messages_ready`` is the
sum over all queues); ``/metrics/per-object`` adds the per-queue series with ``vhost`` and
``queue`` labels as RabbitMQ's. Names: rabbitmq_identity_info{rabbitmq_node, rabbitmq_cluster,
rabbitmq_cluster_permanent_id}, rabbitmq_build_info, rabbitmq_queues, rabbitmq_queue_messages,
rabbitmq_queue_messages_ready, rabbitmq_queue_messages_unacked, rabbitmq_queue_messages_ready_bytes,
rabbitmq_queue_consumers, rabbitmq_connections, rabbitmq_channels, rabbitmq_consumers,
rabbitmq_global_messages_{received,delivered,confirmed,acknowledged}_total{protocol="amqp091"},
rabbitmq_alarms_{memory_used_watermark,free_disk_space_watermark,file_descriptor_limit},
rabbitmq_process_{resident_memory_bytes,open_fds,max_fds}, rabbitmq_resident_memory_limit_bytes,
rabbitmq_disk_space_available_bytes, rabbitmq_disk_space_available_limit_bytes; ours:
rabbitmq_cluster_view (the view number), rabbitmq_cluster_members (how many),
rabbitmq_cluster_member_info{member, leader}. Per replicated queue this broker holds a replica
of (``/metrics/per-object`` only, labels vhost and queue, as RabbitMQ's Raft metrics):
rabbitmq_raft_term_total, rabbitmq_raft_log_commit_index, rabbitmq_raft_log_last_applied_index,
rabbitmq_raft_log_last_written_index; ours: rabbitmq_raft_leader_info{vhost, queue, leader} (the
replica leading as this broker knows it) and, on the leader, rabbitmq_raft_follower_lag_entries
{vhost, queue, member} (log entries the member's replica lacks: last written index minus its Raft
match index). Source: rabbitmq-prometheus "metrics.md".
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .. import __version__
from ..core.broker import Broker
from ..core.stats import message_totals
from ..server.listener import rss_bytes
from .context import Management
from .node import RABBITMQ_API_VERSION, cluster_view, disk_free, fd_limit, fds
from .shapes import visible_connections

__all__ = ["BrokerCollector", "build_metrics_app", "render"]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerCollector(Collector):
    """Reads ``mgmt``'s broker at each scrape; ``per_object`` adds per-queue series."""

    def __init__(self, mgmt: Management, per_object: bool = False) -> None:
        self.mgmt = mgmt
        self.per_object = per_object

    def collect(self) -> Iterator[Metric]:
        """The metric families (see module docstring)."""
        mgmt = self.mgmt
        broker = mgmt.broker
        s = broker.settings
        cluster = cluster_view(mgmt)
        info = GaugeMetricFamily("rabbitmq_identity_info", "RabbitMQ node & cluster identity "
                                 "info", labels=["rabbitmq_node", "rabbitmq_cluster",
                                                 "rabbitmq_cluster_permanent_id"])
        info.add_metric([s.node_name, cluster["cluster_name"], cluster["cluster_name"]], 1)
        yield info
        build = GaugeMetricFamily("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
                                  labels=["rabbitmq_version", "product_version",
                                          "prometheus_plugin_version", "erlang_version"])
        build.add_metric([RABBITMQ_API_VERSION, __version__, __version__, "n/a"], 1)
        yield build
        names = ("messages", "messages_ready", "messages_unacked", "messages_ready_bytes",
                 "consumers")
        docs = {"messages": "Sum of ready and unacknowledged messages - total queue depth",
                "messages_ready": "Messages ready to be delivered to consumers",
                "messages_unacked": "Messages delivered to consumers but not yet acknowledged",
                "messages_ready_bytes": "Size in bytes of ready messages",
                "consumers": "Consumers on a queue"}
        labels = ["vhost", "queue"] if self.per_object else []
        fams = {n: GaugeMetricFamily(f"rabbitmq_queue_{n}", docs[n], labels=labels)
                for n in names}
        totals = dict.fromkeys(names, 0)
        queues = 0
        for vname, vhost in list(broker.vhosts.items()):
            for q in list(vhost.queues.values()):
                queues += 1
                values = {"messages": q.message_count + q.unacked_count,
                          "messages_ready": q.message_count,
                          "messages_unacked": q.unacked_count,
                          "messages_ready_bytes": q.message_bytes,
                          "consumers": q.consumer_count}
                for n in names:
                    totals[n] += values[n]
                    if self.per_object:
                        fams[n].add_metric([vname, q.name], values[n])
        if not self.per_object:
            for n in names:
                fams[n].add_metric([], totals[n])
        yield from fams.values()
        if self.per_object:
            yield from _raft_families(broker)
        yield _gauge("rabbitmq_queues", "Queues available", queues)
        conns = visible_connections(broker)
        yield _gauge("rabbitmq_connections", "Connections currently open", len(conns))
        yield _gauge("rabbitmq_channels", "Channels currently open",
                     sum(len(c.channels) for c in conns))
        yield _gauge("rabbitmq_consumers", "Consumers currently connected",
                     sum(len(ch.consumers) for c in conns for ch in c.channels.values()))
        t = message_totals(broker)
        for name, doc, value in (
                ("received", "Total number of messages received from publishers", t.publish),
                ("delivered", "Total number of messages delivered to consumers",
                 t.deliver_get),
                ("confirmed", "Total number of messages confirmed to publishers", t.confirm),
                ("acknowledged", "Total number of messages acknowledged by consumers", t.ack)):
            fam = CounterMetricFamily(f"rabbitmq_global_messages_{name}", doc,
                                      labels=["protocol"])
            fam.add_metric(["amqp091"], value)
            yield fam
        alarms = broker.alarms
        yield _gauge("rabbitmq_alarms_memory_used_watermark", "is 1 if VM memory watermark "
                     "threshold is reached", int("memory" in alarms))
        yield _gauge("rabbitmq_alarms_free_disk_space_watermark", "is 1 if free disk space "
                     "watermark threshold is reached", int("disk" in alarms))
        yield _gauge("rabbitmq_alarms_file_descriptor_limit", "is 1 if file descriptor limit "
                     "(ulimit -n) is reached", int(fds() >= fd_limit()))
        yield _gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes",
                     rss_bytes())
        yield _gauge("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes",
                     s.memory_high_watermark_bytes)
        yield _gauge("rabbitmq_process_open_fds", "Open file descriptors", fds())
        yield _gauge("rabbitmq_process_max_fds", "Open file descriptors limit", fd_limit())
        yield _gauge("rabbitmq_disk_space_available_bytes", "Disk space available in bytes",
                     disk_free(mgmt.data_dir))
        yield _gauge("rabbitmq_disk_space_available_limit_bytes", "Free disk space low "
                     "watermark in bytes", s.disk_free_limit_bytes)
        yield _gauge("rabbitmq_cluster_view", "This node's cluster view number (only grows)",
                     cluster["view"])
        yield _gauge("rabbitmq_cluster_members", "Members in this node's cluster view",
                     max(1, len(cluster["member_names"])))
        member = GaugeMetricFamily("rabbitmq_cluster_member_info", "A member of this node's "
                                   "cluster view; leader is true for the first",
                                   labels=["member", "leader"])
        for name in cluster["member_names"]:
            member.add_metric([name, str(name == cluster["leader"]).lower()], 1)
        yield member


def _raft_families(broker: Broker) -> Iterator[Metric]:
    """The Raft series of every replicated queue with a replica here (module docstring)."""
    labels = ["vhost", "queue"]
    fams = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
        ("rabbitmq_raft_log_commit_index", "Raft log commit index"),
        ("rabbitmq_raft_log_last_applied_index", "Raft log last applied index"),
        ("rabbitmq_raft_log_last_written_index", "Raft log last written index"))}
    term = CounterMetricFamily("rabbitmq_raft_term", "Current Raft term number", labels=labels)
    leader = GaugeMetricFamily("rabbitmq_raft_leader_info", "The replica leading a replicated "
                               "queue, as this node knows it", labels=[*labels, "leader"])
    lag = GaugeMetricFamily("rabbitmq_raft_follower_lag_entries", "Log entries a member's "
                            "replica lacks (on the leader)", labels=[*labels, "member"])
    for vname, vhost in list(broker.vhosts.items()):
        for q in list(vhost.queues.values()):
            node = getattr(getattr(q, "group", None), "node", None)  # a replica here
            if node is None or not getattr(q.capabilities, "replicated", False):
                continue
            key = [vname, q.name]
            last = node.log.last_index
            for name, value in (("rabbitmq_raft_log_commit_index", node.commit_index),
                                ("rabbitmq_raft_log_last_applied_index", node.applied_index),
                                ("rabbitmq_raft_log_last_written_index", last)):
                fams[name].add_metric(key, value)
            term.add_metric(key, node.term)
            if node.leader is not None:
                leader.add_metric([*key, node.leader], 1)
            if node.is_leader:
                for member, pr in sorted(node.progress.items()):
                    lag.add_metric([*key, member], max(0, last - pr.match_index))
    yield from fams.values()
    yield from (term, leader, lag)


def render(mgmt: Management, per_object: bool = False) -> bytes:
    """One scrape in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(mgmt, per_object))
    return generate_latest(registry)


def build_metrics_app(mgmt: Management) -> ASGIApp:
    """The ASGI app of the Prometheus endpoint (no authentication, as rabbitmq_prometheus)."""

    async def metrics(request: Request) -> Response:
        per_object = request.url.path.rstrip("/").endswith("per-object")
        return Response(render(mgmt, per_object), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics), Route("/metrics/per-object", metrics)])
