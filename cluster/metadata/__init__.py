"""The cluster metadata log (issue 23, step one of several): the commands everything members must
agree on, their byte encoding, and ``MetadataMachine``, the pure state machine that every member
runs over one Raft group (``cluster.raft``) to decide each change in log order. Not wired into
the broker yet: nothing in a running broker uses this package today.

Modules (read ``machine`` first):
  ``commands``   the frozen commands: exchanges, queues (classic shared, private with its home
                 member, quorum whose replica members the machine chooses), bindings (queue and
                 exchange-to-exchange), policies, vhosts, users, permissions, ``MemberGone``.
  ``codec``      ``encode`` / ``decode`` of a command: a Raft entry's data. Bad bytes raise
                 ``MalformedMetadata`` (``wire``), nothing else.
  ``wire``       the primitive encodings and ``MalformedMetadata``.
  ``outcomes``   what a command's client is answered (``Declared``, ``Deleted``, ``Bound``,
                 ``Stored``, ``Refused(code, text)``) and ``timeout_refusal``, a minority's answer.
  ``state``      the records (a ``routing.RoutingTable`` per vhost holds exchanges and bindings).
  ``topology``   the exchange / queue / binding rules, in the single broker's order, over the pure
                 functions shared with it: ``amqp_broker.core.declare_rules`` (moved out of
                 ``VirtualHost`` for this), ``core.policies``, ``cluster.quorum.config``.
  ``snapshot``   the canonical bytes of the state (equal states, equal bytes) and back.
  ``machine``    ``MetadataMachine``: ``apply(index, command) -> outcome``, ``apply_entry``,
                 ``configure(members)``, ``snapshot()``, ``restore(bytes)``.

Membership stays Raft's own: ``cluster.raft`` already changes its configuration one server at a
time (thesis §4.1: a CONFIG entry holds the whole member list and is in force once appended), adds
a server as a non-voting learner until its match index reaches the commit index
(``RaftNode.add_member``, abandoned after ``Timing.catchup_rounds`` election timeouts), lets a
removed leader step down once its removal commits (``remove_member``), refuses votes from a
re-created empty member below ``vote_floor``, and reports ``MembershipChanged`` and
``committed_config``. So the membership is not a metadata command: the driver calls
``MetadataMachine.configure`` with each CONFIG entry it applies (and a snapshot carries the
members), which is what quorum queues choose their replicas from.

Plan for wiring it (later sessions; DESIGN.md §4):
- Today a member applies a change first and broadcasts it after: ``amqp_broker.core.handlers``
  decide through ``VirtualHost`` and then call ``handlers.propagation.reply``, which hands the
  client's method to ``cluster.driver.ClusterDriver.propagate`` (Cluster.InVhost to every member,
  each applying it through its own handlers; the Ok after the ``--sync-replies`` count);
  ``core.access_store`` and ``core.policy_store`` send Cluster.Definition / Cluster.Policy the same
  way; a joiner gets a replay (``cluster.syncing``). A refusal elsewhere undoes nothing.
- What replaces it: one metadata Raft group per cluster (a ``RaftNode`` over a ``DiskLog`` in
  ``<data>/raft/metadata``, driven like ``cluster.quorum.group``). A handler no longer changes the
  vhost: it checks the user's permissions and passive declares against the applied state (as
  RabbitMQ reads its local Khepri copy), encodes the command and proposes it, forwarded to the
  leader when this member does not lead. Every member applies committed entries to its machine and
  then makes its broker objects follow the records that changed (queue objects, routing tables,
  stored messages dropped with a deleted queue, connections of a deleted vhost closed): the only
  path that changes definitions, also for recovery (replay the log over the last snapshot; the
  definitions database becomes a cache of it, or goes). The proposing member answers its client
  from its own machine's outcome at the index the leader gave, once ``--sync-replies`` members
  (``all``, ``majority``, N) report that index applied (a follower's applied index needs a report
  of its own: Raft's match index says stored, not applied). Deletions a member decides alone
  today (auto-delete, x-expires, exclusive queues of a closed connection, a stopped member's
  private queues: ``MemberGone``) become proposals too. Consumer counts of shared queues stay a
  broadcast (soft state).
- Qpid's vocabulary on top: Cluster.Join to any member is forwarded to the leader, which runs
  ``add_member`` (learner first, then a CONFIG entry); Cluster.Membership announces the committed
  configuration (``committed_config``: its log index is the view number that only grows), ordered
  with the leader first; the ring ping stays the failure detector and a suspicion goes to the
  leader as Cluster.Suspect, which verifies it (no answer within the check-quorum period) and runs
  ``remove_member``; Leave is ``remove_member`` of oneself (after ``transfer_leadership`` when
  leading); Cluster.Synch tells a joiner its catch-up (InstallSnapshot plus the log up to the
  commit index of its CONFIG entry) is done, and it accepts clients only then. The vote rounds,
  leases and vote file (``cluster.membership``, ``rounds``, ``lease``, ``durable``, ``restart``)
  retire then; after a power loss the cluster serves once a majority of the last configuration is
  back; ``ctl force_boot`` (RabbitMQ's name) would append a CONFIG entry of the survivors alone,
  for an operator who knows the rest is gone.
- A minority refuses definition changes after a bounded wait: a member whose proposal is not
  committed within ``outcomes.TIMEOUT_MS`` (RabbitMQ 4's ``khepri_default_timeout``, 30 s) answers
  with ``outcomes.timeout_refusal``: 541 INTERNAL_ERROR, a connection error, with RabbitMQ 4's
  texts for a Khepri timeout ("failed to declare exchange 'x' in vhost '/' because the operation
  timed out", "Could not declare queue 'q' in vhost '/' on node 'n' because the metadata store
  operation timed out", "Could not add binding due to timeout", ...; ``rabbit_channel``,
  ``rabbit_amqqueue_process``, ``rabbit_amqqueue``). Check-quorum makes a cut-off leader step down,
  so the minority side has no leader and commits nothing. Publishing and consuming on existing
  queues do not touch the log and go on.
- Upgrade: a member with an old ``definitions.db`` and vote file and no metadata log proposes its
  stored definitions as commands when it bootstraps the group (one cluster restart).

Not done yet (this package is only the pure core): all of the wiring above; exactly-once commands
(a forwarded command re-sent after a leader change may commit twice: most commands are
idempotent in effect but the second answer can differ; the fix is ``cluster.quorum.machine``'s
per-origin sequence numbers, with the first outcome kept for a duplicate, Raft paper §8);
Queue.Delete's ``if_unused`` / ``if_empty`` (the member asks its queue before proposing);
changing a quorum queue's replicas after its declaration (``ctl add_member`` / ``delete_member``
as commands); the process tests, the fault harness's definitions workload and the benchmarks of
issue 23. Tests: ``cluster/tests/test_metadata_*.py`` (outcomes against a real single broker,
codec fuzzing, and the machine on the Raft engine in the deterministic simulator).
"""

from .codec import decode, encode
from .commands import (
    EXCHANGE,
    QUEUE,
    AddVhost,
    Bind,
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
    "ClearPermission", "MemberGone", "QUEUE", "EXCHANGE", "Outcome", "Declared", "Deleted",
    "Bound", "Stored", "Refused", "timeout_refusal",
]
