"""Two core brokers joined the way a cluster joins them, without sockets, for the relay's tests
and ``benchmarks.relaypath``: A (a publisher ``pub``; shared queue "shared" whose one consumer is
B's, a relay consumer) deals through its ``ClusterDriver.relay`` into ``PeerLinkCapture`` (the
bytes A's peer link would write); B reads them on ``peer``, an AMQP connection marked as A's peer
link, through its ``ClusterDriver.on_peer_method``; ``con`` is a client of B that declared
"shared" (it consumes when the caller says so)."""

from __future__ import annotations

import time

from amqp_broker.core import relay
from amqp_broker.core.broker import Broker
from amqp_broker.core.relay_batch import BatchBuilder
from amqp_broker.core.tests.client import Client
from cluster.driver import ClusterDriver
from cluster.membership import Node
from cluster.relay_wire import encode_batch

__all__ = ["PeerLinkCapture", "relay_pair"]


class PeerLinkCapture:
    """Stands for A's peer links (``cluster.driver.LinkSender``, relay part): always up, keeps
    what ``send_raw`` would write to B."""

    def __init__(self) -> None:
        self.out: list[bytes | BatchBuilder] = []

    def can_send(self, node: str) -> bool:
        """The link to ``node`` takes more: always."""
        return True

    def send_raw(self, node: str, data: bytes) -> None:
        """Keep ``data`` for ``take``."""
        for item in self.out:  # as the link does: nothing may overtake ``data`` now
            if isinstance(item, BatchBuilder):
                item.sealed = True
        self.out.append(data)

    def send_batch(self, node: str, batch: BatchBuilder) -> None:
        """Keep ``batch`` for ``take`` (records may still be added until then)."""
        self.out.append(batch)

    def take(self) -> bytes:
        """Everything sent since the last call, as one chunk (batches encoded and sealed, as the
        link's writer does)."""
        chunks = []
        for item in self.out:
            if isinstance(item, BatchBuilder):
                item.sealed = True
                chunks.append(encode_batch(item))
            else:
                chunks.append(item)
        self.out.clear()
        return b"".join(chunks)


def relay_pair(queue: str = "shared") -> tuple[Broker, Broker, Client, Client, Client,
                                                PeerLinkCapture]:
    """(A, B, pub on A, peer: A's link into B, con on B, A's link capture); see module
    docstring. ``queue`` is declared on both, with one relay consumer for B on A."""
    a, b = Broker(), Broker()
    link = PeerLinkCapture()
    driver_a = ClusterDriver(Node("A", "127.0.0.2:5672"), a, link, lambda shared: [],
                             time.monotonic)
    driver_b = ClusterDriver(Node("B", "127.0.0.3:5672"), b, PeerLinkCapture(),
                             lambda shared: [], time.monotonic)
    a.relay_sink = driver_a  # as amqp_broker.clustering.runtime wires them
    b.peer_handler = driver_b.on_peer_method
    pub = Client(a, "127.0.0.1", 41001)
    pub.handshake()
    pub.open_channel(1)
    pub.declare_queue(1, queue)
    peer = Client(b, "127.0.0.2", 41002)
    peer.handshake()
    peer.open_channel(1)
    peer.conn.peer_node = "A"  # as after the cluster-peer handshake
    con = Client(b, "127.0.0.1", 41003)
    con.handshake()
    con.open_channel(1)
    con.declare_queue(1, queue)
    relay.set_remote_consumers(a.vhosts["/"], queue, "B", 1)
    return a, b, pub, peer, con, link
