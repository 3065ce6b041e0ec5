"""``--cluster NAME`` without ``--seed``: find the cluster's members by mDNS and choose the seeds.

Owns the broker-side use of ``cluster.discovery.MdnsDiscovery`` (DESIGN §6: zeroconf bound to the
broker's own ``--host`` only, never every interface). ``discover_seeds`` announces this broker and
browses for brokers of the same cluster name for about two seconds, asks each one found for its
Connection.Start properties (``cli.server_properties``: is it up, is it in a view), and
returns the seeds to join through:

1. brokers already in a view (``cluster_view`` set and their own address among
   ``cluster_members``): join through them, and through the members they report;
2. otherwise (a cold start: every broker found is still starting, or none answered) the broker
   with the lowest address among the answering ones and ourselves founds the cluster, the others
   join through it. Brokers that do not answer (stale mDNS records of a killed broker) are left
   out. Without the tie-break, two brokers started together would each wait to join the other.
3. ``[]``: found a cluster of one (``ClusterDriver.start([])``).

The announcement stays up while the broker runs (brokers started later must find us): a task in
the caller's task group holds it and says goodbye (in a worker thread) when the group is cancelled
at shutdown. Start-up and goodbye block for ~2 s and ~0.5 s in zeroconf, so both run in worker
threads (``anyio.to_thread``). Must not know: the membership rules beyond "in a view or not".
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from .. import __version__
from ..config import Config
from .cli import server_properties

__all__ = ["Found", "choose_seeds", "discover_seeds", "mdns_label", "WAIT_SECONDS"]

log = logging.getLogger(__name__)

#: how long we browse before choosing (from zeroconf start; its name probe alone takes ~1.5-2 s)
WAIT_SECONDS = 2.0
#: after our own registration, time for the announcements of brokers that registered with us
SETTLE_SECONDS = 0.4
PROBE_TIMEOUT = 1.0
#: on a cold start, how long a non-founder waits for the founder to be in its view of one
FOUNDER_WAIT_SECONDS = 1.5
GOODBYE_TIMEOUT = 3.0

Seeds = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Found:
    """A broker seen by mDNS and what its Connection.Start said (``props`` None: no answer)."""

    node: str
    address: str
    props: dict[str, Any] | None

    @property
    def in_view(self) -> bool:
        """It answered, and is a member of a view (a joining broker reports view 0 or none)."""
        if self.props is None or not self.props.get("cluster_view"):
            return False
        return canonical(self.address) in map(canonical, _texts(self.props.get("cluster_members")))


def _texts(value: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in (value or [])]


def canonical(address: str) -> str:
    """``host:port`` without IPv6 brackets (``runtime`` writes ``::1:5672``, mDNS peers
    ``[::1]:5672``), so both compare equal."""
    host, _, port = address.rpartition(":")
    return f"{host.strip('[]')}:{port}"


def _order(address: str) -> tuple[int, Any, int]:
    """Sort key of ``host:port`` / ``[v6]:port``: IPv4 before IPv6, numerically; names last."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
        return (ip.version, int(ip), int(port))
    except ValueError:
        return (9, host, int(port) if port.isdigit() else 0)


def choose_seeds(me: str, found: Sequence[Found]) -> Seeds:
    """The seeds (``("", "host:port")``, as ``runtime.parse_seeds`` gives) for the broker at
    ``me`` given the brokers ``found`` by mDNS; ``[]`` means found a cluster. Pure (see the
    module docstring for the rule)."""
    me = canonical(me)
    members: list[str] = []
    for f in sorted((f for f in found if f.in_view), key=lambda f: _order(f.address)):
        assert f.props is not None
        for address in map(canonical, [f.address, *_texts(f.props.get("cluster_members"))]):
            if address != me and address not in members:
                members.append(address)
    if members:
        return [("", a) for a in members]
    alive = sorted({canonical(f.address) for f in found if f.props is not None} - {me},
                   key=_order)
    if not alive or _order(me) < _order(alive[0]):
        return []
    return [("", a) for a in alive]


