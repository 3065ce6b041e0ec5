"""The commands of the cluster metadata log: everything members must agree on, one frozen value
per change a client, the management API or the cluster itself asks for.

Owns the shapes only (the byte encoding is ``codec``, the rules that decide each outcome are
``machine``). Must not know: Raft, frames, sockets, the broker core.

Fields common to several commands:
  ``vhost``       the virtual host's name.
  ``connection``  the cluster-wide id of the client connection that asked ("" for the management
                  API and the cluster itself), e.g. ``"n1#1700000000000/17"``: an exclusive
                  (private) queue belongs to it, and only it may use the queue (405 otherwise).
  ``arguments``   an AMQP field table as pamqp decodes it (str keys; values str, bytes, int,
                  bool, float, Decimal, datetime, None, lists and nested tables). Never mutated.

Not commands, on purpose: passive declares (answered from the member's applied state, as
RabbitMQ reads its local metadata store copy); the permission checks of the asking user (made by
the member before proposing, as RabbitMQ's channel does); Queue.Delete's ``if_unused`` /
``if_empty`` (the queue's consumers and messages are not metadata: the member asks its queue
first, as RabbitMQ asks the queue process); membership, which is Raft's own CONFIG entries
(``cluster.raft``: single-server changes), told to the machine with ``configure``.
Sources: AMQP 0-9-1 classes exchange and queue; RabbitMQ "Exchanges", "Queues", "Policies",
"Access Control", "Virtual Hosts", "Exclusive Queues", "Parameters and Policies" (runtime
parameters: shovels, federation upstreams); RabbitMQ "Metadata store" (Khepri: every
change above is a command in one Raft log).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Command", "DeclareExchange", "DeleteExchange", "DeclareQueue", "DeleteQueue", "Bind",
           "Unbind", "SetPolicy", "ClearPolicy", "AddVhost", "DeleteVhost", "PutUser",
           "DeleteUser", "SetPermission", "ClearPermission", "MemberGone", "SetParameter",
           "ClearParameter", "InstallView", "QUEUE", "EXCHANGE"]

#: ``Bind.destination_kind`` values.
QUEUE, EXCHANGE = "queue", "exchange"


def _table() -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True, slots=True)
class DeclareExchange:
    """Exchange.Declare (not passive): create exchange ``name`` of ``type`` (direct, fanout,
    topic, headers) or check that it exists with these attributes (406 otherwise)."""

    vhost: str
    name: str
    type: str = "direct"
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=_table)


@dataclass(frozen=True, slots=True)
class DeleteExchange:
    """Exchange.Delete: with its bindings (as source and destination); ``if_unused``: only when
    it is the source of no binding (406 otherwise)."""

    vhost: str
    name: str
    if_unused: bool = False


@dataclass(frozen=True, slots=True)
class DeclareQueue:
    """Queue.Declare (not passive; a server-named queue already has its ``amq.gen-`` name).
    ``exclusive``: a private queue of ``connection``, living on member ``home`` (the other
    members route to it through the relay). The type comes from ``x-queue-type`` after the
    matching policy (classic shared, stream, or quorum, whose replica members the machine
    chooses from the configuration in force, as ``cluster.quorum.config`` does)."""

    vhost: str
    name: str
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    arguments: Mapping[str, Any] = field(default_factory=_table)
    connection: str = ""
    home: str = ""


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    """Queue.Delete (and the deletion of an auto-delete, expired or exclusive queue): with its
    bindings; auto-delete exchanges that lose their last binding go too."""

    vhost: str
    name: str
    connection: str = ""


@dataclass(frozen=True, slots=True)
class _Binding:
    """The fields of ``Bind`` and ``Unbind``: exchange ``source`` to ``destination``, a queue
    (``destination_kind`` "queue") or an exchange ("exchange"), with ``routing_key`` and
    ``arguments`` (a binding's identity is all four, as RabbitMQ's)."""

    vhost: str
    source: str
    destination: str
    destination_kind: str = QUEUE
    routing_key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=_table)
    connection: str = ""


@dataclass(frozen=True, slots=True)
class Bind(_Binding):
    """Queue.Bind (``destination_kind`` "queue") or Exchange.Bind ("exchange": RabbitMQ's
    exchange-to-exchange bindings)."""


@dataclass(frozen=True, slots=True)
class Unbind(_Binding):
    """Queue.Unbind / Exchange.Unbind: idempotent as in RabbitMQ (a missing binding, source or
    destination is no error); an auto-delete source that loses its last binding goes."""


@dataclass(frozen=True, slots=True)
class SetPolicy:
    """Set policy ``name`` of ``vhost`` (the management API's PUT /api/policies body, see
    ``amqp_broker.core.policies``): re-applied at once to the vhost's existing classic queues."""

    vhost: str
    name: str
    pattern: str
    definition: Mapping[str, Any]
    priority: int = 0
    apply_to: str = "queues"


