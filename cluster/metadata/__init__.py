"""The cluster metadata log (issue 23): the commands everything members must agree on, their byte
encoding, ``MetadataMachine``, the pure state machine that every member runs over one Raft group
(``cluster.raft``) to decide each change in log order, and ``MetadataGroup``, one member's replica
and outbox of that group. Pure; the broker runs it through ``amqp_broker.clustering.metadata``
(see "Wiring" below for what is done).

Modules (read ``machine`` first):
  ``commands``   the frozen commands: exchanges, queues (classic shared, private with its home
                 member, quorum whose replica members the machine chooses), bindings (queue and
                 exchange-to-exchange), policies, vhosts, users, permissions, ``MemberGone``,
                 runtime parameters (``SetParameter`` / ``ClearParameter``: shovels,
                 federation upstreams and upstream sets).
  ``codec``      ``encode`` / ``decode`` of a command: a Raft entry's data. Bad bytes raise
                 ``MalformedMetadata`` (``wire``), nothing else.
  ``wire``       the primitive encodings and ``MalformedMetadata``.
  ``outcomes``   what a command's client is answered (``Declared``, ``Deleted``, ``Bound``,
                 ``Stored``, ``Refused(code, text)``) and ``timeout_refusal``, a minority's answer.
  ``state``      the records (a ``routing.RoutingTable`` per vhost holds exchanges and bindings).
  ``topology``   the exchange / queue / binding rules, in the single broker's order, over the pure
                 functions shared with it: ``amqp_broker.core.declare_rules`` (moved out of
                 ``VirtualHost`` for this), ``core.policies``, ``cluster.quorum.config``.
  ``parameters`` the runtime parameter rules (component, vhost, RabbitMQ's validation of the
                 value, the shovel and federation packages' pure validators).
  ``snapshot``   the canonical bytes of the state (equal states, equal bytes) and back.
  ``machine``    ``MetadataMachine``: ``apply(index, command) -> outcome``, ``apply_entry``,
                 ``configure(members)``, ``snapshot()``, ``restore(bytes)``.
  ``sessions``   exactly-once: per-origin sequence numbers (a duplicate keeps the first outcome).
  ``group``      ``MetadataGroup``: the replica (``RaftNode`` + machine) and this member's outbox,
                 the leader's duties (configuration follows the cluster view, ``MemberGone``),
                 applied-index reports for ``--sync-replies``, snapshots.

Membership stays Raft's own: ``cluster.raft`` already changes its configuration one server at a
time (thesis §4.1: a CONFIG entry holds the whole member list and is in force once appended), adds
a server as a non-voting learner until its match index reaches the commit index
(``RaftNode.add_member``, abandoned after ``Timing.catchup_rounds`` election timeouts), lets a
removed leader step down once its removal commits (``remove_member``), refuses votes from a
re-created empty member below ``vote_floor``, and reports ``MembershipChanged`` and
``committed_config``. So the membership is not a metadata command: the driver calls
``MetadataMachine.configure`` with each CONFIG entry it applies (and a snapshot carries the
members), which is what quorum queues choose their replicas from.

Wiring (DESIGN.md §4), done: one metadata Raft group per cluster (a ``RaftNode`` over a
``DiskLog`` in ``<data>/raft/metadata``, run by ``amqp_broker.clustering.metadata`` on the quorum
queues' transport, group commit and timers). A handler no longer changes the vhost in a cluster:
it checks the user's permissions and passive declares against the applied state (as RabbitMQ
reads its local Khepri copy), and proposes the command (``core.handlers.propagation.propose``),
forwarded to the leader when this member does not lead; the management API's user, vhost,
permission and policy changes do the same (``amqp_broker.management.changes``). Every member
applies committed entries to its machine and then makes its broker objects follow the records
that changed (``amqp_broker.clustering.metadata_follow``): the only path that changes definitions,
also after a restart or a joiner's catch-up (the whole state is reconciled once the replica
caught up, and after a snapshot install: a member forgets what was deleted while it was away);
``definitions.db`` is a cache of it. The proposing member answers its client from its own
machine's outcome at the index, once ``--sync-replies`` members (``all``, ``majority``, N) report
that index applied. Auto-delete, x-expires, exclusive queues of a closed connection and a stopped
member's private queues (``MemberGone``, proposed by the leader) are proposals too. Consumer
counts of shared queues stay a broadcast (soft state). A minority refuses after
``--metadata-timeout`` (default ``outcomes.TIMEOUT_MS``, RabbitMQ 4's ``khepri_default_timeout``)
with ``outcomes.timeout_refusal`` (541, RabbitMQ 4's texts); check-quorum makes a cut-off leader
step down. Exactly-once: commands carry per-origin sequence numbers (``sessions``). Upgrade: the
replica opens at the first cluster view, whose leader bootstraps an empty log with the broker's
stored definitions (one cluster restart).

Membership (step 6), done: what is published as the cluster is the view's voters of the
committed configuration, and a joiner accepts clients only once it is one (so a quorum queue
declared then is placed on it); a member that had a replica opens it at start, before any view
(Raft's restart: it serves once a majority of its last configuration is back), and never founds
a group (only a first broker or an upgrade does); the leader removes from the configuration only
members the view lost while it was in it (``MetadataGroup.departed``), not members absent after a
power loss; ``ctl force_boot`` (``cluster.force_boot``, ``RaftNode.force_configuration``) starts a
minority alone. Not done yet: Cluster.Join forwarded as a proposal to the metadata leader,
Cluster.Membership announcing ``committed_config``, Cluster.Suspect verified by the leader and
``remove_member`` directly; the vote rounds, leases and vote file (``cluster.membership``,
``rounds``, ``lease``, ``durable``, ``restart``) still install the view, which the group's
configuration follows (the leader adds and removes one member at a time). Also: Queue.Delete's ``if_unused`` / ``if_empty`` are asked of the member's
own queue before proposing (not decided in the log); changing a quorum queue's replicas after its
declaration is not a command; a command covered by a snapshot a follower installs before it
applied it is answered with the timeout refusal. Tests: ``cluster/tests/test_metadata_*.py``
(outcomes against a real single broker, codec fuzzing, the machine on the Raft engine in the
deterministic simulator, ``test_metadata_processes`` and ``test_metadata_conflicts`` with real
brokers).
"""

from .codec import decode, encode
from .commands import (
    EXCHANGE,
    QUEUE,
    AddVhost,
    Bind,
    ClearParameter,
    ClearPermission,
    ClearPolicy,
    Command,
    DeclareExchange,
    DeclareQueue,
    DeleteExchange,
    DeleteQueue,
    DeleteUser,
    DeleteVhost,
    MemberGone,
    PutUser,
    SetParameter,
    SetPermission,
    SetPolicy,
    Unbind,
)
from .machine import MetadataMachine
from .outcomes import Bound, Declared, Deleted, Outcome, Refused, Stored, timeout_refusal
from .wire import MalformedMetadata

__all__ = [
    "MetadataMachine", "encode", "decode", "MalformedMetadata", "Command", "DeclareExchange",
    "DeleteExchange", "DeclareQueue", "DeleteQueue", "Bind", "Unbind", "SetPolicy",
    "ClearPolicy", "AddVhost", "DeleteVhost", "PutUser", "DeleteUser", "SetPermission",
    "ClearPermission", "MemberGone", "SetParameter", "ClearParameter", "QUEUE", "EXCHANGE",
    "Outcome", "Declared", "Deleted", "Bound", "Stored", "Refused", "timeout_refusal",
]
