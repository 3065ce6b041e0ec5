"""Quorum queues larger than RAM: a replica's bodies stay in its Raft log on disk (issue 25).

Owns: wiring one replica's ``DiskLog`` to its Raft node and state machine so that neither keeps
the bodies of a backlog in memory, as RabbitMQ's quorum queues since 3.10 ("Quorum Queues",
"Memory usage": only a small record per message in memory, bodies read back from the log's
segments on delivery; rabbit_fifo keeps the Raft index of a message and reads it from ``ra_log``):

* ``page``: the machine reads a paged message's header and body back by its message id (the
  Raft index of its Enqueue: from the node's in-memory log when still there, else from the
  segment, ``DiskLog.read``), and the node's log reads back entries it dropped;
* ``batches``: an ``Apply`` batch gets the data of entries loaded without it back (the log
  is opened ``lazy``: a restart reads neither the backlog nor an object per entry into
  memory; its entries are runs of terms, ``PersistentState.dry``, and the replay's ``Apply``
  builds an ``Entry`` only per part of ``BATCH_ENTRIES``);
* ``applied``: after an ``Apply``, the entries applied and written leave memory but for their
  terms (``RaftLog.dry``: runs of terms): a follower that lags is sent them from the segments;
* ``persisting``: before a snapshot is persisted, the log is told its floor (the oldest live
  paged message, ``cluster.quorum.machine.snapshot_floor``): no segment holding a live
  message's entry is deleted ("the log can be truncated only up to the oldest live message");
  the snapshot image itself holds no paged body (nor the header of a message in a tail);
* ``outgoing``: an InstallSnapshot to a follower carries the headers and bodies
  (``QuorumMachine.hydrate``),
  since that follower has none of those entries; it keeps them in its own snapshot.
What a ready message costs then (issue 25, ``benchmarks.quorum_rss``): about 12 bytes in the
state machine's columns (``cluster.raft.fifo_ready``), 8 in ``DiskLog``'s position map, nothing
in the Raft log's memory: about 40 bytes of RSS measured at 102,400 x 1 KiB.
Must not know: AMQP, the network, timers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from cluster.quorum.group import QuorumGroup
from cluster.quorum.machine import NO_FLOOR, enqueue_message, snapshot_floor
from cluster.raft.actions import PersistSnapshot, PersistState
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import Entry, EntryKind, InstallSnapshot, Message
from cluster.raft.raftlog import RaftLog

__all__ = ["page", "batches", "BATCH_BYTES", "BATCH_ENTRIES", "LOST", "applied", "persisting", "outgoing",
           "body_reader"]

log = logging.getLogger(__name__)
#: Bytes of entry data read back for one part of a replayed ``Apply`` batch, and its most
#: entries (the runtime yields to the event loop between parts of a replay).
BATCH_BYTES = 4 << 20
BATCH_ENTRIES = 1024
#: (header, body) of a message the log lost: no exchange, no routing key, then a content
#: header of class 60 (basic), body size 0, no property (``cluster.quorum.queue.join_header``'s
#: layout), and no body.
LOST = (b"\x00\x00" + b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x00\x00", b"")


def body_reader(raft_log: RaftLog, disk: DiskLog, name: str
                ) -> Callable[[int], tuple[bytes, bytes]]:
    """msg id -> (header, body) of the Enqueue at that Raft index: from ``raft_log`` while it
    holds the entry's data, else read from ``disk``. A message the log no longer holds (it
    never should) is logged as an error naming queue ``name`` (the first of a run of them) and
    read as ``LOST`` (an empty message with no exchange, routing key or properties) rather than
    stopping the replica."""
    failed = [0]

    def read(index: int) -> tuple[bytes, bytes]:
        try:
            if raft_log.dry_to < index <= raft_log.last_index:
                data = raft_log.entry(index).data
            else:
                data = disk.read(index)
            message = enqueue_message(data)
        except (LookupError, ValueError, OSError) as exc:
            if failed[0] != index - 1:
                log.error("quorum queue %r: cannot read message %d from the Raft log: %s",
                          name, index, exc)
            failed[0] = index
            return LOST
        return message
    return read


def page(group: QuorumGroup, disk: DiskLog, name: str) -> None:
    """Turn paging on for ``group``'s replica over ``disk`` (see the module docstring). The
    environment variable ``AMQP_QUORUM_PAGE_BYTES`` sets how many bytes of ready bodies a queue
    keeps in memory (default ``cluster.raft.fifo.PAGE_BYTES``, 1 MiB; 0: none, every body is
    read back from the log: the tests use it); ``AMQP_QUORUM_SNAPSHOT_ENTRIES`` the entries
    between snapshots (default ``cluster.quorum.group.SNAPSHOT_MIN_ENTRIES``; tests: fewer)."""
    raft_log = group.node.log
    raft_log.reader = disk.read
    if disk.lazy:   # the entries it loaded came without their data: only their terms stay
        raft_log.dry(raft_log.last_index)
    disk.release_loaded()
    group.machine.fifo.read = body_reader(raft_log, disk, name)   # kept by restore()
    page_bytes = os.environ.get("AMQP_QUORUM_PAGE_BYTES", "")
    if page_bytes.isdigit():
        group.machine.fifo.page_bytes = int(page_bytes)
    entries = os.environ.get("AMQP_QUORUM_SNAPSHOT_ENTRIES", "")
    if entries.isdigit() and int(entries) > 0:
        group.snapshot_min_entries = int(entries)


def batches(group: QuorumGroup, batch: Sequence[Entry]) -> Iterator[Sequence[Entry]]:
    """An ``Apply`` batch, as is or -- when it holds entries loaded without their data
    (``DiskLog.lazy``: after a restart; ``RaftLog.held`` gives them as ``DryEntries``, an
    ``Entry`` built as each is read) -- in parts of at most ``BATCH_BYTES`` of data read back
    and ``BATCH_ENTRIES`` entries, so that replaying a backlog holds neither its data nor an
    object per entry in memory beyond one part."""
    raft_log = group.node.log
    read = raft_log.reader
    if read is None or not batch or batch[0].index > raft_log.dry_to:
        yield batch
        return
    dry = raft_log.dry_to
    part: list[Entry] = []
    size = 0
    for e in batch:
        if e.kind is EntryKind.COMMAND and not e.data and e.index <= dry:
            e = Entry(e.index, e.term, e.kind, read(e.index))
        part.append(e)
        size += len(e.data)
        if size >= BATCH_BYTES or len(part) >= BATCH_ENTRIES:
            yield tuple(part)
            part, size = [], 0
    if part:
        yield tuple(part)


def applied(group: QuorumGroup, disk: DiskLog) -> None:
    """After an ``Apply``: the entries applied and written drop their data from memory."""
    raft_log = group.node.log
    if raft_log.reader is not None:
        raft_log.dry(min(group.machine_index, disk.readable_to))


def persisting(group: QuorumGroup, disk: DiskLog, act: PersistState | PersistSnapshot) -> None:
    """Before ``act`` runs: a snapshot's floor is given to ``disk``, which keeps every segment
    from there on when the snapshot is persisted."""
    if not isinstance(act, PersistSnapshot) or group.node.log.reader is None:
        return
    floor = snapshot_floor(act.snapshot.data)
    disk.retain_from = 0 if floor is None or floor >= NO_FLOOR else floor


def outgoing(group: QuorumGroup, message: Message) -> Message:
    """``message`` as sent to a follower: an InstallSnapshot with its paged bodies filled in."""
    if not isinstance(message, InstallSnapshot) or group.node.log.reader is None:
        return message
    snap = message.snapshot
    return replace(message, snapshot=replace(snap, data=group.machine.hydrate(snap.data)))
