"""Proxies of private queues that live on other cluster members (Qpid ClusteringHA "Private
queues": "real on one broker, proxies elsewhere; a message matching several proxies for the same
target broker is relayed once").

Owns, per vhost, the map proxy name -> home node. A proxy is only a name in our routing table (so
bindings to it route here) with no queue object: messages routed to proxies are collected per home
node and relayed once per home (``relay(home, vhost, "", message)``); the home then routes the
message itself and keeps it for its private queues only (``route_private``). A proxy is made when
the cluster metadata log records a private queue of another member (``clustering.metadata_follow``),
and dropped when that queue is deleted or its home leaves the view. Must not know: links (the sink
is ``broker.relay_sink``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queues.message import Message

    from .vhost import VirtualHost

__all__ = ["add_proxy", "remove_proxy", "remove_home", "relay_to_homes", "route_private"]


def add_proxy(vhost: VirtualHost, name: str, home: str) -> None:
    """Register a proxy for ``home``'s private queue ``name`` (idempotent)."""
    if name in vhost.queues:
        return  # a real queue of ours by that name wins
    vhost.proxies[name] = home
    vhost.routing.add_queue(name)


def remove_proxy(vhost: VirtualHost, name: str) -> bool:
    """Drop proxy ``name`` and its bindings; False when there was none."""
    if vhost.proxies.pop(name, None) is None:
        return False
    vhost.routing.remove_queue(name)
    return True


def remove_home(vhost: VirtualHost, home: str) -> None:
    """``home`` left the view: its private queues are gone with it."""
    for name in [n for n, h in vhost.proxies.items() if h == home]:
        remove_proxy(vhost, name)


def relay_to_homes(vhost: VirtualHost, message: Message, names: set[str]) -> None:
    """Relay ``message`` once to each home node owning one of the proxies in ``names``."""
    sink = vhost.broker.relay_sink
    if sink is None:
        return
    homes = {vhost.proxies[n] for n in names if n in vhost.proxies}
    for home in homes:
        sink.relay(home, vhost.name, "", message)


def route_private(vhost: VirtualHost, message: Message) -> None:
    """A message relayed here for our private queues: route it and enqueue it into the private
    queues it matches (never shared copies or proxies: the sender delivered those itself)."""
    names = {n for n in vhost.route(message)
             if (q := vhost.queues.get(n)) is not None and q.exclusive_owner is not None}
    if names:
        vhost.enqueue(message, names)
