"""Durable message store for persistent messages on durable queues (issue 4).

Public API (see ``store`` for the contract and ``format`` for the on-disk layout)::

    store = MessageStore(directory, segment_bytes=64 << 20, sync="batch")
    recovered = store.recover()          # {queue: [RecoveredMessage, ...]} in publish order
    sid = store.append(["q1", "q2"], message)   # buffered, not durable
    durable = store.sync()               # one write + one fdatasync; confirm ids <= durable
    store.mark_delivered("q1", sid); store.ack("q1", sid); store.delete_queue("q2")
    body = store.read_body(sid)          # paging
    store.close()

Must not know: sockets, event loops, channels. Time is not used at all: the caller decides when to
sync (once per event-loop iteration).
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
