"""The headers a federation link adds and reads, as RabbitMQ's: ``x-received-from``, an array of
tables, the newest hop first. Exchange links add ``uri`` (the upstream's, without password),
``exchange`` (the downstream exchange's name, as RabbitMQ 3.10 writes it), ``redelivered``, ``cluster-name`` (the upstream's name)
and ``vhost`` (the upstream's); a message is forwarded only while the array is shorter than
``max-hops`` and names no hop of this broker's (``cluster-name`` and ``vhost``): cycle
detection. Queue links add ``uri``, ``queue``, ``redelivered`` and ``visit-count`` (how often the
message came through that upstream queue), and on the first hop ``x-original-exchange`` /
``x-original-routing-key``; a ``CC`` header becomes ``x-original-cc``. Pure. Source:
rabbit_federation_util:should_forward/4, rabbit_federation_exchange_link:
update_routing_headers/5, rabbit_federation_queue_link:update_headers/5 (3.10).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RECEIVED_FROM", "should_forward", "exchange_hop", "queue_hop", "upstream_identity",
           "identity"]

RECEIVED_FROM = "x-received-from"


def should_forward(headers: Mapping[str, Any] | None, max_hops: int, name: str,
                   vhost: str) -> bool:
    """True when a message with ``headers`` may enter this broker (``name``, ``vhost``) over a
    link with ``max_hops``."""
    hops = (headers or {}).get(RECEIVED_FROM)
    if not isinstance(hops, list):
        return True
    if len(hops) >= max_hops:
        return False
    return not any(isinstance(h, dict) and h.get("cluster-name") == name
                   and h.get("vhost") == vhost for h in hops)


def exchange_hop(headers: Mapping[str, Any] | None, uri: str, exchange: str, redelivered: bool,
                 upstream_name: str | None, upstream_vhost: str) -> dict[str, Any]:
    """``headers`` with this hop of an exchange link first in ``x-received-from``."""
    out = dict(headers or {})
    hop: dict[str, Any] = {"uri": uri, "exchange": exchange, "redelivered": redelivered}
    if upstream_name is not None:
        hop["cluster-name"] = upstream_name
    hop["vhost"] = upstream_vhost
    hops = out.get(RECEIVED_FROM)
    out[RECEIVED_FROM] = [hop, *(hops if isinstance(hops, list) else [])]
    return out


def queue_hop(headers: Mapping[str, Any] | None, uri: str, queue: str, redelivered: bool,
              exchange: str, routing_key: str) -> dict[str, Any]:
    """``headers`` with this hop of a queue link first in ``x-received-from`` (see the module
    docstring; ``exchange`` / ``routing_key``: the delivery's, kept on the first hop)."""
    out = {("x-original-cc" if k == "CC" else k): v for k, v in (headers or {}).items()}
    hops = out.get(RECEIVED_FROM)
    count = 0
    if isinstance(hops, list):
        same = [h for h in hops if isinstance(h, dict) and h.get("uri") == uri
                and h.get("queue") == queue]
        hops = [h for h in hops if not any(h is s for s in same)]
        if same and isinstance(same[0].get("visit-count"), int):
            count = same[0]["visit-count"]
    else:
        out["x-original-exchange"] = exchange
        out["x-original-routing-key"] = routing_key
        hops = []
    out[RECEIVED_FROM] = [{"uri": uri, "queue": queue, "redelivered": redelivered,
                           "visit-count": count + 1}, *hops]
    return out


def upstream_identity(server_properties: Mapping[str, Any]) -> str | None:
    """The name an upstream gives itself in Connection.Start: ``cluster_name`` (RabbitMQ's
    ``cluster-name`` hop key); for a broker of ours that is not clustered, its ``node_name``
    (its cluster name is the same default everywhere), as ``identity`` names ours."""
    props = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in server_properties.items()}
    if props.get("product") == "amqp-broker" and "cluster_members" not in props:
        node = props.get("node_name")
        return str(node) if node else None
    name = props.get("cluster_name")
    return str(name) if name else None



def identity(cluster_properties: Mapping[str, Any], node_name: str) -> str:
    """This broker's name in hops and upstream queue names (RabbitMQ's
    ``rabbit_nodes:cluster_name()``): its cluster's name when clustered, else its node name."""
    if "cluster_members" in cluster_properties and cluster_properties.get("cluster_name"):
        return str(cluster_properties["cluster_name"])
    return node_name
