"""Dealing a shared queue's messages to consumers on other cluster members: the receiving side.

A message another member relayed here (a record of a Cluster.RelayBatch on its peer link,
``core.relay_batch``, or one Cluster.Relay; see ``core.relay``) is still the sender's. We hand it to one of our own consumers of the queue, round-
robin with a turn of its own (the Qpid proposal keeps "the next consumer for application messages
and for relayed ones separately"), and report back on the same channel when that consumer settles
it: Basic.Ack when it acks, Basic.Nack(requeue) when it requeues, cancels or goes away unacked,
Basic.Reject when it rejects. The message never enters our copy of the queue, so nothing here can
deal it onwards a second time or lose it: the sender requeues whatever we did not settle if we or
the link die.

Acks are coalesced: the acks collected on a link go back as one Basic.Ack(multiple) when every
transfer of that link up to the highest of them is acked, else one Basic.Ack each
(``PeerSettles``); requeues and rejects go at once. The sender's tags only grow and a link
delivers in order, so "every earlier tag" is exact; a link whose tags ever arrive out of order is
never coalesced. When they go (``RelayInbox.after_dispatch``, from ``Broker.run_dispatch``): at
once after each batch of input when no I/O layer arranges a later flush (``on_acks_pending`` is
None); with one, a link's acks go once ``ACK_BATCH`` have gathered, the rest within
``ACK_DELAY_S`` (``flush_acks``). Settling later costs nothing a client sees (the sender's
publisher was confirmed when the message was enqueued there) and spares both brokers a write, a
read and an event-loop turn per batch of input: at 20,000 msg/s that was one each per message.

When no local consumer can take it at once it waits in ``RelayInbox`` (bounded by the sender's
credit window) until one can. When the queue has no local consumer at all -- the one it was dealt
to has gone -- the broker's relay policy decides (``--relay-policy``, the proposal's three):
``pass-on`` (default) gives it back to the sender at once (Basic.Nack requeue: redelivered there,
dealt again), ``hold:SECONDS`` keeps it that long for a new local consumer and then passes it on,
``drop`` settles it as acked and drops it (the one policy that loses a message, on purpose).

Must not know: links, sockets; replies go out through the peer connection's ``send_method``.
Source: Qpid ClusteringHA proposal ("Basic.Consume", "Basic.Publish"); issue 10.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from queues.queue import Queue

from ..protocol import constants as c
from .consumer import ChannelConsumer
from .proxies import route_private
from .settings import RelayPolicy

if TYPE_CHECKING:
    from queues.message import Message
    from queues.queue_type import QueueType

    from .broker import Broker
    from .channel import Channel
    from .vhost import VirtualHost

__all__ = ["RelayOrigin", "RelayInbox", "PeerSettles", "RelayedTransfer", "receive_relayed"]

log = logging.getLogger(__name__)

#: Acks one link may gather before they go at once: a quarter of the sender's credit window per
#: remote consumer (``core.relay.RELAY_WINDOW``, 1024), so its consumers never run out of credit
#: waiting for them.
ACK_BATCH = 256
#: Seconds acks may wait for more before they go (``RelayInbox.on_acks_pending``): the sender
#: holds a message our consumer has acked at most this much longer.
ACK_DELAY_S = 0.005


#: Basic.Ack / Nack / Reject frame: type, channel, size 13, class 60 + method, tag, bits.
_SETTLE_FRAME = struct.Struct(">BHIIQB")
#: outcome -> ((class << 16) | method, bits): Ack (multiple=0), Nack (requeue), Reject (no requeue)
_SETTLE_METHODS = {"ack": ((60 << 16) | 80, 0), "requeue": ((60 << 16) | 120, 2),
                   "reject": ((60 << 16) | 90, 0)}


class RelayedTransfer:
    """A received Cluster.Relay as the peer handler hands it to the channel
    (``Channel.relay_target``; decoded by ``cluster.relay_wire.decode_relay`` into its subclass
    ``DecodedRelay``): the shared queue ``queue`` of ``vhost`` it is for, the sender's
    ``delivery_tag`` (> 0) and ``redelivered`` flag, the original ``exchange`` and
    ``routing_key`` and those two as the short strings that came in (``routing_raw``, reused for
    Basic.Deliver). Its content follows on the channel. A concrete class, not a protocol, so that
    the compiled channel reads its fields directly."""

    __slots__ = ("vhost", "queue", "delivery_tag", "redelivered", "routing_raw", "exchange",
                 "routing_key")

    def __init__(self, vhost: str, queue: str, delivery_tag: int, redelivered: bool,
                 routing_raw: bytes, exchange: str, routing_key: str) -> None:
        self.vhost = vhost
        self.queue = queue
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.routing_raw = routing_raw
        self.exchange = exchange
        self.routing_key = routing_key


def _settle_frame(channel: int, outcome: str, tag: int, multiple: bool = False) -> bytes:
    method, bits = _SETTLE_METHODS[outcome]
    return _SETTLE_FRAME.pack(c.FRAME_METHOD, channel, 13, method, tag,
                              bits | (1 if multiple else 0)) + c.FRAME_END_BYTE


class PeerSettles:
    """One peer link channel's transfers not settled yet (``outstanding``, in arrival order: the
    sender's tags grow) and the acks waiting for ``RelayInbox.flush_acks`` (``acked``).
    Lives on the channel (``Channel.relay_settles``), so it goes with the link."""

    __slots__ = ("channel", "outstanding", "acked", "ordered", "last", "flush")

    def __init__(self, channel: Channel, flush: list[PeerSettles]) -> None:
        self.channel = channel
        self.outstanding: dict[int, None] = {}
        self.acked: list[int] = []
        #: False once a tag arrived below an earlier one: then acks are never coalesced
        self.ordered = True
        self.last = 0
        self.flush = flush  # the inbox's list of links with acks to send

    def received(self, tag: int) -> None:
        """Transfer ``tag`` (> 0) arrived on this link."""
        if tag <= self.last:
            self.ordered = False
        self.last = tag
        self.outstanding[tag] = None

    def settle(self, tag: int, outcome: str) -> None:
        """Tell the sender ``outcome`` of ``tag``: acks wait for the flush, the rest go now."""
        self.outstanding.pop(tag, None)
        if outcome == "ack" and self.ordered:
            if not self.acked:
                self.flush.append(self)
            self.acked.append(tag)
            return
        ch = self.channel
        ch.connection.write(_settle_frame(ch.id, outcome, tag))

    def send_acks(self) -> None:
        """The acks since the last flush: one Basic.Ack(multiple) for all of them when no
        transfer up to the highest is still outstanding here, else one Basic.Ack each."""
        acked, self.acked = self.acked, []
        ch = self.channel
        if not acked or ch.closing or ch.connection.channels.get(ch.id) is not ch:
            return  # the link is gone: the sender has requeued what we had not settled
        top = max(acked)
        first = next(iter(self.outstanding), None)
        if first is None or first > top:
            ch.connection.write(_settle_frame(ch.id, "ack", top, multiple=True))
        else:
            ch.connection.write(b"".join(_settle_frame(ch.id, "ack", t) for t in acked))


class RelayOrigin:
    """Where a relayed message came from: the peer link's ``channel`` (its ``PeerSettles``) and
    the sender's ``delivery_tag``; ``settle(outcome)`` sends the outcome back once."""

    __slots__ = ("link", "delivery_tag")

    def __init__(self, link: PeerSettles, delivery_tag: int) -> None:
        self.link = link
        self.delivery_tag = delivery_tag

    @property
    def channel(self) -> Channel:
        """The peer link channel it came over."""
        return self.link.channel

    @property
    def alive(self) -> bool:
        """True while the link it came over is open (else the sender has requeued it)."""
        ch = self.link.channel
        return not ch.closing and ch.connection.channels.get(ch.id) is ch

    def settle(self, outcome: str) -> None:
        """Tell the sender: "ack", "requeue" or "reject" (nothing when the link is gone): a
        Basic.Ack (coalesced, see ``PeerSettles``), Basic.Nack(requeue) or Basic.Reject, encoded
        here (one per relayed message, so not through pamqp)."""
        if self.alive:
            self.link.settle(self.delivery_tag, outcome)


