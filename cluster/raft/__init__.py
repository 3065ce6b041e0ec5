"""Raft consensus for replicated queues (issue 12): one Raft group per queue, sans-IO.

Modules (each owns one job; read ``node`` first):
  ``messages``  values: ``Entry`` (index, term, kind, data), ``Snapshot``, ``PersistentState``, the
                RPCs (RequestVote[Reply] incl. pre-vote, AppendEntries[Reply], InstallSnapshot,
                TimeoutNow).
  ``actions``   outputs of the core (``Send``, ``PersistState``, ``AppendLog``, ``PersistSnapshot``,
                ``Apply``, ``Restore``, ``CommitAdvanced``, ``StateChanged``,
                ``MembershipChanged``), ``Timing``, ``Role``, ``Proposed`` / ``NotLeader``.
  ``node``      ``RaftNode``: elections, pre-vote, the follower side, commit and apply.
  ``leader``    its leader half: batched, pipelined replication, commit rule, check-quorum,
                leadership transfer, single-server membership changes.
  ``progress``  the leader's per-follower match/next index and flow control.
  ``raftlog``   the in-memory log view of the core (entries after the last snapshot).
  ``storage``   the ``RaftStorage`` protocol and ``MemoryStorage`` (simulator, tests).
  ``disklog``   ``DiskLog``: the on-disk log (format in its docstring), group commit, recovery.
  ``marks``     how far a replica's log was durable, and a copy of its term and vote: at open, a
                replica tells a loss of acknowledged entries (a damaged, truncated or older file)
                from a torn unsynced tail, and then votes again only once caught up
                (``PersistentState.floor``).
  ``codec``     ``encode(message) -> bytes`` / ``decode(bytes)`` for peer links.
  ``fifo``      ``FifoQueue``: the quorum queue's state machine (commands in, effects out: deliver,
                confirm, reject, dead-letter; delivery-limit, overflow, TTL, SAC, dedup window).
  ``fifo_ready`` its message record and its paged ready backlog as columns of integers.
No module but ``disklog`` and ``marks`` does I/O; the core never reads a clock (``now_ms`` comes in).

Driving one replica (the lead's queue-type seam; one ``RaftNode`` per queue per member)::

    storage = DiskLog(data_dir / "raft" / queue_id)               # replays, cuts torn tails
    state = storage.load()
    node = RaftNode(my_id, state, now_ms, Timing(), random.Random(),
                    bootstrap=initial_members if brand_new_group else ())
    sm.restore(state.snapshot.index, state.snapshot.data)        # when state.snapshot.index
    run(node.tick(now_ms))                  # at least every heartbeat_ms, or at next_deadline()
    run(node.receive(peer_id, message, now_ms))                  # each message from a peer link
    result, actions = node.propose(command_bytes)                # or propose_batch([...])
    run(actions)                      # result: Proposed(index, term) | NotLeader(leader hint)
    # after the group-commit fsync (in a worker thread: pending, newest = storage.flush();
    # pending.run(); then on the loop):
    run(node.persisted(*newest))                                 # when newest is not None
    run(node.snapshot_taken(index, sm.snapshot()))               # every N applied entries
    run(node.transfer_leadership())                              # orderly stop
    ok, actions = node.add_member(new_id) / node.remove_member(old_id)

    def run(actions):              # in list order
        Send(to, msg)              -> encode and send on the peer link (loss is fine)
        PersistState(term, vote)   -> storage.save_state(...)       durable before what follows
        AppendLog(first, entries)  -> storage.append(...)           buffered: group commit
        PersistSnapshot(s, discard)-> storage.save_snapshot(...)    durable before what follows
        Apply(entries)             -> sm.apply(e.index, e.data) for e.kind == COMMAND
        Restore(snapshot)          -> sm.restore(snapshot.index, snapshot.data)
        CommitAdvanced(n)          -> leader: confirm publishes whose Proposed(index, term) has
                                      index <= n and node.log.term_at(index) == term
        StateChanged(role, term, leader)   -> route publishes to the leader; stop delivering
                                              when not leader
        MembershipChanged(members, index)  -> open/close peer links, report replicas

The state machine is abstract: ``apply(index, command bytes)``, ``snapshot() -> bytes``,
``restore(index, bytes)``. Apply runs on every replica for committed entries only, so effects
(deliveries, confirms, dead-letters) come from the replica that leads; a leader cut off from a
majority steps down within two election timeouts (check-quorum) and can never commit, so the
minority side neither confirms nor delivers new work.

Sources: Ongaro and Ousterhout 2014 (Raft paper, §5, §7, §8, figure 2); Ongaro's PhD thesis
(§3.10, §4.1-§4.2, §6.2, §9.6, §10.2.1); etcd/raft (flow control, rejection hints); RabbitMQ Ra.
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)

from .actions import (
    Action,
    AppendLog,
    Apply,
    CommitAdvanced,
    MembershipChanged,
    NotLeader,
    PersistSnapshot,
    PersistState,
    Proposed,
    ProposeResult,
    Restore,
    Role,
    Send,
    StateChanged,
    Timing,
)
from .messages import Entry, EntryKind, Message, PersistentState, Snapshot
from .node import RaftNode
from .storage import MemoryStorage, RaftStorage

__all__ = [
    "RaftNode", "Timing", "Role", "Action", "Send", "PersistState", "AppendLog",
    "PersistSnapshot", "Apply", "Restore", "CommitAdvanced", "StateChanged", "MembershipChanged",
    "Proposed", "NotLeader", "ProposeResult", "Entry", "EntryKind", "Message", "PersistentState",
    "Snapshot", "RaftStorage", "MemoryStorage",
]
