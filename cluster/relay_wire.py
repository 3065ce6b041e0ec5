"""The hot half of the relay's codec, both ways: Cluster.RelayBatch (a shared queue's transfers to
one member during one turn of the event loop) and Cluster.Relay (one message: a private queue's
relay, never settled).

Sending: ``encode_batch`` writes a ``core.relay_batch.BatchBuilder`` as Cluster.RelayBatch (the
prefix from ``batch_prefix``, made once per queue, and the record count), a content header of
class 60 without properties, and the records as the body, in one join when they fit one frame.
``encode_relay`` writes one Cluster.Relay and the message's content (header as it came in, body)
through ``amqp_broker.protocol.delivery.encode_deliver`` -- Cluster.Relay's arguments after the
queue name (delivery_tag longlong, redelivered bit, exchange and routing key short strings) are
laid out as Basic.Deliver's after the consumer tag, so only the prefix differs (``relay_prefix``).

Receiving: ``decode_relay_batch`` and ``decode_relay`` read the method frames by hand into
``DecodedRelayBatch`` / ``DecodedRelay`` (compiled subclasses of the core's ``RelayedBatch`` /
``RelayedTransfer``, not pamqp objects) instead of pamqp's generic unmarshal; they are registered
with ``amqp_broker.protocol.methods.register_fast_decoder`` when this module is imported (the
cluster driver imports it). The channel collects the content and hands it to
``core.relay_batch.receive_batch`` or ``core.relay_inbox.receive_relayed``. The frame layouts are
``cluster.codec.RelayBatch``'s and ``cluster.codec.Relay``'s (AMQP 0-9-1 §4.2.5 field encoding).
Source: issue 10 (CPU per relayed message).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar, Final

from amqp_broker.core.relay_batch import BatchBuilder, RelayedBatch
from amqp_broker.core.relay_inbox import RelayedTransfer
from amqp_broker.protocol import constants as c
from amqp_broker.protocol.delivery import encode_content, encode_deliver, encode_routing
from amqp_broker.protocol.methods import encode_method, register_fast_decoder

from .codec import Relay, RelayBatch

if TYPE_CHECKING:
    from queues.message import Message

__all__ = ["DecodedRelay", "DecodedRelayBatch", "RELAY_FRAME_MAX", "batch_prefix", "decode_relay",
           "decode_relay_batch", "encode_batch", "encode_relay", "relay_prefix"]

_MAX_LONGLONG: Final = (1 << 63) - 1  # the largest delivery tag (a signed longlong)
#: Largest frame (bytes) a relay's body is cut into on a peer link (the links negotiate more).
RELAY_FRAME_MAX: Final = 131072
_HEAD: Final = struct.Struct(">BHI")
_pack_head: Final = _HEAD.pack
#: A batch's content header: class 60 (what the assembler takes), weight 0, body size, no
#: property flags.
_BATCH_HEADER: Final = struct.Struct(">HHQH")
_pack_batch_header: Final = _BATCH_HEADER.pack
_COUNT: Final = struct.Struct(">I")


class DecodedRelay(RelayedTransfer):
    """A received Cluster.Relay: ``amqp_broker.core.relay_inbox.RelayedTransfer``'s fields (those
    of ``cluster.codec.Relay``, the exchange and routing key also as the short strings that came
    in, ``routing_raw``), plus ``index`` and ``name`` as a pamqp command's (for error reports: a
    client that sends Cluster.Relay gets 503 naming it). Its content (header and body frames)
    follows on the channel."""

    __slots__ = ()

    index: ClassVar[int] = Relay.index
    name: ClassVar[str] = Relay.name

    def to_relay(self) -> Relay:
        """The same method as a pamqp ``cluster.codec.Relay`` (for tests and logs)."""
        return Relay(self.vhost, self.queue, self.delivery_tag, self.redelivered, self.exchange,
                     self.routing_key)

    def __repr__(self) -> str:
        return repr(self.to_relay())


def decode_relay(payload: bytes) -> DecodedRelay | None:
    """The method frame payload of a Cluster.Relay (class, method, vhost shortstr, queue shortstr,
    delivery_tag longlong, redelivered bit, exchange shortstr, routing_key shortstr) ->
    ``DecodedRelay``, without pamqp's generic decoder. None for a payload that is not exactly
    that (or names that are not UTF-8, or a tag of 2**63 or more): the generic decoder then
    reports it (502 SYNTAX_ERROR)."""
    try:
        vlen = payload[4]
        qpos = 5 + vlen
        qlen = payload[qpos]
        tpos = qpos + 1 + qlen
        epos = tpos + 9
        elen = payload[epos]
        rpos = epos + 1 + elen
        if len(payload) != rpos + 1 + payload[rpos]:
            return None
        tag = 0
        for i in range(tpos, tpos + 8):  # longlong, big-endian (native ints when compiled)
            tag = (tag << 8) | payload[i]
        if tag > _MAX_LONGLONG:
            return None
        return DecodedRelay(payload[5:qpos].decode(), payload[qpos + 1:tpos].decode(), tag,
                            bool(payload[tpos + 8] & 1), payload[epos:],
                            payload[epos + 1:rpos].decode(), payload[rpos + 1:].decode())
    except (IndexError, UnicodeDecodeError):
        return None


def relay_prefix(vhost: str, queue: str) -> bytes:
    """Cluster.Relay's method payload up to the delivery tag (class, method, vhost, queue), the
    constant part of every relay to one queue. Raises ``ValueError`` for a name over 255 bytes."""
    return encode_method(1, Relay(vhost, queue))[7:-12]


def encode_relay(prefix: bytes, delivery_tag: int, redelivered: bool, message: Message) -> bytes:
    """The frames of one relayed message on channel 1 of a peer link: Cluster.Relay (``prefix``
    from ``relay_prefix``, then the tag, the flag, the original exchange and routing key), the
    content header as it came in and the body (cut at ``RELAY_FRAME_MAX``; none when empty)."""
    routing_raw = message.routing_raw
    if routing_raw is None:
        routing_raw = encode_routing(message.exchange, message.routing_key)
    return encode_deliver(1, prefix, delivery_tag, redelivered, routing_raw,
                          message.header_payload, message.body, RELAY_FRAME_MAX)


class DecodedRelayBatch(RelayedBatch):
    """A received Cluster.RelayBatch: ``amqp_broker.core.relay_batch.RelayedBatch``'s fields,
    plus ``index`` and ``name`` as a pamqp command's (for error reports). Its records follow as
    the content's body."""

    __slots__ = ()

    index: ClassVar[int] = RelayBatch.index
    name: ClassVar[str] = RelayBatch.name

    def to_method(self) -> RelayBatch:
        """The same method as a pamqp ``cluster.codec.RelayBatch`` (for tests and logs)."""
        return RelayBatch(self.vhost, self.queue, self.count)

    def __repr__(self) -> str:
        return repr(self.to_method())


