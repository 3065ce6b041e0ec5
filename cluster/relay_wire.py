"""The hot half of Cluster.Relay's codec: one arrives per relayed message, so its method frame is
decoded by hand instead of by pamqp's generic unmarshal (registered with
``amqp_broker.protocol.methods.register_fast_decoder`` when this module is imported: the cluster
driver imports it), and the receiver takes the original exchange and routing key as raw bytes for
Basic.Deliver. The frame layout is ``cluster.codec.Relay``'s (AMQP 0-9-1 §4.2.5 field encoding).
"""

from __future__ import annotations

import struct

from amqp_broker.protocol.methods import register_fast_decoder

from .codec import _MAX_LONGLONG, Relay

__all__ = ["decode_relay", "relay_routing_raw"]

_RELAY_TAIL = struct.Struct(">QB")


def relay_routing_raw(payload: bytes) -> bytes:
    """The ``exchange`` and ``routing_key`` short strings of a Cluster.Relay method payload (one
    ``decode_relay`` accepted), as Basic.Publish and Basic.Deliver carry them."""
    vlen = payload[4]
    return payload[15 + vlen + payload[5 + vlen]:]


def decode_relay(payload: bytes) -> Relay | None:
    """The method frame payload of a Cluster.Relay (class, method, vhost shortstr, queue shortstr,
    delivery_tag longlong, redelivered bit, exchange shortstr, routing_key shortstr) -> ``Relay``,
    without pamqp's generic decoder: one arrives per relayed message. None for a payload that is
    not exactly that (or names that are not UTF-8, or a tag of 2**63 or more): the generic decoder
    then reports it (502 SYNTAX_ERROR)."""
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
        tag, bits = _RELAY_TAIL.unpack_from(payload, tpos)
        if tag > _MAX_LONGLONG:
            return None
        relay = Relay.__new__(Relay)
        relay.vhost = payload[5:qpos].decode()
        relay.queue = payload[qpos + 1:tpos].decode()
        relay.exchange = payload[epos + 1:rpos].decode()
        relay.routing_key = payload[rpos + 1:].decode()
    except (IndexError, UnicodeDecodeError):
        return None
    relay.delivery_tag = tag
    relay.redelivered = bool(bits & 1)
    return relay


register_fast_decoder(Relay.index, decode_relay)
