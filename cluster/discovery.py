"""Finding the other brokers of a cluster: mDNS with python-zeroconf, or static seeds.

Owns ``--cluster NAME`` discovery (issue 5 "Discovery"): each broker announces the service
``_amqp._tcp.local.`` as instance ``NODE@CLUSTER`` with TXT ``cluster``, ``node`` and ``version``
and the address and port its *peers* connect to, and browses for the others of the same cluster.
It also parses ``--seed HOST:PORT`` for networks without multicast.

Network rule (DESIGN §6): zeroconf is created with ``interfaces=[host]``, the broker's own address,
never ``InterfaceChoice.All``: multicast group membership and every packet we send go through that
address's interface only. (zeroconf's receive socket is bound to ``0.0.0.0:5353``, as mDNS
requires; queries reach it only from interfaces that joined the group, or as unicast.) A wildcard
host (``0.0.0.0``, ``::``, "") is refused with ``ValueError``.

Threads: zeroconf runs its own thread; ``on_change`` is called from it with a snapshot of the peers,
so a driver on an event loop must hand it over (``anyio.from_thread.run_sync``,
``loop.call_soon_threadsafe``). ``start`` blocks ~1.5-2 s while zeroconf probes that our name is
unique (RFC 6762 §8): run it in a worker thread. Must not know: the membership rules, the broker.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

__all__ = ["SERVICE_TYPE", "Seed", "Peer", "MdnsDiscovery", "parse_seed", "parse_seeds"]

log = logging.getLogger(__name__)
SERVICE_TYPE = "_amqp._tcp.local."
DEFAULT_PEER_PORT = 5672


@dataclass(frozen=True, slots=True)
class Seed:
    """A ``--seed``: where to send a Join when the members' names are not known yet."""

    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port`` for IPv6), as Join and Membership carry addresses."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Peer:
    """A broker of our cluster seen by mDNS."""

    node: str
    cluster: str
    version: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` to open a peer link to."""
        return Seed(self.host, self.port).address


def parse_seed(text: str, default_port: int = DEFAULT_PEER_PORT) -> Seed:
    """Parse ``HOST[:PORT]`` or ``[V6]:PORT``; raises ``ValueError`` for an empty host or a port
    outside 1..65535."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad seed {text!r}")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""   # a bare host, or a bare IPv6 address
    if not host:
        raise ValueError(f"seed {text!r} has no host")
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise ValueError(f"seed {text!r} has a bad port") from None
    if not 0 < port < 65536:
        raise ValueError(f"seed {text!r} port out of range")
    return Seed(host, port)


def parse_seeds(texts: Iterable[str], default_port: int = DEFAULT_PEER_PORT) -> list[Seed]:
    """Parse each ``--seed`` (each may also be a comma-separated list); duplicates dropped."""
    out: list[Seed] = []
    for text in texts:
        for part in text.split(","):
            if part.strip():
                seed = parse_seed(part, default_port)
                if seed not in out:
                    out.append(seed)
    return out


def _txt(props: dict[bytes, bytes | None], key: str) -> str:
    value = props.get(key.encode())
    return value.decode("utf-8", "replace") if value else ""


class MdnsDiscovery:
    """Announce ``node`` of ``cluster`` at ``host:port`` and track the other brokers of ``cluster``.

    ``host`` must be a concrete IP address (the broker's own). ``peers()`` is a snapshot
    ``{node: Peer}`` without ourselves. Use as a context manager, or ``start()``/``close()``.
    Raises ``ValueError`` for a wildcard or non-IP host, and zeroconf's ``NonUniqueNameException``
    when another broker already announces the same ``NODE@CLUSTER``.
    """

    def __init__(self, cluster: str, node: str, host: str, port: int, version: str = "",
                 on_change: Callable[[dict[str, Peer]], None] | None = None) -> None:
        ip = ipaddress.ip_address(host)   # ValueError for a name
        if ip.is_unspecified:
            raise ValueError("mDNS must be bound to the broker's own address, not a wildcard")
        if "@" in node or "@" in cluster or not node or not cluster:
            raise ValueError("node and cluster names must be non-empty and without '@'")
        self.cluster, self.node, self.host, self.port, self.version = (
            cluster, node, host, port, version)
        self._on_change = on_change
        self._lock = threading.Lock()
        self._peers: dict[str, Peer] = {}       # by service name
        self._zc: Zeroconf | None = None
        self._browser: ServiceBrowser | None = None
        self._info = ServiceInfo(
            SERVICE_TYPE, f"{node}@{cluster}.{SERVICE_TYPE}",
            addresses=[ip.packed], port=port,
            properties={"cluster": cluster, "node": node, "version": version},
            server=f"{node}.local.")

    def start(self) -> None:
        """Register our service (blocks while probing, ~1.5-2 s) and start browsing."""
        ip_version = IPVersion.V6Only if ":" in self.host else IPVersion.V4Only
        self._zc = Zeroconf(interfaces=[self.host], ip_version=ip_version)
        self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._changed])
        self._zc.register_service(self._info)

    def close(self) -> None:
        """Say goodbye (peers drop us at once) and stop zeroconf. Idempotent."""
        zc, self._zc = self._zc, None
        if zc is None:
            return
        if self._browser is not None:
            self._browser.cancel()
        try:
            zc.unregister_service(self._info)
        finally:
            zc.close()

    def __enter__(self) -> MdnsDiscovery:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def peers(self) -> dict[str, Peer]:
        """``{node: Peer}`` of our cluster, ourselves excluded."""
        with self._lock:
            return {p.node: p for p in self._peers.values()}

    def _changed(self, zeroconf: Zeroconf, service_type: str, name: str,
                 state_change: ServiceStateChange) -> None:
        """zeroconf's browser callback (its thread): resolve added/updated services."""
        peer = None
        if state_change is not ServiceStateChange.Removed:
            info = zeroconf.get_service_info(service_type, name, timeout=2000)
            peer = self._peer_of(info) if info is not None else None
        with self._lock:
            before = dict(self._peers)
            if peer is None:
                self._peers.pop(name, None)
            else:
                self._peers[name] = peer
            changed = before != self._peers
        if changed and self._on_change is not None:
            self._on_change(self.peers())

    def _peer_of(self, info: ServiceInfo) -> Peer | None:
        props = info.properties or {}
        cluster, node = _txt(props, "cluster"), _txt(props, "node")
        if cluster != self.cluster or not node or node == self.node:
            return None
        addresses = info.parsed_addresses()
        if not addresses or not info.port:
            return None
        return Peer(node, cluster, _txt(props, "version"), addresses[0], info.port)

