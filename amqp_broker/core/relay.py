"""Dealing a shared queue's messages to consumers on other cluster members: the sending side.

Owns ``RelayConsumer``: one object per consumer another broker has on a shared queue (counts come
from Cluster.Consumers), registered on our copy of the queue like a local consumer, so the queue's
own round-robin deals to a peer in proportion to its consumer count (Qpid ClusteringHA
"Basic.Consume" / "Basic.Publish": each message is dealt, at the first broker that receives it,
round-robin over local consumers and relay links). Also ``RelayOutbox``: what we relayed and the
receiver has not settled yet.

An acknowledged transfer (issue 10, DESIGN.md §4a): a relayed message stays ours -- unacked in our
queue, still in our message store when persistent -- until the receiver settles its delivery tag.
The receiver settles when *its consumer* settles (Basic.Ack -> ack here; a requeue, a cancelled or
closed consumer -> Basic.Nack(requeue) -> back in its original place here, redelivered; a reject ->
Basic.Reject -> dead-lettered or dropped here by our queue's own rules). We chose settle-on-consumer-
ack over settle-on-durable-store at the receiver: the message then never depends on the receiver
surviving -- when the link or the receiving broker dies, everything it had not settled is requeued
here at once and served by the brokers still up, instead of waiting for the receiver to restart --
and non-persistent messages get the same guarantee; the price is one settle frame per message on
the link and our memory for what is in flight (bounded by ``RELAY_WINDOW`` per remote consumer).
A consumer that acked on the receiver just before it died may see the message again (at least
once, as with any requeue).

Must not know: links, sockets (the sink is ``broker.relay_sink``: ``can_relay(node) -> bool`` and
``relay(node, vhost, queue, message, delivery_tag, redelivered)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queues.entry import QueueEntry
    from queues.queue_type import QueueType

    from .broker import Broker
    from .vhost import VirtualHost

__all__ = ["RELAY_WINDOW", "ACK", "REQUEUE", "REJECT", "RelayConsumer", "RelayOutbox",
           "set_remote_consumers", "remove_node", "settle_relayed", "settle_batch", "requeue_node",
           "local_consumer_count"]

#: Relayed messages one remote consumer may hold unsettled (the transfer's credit window): with
#: the settles coming back a link round trip later, a window of n caps one remote consumer at
#: n per round trip (1024 at 10 ms: ~100k msg/s).
RELAY_WINDOW = 1024
#: Outcomes a receiver reports for a relayed message.
ACK, REQUEUE, REJECT = "ack", "requeue", "reject"


class RelayConsumer:
    """One consumer of node ``node`` on ``queue`` (see module docstring): an ack-mode consumer
    whose credit is ``RELAY_WINDOW`` unsettled transfers while the link takes more."""

    __slots__ = ("tag", "no_ack", "exclusive", "priority", "node", "vhost", "queue", "channel",
                 "arguments", "unsettled")

    def __init__(self, vhost: VirtualHost, queue: QueueType, node: str, index: int) -> None:
        self.tag = f"amq.relay-{node}-{index}"
        self.no_ack = False
        self.exclusive = False
        self.priority = 0
        self.node = node
        self.vhost = vhost
        self.queue = queue
        self.channel = None  # not on a channel of ours
        self.arguments: dict[str, Any] = {}
        self.unsettled = 0

    def can_deliver(self) -> bool:
        """True while the window has room and the link to the node takes more."""
        if self.unsettled >= RELAY_WINDOW:
            return False
        sink = self.vhost.broker.relay_sink
        return sink is not None and sink.can_relay(self.node)

    def deliver(self, queue: QueueType, entry: QueueEntry) -> None:
        """Relay the message under a fresh delivery tag; it stays unacked here until settled."""
        vhost = self.vhost
        broker = vhost.broker
        sink = broker.relay_sink
        if sink is None:  # relay consumers exist only while clustering set the sink
            raise AttributeError("'NoneType' object has no attribute 'relay' (no relay_sink)")
        tag = broker.relay_outbox.add(self.node, queue, entry, self)
        self.unsettled += 1
        sink.relay(self.node, vhost.name, queue.name, entry.message, tag, entry.redelivered)


class RelayOutbox:
    """Per node, the transfers sent and not settled: delivery tag -> (queue, entry, consumer).
    Tags grow per broker and are never reused, so a settle meant for an old link cannot hit a
    new transfer."""

    __slots__ = ("_last_tag", "_unsettled")

    def __init__(self) -> None:
        self._last_tag = 0
        self._unsettled: dict[str, dict[int, tuple[QueueType, QueueEntry, RelayConsumer]]] = {}

    def add(self, node: str, queue: QueueType, entry: QueueEntry, consumer: RelayConsumer) -> int:
        """Record a transfer to ``node``; returns its delivery tag (> 0)."""
        tag = self._last_tag + 1
        self._last_tag = tag
        per_node = self._unsettled.get(node)
        if per_node is None:
            per_node = self._unsettled[node] = {}
        per_node[tag] = (queue, entry, consumer)
        return tag

    def unsettled(self, node: str) -> int:
        """How many transfers to ``node`` wait for their settle."""
        return len(self._unsettled.get(node, ()))

    def take(self, node: str, tag: int, multiple: bool) -> list[tuple[QueueType, QueueEntry,
                                                                      RelayConsumer]]:
        """Remove and return the transfers a settle of ``tag`` covers (every tag <= ``tag``
        with ``multiple``); unknown tags are ignored (settled already, or requeued when a link
        broke)."""
        per_node = self._unsettled.get(node)
        if not per_node:
            return []
        if not multiple:
            item = per_node.get(tag)
            if item is None:
                return []
            del per_node[tag]
            return [item]
        if next(reversed(per_node)) <= tag:  # covers them all (tags were added in order)
            every = list(per_node.values())
            per_node.clear()
            return every
        tags: list[int] = []
        items: list[tuple[QueueType, QueueEntry, RelayConsumer]] = []
        for t, item in per_node.items():  # added in increasing order: stop at the first later
            if t > tag:
                break
            tags.append(t)
            items.append(item)
        for t in tags:
            del per_node[t]
        return items

    def take_all(self, node: str) -> list[tuple[QueueType, QueueEntry, RelayConsumer]]:
        """Remove and return every transfer to ``node`` (its link or the node is gone)."""
        per_node = self._unsettled.pop(node, None)
        return list(per_node.values()) if per_node else []


def settle_relayed(broker: Broker, node: str, tag: int, multiple: bool, outcome: str) -> int:
    """``node`` settled transfer ``tag`` (and every earlier one with ``multiple``) with
    ``outcome`` (``ACK``, ``REQUEUE`` or ``REJECT``); returns how many transfers it covered.
    Ack: the queue forgets the entry and the store its record; requeue: back in its original
    place, redelivered; reject: dead-lettered or dropped by the queue's rules."""
    return settle_batch(broker, node, ((tag, multiple, outcome),))


