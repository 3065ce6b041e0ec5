"""The seams between the cluster and the broker (DESIGN §2: cluster talks to the broker only here).

Owns the typed interface, no behaviour beyond turning a declaration into the AMQP method that
carries it on a peer link (the proposal replays and propagates state as ordinary Exchange.Declare,
Queue.Declare, Queue.Bind and Basic.Consume methods, "Cluster Management"):

- ``BrokerPort``: what the broker core implements for the cluster: list its state for a joiner's
  replay, apply a replayed or propagated declaration, take relayed messages, report load and
  consumer counts, and obey membership (accept clients, serve mirrored queues, drop replicated state).
- ``PeerLinks``: what the peer-link layer (anyio, one AMQP connection per peer, ``cluster-peer``
  capability) implements: send a Cluster method or a replayed AMQP method to a node.
- ``ClusterHooks``: what the cluster implements and the core calls (sans-IO, never blocks) when a
  client changes shared state, so the change reaches every member before the client's reply (after
  n answers, n set by policy: proposal "Outline", "Exchange.Declare" ...).

Values are frozen slotted dataclasses. A *private* queue is an exclusive queue: real on its home
node, a proxy elsewhere; it is replayed as a non-exclusive Queue.Declare with the argument
``x-cluster-home`` naming the home node (exclusivity belongs to one client connection and cannot
travel). Must not know: sockets, anyio, the core's classes (only these shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pamqp import base, commands

__all__ = [
    "ExchangeDecl", "QueueDecl", "BindingDecl", "ConsumerCount", "ExchangeDelete", "QueueDelete",
    "Unbind", "Declaration", "Change", "RelayedMessage", "BrokerPort", "PeerLinks", "ClusterHooks",
    "HOME_ARGUMENT",
]

HOME_ARGUMENT = "x-cluster-home"


@dataclass(frozen=True, slots=True)
class ExchangeDecl:
    """An exchange (always shared: a copy on every member). Replayed by the leader only."""

    vhost: str
    name: str
    type: str
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_method(self) -> base.Frame:
        """The Exchange.Declare that carries it (``nowait`` unset: the peer answers DeclareOk)."""
        return commands.Exchange.Declare(exchange=self.name, exchange_type=self.type,
                                         durable=self.durable, auto_delete=self.auto_delete,
                                         internal=self.internal, arguments=dict(self.arguments))


@dataclass(frozen=True, slots=True)
class QueueDecl:
    """A queue. ``home`` is None for a shared queue (a copy on every member; replayed by the
    leader), else the node the private queue really lives on (replayed by that node)."""

    vhost: str
    name: str
    durable: bool = False
    auto_delete: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    home: str | None = None

    @property
    def shared(self) -> bool:
        """True for a shared queue."""
        return self.home is None

    def to_method(self) -> base.Frame:
        """The Queue.Declare that carries it; a private queue gets ``x-cluster-home``."""
        args = dict(self.arguments)
        if self.home is not None:
            args[HOME_ARGUMENT] = self.home
        return commands.Queue.Declare(queue=self.name, durable=self.durable,
                                      auto_delete=self.auto_delete, arguments=args)


@dataclass(frozen=True, slots=True)
class BindingDecl:
    """A binding from exchange ``source`` to a queue or (``to_exchange``) an exchange."""

    vhost: str
    source: str
    destination: str
    routing_key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    to_exchange: bool = False

    def to_method(self) -> base.Frame:
        """Queue.Bind, or Exchange.Bind for exchange-to-exchange bindings."""
        if self.to_exchange:
            return commands.Exchange.Bind(destination=self.destination, source=self.source,
                                          routing_key=self.routing_key,
                                          arguments=dict(self.arguments))
        return commands.Queue.Bind(queue=self.destination, exchange=self.source,
                                   routing_key=self.routing_key, arguments=dict(self.arguments))


@dataclass(frozen=True, slots=True)
class ConsumerCount:
    """``count`` consumers of shared queue ``queue`` are attached at ``node`` (proposal
    "Basic.Consume": every broker knows the cluster-wide consumer distribution)."""

    vhost: str
    queue: str
    node: str
    count: int


@dataclass(frozen=True, slots=True)
class ExchangeDelete:
    """Exchange.Delete, propagated."""

    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class QueueDelete:
    """Queue.Delete, propagated (for a private queue: its proxies go)."""

    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class Unbind:
    """Queue.Unbind / Exchange.Unbind, propagated."""

    binding: BindingDecl


Declaration = ExchangeDecl | QueueDecl | BindingDecl | ConsumerCount
Change = Declaration | ExchangeDelete | QueueDelete | Unbind


@dataclass(frozen=True, slots=True)
class RelayedMessage:
    """A message dealt to a consumer at another node (shared queue) or routed to a proxy of a
    private queue, relayed once per target node (proposal "Basic.Publish"). ``header`` and
    ``body`` are the raw content frames' payloads as they came in (DESIGN §5: do not decode what
    you only forward)."""

    vhost: str
    queue: str
    exchange: str
    routing_key: str
    header: bytes
    body: bytes
    redelivered: bool = False
    origin: str = ""


@runtime_checkable
class BrokerPort(Protocol):
    """Implemented by the broker core (the lead wires it); every method is synchronous and cheap."""

    def exchanges(self) -> Iterable[ExchangeDecl]:
        """Every user-declared exchange, all vhosts (not the default and ``amq.*`` ones, which
        every broker has). Replayed to a joiner by the leader."""
        ...

    def queues(self, shared: bool) -> Iterable[QueueDecl]:
        """Shared queues (``shared=True``, replayed by the leader), or the private queues whose
        home is this node (``shared=False``, replayed by every member)."""
        ...

    def bindings(self, shared: bool) -> Iterable[BindingDecl]:
        """Bindings to shared queues and exchanges (``shared=True``), or to our private queues."""
        ...

    def consumer_counts(self) -> Iterable[ConsumerCount]:
        """Our local consumer count of each shared queue that has any."""
        ...

    def apply(self, change: Change, origin: str) -> None:
        """Apply a replayed or propagated change from node ``origin``, idempotently (a declare
        of what exists with the same properties is a no-op). A private queue from another home
        becomes a proxy. Raises ``amqp_broker.protocol.errors.ChannelException`` (e.g. 406
        PRECONDITION_FAILED for an inequivalent redeclare): the link answers it as usual."""
        ...

    def deliver_relayed(self, message: RelayedMessage) -> bool:
        """Hand a relayed message to a local consumer of ``queue``; False when there is none any
        more (the cluster then applies the relay policy: pass on redelivered, hold, or drop)."""
        ...

    def load(self) -> dict[str, int]:
        """Load figures for Cluster.Ping: connections, queues, messages, cpu (per-mille)."""
        ...

    def accept_clients(self, enabled: bool) -> None:
        """Open (True) or close the client listener; a joiner opens it after every Synch."""
        ...

    def serve_mirrored(self, enabled: bool) -> None:
        """Serve mirrored queues only while a majority is confirmed (DESIGN §4 partitions)."""
        ...

    def drop_replicated_state(self) -> None:
        """We were excluded from the cluster: drop shared entities and proxies before re-joining
        (our private queues and their messages stay)."""
        ...


@runtime_checkable
class PeerLinks(Protocol):
    """Implemented by the peer-link layer: one authenticated AMQP connection to each peer."""

    def send(self, node: str, address: str, method: base.Frame) -> None:
        """Queue ``method`` (a Cluster method, or a replayed AMQP method) on the link to ``node``,
        opening it to ``address`` ("" = only an existing link) when needed. Never blocks: a
        failure comes back later as ``Node.send_failed(node, now)``."""
        ...

    def relay(self, node: str, message: RelayedMessage) -> None:
        """Queue a relayed message (Basic.Publish + raw header and body) on the link to ``node``."""
        ...

    def close(self, node: str) -> None:
        """Close the link to ``node`` (it left the view)."""
        ...


@runtime_checkable
class ClusterHooks(Protocol):
    """Implemented by the cluster; called by the core on each client change of shared state."""

    def propagate(self, vhost: str, change: Change, done: Callable[[str | None], None]) -> None:
        """Send ``change`` to every other member; call ``done(None)`` once the policy's number of
        members answered (at once when alone), or ``done(reason)`` when that cannot happen (the
        core then answers its client with a channel error). Must not block."""
        ...

    def is_peer(self, client_properties: Mapping[str, Any]) -> bool:
        """True when a connection's StartOk capabilities carry ``cluster-peer`` (then it must be
        authenticated by mTLS or the cluster secret, else refused)."""
        ...
