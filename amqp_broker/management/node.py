"""This node's figures for ``/api/nodes``, ``/api/overview`` and Prometheus: process memory and
file descriptors (from /proc), the resource alarms and their limits, the cluster as this node sees
it (``Broker.cluster_properties``: view number, members leader first). Reads the OS only through
/proc and ``os``/``resource``/``shutil`` calls that do not block.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from typing import Any

from routing.exchange_types import EXCHANGE_TYPES

from .. import __version__
from ..core.stats import message_totals
from ..server.listener import rss_bytes
from .context import Management
from .shapes import rate, visible_connections

__all__ = ["fds", "fd_limit", "disk_free", "cluster_view", "node_json", "overview_json",
           "peer_nodes", "RABBITMQ_API_VERSION"]

#: The RabbitMQ release whose management API shapes we follow (tools read ``rabbitmq_version``
#: to decide which fields exist); ``product_version`` is ours.
RABBITMQ_API_VERSION = "3.10.8"


def fds() -> int:
    """File descriptors open in this process (0 when /proc is not there)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def fd_limit() -> int:
    """The soft RLIMIT_NOFILE."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def disk_free(path: str | None) -> int:
    """Free bytes on ``path``'s file system (0 when unknown)."""
    try:
        return shutil.disk_usage(path or ".").free
    except OSError:
        return 0


def cluster_view(mgmt: Management) -> dict[str, Any]:
    """``{"cluster_name", "view", "members": [host:port...], "member_names": [...], "leader",
    "clustered", "metadata_store"}``: this node alone when it is not clustered.
    ``metadata_store``: this member's replica of the cluster metadata log as it knows it
    (``{"leader", "term", "members"}``, RabbitMQ 4's ``rabbitmq-diagnostics
    metadata_store_status`` in short; the log's leader follows the view's leader), or null
    when there is none (not clustered, or not open yet)."""
    broker = mgmt.broker
    props = broker.cluster_properties
    names = list(props.get("cluster_member_names") or [broker.settings.node_name])
    members = list(props.get("cluster_members") or [])
    if not members:  # not clustered: this node's AMQP address
        host, port = mgmt.amqp_address
        members = [f"{host}:{port}"]
    return {"cluster_name": props.get("cluster_name") or broker.settings.cluster_name,
            "view": int(props.get("cluster_view") or 0), "members": members,
            "member_names": names, "leader": names[0] if names else broker.settings.node_name,
            "clustered": broker.cluster_hooks is not None, "metadata_store": _store(broker)}


def _store(broker: Any) -> dict[str, Any] | None:
    """The metadata log replica's leader, term and members (``cluster_view``), or None."""
    metadata = getattr(broker, "metadata", None)
    status = metadata.status() if metadata is not None else {}
    if not status:
        return None
    return {"leader": status["leader"], "term": status["term"], "members": status["members"]}


def node_json(mgmt: Management) -> dict[str, Any]:
    """This node as in ``GET /api/nodes``."""
    broker = mgmt.broker
    s = broker.settings
    cluster = cluster_view(mgmt)
    return {
        "name": s.node_name, "type": "disc", "running": True, "os_pid": str(os.getpid()),
        "mem_used": rss_bytes(), "mem_limit": s.memory_high_watermark_bytes,
        "mem_alarm": "memory" in broker.alarms, "message_memory": broker.message_memory(),
        "disk_free": disk_free(mgmt.data_dir), "disk_free_limit": s.disk_free_limit_bytes,
        "disk_free_alarm": "disk" in broker.alarms, "fd_used": fds(), "fd_total": fd_limit(),
        "sockets_used": len(broker.connections), "sockets_total": fd_limit(),
        "proc_used": 1, "proc_total": 1, "uptime": int((time.time() - mgmt.started_at) * 1000),
        "run_queue": 0, "processors": os.cpu_count() or 1, "partitions": [],
        "rates_mode": "basic", "net_ticktime": 0, "enabled_plugins": ["rabbitmq_management",
                                                                      "rabbitmq_prometheus"],
        "applications": [{"name": "amqp_broker", "description": "amqp-broker",
                          "version": __version__}],
        "cluster_links": [], "being_drained": broker.draining,
        "cluster_view": cluster["view"], "cluster_members": cluster["member_names"],
        "cluster_leader": cluster["leader"],
    }


