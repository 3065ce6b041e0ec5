"""The broker's side of the cluster seam: what a member replays to a joiner, and load figures.

Owns turning the broker's state into the AMQP methods that carry it (the Qpid proposal replays
state as ordinary Exchange.Declare / Queue.Declare / Queue.Bind methods, "Cluster.Join"): the leader
replays policies (Cluster.Policy), exchanges, shared (non-exclusive) queues and their bindings;
every member would replay its private queues (proxies are not built yet, so nothing else is
replayed). Replayed methods carry
``nowait`` so the joiner need not answer them; vhost "/" only for now. Lives beside ``app`` because
it knows both the core and the cluster package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pamqp import commands as cmd

from cluster.codec import Consumers, Policy

from ..core.broker import Broker
from ..core.proxies import HOME_ARGUMENT
from ..core.relay import local_consumer_count

if TYPE_CHECKING:
    from pamqp.common import FieldTable

__all__ = ["replay_methods", "load_figures"]


def replay_methods(broker: Broker, shared: bool, me: str) -> list[Any]:
    """The methods replaying our part of the state to a joiner (see module docstring); every
    member ends with its consumer counts on shared queues (Cluster.Consumers)."""
    vhost = broker.vhosts.get("/")
    if vhost is None:
        return []
    counts: list[Any] = [Consumers("/", q.name, me, n) for q in vhost.queues.values()
                         if q.exclusive_owner is None and (n := local_consumer_count(q))]
    for q in vhost.queues.values():  # our private queues become proxies on the joiner
        if q.exclusive_owner is None:
            continue
        counts.append(cmd.Queue.Declare(queue=q.name, nowait=True,
                                        arguments={HOME_ARGUMENT: me}))
        for b in vhost.routing.bindings_of_queue(q.name):
            counts.append(cmd.Queue.Bind(queue=q.name, exchange=b.source,
                                         routing_key=b.binding_key, nowait=True,
                                         arguments=dict(b.arguments)))
    if not shared:
        return counts
    # policies first (every vhost: they are cluster-wide), so the joiner applies them to the
    # classic queues declared later; replicated queues travel with what was applied
    out: list[Any] = [Policy(p.vhost, p.name, p.encode()) for p in broker.policies.list()]
    routing = vhost.routing
    for ex in routing.exchanges():
        if not ex.name or routing.is_reserved(ex.name):
            continue
        out.append(cmd.Exchange.Declare(exchange=ex.name, exchange_type=ex.type,
                                        durable=ex.durable, auto_delete=ex.auto_delete,
                                        internal=ex.internal, nowait=True,
                                        arguments=dict(ex.arguments)))
    shared_queues = set()
    for q in vhost.queues.values():
        if q.exclusive_owner is not None:
            continue
        shared_queues.add(q.name)
        out.append(cmd.Queue.Declare(queue=q.name, durable=q.durable, auto_delete=q.auto_delete,
                                     nowait=True,
                                     # a queue's arguments came in as an AMQP field table
                                     arguments=cast("FieldTable", dict(q.arguments))))
    for b in routing.bindings():
        if b.destination.kind == "queue":
            if b.destination.name in shared_queues:
                out.append(cmd.Queue.Bind(queue=b.destination.name, exchange=b.source,
                                          routing_key=b.binding_key, nowait=True,
                                          arguments=dict(b.arguments)))
        else:
            out.append(cmd.Exchange.Bind(destination=b.destination.name, source=b.source,
                                         routing_key=b.binding_key, nowait=True,
                                         arguments=dict(b.arguments)))
    return out + counts


def load_figures(broker: Broker) -> dict[str, int]:
    """Cluster.Ping load figures: connections, queues, ready messages, cpu (per-mille, 0 here)."""
    queues = sum(len(v.queues) for v in broker.vhosts.values())
    messages = sum(q.message_count for v in broker.vhosts.values() for q in v.queues.values())
    return {"connections": len(broker.connections), "queues": queues, "messages": messages,
            "cpu": 0}
