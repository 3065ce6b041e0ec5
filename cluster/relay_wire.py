"""The hot half of Cluster.Relay's codec, both ways: one frame of it travels per relayed message.

Sending: ``encode_relay`` writes the method frame and the message's content (header as it came in,
body) in one join, through ``amqp_broker.protocol.delivery.encode_deliver`` -- Cluster.Relay's
arguments after the queue name (delivery_tag longlong, redelivered bit, exchange and routing key
short strings) are laid out as Basic.Deliver's after the consumer tag, so only the prefix differs
(``relay_prefix``: class, method, vhost and queue, made once per queue).

Receiving: ``decode_relay`` reads the method frame by hand into a ``DecodedRelay`` (a compiled
class, not a pamqp object) instead of pamqp's generic unmarshal; it is registered with
``amqp_broker.protocol.methods.register_fast_decoder`` when this module is imported (the cluster
driver imports it). The receiver keeps the original exchange and routing key as the raw bytes
Basic.Deliver carries (``routing_raw``). The frame layout is ``cluster.codec.Relay``'s (AMQP 0-9-1
§4.2.5 field encoding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Final

from amqp_broker.core.relay_inbox import RelayedTransfer
from amqp_broker.protocol.delivery import encode_deliver, encode_routing
from amqp_broker.protocol.methods import encode_method, register_fast_decoder

from .codec import Relay

if TYPE_CHECKING:
    from queues.message import Message

__all__ = ["DecodedRelay", "RELAY_FRAME_MAX", "decode_relay", "encode_relay", "relay_prefix"]

_MAX_LONGLONG: Final = (1 << 63) - 1  # the largest delivery tag (a signed longlong)
#: Largest frame (bytes) a relay's body is cut into on a peer link (the links negotiate more).
RELAY_FRAME_MAX: Final = 131072


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


register_fast_decoder(Relay.index, decode_relay)
