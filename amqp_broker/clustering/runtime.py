"""Starting this broker as a cluster member: builds the membership node, the peer links and the
driver, and plugs them into the broker's cluster seams (peer authentication, peer handler,
propagation hooks, Connection.Start properties, client admission while joining).

Clustering is on when ``--seed`` (or ``--cluster``) is given; it needs ``--cluster-secret FILE``
(peers authenticate with it, ``cluster.secret``). With no seed answering... a broker given no seed
founds a cluster of one. Source: issue "Peer clustering" (Configuration), DESIGN.md §4.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from cluster import durable, force_boot
from cluster import secret as peer_secret
from cluster.actions import Timing
from cluster.driver import ClusterDriver
from cluster.links import PeerLinks, Settle
from cluster.membership import Node, Status
from cluster.metadata.commands import InstallView
from cluster.metadata.outcomes import Refused

from .. import __version__
from ..config import Config
from ..core import proxies, relay
from ..core.broker import Broker
from ..core.relay_inbox import ACK_DELAY_S
from . import delayed, discovery
from .metadata import MetadataRuntime
from .replay import load_figures, replay_methods

__all__ = ["SecretAuth", "start_cluster", "parse_seeds", "load_vote", "save_vote"]

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
#: Seconds a cluster view proposed to the metadata log may take to commit before the round
#: counts as failed and may be tried again (``Node.view_refused``).
VIEW_TIMEOUT = 5.0
#: Seconds an orderly leave waits, after its view, for the metadata leader to take this member
#: out of its configuration (``MetadataRuntime.awaiting_removal``).
LEAVE_REMOVAL_S = 3.0
VOTE_FILE = "cluster-membership.json"


def load_vote(data_dir: Path | str) -> durable.DurableVote | None:
    """The durable vote in ``<data_dir>/cluster-membership.json`` (``cluster.durable``); None
    when there is none or it is unreadable (logged: the broker then has no vote until it re-joined,
    which is safe)."""
    path = Path(data_dir) / VOTE_FILE
    try:
        return durable.decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.error("ignoring %s (no vote until this broker re-joined): %s", path, exc)
        return None


def save_vote(data_dir: Path | str, vote: durable.DurableVote, fsync: bool = True) -> None:
    """Write ``vote`` atomically (temporary file, fsync, rename, fsync of the directory) before
    returning: the membership answers a Vote only after this. Raises ``OSError``."""
    path = Path(data_dir) / VOTE_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(durable.encode(vote))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class SecretAuth:
    """``broker.peer_auth`` for the shared-secret mechanism (``cluster.secret``)."""

    secret: bytes
    mechanism: str = peer_secret.MECHANISM

    def new_server(self) -> peer_secret.SecretServer:
        """Per-connection challenge/verify state."""
        return peer_secret.SecretServer(self.secret)


def parse_seeds(text: str) -> list[tuple[str, str]]:
    """``"h1:p1,h2:p2"`` -> ``[("", "h1:p1"), ...]``; raises ``ValueError`` for a bad entry."""
    seeds = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"seed {item!r} is not HOST:PORT")
        seeds.append(("", item))
    return seeds


def peer_ssl_context(config: Config) -> Any:
    """The peer links' mutual-TLS client context from ``--cluster-tls-dir`` (our node
    certificate, the cluster CA), None without one. Raises ``OSError`` / ``ValueError``."""
    if not config.cluster_tls_dir:
        return None
    from cluster.ca import client_ssl_context
    return client_ssl_context(config.cluster_tls_dir, config.node_name)


async def start_cluster(broker: Broker, config: Config, port: int,
                        tg: anyio.abc.TaskGroup) -> ClusterDriver:
    """Join (or found) the cluster; the driver's timers run in ``tg``. Raises ``ValueError`` /
    ``OSError`` for a missing or short secret file or bad seeds."""
    secret = peer_secret.load_secret(config.cluster_secret)
    if config.cluster_name and not config.seeds:  # --cluster NAME alone: find members by mDNS
        broker.accepting_clients = False  # no client work until we know whether we join
        seeds = await discovery.discover_seeds(config, port, tg)
    else:
        seeds = parse_seeds(config.seeds)
    me = f"{config.host}:{port}"
    timing = Timing(ping_interval=config.ping_interval)
    node = Node(config.node_name, me, config.cluster_name or "amqp-broker", __version__, timing,
                load_vote(config.data_dir))
    driver: ClusterDriver

    def failed(peer: str) -> None:
        driver.send_failed(peer)

    def settled(peer: str, settles: list[Settle]) -> None:  # Ack / Nack / Reject of transfers
        if relay.settle_batch(broker, peer, settles):
            broker.run_dispatch()  # the freed credit deals more

    def link_down(peer: str) -> None:  # what it had not settled comes back, redelivered
        if relay.requeue_node(broker, peer):
            broker.run_dispatch()

    links = PeerLinks(config.node_name, secret, on_failure=failed, on_settle=settled,
                      on_down=link_down, ssl_context=peer_ssl_context(config))
    links.start(tg)
    #: Per member, the (vhost, queue) names it has relay consumers on.
    relaying: dict[str, set[tuple[str, str]]] = {}

    def on_consumers(vhost: str, queue: str, peer: str, count: int) -> None:
        if vhost in broker.vhosts:
            relay.set_remote_consumers(broker.vhosts[vhost], queue, peer, count)
            names = relaying.setdefault(peer, set())
            if count:
                names.add((vhost, queue))
            else:
                names.discard((vhost, queue))
            broker.run_dispatch()

    def on_node_removed(peer: str) -> None:
        relaying.pop(peer, None)
        driver.refused.discard(peer)
        for vhost in broker.vhosts.values():
            relay.remove_node(vhost, peer)
            proxies.remove_home(vhost, peer)
        link_down(peer)

    driver = ClusterDriver(node, broker, links,
                           lambda shared: replay_methods(broker, config.node_name),
                           time.monotonic, config.sync_replies, lambda: load_figures(broker),
                           on_consumers, on_node_removed,
                           lambda vote: save_vote(config.data_dir, vote,
                                                  config.sync_policy != "none"))
    broker.relay_sink = driver  # it remembers the members whose link refused a relay
    inbox = broker.relay_inbox
    loop = asyncio.get_running_loop()

    def acks_pending() -> None:  # acks of relayed messages go back within ACK_DELAY_S
        loop.call_later(ACK_DELAY_S, inbox.flush_acks)

    inbox.on_acks_pending = acks_pending
    broker.peer_auth = SecretAuth(secret)
    broker.peer_handler = driver.on_peer_method
    forced = force_boot.requested(config.data_dir)
    solo = forced or (not seeds and not node.stored.peers(node.name))
    metadata = _metadata(broker, config, driver, links, solo)
    metadata.forced = forced
    quorum = getattr(broker, "quorum", None)
    if quorum is not None:  # quorum queues' Raft traffic rides on the same peer links
        quorum.attach(links, lambda: dict(node.members))

    def on_view(view: int, members: Any) -> None:
        if quorum is not None:
            quorum.view_changed(view, members)
        metadata.view_changed(view, members)

    driver.on_view = on_view
    driver.peer_first = (quorum or metadata.host).on_peer_method
    broker.cluster_hooks = driver
    driver.on_in_vhost = lambda channel, vhost, payload: channel.on_method_in_vhost(vhost, payload)
    broker.cluster_properties.update({"cluster_name": node.cluster_name,
                                      "cluster_view": 0, "cluster_members": [me]})

    async def ticker() -> None:
        while True:
            await anyio.sleep(TICK_SECONDS)
            driver.tick()
            driver.publish_view()
            if not broker.accepting_clients and driver.admit():   # a founder needs no Synch
                broker.accepting_clients = True
            # Links drain between ticks: a link that refused a relay and takes more now gives
            # the queues with that member's relay consumers another chance (O(those queues)).
            for node in list(driver.refused):
                if not driver.can_relay(node):  # still full or down (reopened meanwhile)
                    continue
                driver.refused.discard(node)
                for vhost_name, queue_name in relaying.get(node, ()):
                    vhost = broker.vhosts.get(vhost_name)
                    q = vhost.queues.get(queue_name) if vhost is not None else None
                    if q is not None and q.message_count:
                        broker.needs_dispatch.add(q)
            broker.run_dispatch()

    tg.start_soon(ticker)
    metadata.start()   # a member that had a replica opens it now, else at the first view
    tg.start_soon(metadata.run)
    if forced:   # ``ctl force_boot``: alone, whatever its last view (RabbitMQ's force_boot)
        log.warning("cluster node %s: force_boot: starting a cluster of one from this "
                    "broker's data; reset the other members before they come back", me)
        driver.start([], force=True)
        return driver
    driver.start([s for s in seeds if s[1] != me])
    log.info("cluster node %s at %s: %s", config.node_name, me,
             f"joining via {', '.join(a for _, a in seeds)}" if seeds
             else "founding a cluster of one")
    return driver


def _metadata(broker: Broker, config: Config, driver: ClusterDriver,
              links: PeerLinks, solo: bool) -> MetadataRuntime:
    """The metadata log of this member (``clustering.metadata``) on the peer links: Raft
    traffic of its group goes to it before the quorum queues' handler (members' addresses: the
    view's, else the last view's kept on disk: a restarted member's replica runs before it is
    in a view); clients are admitted once the membership synched, the broker follows the log
    and this member is a voter of the committed configuration. ``solo``: this broker starts a
    cluster of one by its own data (``MetadataRuntime.solo``). Raises ``ValueError`` for a bad
    ``--sync-replies``."""
    metadata = MetadataRuntime(broker, config.data_dir, config.node_name,
                               fsync=config.sync_policy != "none",
                               reply_policy=config.sync_replies,
                               timeout=config.metadata_timeout, solo=solo)
    node = driver.node
    metadata.attach(links, lambda: {**node.known_addresses(), **dict(node.stored.members),
                                    **dict(node.members)})
    quorum_content = broker.peer_content

    def peer_content(channel: Any, method: Any, body: bytes) -> None:
        if not metadata.on_peer_content(channel, method, body) and quorum_content is not None:
            quorum_content(channel, method, body)

    broker.peer_content = peer_content
    broker.metadata = metadata
    delayed.install(broker, metadata)   # x-delayed-message exchanges hold in quorum queues
    broker.accepting_clients = False

    def admit() -> bool:
        return metadata.ready and driver.node.status is Status.MEMBER and metadata.voter

    def on_ready() -> None:
        broker.accepting_clients = admit()

    def in_configuration(name: str) -> bool:
        group = metadata.group
        return group is None or name in group.node.committed_config[1]

    def may_recover() -> bool:   # after a power loss the metadata leader restarts the view
        group = metadata.group
        return group is None or group.is_leader

    def propose_view(act: Any, done: Callable[[bool], None]) -> None:
        command = InstallView(act.base, act.view, tuple(n for n, _ in act.members),
                              tuple(ad for _, ad in act.members), act.left)

        def answer(outcome: Any) -> None:
            if isinstance(outcome, Refused):
                log.info("cluster view %#x: %s", act.view, outcome.text)
            done(not isinstance(outcome, Refused))

        metadata.propose(command, answer, replies=False, timeout=VIEW_TIMEOUT)

    driver.admit = admit
    driver.in_configuration = in_configuration
    driver.node.may_recover = may_recover
    driver.propose_view = propose_view
    # views are committed in the log once this member has a replica: a cluster restarted
    # from the broadcast design's data (no replica anywhere) agrees its first view by the
    # rounds' majority rule, and that view's leader founds the log
    driver.node.commit_views = metadata.group is not None

    def log_opened() -> None:
        driver.node.commit_views = True

    metadata.on_open = log_opened

    def on_view(cmd: InstallView) -> None:
        metadata.left_in_order(cmd.left)
        driver.view_committed(cmd.view, cmd.members)

    metadata.on_view = on_view
    metadata.on_ready = on_ready
    return metadata


async def leave_cluster(driver: ClusterDriver, grace: float = 1.0) -> None:
    """Orderly shutdown: the metadata log's leadership handed over, Cluster.Leave, a moment
    for the leader to announce the new view (``grace`` s), then up to ``LEAVE_REMOVAL_S`` for the
    metadata leader to take this member out of its configuration (not when it is the only one)."""
    metadata = getattr(driver.broker, "metadata", None)
    if metadata is not None:
        await metadata.hand_over()
    driver.leave()
    with anyio.move_on_after(grace):
        while driver.node.status.value not in ("left",):
            await anyio.sleep(0.05)
    if metadata is not None:   # out of the metadata configuration before we stop: else a
        with anyio.move_on_after(LEAVE_REMOVAL_S):   # configuration of two would need us
            while metadata.awaiting_removal():
                await anyio.sleep(0.05)
