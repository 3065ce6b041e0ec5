"""One AMQP channel: its state and the dispatch of its frames to the per-class handlers.

Owns: delivery tags and unacked deliveries, prefetch (per consumer and ``global`` per channel, as
RabbitMQ), consumers, flow, the content assembler, confirm mode and tx mode, and the channel close
handshake. Handlers for each AMQP class live in ``handlers/``; this module only routes to them.
Errors: a ``ChannelException`` from a handler closes this channel (Channel.Close); a
``ConnectionException`` propagates to the connection. Source: AMQP 0-9-1 §1.5 (channel), §4.2.6
(content), RabbitMQ "Consumer Prefetch", "Publisher Confirms", "Channels" guide.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pamqp import commands as cmd

from queues.message import Message

from ..protocol import constants as c
from ..protocol.assembler import NO_LIMIT, ContentAssembler
from ..protocol.errors import ChannelException, ConnectionException
from ..protocol.methods import FastCommand, Publish, decode_method, method_ids
from .confirms import ConfirmTracker
from .handlers import HANDLERS
from .handlers.basic import publish_message, settle_unacked
from .relay_batch import RelayedBatch, receive_batch
from .relay_inbox import PeerSettles, RelayedTransfer, receive_relayed
from .stats import N_TYPED, fold_channel

if TYPE_CHECKING:
    from pamqp.base import Frame

    from queues.entry import QueueEntry
    from queues.queue_type import QueueType

    from .connection import Connection
    from .consumer import ChannelConsumer
    from .vhost import VirtualHost

__all__ = ["Channel"]


class Channel:
    """A channel of ``connection`` numbered ``id`` (1..channel_max).

    ``unacked`` maps delivery tag -> (queue, entry, consumer or None for Basic.Get), in tag order.
    ``tx`` is None outside tx mode, else a list of pending operations; ``confirms`` is None outside
    confirm mode.
    """

    def __init__(self, connection: Connection, channel_id: int) -> None:
        self.connection = connection
        self.id = channel_id
        vhost = connection.vhost
        if vhost is None:  # Connection._open_channel only opens channels once the vhost is chosen
            raise ConnectionException(c.CHANNEL_ERROR,
                                      f"CHANNEL_ERROR - channel {channel_id} before connection.open")
        self.vhost: VirtualHost = vhost
        self.closing = False  # we sent Channel.Close and wait for Close-Ok
        #: Assembles a Basic.Publish's content, or on a cluster peer link the content of a
        #: cluster method its peer handler started (Cluster.Quorum, Cluster.Relay): a client's
        #: bodies are bounded by ``max_message_size`` (406), a peer link's are not (a member
        #: checked the client's publish; a relayed batch holds many messages).
        self.assembler: ContentAssembler[Publish | Frame | FastCommand] = ContentAssembler(
            NO_LIMIT if connection.peer_node is not None
            else connection.broker.settings.max_message_size)
        self.next_delivery_tag = 1
        self.unacked: dict[int, tuple[QueueType, QueueEntry, ChannelConsumer | None]] = {}
        self.consumers: dict[str, ChannelConsumer] = {}
        self.prefetch = 0  # applied to consumers created after Basic.Qos(global=False)
        self.global_prefetch = 0  # shared by the channel: Basic.Qos(global=True)
        self.confirms: ConfirmTracker | None = None
        self.tx: list[tuple[str, Any]] | None = None
        self.last_queue = ""  # "the last queue declared on this channel" (spec: empty queue name)
        #: On a cluster peer link: the Cluster.Relay or Cluster.RelayBatch whose content the
        #: assembler collects, messages another member deals to our consumers (set by the peer
        #: handler).
        self.relay_target: RelayedTransfer | RelayedBatch | None = None
        #: On a cluster peer link: its relayed transfers not settled yet (``core.relay_inbox``).
        self.relay_settles: PeerSettles | None = None
        #: Message counters for the management API and Prometheus (``core.stats``).
        self.n_publish = 0
        self.n_ack = 0
        self.n_routed = 0  # queues reached, summed over publishes (RabbitMQ's messages_routed)
        self.n_returned = 0  # mandatory and unroutable: Basic.Return
        self.n_dropped = 0  # unroutable, not mandatory
        #: Deliveries, gets, acks by kind and queue type (``core.stats.TYPED_KINDS``).
        self.typed: list[int] = [0] * N_TYPED
        self.counts_folded = False
        #: ``core.access.permit``'s cache: the permissions generation at which this channel's
        #: user was found to be allowed everything in its vhost (-1: not known).
        self.access_gen = -1

    @property
    def deliverable(self) -> bool:
        """True while deliveries may be sent (not closing; a client's Channel.Flow active=false is
        refused with 540, as RabbitMQ 3.x, so flow never pauses a channel)."""
        return not self.closing

    # ----------------------------------------------------------------- frames from the connection
    def on_method(self, payload: bytes) -> None:
        """Handle one method frame payload addressed to this channel."""
        method = decode_method(payload)
        if self.closing:
            # After we sent Channel.Close only Close/Close-Ok count (spec §4.2.3 / channel.close).
            # A Close crossing ours gets Close-Ok and the channel stays closing until the peer's
            # Close-Ok for ours arrives, as RabbitMQ's reader does (checked against 3.10): that
            # Close-Ok must not look like a frame on an unopened channel (504).
            if isinstance(method, cmd.Channel.CloseOk):
                self.connection.channel_closed(self.id)
            elif isinstance(method, cmd.Channel.Close):
                self.connection.send_method(self.id, cmd.Channel.CloseOk())
            elif isinstance(method, cmd.Channel.Open):  # before its Close-Ok: RabbitMQ's 504
                raise ConnectionException(c.CHANNEL_ERROR, f"CHANNEL_ERROR - second "
                                          f"'channel.open' seen on channel {self.id}", 20, 10)
            return
        if self.assembler.expecting_content:
            raise self.assembler.unexpected("method frame")
        if self.connection.peer_node is not None:
            peer_handler = self.connection.broker.peer_handler
            if peer_handler is not None and peer_handler(self, method, payload):
                return
        try:
            if type(method) is Publish:   # type(): a pointer compare when compiled
                self._check_publish(method)
                self.assembler.start(method)
                return
            handler = HANDLERS.get(type(method))
            if handler is None:
                cid, mid = method_ids(method)
                raise ConnectionException(
                    c.COMMAND_INVALID, f"COMMAND_INVALID - {method.name} not allowed from a client",
                    cid, mid)
            handler(self, method)
        except ChannelException as channel_error:
            cid, mid = method_ids(method)
            self.close_with(channel_error.for_method(cid, mid))
        except ConnectionException as connection_error:  # own name: mypyc types a name once
            cid, mid = method_ids(method)
            raise connection_error.for_method(cid, mid) from None

    def on_method_in_vhost(self, vhost_name: str, payload: bytes) -> None:
        """On a cluster peer link: the method frame ``payload`` a member sent for vhost
        ``vhost_name`` (Cluster.InVhost; the link itself opened "/") runs as if this channel were
        opened there, and is answered as usual. An unknown vhost closes the channel with 404.
        Members wrap declarations, bindings, deletions and purges only (a message travels with
        Cluster.Relay, which names its vhost), so no content follows a wrapped method."""
        vhost = self.connection.broker.vhosts.get(vhost_name)
        if vhost is None:
            cid, mid = int.from_bytes(payload[:2]), int.from_bytes(payload[2:4])
            self.close_with(ChannelException(c.NOT_FOUND, f"NOT_FOUND - no vhost '{vhost_name}'",
                                             cid, mid))
            return
        home, self.vhost = self.vhost, vhost
        try:
            self.on_method(payload)
        finally:
            self.vhost = home

    def on_header(self, payload: bytes) -> None:
        """Handle a content header frame payload."""
        if self.closing:
            return
        try:
            done = self.assembler.header(payload)
        except ChannelException as too_large:  # over max_message_size: 406, the body is dropped
            self.close_with(too_large)
            return
        if done is not None:
            publish, header, body = done  # unpacked here: a native call, not a ``*args`` one
            self._publish(publish, header, body)

    def on_body(self, payload: bytes) -> None:
        """Handle a content body frame payload."""
        if self.closing:
            return
        done = self.assembler.body(payload)
        if done is not None:
            publish, header, body = done
            self._publish(publish, header, body)

    def on_body_view(self, view: memoryview) -> None:
        """``on_body`` for a body frame's payload as a view of its read chunk (``FrameSplitter``
        body views: the frames of a body larger than one frame, copied once when joined)."""
        if self.closing:
            return
        done = self.assembler.body_view(view)
        if done is not None:
            publish, header, body = done
            self._publish(publish, header, body)

    def _check_publish(self, publish: Publish) -> None:
        if publish.immediate:
            raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - immediate=true",
                                      c.CLASS_BASIC, 40)

    def _publish(self, publish: Publish | Frame | FastCommand, header: bytes, body: bytes) -> None:
        if not isinstance(publish, Publish):
            # the content of a cluster method the peer handler started: only on a peer link
            if self.connection.peer_node is None:
                return
            relay = self.relay_target
            if relay is not None and relay is publish:
                # Messages another member dealt to our consumers (Cluster.RelayBatch, or one
                # Cluster.Relay): they go to the named queue's local consumers, never through
                # routing again.
                self.relay_target = None
                if isinstance(relay, RelayedBatch):
                    receive_batch(self.connection.broker.vhosts.get(relay.vhost), self, relay,
                                  body)
                    return
                msg = Message(relay.exchange, relay.routing_key, header, body)
                msg.routing_raw = relay.routing_raw
                receive_relayed(self.connection.broker.vhosts.get(relay.vhost), self, relay.queue,
                                msg, relay.delivery_tag, relay.redelivered)
                return
            sink = self.connection.broker.peer_content  # Cluster.Quorum's
            if sink is not None:
                sink(self, publish, body)
            return
        try:
            publish_message(self, publish, header, body)
        except ChannelException as exc:
            self.close_with(exc.for_method(c.CLASS_BASIC, 40))

    # ----------------------------------------------------------------------------- closing
    def close_with(self, exc: ChannelException) -> None:
        """Send Channel.Close for ``exc``, release everything, wait for the client's Close-Ok.
        Confirms already settled go out first: after Close the client ignores the channel."""
        self.flush_confirms()
        self.release()
        self.closing = True
        text = exc.reply_text.encode()[:255].decode(errors="ignore")
        self.connection.send_method(
            self.id, cmd.Channel.Close(exc.reply_code, text, exc.class_id, exc.method_id))

    def release(self) -> None:
        """Cancel consumers and requeue unacked deliveries (channel or connection going away)."""
        fold_channel(self)
        self.assembler.reset()
        self.tx = None
        vhost = self.vhost
        for consumer in list(self.consumers.values()):
            consumer.fold_counts()   # its queue's counts (the channel's went with fold_channel)
            vhost.remove_consumer(consumer)
        self.consumers.clear()
        if self.unacked:
            settle_unacked(self, list(self.unacked), requeue=True)

    # ------------------------------------------------------------------------- confirms
    def release_durable(self, durable_id: int) -> bool:
        """Confirms waiting for a sync up to ``durable_id`` go out; True when none waits any more."""
        tracker = self.confirms
        if tracker is None or self.closing:
            return True
        done = tracker.release(durable_id)
        self.flush_confirms()
        return done

    def advance_safe(self, source: object, up_to: int, failed: Collection[int] = ()) -> bool:
        """``source`` (a replicated queue's group) made every token <= ``up_to`` safe, those in
        ``failed`` refused (nacked): confirms that waited for it go out. True when none waits on
        it any more (``SafeWaiter``)."""
        tracker = self.confirms
        if tracker is None or self.closing:
            return True
        done = tracker.advance(source, up_to, failed)
        self.flush_confirms()
        return done

    def flush_confirms(self) -> None:
        """Send Basic.Ack/Nack for every settled publish (called once per received chunk)."""
        tracker = self.confirms
        if tracker is None or self.closing or not tracker.pending:
            return
        send = self.connection.send_method
        for tag, multiple, ack in tracker.drain():
            if ack:
                send(self.id, cmd.Basic.Ack(tag, multiple))
            else:
                send(self.id, cmd.Basic.Nack(tag, multiple, False))