def mdns_label(node_name: str) -> str:
    """Our node name as an mDNS instance label: ``@`` (as in the default ``amqp-broker@HOST``)
    is reserved by the announcement's ``NODE@CLUSTER`` form, so it becomes ``-``."""
    return node_name.replace("@", "-")


async def discover_seeds(config: Config, port: int, tg: anyio.abc.TaskGroup,
                         wait: float = WAIT_SECONDS,
                         probe: Callable[[str, int, float], dict[str, Any]] = server_properties,
                         ) -> Seeds:
    """Announce this broker (``config.node_name`` at ``config.host:port`` in cluster
    ``config.cluster_name``) by mDNS, browse ~``wait`` s, probe what was found, and return the
    seeds to join through (``[]``: found a cluster). The announcement lives in a task of ``tg``
    until ``tg`` is cancelled. Raises ``ValueError`` for a wildcard ``--host`` (mDNS must be
    bound to the broker's own address) or a cluster name containing ``@``; zeroconf's
    ``NonUniqueNameException`` when another broker announces the same node name; ``OSError``
    when zeroconf cannot use the address."""
    from cluster.discovery import MdnsDiscovery  # zeroconf only when discovery is on

    if not config.cluster_name:
        raise ValueError("discovery needs a cluster name (--cluster NAME)")
    me = f"{config.host}:{port}"
    mdns = MdnsDiscovery(config.cluster_name, mdns_label(config.node_name), config.host, port,
                         __version__)
    t0 = time.monotonic()
    try:
        await anyio.to_thread.run_sync(mdns.start)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(mdns.close)
        raise

    async def hold() -> None:
        """Keep the announcement up; goodbye when the task group is cancelled."""
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(GOODBYE_TIMEOUT):
                await anyio.to_thread.run_sync(mdns.close, abandon_on_cancel=True)

    tg.start_soon(hold)
    settle_until = max(t0 + wait, time.monotonic() + SETTLE_SECONDS)
    await anyio.sleep(max(0.0, settle_until - time.monotonic()))
    peers = mdns.peers()

    def probe_one(address: str, host: str, peer_port: int) -> dict[str, Any] | None:
        try:
            props = probe(host, peer_port, PROBE_TIMEOUT)
        except OSError as exc:
            log.info("mDNS peer %s does not answer (%s): left out", address, exc)
            return None
        name = props.get("cluster_name")
        name = name.decode() if isinstance(name, bytes) else name
        if "cluster_view" in props and name != config.cluster_name:   # clustering started
            log.warning("mDNS peer %s announces cluster %r but reports %r: left out", address,
                        config.cluster_name, props.get("cluster_name"))
            return None
        return props

    found: list[Found] = []

    async def probe_task(node: str, address: str, host: str, peer_port: int) -> None:
        props = await anyio.to_thread.run_sync(probe_one, address, host, peer_port)
        found.append(Found(node, address, props))

    async with anyio.create_task_group() as probes:
        for peer in peers.values():
            probes.start_soon(probe_task, peer.node, peer.address, peer.host, peer.port)
    seeds = choose_seeds(me, found)
    if seeds and not any(f.in_view for f in found):
        # a cold start and we are not the founder: give it a moment to found, so our first
        # Join is not ignored (a Join to a broker not in a view is dropped; retried every 2 s)
        founder = seeds[0][1]
        host, _, founder_port = founder.rpartition(":")
        with anyio.move_on_after(FOUNDER_WAIT_SECONDS):
            while not Found("", founder, await anyio.to_thread.run_sync(
                    probe_one, founder, host, int(founder_port))).in_view:
                await anyio.sleep(0.1)
    log.info("mDNS discovery of cluster %r in %.1f s: %s -> %s", config.cluster_name,
             time.monotonic() - t0,
             ", ".join(f"{f.node}@{f.address}{'' if f.props is not None else ' (no answer)'}"
                       f"{' (in view)' if f.in_view else ''}" for f in found) or "no peers",
             ", ".join(a for _, a in seeds) or "founding a cluster")
    return seeds