def decode_relay_batch(payload: bytes) -> DecodedRelayBatch | None:
    """The method frame payload of a Cluster.RelayBatch (class, method, vhost shortstr, queue
    shortstr, count long) -> ``DecodedRelayBatch``; None for a payload that is not exactly that
    (the generic decoder then reports it: 502 SYNTAX_ERROR)."""
    try:
        qpos = 5 + payload[4]
        cpos = qpos + 1 + payload[qpos]
        if len(payload) != cpos + 4:
            return None
        count = ((payload[cpos] << 24) | (payload[cpos + 1] << 16) | (payload[cpos + 2] << 8)
                 | payload[cpos + 3])
        return DecodedRelayBatch(payload[5:qpos].decode(), payload[qpos + 1:cpos].decode(),
                                 count)
    except (IndexError, UnicodeDecodeError):
        return None


def batch_prefix(vhost: str, queue: str) -> bytes:
    """Cluster.RelayBatch's method payload up to the record count (class, method, vhost, queue),
    the same for every batch to one queue. Raises ``ValueError`` for a name over 255 bytes."""
    return encode_method(1, RelayBatch(vhost, queue))[7:-5]


def encode_batch(batch: BatchBuilder, frame_max: int = RELAY_FRAME_MAX) -> bytes:
    """The frames of ``batch`` on channel 1 of a peer link: Cluster.RelayBatch, a content header
    and the records as the body (cut at ``frame_max`` bytes per frame)."""
    size = batch.size
    method = (_pack_head(c.FRAME_METHOD, 1, len(batch.prefix) + 4), batch.prefix,
              _COUNT.pack(batch.count), c.FRAME_END_BYTE)
    header = _pack_batch_header(c.CLASS_BASIC, 0, size, 0)
    if 0 < size <= frame_max - c.FRAME_OVERHEAD:  # the common case: one join
        return b"".join((*method, _pack_head(c.FRAME_HEADER, 1, len(header)), header,
                         c.FRAME_END_BYTE, _pack_head(c.FRAME_BODY, 1, size), *batch.parts,
                         c.FRAME_END_BYTE))
    return b"".join((*method, encode_content(1, header, b"".join(batch.parts), frame_max)))


register_fast_decoder(Relay.index, decode_relay)
register_fast_decoder(RelayBatch.index, decode_relay_batch)