@dataclass(frozen=True, slots=True)
class ClearPolicy:
    """Clear policy ``name`` of ``vhost``."""

    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class AddVhost:
    """Create vhost ``name`` (with the predeclared exchanges) or update its description and tags;
    ``creator`` (a user name, "" for none) gets full permissions in a new one, as the management
    UI does."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    creator: str = ""


@dataclass(frozen=True, slots=True)
class DeleteVhost:
    """Delete vhost ``name`` with its exchanges, queues, bindings, policies and permissions."""

    name: str


@dataclass(frozen=True, slots=True)
class PutUser:
    """Create or replace user ``name`` (its permissions stay): RabbitMQ's salted hash
    (``rabbit_password_hashing_sha256`` ...), never a password."""

    name: str
    password_hash: str
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteUser:
    """Delete user ``name`` and its permissions (its open connections stay, as RabbitMQ)."""

    name: str


@dataclass(frozen=True, slots=True)
class SetPermission:
    """Set ``user``'s three permission regular expressions in ``vhost``."""

    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(frozen=True, slots=True)
class ClearPermission:
    """Clear ``user``'s permissions in ``vhost``."""

    user: str
    vhost: str


@dataclass(frozen=True, slots=True)
class MemberGone:
    """Member ``member`` stopped, restarted or left: its private queues (exclusive to its
    connections) are deleted with their bindings, as RabbitMQ deletes exclusive queues when
    their owner's node goes down."""

    member: str


@dataclass(frozen=True, slots=True)
class SetParameter:
    """Set runtime parameter ``name`` of ``component`` in ``vhost`` (the management API's
    ``PUT /api/parameters/{component}/{vhost}/{name}``, ``ctl set_parameter``): ``value`` is
    its JSON text (an object for ``shovel`` and ``federation-upstream``, a list for
    ``federation-upstream-set``), validated by the machine as RabbitMQ 3.10 validates it (400
    with RabbitMQ's text otherwise; 404 for a missing vhost or an unknown component). Source:
    RabbitMQ "Parameters and Policies", "Dynamic Shovels", "Federation Reference"."""

    component: str
    vhost: str
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class ClearParameter:
    """Clear runtime parameter ``name`` of ``component`` in ``vhost`` (``DELETE
    /api/parameters/...``, ``ctl clear_parameter``; a shovel that completed its
    ``src-delete-after``): ``Deleted(False)`` when there was none."""

    component: str
    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class InstallView:
    """Cluster view ``view`` (a ``cluster.views`` number) replaces view ``base`` (the rule:
    ``cluster.metadata.views``): its members in order (``names``, the leader first) with their
    peer addresses (``addresses``, "host:port", the same length); ``left``: the members it
    drops because they left in order (Cluster.Leave). Proposed by the membership's round that
    decided it (``cluster.committed_views``)."""

    base: int
    view: int
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    left: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[tuple[str, str], ...]:
        """((name, address), ...) in order, as ``cluster.actions.Members``."""
        return tuple(zip(self.names, self.addresses, strict=True))


Command = (DeclareExchange | DeleteExchange | DeclareQueue | DeleteQueue | Bind | Unbind
           | SetPolicy | ClearPolicy | AddVhost | DeleteVhost | PutUser | DeleteUser
           | SetPermission | ClearPermission | MemberGone | SetParameter | ClearParameter
           | InstallView)
"""Every command of the metadata log."""
