"""Durable message store for persistent messages on durable queues (issue 4).

Modules: ``format`` (on-disk layout: magic, version, records; read it first), ``index`` (in-memory
location and holder bookkeeping, 20 bytes per message), ``recovery`` (replay, torn-tail cutting),
``store`` (``MessageStore``: writing, group commit, paging reads, segment deletion, compaction),
``bench`` (``python -m queues.store.bench``).

Public API::

    store = MessageStore(directory, segment_bytes=64 << 20, sync="batch")   # replays the log
    for queue, rec in store.iter_recovered(body_budget=...):   # or store.recover() -> dict
        ...  # rec.store_id, rec.message (Message, store_id set), rec.redelivered, rec.body_loaded
    sid = store.append(["q1", "q2"], message)    # buffered; sets message.store_id
    durable = store.sync()                       # one write + one fdatasync; confirm ids <= it
    store.mark_delivered("q1", sid)              # memory only
    store.ack("q1", sid) / store.ack_many("q1", ids)
    store.delete_queue("q2")
    body = store.read_body(sid)                  # page a body back in
    store.close()

Integration (what the broker core does):
  * Start: open ``MessageStore(data_dir / "msgs")`` after loading definitions; rebuild each durable
    queue from ``iter_recovered()`` (set Basic.Deliver's redelivered from ``rec.redelivered``);
    ``delete_queue`` any stored queue that no longer exists in the definitions.
  * Publish: for a persistent message (``message.persistent``) routed to durable queues, call
    ``append(durable_queue_names, message)`` once; transient messages and transient queues never
    touch the store. In confirm mode, hold the confirm (``ConfirmTracker.settle`` later).
  * Once per event-loop iteration (after handling every frame read in it): ``durable = sync()``;
    settle as acked every pending confirm whose ``store_id <= durable``. To keep the loop free
    during the fsync: ``pending = store.flush()`` in the loop, ``pending.run()`` in a worker
    thread, ``store.synced(pending)`` back in the loop (one outstanding at a time).
  * Deliver: ``mark_delivered(queue, sid)``. Settle: ``ack(queue, sid)`` when a consumer acks,
    on reject/nack without requeue, dead-lettering (after appending the dead-lettered copy to its
    target queues), TTL expiry, max-length drops and purge; ``delete_queue`` on queue deletion.
  * Paging: under a per-queue memory budget, drop ``message.body`` of queued persistent messages
    and call ``read_body(sid)`` when the consumer needs them.
  * Stop: ``close()`` (writes the CLEAN record, so only delivered messages come back redelivered).

Must not know: sockets, event loops, channels. Time is not used at all: the caller decides when to
sync. Sources: Kafka ``LogSegment``/``OffsetIndex`` (segments by base offset, recovery truncation),
RabbitMQ "Persistence Configuration" and "Reliability Guide" (group commit, confirms after fsync,
redelivered after recovery).
"""

from .format import FormatError
from .store import (
    SYNC_POLICIES,
    MessageStore,
    PendingSync,
    RecoveredMessage,
    StoreError,
    StoreStats,
)

__all__ = ["MessageStore", "RecoveredMessage", "PendingSync", "StoreStats", "StoreError",
           "FormatError", "SYNC_POLICIES"]
