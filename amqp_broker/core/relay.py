"""Remote consumers of a shared queue: dealing messages to consumers on other cluster members.

Owns ``RelayConsumer``: one object per consumer another broker has on a shared queue (counts come
from Cluster.Consumers), registered on our copy of the queue like a local consumer, so the queue's
own round-robin deals to a peer in proportion to its consumer count (Qpid ClusteringHA "Basic.Consume"
and "Basic.Publish": "deals each message, at the first broker that receives it, round-robin over its
local consumers and its relay links"). A delivery to it hands the message to the relay sink (the peer
link) and is final here (no-ack: the receiving broker owns it from then on). Also the receiving side:
``deliver_relayed`` hands a relayed message to a local consumer, round-robin with its own turn
(the proposal keeps "the next consumer for application messages and for relayed ones separately"),
or keeps it in our copy when no local consumer has credit (the "pass on" policy).
Must not know: links, sockets (the sink is ``broker.relay_sink``: ``can_relay(node) -> bool`` and
``relay(node, vhost, queue, message)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .durability import store_key
from .proxies import route_private

if TYPE_CHECKING:
    from queues.entry import QueueEntry
    from queues.message import Message
    from queues.queue import Queue

    from .vhost import VirtualHost

__all__ = ["RelayConsumer", "set_remote_consumers", "remove_node", "deliver_relayed",
           "local_consumer_count"]


class RelayConsumer:
    """One consumer of node ``node`` on ``queue`` (see module docstring)."""

    __slots__ = ("tag", "no_ack", "exclusive", "priority", "node", "vhost", "queue", "channel",
                 "arguments")

    def __init__(self, vhost: VirtualHost, queue: Queue, node: str, index: int) -> None:
        self.tag = f"amq.relay-{node}-{index}"
        self.no_ack = True
        self.exclusive = False
        self.priority = 0
        self.node = node
        self.vhost = vhost
        self.queue = queue
        self.channel = None  # not on a channel of ours
        self.arguments: dict[str, Any] = {}

    def can_deliver(self) -> bool:
        """True while the link to the node takes more (it is up and its backlog is short)."""
        sink = self.vhost.broker.relay_sink
        return sink is not None and sink.can_relay(self.node)

    def deliver(self, queue: Queue, entry: QueueEntry) -> None:
        """Relay the message; a stored persistent message is released from our store."""
        msg = entry.message
        sink = self.vhost.broker.relay_sink
        if sink is None:  # relay consumers exist only while clustering set the sink
            raise AttributeError("'NoneType' object has no attribute 'relay' (no relay_sink)")
        sink.relay(self.node, self.vhost.name, queue.name, msg)
        if msg.store_id is not None and queue.durable:
            self.vhost.broker.durability.forget(store_key(self.vhost.name, queue.name), msg)


def local_consumer_count(queue: Queue) -> int:
    """Consumers on our own channels (not relays)."""
    return sum(1 for c in queue.consumers() if not isinstance(c, RelayConsumer))


def set_remote_consumers(vhost: VirtualHost, queue_name: str, node: str, count: int) -> None:
    """Make ``node``'s relay consumers on shared queue ``queue_name`` number ``count``."""
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
    """``node`` left the view: drop its relay consumers everywhere."""
    for q in list(vhost.queues.values()):
        for consumer in [c for c in q.consumers()
                         if isinstance(c, RelayConsumer) and c.node == node]:
            q.remove_consumer(consumer)


_turns: dict[int, int] = {}


def deliver_relayed(vhost: VirtualHost, queue_name: str, message: Message) -> bool:
    """A message relayed to us for ``queue_name``: to a local consumer with credit (own turn
    order), else kept in our copy. False when the queue does not exist (the message is dropped)."""
    if not queue_name:  # for our private queues (proxied on the sender): route it here
        route_private(vhost, message)
        return True
    q = vhost.queues.get(queue_name)
    if q is None:
        return False
    local = [c for c in q.consumers() if not isinstance(c, RelayConsumer)]
    if local:
        start = _turns.get(id(q), 0)
        for i in range(len(local)):
            consumer = local[(start + i) % len(local)]
            if consumer.can_deliver():
                _turns[id(q)] = (start + i + 1) % len(local)
                q.deliver_to(consumer, message)
                return True
    vhost.enqueue(message, {queue_name})
    return True
