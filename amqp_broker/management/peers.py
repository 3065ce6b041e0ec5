"""The other cluster members' listeners, for ``/api/overview``'s ``listeners`` and ``contexts``.

RabbitMQ's ``/api/overview`` lists the listeners of every node of the cluster, each with its
``node`` (``rabbit_networking:active_listeners/0`` is cluster-wide; "Management HTTP API",
``/api/overview``), and ``contexts`` the management listener of every node: a client that
reaches one node finds the others' management URLs there (``amqp-broker ctl`` remembers them,
``ctl_client``). We list the same:

* each broker publishes its HTTP listeners in its Connection.Start server properties
  (``publish``, called by ``server.start``): ``management_port`` (int, 0 when off),
  ``management_protocol`` ("http", or "https" with ``--management-tls``) and
  ``prometheus_port`` (int, 0 when off), through ``Broker.cluster_properties`` (the extra
  server properties every connection's Connection.Start carries);
* a member learns another's by reading that member's Connection.Start on its AMQP address in
  the cluster view, the way ``amqp-broker cluster-status`` does (``clustering.cli.
  server_properties``: protocol header, Connection.Start, close; no login), in a worker thread,
  all members at once, each within ``PROBE_TIMEOUT_S``. An answer is kept ``KEEP_S`` seconds,
  a member that did not answer is left out and asked again after ``RETRY_S`` (the page polls
  the overview every 2 s). The ``ip_address`` of another member's listeners is the host of its
  AMQP address in the view (where the members reach it), not its bind address.

``member_states`` asks every other member at once, now, for what changes from one moment to the
next (``being_drained``, whether it answers at all: ``/api/nodes``, ``maintenance``), and
refreshes the listeners cache with the answers.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread

from ..clustering.cli import server_properties
from .context import Listener, Management
from .node import cluster_view

__all__ = ["publish", "peer_listeners", "listener_json", "member_states", "PROBE_TIMEOUT_S",
           "KEEP_S", "RETRY_S"]

#: seconds to wait for a member's Connection.Start
PROBE_TIMEOUT_S = 1.0
#: seconds an answer is reused before the member is asked again
KEEP_S = 30.0
#: seconds before a member that did not answer is asked again
RETRY_S = 5.0


def publish(mgmt: Management) -> None:
    """Put this node's HTTP listeners into its Connection.Start server properties (see the
    module docstring for the property names)."""
    web = mgmt.listener("http") or mgmt.listener("https")
    prom = mgmt.listener("http/prometheus")
    mgmt.broker.cluster_properties.update({
        "management_port": web.port if web else 0,
        "management_protocol": web.protocol if web else "",
        "prometheus_port": prom.port if prom else 0})


def listener_json(node: str, x: Listener) -> dict[str, Any]:
    """One listener as in ``/api/overview``'s ``listeners`` (RabbitMQ's keys)."""
    return {"node": node, "protocol": x.protocol, "ip_address": x.host, "port": x.port,
            "socket_opts": {}}


def _split(address: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` -> (host, port); None when malformed."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _listeners(host: str, port: int, props: dict[str, Any]) -> list[Listener]:
    """The listeners a member's server properties announce (its AMQP one first)."""
    out = [Listener("amqp", host, port)]
    web, prom = props.get("management_port"), props.get("prometheus_port")
    protocol = props.get("management_protocol") or "http"
    if isinstance(protocol, bytes):
        protocol = protocol.decode("utf-8", "replace")
    if isinstance(web, int) and web > 0:
        out.append(Listener(protocol if protocol in ("http", "https") else "http", host, web))
    if isinstance(prom, int) and prom > 0:
        out.append(Listener("http/prometheus", host, prom))
    return out


async def _probe(mgmt: Management, address: str, now: float) -> dict[str, Any] | None:
    """Ask the member at ``address`` for its server properties (None: no answer) and cache its
    listeners."""
    hp = _split(address)
    if hp is None:
        mgmt.peer_cache[address] = (now + KEEP_S, None)
        return None
    try:
        props = await anyio.to_thread.run_sync(server_properties, hp[0], hp[1],
                                               PROBE_TIMEOUT_S, abandon_on_cancel=True)
    except OSError:   # refused, timed out, not AMQP 0-9-1 (ConnectionError is an OSError)
        mgmt.peer_cache[address] = (now + RETRY_S, None)
        return None
    mgmt.peer_cache[address] = (now + KEEP_S, _listeners(hp[0], hp[1], props))
    return props


def _peers(mgmt: Management) -> list[tuple[str, str]]:
    """(node name, AMQP address) of the other members of this node's view, in view order."""
    view = cluster_view(mgmt)
    me = mgmt.broker.settings.node_name
    return [(n, a) for n, a in zip(view["member_names"], view["members"], strict=False)
            if n != me]


async def member_states(mgmt: Management) -> dict[str, dict[str, Any] | None]:
    """Node name -> Connection.Start server properties of each other member of this node's view
    (``being_drained``, its listeners ...), asked now, all at once, each within
    ``PROBE_TIMEOUT_S``; None for a member that did not answer. Refreshes the listeners cache
    with the answers. {} for a broker not clustered."""
    now = time.monotonic()
    out: dict[str, dict[str, Any] | None] = {}

    async def one(name: str, address: str) -> None:
        out[name] = await _probe(mgmt, address, now)

    async with anyio.create_task_group() as tg:
        for name, address in _peers(mgmt):
            tg.start_soon(one, name, address)
    return out


async def peer_listeners(mgmt: Management) -> list[dict[str, Any]]:
    """The listeners of the other members of this node's view, as ``listener_json`` dicts,
    in view order; a member that does not answer (or a broker not clustered) adds none.
    Waits at most about ``PROBE_TIMEOUT_S`` (members are asked in parallel)."""
    peers = _peers(mgmt)
    now = time.monotonic()
    stale = [a for _, a in peers if mgmt.peer_cache.get(a, (0.0, None))[0] <= now]
    if stale:
        async with anyio.create_task_group() as tg:
            for address in stale:
                tg.start_soon(_probe, mgmt, address, now)
    for address in [a for a in mgmt.peer_cache if a not in {a for _, a in peers}]:
        del mgmt.peer_cache[address]   # members gone from the view
    return [listener_json(name, x) for name, address in peers
            for x in (mgmt.peer_cache.get(address, (0.0, None))[1] or [])]
