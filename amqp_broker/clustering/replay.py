"""The broker's side of the cluster seam: what a member replays to a joiner, and load figures.

Owns turning the broker's state into the AMQP methods that carry it (the Qpid proposal replays
state as ordinary Exchange.Declare / Queue.Declare / Queue.Bind methods, "Cluster.Join"): the leader
replays vhosts, users and permissions (Cluster.Definition), policies (Cluster.Policy), then every
vhost's exchanges, shared (non-exclusive) queues and their bindings; every member replays its
private queues (the joiner makes proxies of them) and its consumer counts. Replayed methods carry
``nowait`` so the joiner need not answer them; a vhost other than "/" wraps them in
Cluster.InVhost. Lives beside ``app`` because it knows both the core and the cluster package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pamqp import commands as cmd

from cluster.codec import Consumers, Definition, Policy
from cluster.driver import in_vhost

from ..core import access_store
from ..core.broker import Broker
from ..core.proxies import HOME_ARGUMENT
from ..core.relay import local_consumer_count

if TYPE_CHECKING:
    from pamqp.common import FieldTable

    from ..core.vhost import VirtualHost

__all__ = ["replay_methods", "load_figures"]


def replay_methods(broker: Broker, shared: bool, me: str, definitions: bool = True
                   ) -> list[Any]:
    """The methods replaying our part of the state to a joiner (see module docstring); every
    member ends with its consumer counts on shared queues (Cluster.Consumers). Without
    ``definitions`` (the cluster metadata log carries them: ``clustering.metadata``) only
    those counts."""
    counts: list[Any] = []
    for vhost in broker.vhosts.values():
        counts += _private_part(vhost, me) if definitions else _counts(vhost, me)
    if not shared or not definitions:
        return counts
    # vhosts, users, permissions first (declarations need their vhost); then policies (every
    # vhost: they are cluster-wide), so the joiner applies them to the classic queues declared
    # later; replicated queues travel with what was applied
    out: list[Any] = [Definition(*item) for item in access_store.replay_items(broker)]
    out += [Policy(p.vhost, p.name, p.encode()) for p in broker.policies.list()]
    for vhost in broker.vhosts.values():
        out += _shared_part(vhost)
    return out + counts


def _counts(vhost: VirtualHost, me: str) -> list[Any]:
    """Our consumer counts on the shared queues of ``vhost`` (Cluster.Consumers)."""
    return [Consumers(vhost.name, q.name, me, n) for q in vhost.queues.values()
            if q.exclusive_owner is None and (n := local_consumer_count(q))]


def _private_part(vhost: VirtualHost, me: str) -> list[Any]:
    """Our consumer counts on shared queues and our private queues (they become proxies on the
    joiner) with their bindings, in ``vhost``."""
    name = vhost.name
    out: list[Any] = _counts(vhost, me)
    for q in vhost.queues.values():
        if q.exclusive_owner is None:
            continue
        out.append(in_vhost(name, cmd.Queue.Declare(queue=q.name, nowait=True,
                                                    arguments={HOME_ARGUMENT: me})))
        for b in vhost.routing.bindings_of_queue(q.name):
            out.append(in_vhost(name, cmd.Queue.Bind(queue=q.name, exchange=b.source,
                                                     routing_key=b.binding_key, nowait=True,
                                                     arguments=dict(b.arguments))))
    return out


def _shared_part(vhost: VirtualHost) -> list[Any]:
    """``vhost``'s exchanges, shared queues and the bindings between them, as declarations."""
    name = vhost.name
    out: list[Any] = []
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
    return [in_vhost(name, m) for m in out]


def load_figures(broker: Broker) -> dict[str, int]:
    """Cluster.Ping load figures: connections, queues, ready messages, cpu (per-mille, 0 here)."""
    queues = sum(len(v.queues) for v in broker.vhosts.values())
    messages = sum(q.message_count for v in broker.vhosts.values() for q in v.queues.values())
    return {"connections": len(broker.connections), "queues": queues, "messages": messages,
            "cpu": 0}
