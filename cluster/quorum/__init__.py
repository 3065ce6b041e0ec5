"""Quorum queues (issue 12): ``x-queue-type: quorum`` queues replicated by Raft, the pure part.

Modules (one job each; the I/O glue is ``amqp_broker.clustering.quorum``):
  ``config``   the declaration: arguments accepted (406 for others), ``FifoConfig``, the
               deterministic choice of the group's members and its id (hidden arguments
               ``x-quorum-members`` / ``x-quorum-group`` travel with the Queue.Declare).
  ``machine``  ``QuorumMachine``: ``cluster.raft.fifo.FifoQueue`` behind exactly-once commands
               (per-origin seqs: re-sending to a new leader is idempotent), Down of a member,
               incarnations of restarted brokers.
  ``outbox``   this broker's unapplied commands, numbered, kept for re-sending.
  ``group``    ``QuorumGroup``: a replica (``RaftNode`` + machine) and the outbox; routes
               commands to the leader, applies committed entries, leader duties, snapshots.
  ``remote``   ``RemoteGroup``: a broker outside the group (no replica): forwards its commands,
               receives its consumers' deliveries from the leader.
  ``shipping`` the leader -> outside broker deliveries (``Ship``) and its ``Holding`` reports.
  ``queue``    ``QuorumQueue``: the ``queues.queue_type.QueueType`` the core uses.

Design (DESIGN.md §4 "Replicated queues"): the group is the members of the cluster view at
declare time, up to ``x-quorum-initial-group-size`` (default 3). A publish on any member becomes
an Enqueue forwarded to the leader; its confirm goes out when that member's own replica applies it
(applied = committed = persisted on a majority). A consumer on any member is a Checkout; every
replica applies the same log and the member hosting the consumer delivers from its own replica;
a broker outside the group gets its consumers' deliveries shipped by the leader (the checkout is
replicated, so a new leader takes the delivering over). A member that leaves the view has its
consumers cancelled (their messages redelivered). The Raft
election picks a new leader among the survivors; a minority side never commits, so it neither
confirms nor delivers new work.
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)
