"""The broker's side of clustering, in one package: what the composition root (``app``) starts
when the broker is a cluster member, and the cluster's command-line tools.

Modules, one job each:

* ``runtime`` -- ``start_cluster`` / ``leave_cluster``: builds the membership node, the peer links
  (``cluster.links``) and the driver (``cluster.driver``) and plugs them into the core's seams
  (``core.broker``: peer authentication, the peer handler, propagation hooks, the relay sink);
* ``replay`` -- the broker's state as the AMQP methods a joiner replays, and the ping load figures;
* ``quorum`` (with ``quorum_members``, ``quorum_timers``) -- quorum queues' I/O: one Raft group per
  queue (``cluster.quorum``), its disk log
  synced in a worker thread, its messages on the peer links;
* ``discovery`` -- finding the members by mDNS (``--cluster NAME`` without ``--seed``);
* ``cli`` -- ``amqp-broker cluster-status``; ``local`` -- ``make cluster`` (N brokers here).

The pure parts (membership, Raft, the Cluster method codec, the quorum state machine) are in the
top-level ``cluster`` package, which never imports the broker.
"""

from .runtime import SecretAuth, leave_cluster, parse_seeds, start_cluster

__all__ = ["SecretAuth", "leave_cluster", "parse_seeds", "start_cluster"]
