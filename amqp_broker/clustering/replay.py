"""The broker's side of the cluster seam: what a member replays to a joiner, and load figures.

Owns turning the broker's soft state into the methods that carry it to a joiner (the Qpid
proposal's "Cluster.Join" replay): every member sends its consumer counts on shared queues
(Cluster.Consumers), before its Synch. Definitions (vhosts, users, permissions, policies,
exchanges, queues, private queues' proxies, bindings) are not replayed: the joiner gets them from
the cluster metadata log (``clustering.metadata``), so what was deleted while it was away is not
sent back to it. Lives beside ``app`` because it knows both the core and the cluster package.
"""

from __future__ import annotations

from typing import Any

from cluster.codec import Consumers

from ..core.broker import Broker
from ..core.relay import local_consumer_count

__all__ = ["replay_methods", "load_figures"]


def replay_methods(broker: Broker, me: str) -> list[Any]:
    """Our consumer counts on shared queues (Cluster.Consumers), for a joiner."""
    return [Consumers(vhost.name, q.name, me, n) for vhost in broker.vhosts.values()
            for q in vhost.queues.values()
            if q.exclusive_owner is None and (n := local_consumer_count(q))]


def load_figures(broker: Broker) -> dict[str, int]:
    """Cluster.Ping load figures: connections, queues, ready messages, cpu (per-mille, 0 here)."""
    queues = sum(len(v.queues) for v in broker.vhosts.values())
    messages = sum(q.message_count for v in broker.vhosts.values() for q in v.queues.values())
    return {"connections": len(broker.connections), "queues": queues, "messages": messages,
            "cpu": 0}
