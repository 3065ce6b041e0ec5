"""``/metrics`` in rabbitmq_prometheus's names, labels and types, so that every panel of RabbitMQ's
Grafana dashboards "RabbitMQ-Overview" (id 10991) and "RabbitMQ-Quorum-Queues-Raft" (id 11340)
that fills in on RabbitMQ 3.10 fills in on ours (interop_tests/test_dashboards.py evaluates their
queries with Prometheus against both); exposed with ``prometheus_client``; a custom collector
reads the broker's state at scrape time (nothing is kept between scrapes).

``/metrics`` is aggregated as RabbitMQ's default endpoint (``rabbitmq_queue_messages_ready`` is the
sum over all queues, ``rabbitmq_raft_log_commit_index`` over all Raft replicas here);
``/metrics/per-object`` has the per-queue series with ``vhost`` and ``queue`` labels as RabbitMQ's.
A replicated (quorum) queue's series, and its count in ``rabbitmq_queues``, come from the broker
of its leader only, as RabbitMQ's (the leader's Ra server emits them), so that a dashboard's sum
over the cluster counts each message once; a classic queue's come from every member holding a
copy of it (each copy's messages are that member's).
Names: rabbitmq_identity_info{rabbitmq_node, rabbitmq_cluster, rabbitmq_cluster_permanent_id,
rabbitmq_endpoint} (the endpoint label as RabbitMQ 3.13+: "aggregated" or "per-object"; the
dashboards join every panel on it), rabbitmq_build_info{rabbitmq_version (the RabbitMQ API we
follow), prometheus_plugin_version, prometheus_client_version, erlang_version ("n/a"),
product_name, product_version (ours: RabbitMQ sets these two for a product built on it)},
rabbitmq_erlang_uptime_seconds (the broker process's uptime), rabbitmq_queues,
rabbitmq_queue_messages, rabbitmq_queue_messages_ready, rabbitmq_queue_messages_unacked,
rabbitmq_queue_messages_ready_bytes, rabbitmq_queue_consumers, rabbitmq_connections,
rabbitmq_channels, rabbitmq_consumers, the churn and global message counters and client gauges
of ``metrics_global``, rabbitmq_alarms_{memory_used_watermark,free_disk_space_watermark,
file_descriptor_limit}, rabbitmq_process_{resident_memory_bytes,open_fds,max_fds,
open_tcp_sockets,max_tcp_sockets} (a socket takes one descriptor: the socket limit is the
descriptor limit), rabbitmq_resident_memory_limit_bytes, rabbitmq_disk_space_available_bytes,
rabbitmq_disk_space_available_limit_bytes, the rabbitmq_raft_* families of ``metrics_raft``;
ours: rabbitmq_cluster_view (the view number), rabbitmq_cluster_members (how many),
rabbitmq_cluster_member_info{member, leader}. Source: rabbitmq-prometheus "metrics.md" and its
collectors (rabbitmq-server v3.10.8, ``deps/rabbitmq_prometheus/src/collectors/``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import prometheus_client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .. import __version__
from ..server.listener import rss_bytes
from .context import Management
from .direct import is_direct
from .metrics_global import churn_families, global_families
from .metrics_raft import raft_families
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
                                                 "rabbitmq_cluster_permanent_id",
                                                 "rabbitmq_endpoint"])
        info.add_metric([s.node_name, cluster["cluster_name"], cluster["cluster_name"],
                         "per-object" if self.per_object else "aggregated"], 1)
        yield info
        build = GaugeMetricFamily("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
                                  labels=["rabbitmq_version", "prometheus_plugin_version",
                                          "prometheus_client_version", "erlang_version",
                                          "product_name", "product_version"])
        build.add_metric([RABBITMQ_API_VERSION, __version__, _client_version(), "n/a",
                          "amqp-broker", __version__], 1)
        yield build
        yield _gauge("rabbitmq_erlang_uptime_seconds", "Node uptime",
                     max(0.0, time.time() - mgmt.started_at))
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
                if (getattr(q.capabilities, "replicated", False)
                        and not getattr(getattr(q, "group", None), "is_leader", False)):
                    continue   # reported by the broker of its leader only, as RabbitMQ's
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
        yield from raft_families(broker, self.per_object)
        yield _gauge("rabbitmq_queues", "Queues available", queues)
        conns = visible_connections(broker)
        yield _gauge("rabbitmq_connections", "Connections currently open", len(conns))
        yield _gauge("rabbitmq_channels", "Channels currently open",
                     sum(len(c.channels) for c in conns))
        yield _gauge("rabbitmq_consumers", "Consumers currently connected",
                     sum(len(ch.consumers) for c in conns for ch in c.channels.values()))
        yield from churn_families(broker)
        yield from global_families(broker, self.per_object)
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
        yield _gauge("rabbitmq_process_open_tcp_sockets", "Open TCP sockets",
                     sum(1 for c in broker.connections.values() if not is_direct(c)))
        yield _gauge("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", fd_limit())
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


def _client_version() -> str:
    """The version of the ``prometheus_client`` package exposing these metrics."""
    return getattr(prometheus_client, "__version__", "") or _dist_version("prometheus-client")


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


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
