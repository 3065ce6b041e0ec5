"""The broker's side of persistence: which messages go to the message store, when they leave it, and
when publisher confirms for them may go out.

Owns the contract with ``queues.store.MessageStore`` (DESIGN.md §5, issue "Durable broker"): a
persistent message (delivery-mode 2) routed to durable queues is appended once for all of them; each
durable queue then owns its part through its ``QueueJournal`` (the queue-type seam: the queue calls
it as entries are delivered and leave -- ack, no-ack delivery, reject, dead-letter, expiry,
max-length, purge; a deleted queue's records go with ``queue_deleted``); a confirm for a stored message is deferred until a
group-commit sync covers its store id. The fsync itself runs in the I/O layer (a worker thread); it
tells us with ``synced(durable_id)``. Must not know: sockets, threads, event loops.
Source: RabbitMQ "Reliability Guide" (confirms mean "persisted to disk" for persistent messages on
durable queues), "Persistence Configuration".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from queues.store.values import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from queues.entry import QueueEntry
    from queues.message import Message
    from queues.queue_type import QueueType
    from queues.store.store import MessageStore
    from routing.destination import Destination
    from routing.exchange import Exchange

    from ..definitions.store import DefinitionsStore
    from .channel import Channel

__all__ = ["Durability", "QueueJournal", "store_key"]

log = logging.getLogger(__name__)


def store_key(vhost: str, queue: str) -> str:
    """The message store's name for ``queue`` of ``vhost`` (queue names are per vhost)."""
    return queue if vhost == "/" else f"{vhost}\x1f{queue}"


class QueueJournal:
    """One durable classic queue's persistence over the shared message store
    (``queues.queue_type.Journal``): the queue calls it as its stored entries move, so that
    handlers, consumers and the relay never touch the store. ``key`` is the store's name of the
    queue (``store_key``)."""

    __slots__ = ("durability", "key")

    def __init__(self, durability: Durability, key: str) -> None:
        self.durability = durability
        self.key = key

    def delivered(self, entry: QueueEntry) -> None:
        """The entry went to a consumer that must settle it: after a crash it comes back
        redelivered."""
        store = self.durability.store
        if store is not None:
            store.mark_delivered(self.key, entry.message.store_id)  # type: ignore[arg-type]

    def settled(self, entries: Iterable[QueueEntry]) -> None:
        """The entries left the queue for good: one ack record for all of those stored."""
        ids = [sid for e in entries if (sid := e.message.store_id) is not None]
        if ids:
            self.durability.forget_ids(self.key, ids)


class Durability:
    """Persistence hooks of one broker. ``store`` is None for a broker without a message store
    (then persistent messages live in memory only and confirms are immediate)."""

    __slots__ = ("store", "definitions", "on_dirty", "dirty", "waiting")

    def __init__(self, store: MessageStore | None = None,
                 definitions: DefinitionsStore | None = None) -> None:
        self.store = store
        #: Durable exchanges, queues and bindings (SQLite); None: definitions are not kept.
        self.definitions = definitions
        #: Called (no arguments) when the store has writes that need a sync; set by the I/O layer.
        self.on_dirty: Callable[[], None] | None = None
        self.dirty = False
        #: Channels holding confirms until a sync covers their messages.
        self.waiting: set[Channel] = set()

    def _mark_dirty(self) -> None:
        if not self.dirty:
            self.dirty = True
            if self.on_dirty is not None:
                self.on_dirty()

    def journal(self, key: str) -> QueueJournal | None:
        """The journal of the durable queue stored as ``key``; None without a message store."""
        return None if self.store is None else QueueJournal(self, key)

    def store_message(self, message: Message, keys: list[str]) -> int:
        """Append ``message`` for the durable queues ``keys`` (``store_key`` names); returns its
        store id (also set as ``message.store_id``). Raises ``OSError`` from the file system."""
        assert self.store is not None
        sid = self.store.append(keys, message)
        self._mark_dirty()
        return sid

    def page_in(self, key: str, store_id: int) -> Message | None:
        """Read message ``store_id`` of durable queue ``key`` back from the store (a paged-out
        ready message reaching the head; see ``queues.paged_list``). None when it cannot be read:
        the record failed its checksum (logged; the queue's hold on it is released so it does not
        come back at every start) or no queue holds it any more (logged)."""
        store = self.store
        if store is None:
            return None
        try:
            return store.read_message(store_id)
        except KeyError:
            log.error("paged message %d of queue %r is not in the message store", store_id, key)
        except StoreError as exc:
            log.error("paged message %d of queue %r is lost: %s", store_id, key, exc)
            if store.ack(key, store_id):
                self._mark_dirty()
        return None

    def forget_ids(self, key: str, store_ids: list[int]) -> None:
        """``forget`` for many store ids of one queue at once (one ACK record in the store)."""
        if self.store is not None and self.store.ack_many(key, store_ids):
            self._mark_dirty()

    def queue_deleted(self, vhost: str, name: str) -> None:
        """A durable queue was deleted: its definition and every message it held go."""
        if self.definitions is not None:
            self.definitions.delete_queue(vhost, name)
        if self.store is not None and self.store.delete_queue(store_key(vhost, name)):
            self._mark_dirty()

    # ----------------------------------------------------------------------- definitions
    # RabbitMQ keeps durable exchanges, durable non-exclusive queues, and bindings whose source
    # and destination are both durable ("Queues" / "Exchanges" guides: durability).
    def exchange_declared(self, vhost: str, ex: Exchange) -> None:
        """A new exchange: stored when durable."""
        if self.definitions is not None and ex.durable:
            self.definitions.save_exchange(vhost, ex.name, ex.type, ex.durable, ex.auto_delete,
                                           ex.internal, dict(ex.arguments))

    def exchanges_deleted(self, vhost: str, names: list[str]) -> None:
        """Exchanges gone (deleted, or auto-deleted in a cascade), with their bindings."""
        if self.definitions is not None:
            for name in names:
                self.definitions.delete_exchange(vhost, name)

    def queue_declared(self, vhost: str, q: QueueType) -> None:
        """A new queue: stored when durable and not exclusive."""
        if self.definitions is not None and q.durable and q.exclusive_owner is None:
            self.definitions.save_queue(vhost, q.name, True, q.auto_delete, dict(q.arguments))

    def binding_changed(self, vhost: str, source: Exchange, destination: Destination,
                        destination_durable: bool, binding_key: str, arguments: dict | None,
                        added: bool) -> None:
        """A binding added or removed: stored only when both ends are durable."""
        if self.definitions is None or not (source.durable and destination_durable):
            return
        if added:
            self.definitions.save_binding(vhost, source.name, destination.kind, destination.name,
                                          binding_key, dict(arguments or {}))
        else:
            self.definitions.delete_binding(vhost, source.name, destination.kind,
                                            destination.name, binding_key, dict(arguments or {}))

    # ----------------------------------------------------------------------- group commit
    def begin_sync(self) -> None:
        """The I/O layer is about to flush: writes from now on need another sync."""
        self.dirty = False

    def wait_for_sync(self, channel: Channel) -> None:
        """``channel`` holds a confirm that must wait for the next sync."""
        self.waiting.add(channel)
        self._mark_dirty()

    def synced(self, durable_id: int) -> None:
        """A sync made every store id <= ``durable_id`` durable: release the confirms it covers."""
        done = []
        for ch in self.waiting:
            if ch.release_durable(durable_id):
                done.append(ch)
        for ch in done:
            self.waiting.discard(ch)
