"""What the metadata state machine holds: vhosts with their exchanges, bindings and queues, users,
permissions, policies, runtime parameters (shovels, federation upstreams), and the configuration
(member list) in force.

Owns the records and their containers; ``topology`` and ``machine`` change them by the rules.
Exchanges and bindings live in a ``routing.RoutingTable`` per vhost, the same class a broker
routes with, so cascades (auto-delete exchanges, a deleted exchange's bindings) and binding
validation (headers ``x-match``) are the broker's own. Must not know: Raft, bytes (``snapshot``
encodes this), the broker's objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amqp_broker.core.access import Account, Grant
from amqp_broker.core.policies import Policies
from cluster.quorum.config import GROUP_ARG, MEMBERS_ARG
from routing.table import RoutingTable

__all__ = ["QueueRecord", "VhostState", "MetadataState"]


@dataclass(slots=True)
class QueueRecord:
    """One queue as every member knows it. ``owner``: the connection id of a private
    (exclusive) queue, "" for a shared one; ``home``: the member a private queue lives on;
    ``arguments``: what it was made with (the client's, plus a policy's keys and marks, plus for
    a quorum queue its replica members and group id, ``cluster.quorum.config``); ``queue_type``:
    classic, stream or quorum."""

    name: str
    durable: bool
    auto_delete: bool
    owner: str
    home: str
    arguments: dict[str, Any]
    queue_type: str

    @property
    def exclusive(self) -> bool:
        """A private queue of one connection."""
        return bool(self.owner)

    @property
    def replicas(self) -> tuple[str, ...]:
        """The members holding a quorum queue's Raft group (sorted), () for other types."""
        members = self.arguments.get(MEMBERS_ARG)
        return tuple(sorted(members.split(","))) if isinstance(members, str) and members else ()

    @property
    def group(self) -> str:
        """A quorum queue's group id ("" for other types)."""
        return str(self.arguments.get(GROUP_ARG) or "")


@dataclass(slots=True)
class VhostState:
    """One vhost: ``routing`` (exchanges and bindings), ``queues`` by name, its metadata."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    routing: RoutingTable = field(default_factory=RoutingTable)
    queues: dict[str, QueueRecord] = field(default_factory=dict)

    def add_queue(self, record: QueueRecord) -> None:
        """Register ``record`` (the default exchange routes its name to it)."""
        self.queues[record.name] = record
        self.routing.add_queue(record.name)

    def remove_queue(self, name: str) -> tuple[str, ...]:
        """Forget queue ``name`` and its bindings; returns the auto-delete exchanges that went
        with them, sorted."""
        self.queues.pop(name, None)
        return tuple(sorted(self.routing.remove_queue(name)))


@dataclass(slots=True)
class MetadataState:
    """Everything: ``vhosts`` by name, ``users`` (``core.access.Account``, ``loopback_only``
    always False: that is each broker's configuration), ``permissions`` by (user, vhost),
    ``policies`` (``core.policies.Policies``), ``members`` (the configuration in force, sorted),
    ``parameters`` (runtime parameters: (vhost, component, name) -> the value's JSON text),
    ``view`` / ``view_members`` (the last committed cluster view, 0 / (): none yet;
    ``cluster.metadata.views``)."""

    vhosts: dict[str, VhostState] = field(default_factory=dict)
    users: dict[str, Account] = field(default_factory=dict)
    permissions: dict[tuple[str, str], Grant] = field(default_factory=dict)
    policies: Policies = field(default_factory=Policies)
    members: tuple[str, ...] = ()
    parameters: dict[tuple[str, str, str], str] = field(default_factory=dict)
    view: int = 0
    view_members: tuple[tuple[str, str], ...] = ()