def settle_batch(broker: Broker, node: str,
                 settles: Iterable[tuple[int, bool, str]]) -> int:
    """``settle_relayed`` for a run of ``(tag, multiple, outcome)`` read together from
    ``node``'s link, applied per queue and outcome in one pass (one ``ack_many`` per queue).
    Returns how many transfers they covered (0: nothing to dispatch)."""
    outbox = broker.relay_outbox
    by_outcome: dict[str, list[tuple[QueueType, QueueEntry, RelayConsumer]]] = {}
    for tag, multiple, outcome in settles:
        items = outbox.take(node, tag, multiple)
        if items:
            got = by_outcome.get(outcome)
            if got is None:
                by_outcome[outcome] = items
            else:
                got.extend(items)
    for outcome, items in by_outcome.items():
        _settle(broker, items, outcome)
    return sum(len(items) for items in by_outcome.values())


def requeue_node(broker: Broker, node: str) -> int:
    """The link to ``node`` broke, or ``node`` left the view: every transfer it had not settled
    goes back to its original place, redelivered. Returns how many."""
    items = broker.relay_outbox.take_all(node)
    _settle(broker, items, REQUEUE)
    return len(items)


def _settle(broker: Broker, items: list[tuple[QueueType, QueueEntry, RelayConsumer]],
            outcome: str) -> None:
    grouped: dict[QueueType, list[QueueEntry]] = {}
    last: QueueType | None = None
    entries: list[QueueEntry] = []
    for q, entry, consumer in items:
        consumer.unsettled -= 1
        if q is not last:  # settles mostly come in runs of one queue
            got = grouped.get(q)
            if got is None:
                got = grouped[q] = []
            entries = got
            last = q
        entries.append(entry)
    needs_dispatch = broker.needs_dispatch
    for q, entries in grouped.items():
        needs_dispatch.add(q)
        if outcome == ACK:
            q.ack_many(entries)  # the queue's journal forgets the stored copies
        elif outcome == REJECT:
            for entry in entries:
                q.reject(entry)
        else:
            q.requeue_many(entries)


def local_consumer_count(queue: QueueType) -> int:
    """Consumers on our own channels (not relays)."""
    return sum(1 for c in queue.consumers() if not isinstance(c, RelayConsumer))


def set_remote_consumers(vhost: VirtualHost, queue_name: str, node: str, count: int) -> None:
    """Make ``node``'s relay consumers on shared queue ``queue_name`` number ``count``. A removed
    relay consumer's transfers stay in the outbox: the receiver settles them (or they are
    requeued when its link goes)."""
    q = vhost.queues.get(queue_name)
    if q is None or q.exclusive_owner is not None:
        return
    mine = [c for c in q.consumers() if isinstance(c, RelayConsumer) and c.node == node]
    for consumer in mine[count:]:
        q.remove_consumer(consumer)
    for index in range(len(mine), count):
        q.had_consumers = True
        q.add_consumer(RelayConsumer(vhost, q, node, index))


def remove_node(vhost: VirtualHost, node: str) -> None:
    """``node`` left the view: drop its relay consumers everywhere (``requeue_node`` takes back
    what it held)."""
    for q in list(vhost.queues.values()):
        for consumer in [c for c in q.consumers()
                         if isinstance(c, RelayConsumer) and c.node == node]:
            q.remove_consumer(consumer)