def peer_nodes(mgmt: Management,
               states: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The other members of our view, as far as this node knows them: name, ``running`` (it
    answered), ``being_drained`` (in maintenance mode: RabbitMQ's field), from ``states`` (node
    name -> its server properties, None when it did not answer: ``peers.member_states``)."""
    cluster = cluster_view(mgmt)
    me = mgmt.broker.settings.node_name
    out = []
    for n in cluster["member_names"]:
        if n == me:
            continue
        props = states.get(n)
        out.append({"name": n, "type": "disc", "running": props is not None,
                    "being_drained": bool(props and props.get("being_drained")),
                    "cluster_view": cluster["view"], "cluster_leader": cluster["leader"]})
    return out


def overview_json(mgmt: Management, peers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``GET /api/overview``: versions, node, cluster name, message_stats with rates,
    queue_totals, object_totals, listeners, contexts. ``peers``: the other members' listeners
    (``peers.peer_listeners``), listed after this node's in ``listeners``, their management
    listeners in ``contexts`` (RabbitMQ lists every node's there)."""
    broker = mgmt.broker
    assert mgmt.sampler is not None
    rates = mgmt.sampler.rates()
    totals = message_totals(broker)
    ready = unacked = queues = exchanges = consumers = 0
    for vhost in broker.vhosts.values():
        queues += len(vhost.queues)
        exchanges += sum(1 for _ in vhost.routing.exchanges())
        for q in vhost.queues.values():
            ready += q.message_count
            unacked += q.unacked_count
            consumers += q.consumer_count
    conns = visible_connections(broker)
    s = broker.settings
    listeners = [{"node": s.node_name, "protocol": x.protocol, "ip_address": x.host,
                  "port": x.port, "socket_opts": {}} for x in mgmt.listeners] + list(peers or [])
    return {
        "management_version": RABBITMQ_API_VERSION, "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "amqp-broker", "product_version": __version__, "rates_mode": "basic",
        "erlang_version": "n/a (Python)", "erlang_full_version": "n/a (Python)",
        "disable_stats": False, "enable_queue_totals": True,
        "cluster_name": cluster_view(mgmt)["cluster_name"], "node": s.node_name,
        "exchange_types": [{"name": t, "description": "", "enabled": True}
                           for t in sorted(EXCHANGE_TYPES)],
        "message_stats": {
            "publish": totals.publish, "publish_details": rate(rates["publish"]),
            "deliver_get": totals.deliver_get, "deliver_get_details": rate(rates["deliver_get"]),
            "ack": totals.ack, "ack_details": rate(rates["ack"]),
            "confirm": totals.confirm, "confirm_details": rate(rates["confirm"]),
        },
        "queue_totals": {
            "messages": ready + unacked, "messages_details": rate(rates["messages"]),
            "messages_ready": ready, "messages_ready_details": rate(rates["messages_ready"]),
            "messages_unacknowledged": unacked,
            "messages_unacknowledged_details": rate(rates["messages_unacknowledged"]),
        },
        "object_totals": {"connections": len(conns), "channels": sum(len(c.channels) for c in conns),
                          "exchanges": exchanges, "queues": queues, "consumers": consumers},
        "statistics_db_event_queue": 0,
        "listeners": listeners,
        "contexts": [{"node": x["node"], "description": "RabbitMQ Management", "path": "/",
                      "port": str(x["port"])} for x in listeners
                     if x["protocol"] in ("http", "https")],
    }
