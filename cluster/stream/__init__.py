"""Replicated streams (issue 25): ``x-queue-type: stream`` declared in a cluster, one Raft group per
stream on ``cluster.raft`` (the one consensus engine), the pure part.

Modules (one job each; the I/O is ``amqp_broker.clustering.stream`` and ``stream_queue``):
  ``machine``  ``StreamMachine``: Appends get offsets and timestamps in log order, the leader's
               Retain drops the same head segments everywhere, per-origin seqs make re-sent
               publishes apply once; the entry encodings.
  ``group``    ``StreamGroup``: a replica (``RaftNode`` + machine) and the outbox of this broker's
               publishes, with the interface of ``cluster.quorum.group.QuorumGroup`` the quorum
               runtime drives; retention proposals; snapshots once the segments hold the records.

Design: a publish on any member becomes an Append forwarded to the leader; its confirm goes out
when that member's replica applied it (committed: a majority of the Raft logs hold it). Every
replica writes the records it applies to its own segment files (``queues.stream.log``), so the
same offsets and timestamps are everywhere and consumers on any member read that member's replica.
Why Raft rather than an Osiris-like log: ``amqp_broker.clustering.stream``'s docstring.
"""