class _Waiting:
    __slots__ = ("message", "origin", "redelivered", "since")

    def __init__(self, message: Message, origin: RelayOrigin, redelivered: bool,
                 since: float) -> None:
        self.message = message
        self.origin = origin
        self.redelivered = redelivered
        self.since = since


class RelayInbox:
    """Relayed messages waiting for a local consumer with credit, per queue, plus each queue's
    turn among its local consumers. ``policy`` is the broker's relay policy."""

    __slots__ = ("policy", "waiting", "_turns", "_local", "pending_acks", "on_acks_pending",
                 "flush_armed", "relayed_in")

    def __init__(self, policy: RelayPolicy | None = None) -> None:
        self.policy = policy or RelayPolicy()
        self.waiting: dict[QueueType, deque[_Waiting]] = {}
        self._turns: dict[QueueType, int] = {}
        #: per queue, (its consumers' version, its local consumers): one relayed message each
        self._local: dict[QueueType, tuple[int, list[ChannelConsumer]]] = {}
        #: links with acks not sent yet (``after_dispatch``, ``flush_acks``)
        self.pending_acks: list[PeerSettles] = []
        #: ``on_acks_pending()``: set by the I/O layer, which then calls ``flush_acks`` within
        #: ``ACK_DELAY_S``; None: acks go at the end of each batch of input.
        self.on_acks_pending: Callable[[], None] | None = None
        #: True from ``on_acks_pending`` until the ``flush_acks`` it asked for.
        self.flush_armed = False
        #: per queue, the relayed messages handed to its local consumers (``Queue.deliver_to``
        #: gives each an entry sequence number: not a publish to this member's copy, so the
        #: management API's ``publish`` leaves them out, ``core.stats.queue_message_stats``)
        self.relayed_in: dict[QueueType, int] = {}

    def link(self, channel: Channel) -> PeerSettles:
        """The settle state of peer link ``channel`` (made on its first relay)."""
        link = channel.relay_settles
        if link is None:
            link = channel.relay_settles = PeerSettles(channel, self.pending_acks)
        return link

    def after_dispatch(self) -> None:
        """A batch of input was handled (``Broker.run_dispatch``): send the acks collected,
        those of links with ``ACK_BATCH`` or more only when a later flush can be arranged
        (``on_acks_pending``), and arrange it for the rest."""
        arrange = self.on_acks_pending
        if arrange is None:
            self.flush_acks()
            return
        links = self.pending_acks
        if any(len(link.acked) >= ACK_BATCH for link in links):
            full = [link for link in links if len(link.acked) >= ACK_BATCH]
            links[:] = [link for link in links if len(link.acked) < ACK_BATCH]  # in place:
            for link in full:                                       # each link holds the list
                link.send_acks()
        if links and not self.flush_armed:
            self.flush_armed = True
            arrange()

    def flush_acks(self) -> None:
        """Send every ack collected so far (the I/O layer's delayed flush, shutdown, or
        ``after_dispatch`` without one)."""
        self.flush_armed = False
        links = self.pending_acks[:]
        self.pending_acks.clear()
        for link in links:
            link.send_acks()

    def __len__(self) -> int:
        return sum(len(d) for d in self.waiting.values())

    def forget_queue(self, q: QueueType) -> None:
        """``q`` was deleted: what waited for it goes back to its senders (who delete it too)."""
        self._turns.pop(q, None)
        self._local.pop(q, None)
        self.relayed_in.pop(q, None)
        for item in self.waiting.pop(q, ()):
            item.origin.settle("requeue")

    def drain(self, broker: Broker, q: QueueType) -> None:
        """Hand waiting messages of ``q`` to local consumers with credit; apply the policy when
        it has none at all. Called from ``Broker.run_dispatch`` and the tick."""
        pending = self.waiting.get(q)
        if not pending:
            return
        local = self._local_consumers(q)
        while pending:
            item = pending[0]
            if not item.origin.alive:  # the sender requeued it when the link went
                pending.popleft()
                continue
            if not local:
                if not self._apply_policy(item, broker.clock()):
                    break
                pending.popleft()
                continue
            if not self._deliver(q, local, item.message, item.origin, item.redelivered):
                break
            pending.popleft()
        if not pending:
            del self.waiting[q]

    def tick(self, broker: Broker) -> None:
        """Held messages past their time are passed on (``hold`` policy)."""
        for q in list(self.waiting):
            self.drain(broker, q)

    def receive(self, broker: Broker, q: QueueType, message: Message, origin: RelayOrigin,
                redelivered: bool) -> None:
        """A relayed message for ``q``: to a local consumer now, else wait or apply the policy."""
        local = self._local_consumers(q)
        if q not in self.waiting and local and self._deliver(q, local, message, origin,
                                                             redelivered):
            return
        item = _Waiting(message, origin, redelivered, broker.clock())
        if not local and self._apply_policy(item, item.since):
            return
        self.waiting.setdefault(q, deque()).append(item)

    def _local_consumers(self, q: QueueType) -> list[ChannelConsumer]:
        """``q``'s consumers on our own channels (not relays), cached until they change. Only
        classic queues are shared and take relays: any other type has none (the policy then
        passes the message back)."""
        if not isinstance(q, Queue):
            return []
        version = q.consumers_version
        cached = self._local.get(q)
        if cached is not None and cached[0] == version:
            return cached[1]
        local = [c for c in q.consumers() if isinstance(c, ChannelConsumer)]
        if len(self._local) > 4096:
            self._local.clear()
        self._local[q] = (version, local)
        return local

    def _apply_policy(self, item: _Waiting, now: float) -> bool:
        """No local consumer: True when ``item`` was passed on or dropped, False to keep it."""
        policy = self.policy
        if policy.kind == "hold" and now - item.since < policy.hold_s:
            return False
        if policy.kind == "drop":
            log.debug("relayed message dropped: no local consumer (relay policy drop)")
            item.origin.settle("ack")
        else:
            item.origin.settle("requeue")
        return True

    def _deliver(self, q: QueueType, local: list[ChannelConsumer], message: Message,
                 origin: RelayOrigin, redelivered: bool) -> bool:
        if not isinstance(q, Queue):  # ``local`` is empty then (``_local_consumers``)
            return False
        start = self._turns.get(q, 0)
        n = len(local)
        for i in range(n):
            consumer = local[(start + i) % n]
            if consumer.can_deliver():
                self._turns[q] = (start + i + 1) % n
                entry = q.deliver_to(consumer, message, redelivered)
                self.relayed_in[q] = self.relayed_in.get(q, 0) + 1
                if consumer.no_ack:
                    origin.settle("ack")  # gone from us as it left: the sender may forget it
                else:
                    entry.origin = origin
                return True
        return False


def receive_relayed(vhost: VirtualHost | None, channel: Channel, queue_name: str,
                    message: Message, delivery_tag: int, redelivered: bool) -> None:
    """A message relayed to us over peer ``channel`` for a queue of ``vhost`` (see module
    docstring). ``queue_name`` "" is a relay for our private queues (not settled: routed here at
    once). A shared queue we do not have (deleted meanwhile, or its vhost: None) gives the
    message back to the sender."""
    if not queue_name:
        if vhost is not None:
            route_private(vhost, message)
        return
    broker = channel.connection.broker
    link = broker.relay_inbox.link(channel)
    link.received(delivery_tag)
    origin = RelayOrigin(link, delivery_tag)
    q = vhost.queues.get(queue_name) if vhost is not None else None
    if q is None or q.exclusive_owner is not None:
        origin.settle("requeue")
        return
    broker.relay_inbox.receive(broker, q, message, origin, redelivered)
