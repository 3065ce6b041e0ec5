"""The hand-written decoder of Cluster.Quorum, the method before every Raft message of a quorum
queue, a stream or the metadata log on a peer link (several per message or definition change).

``decode_quorum`` reads the method frame payload (class, method, vhost shortstr, queue shortstr,
group shortstr, kind octet: ``cluster.codec.Quorum``'s layout, AMQP 0-9-1 §4.2.5 field encoding)
into a ``cluster.codec.Quorum`` without pamqp's generic unmarshal and argument checks (about 17
µs a method in pure Python, against about 2); registered with
``amqp_broker.protocol.methods.register_fast_decoder`` when this module is imported (the quorum
queues' wire half, ``amqp_broker.clustering.quorum_wire``, imports it). A payload that is not
exactly that layout returns None: the generic decoder then decodes it or reports the error (502
SYNTAX_ERROR), as before. Source: issue 23 (CPU per definition change), issue 12 (quorum queues).
"""

from __future__ import annotations

from amqp_broker.protocol.methods import register_fast_decoder

from .codec import Quorum

__all__ = ["decode_quorum"]


def decode_quorum(payload: bytes) -> Quorum | None:
    """The method frame payload of a Cluster.Quorum -> a ``cluster.codec.Quorum`` (the same
    fields pamqp's decode gives); None for a payload that is not exactly that layout or whose
    names are not UTF-8 (the generic decoder then reports it)."""
    try:
        qpos = 5 + payload[4]
        gpos = qpos + 1 + payload[qpos]
        kpos = gpos + 1 + payload[gpos]
        if len(payload) != kpos + 1:
            return None
        method = Quorum.__new__(Quorum)
        method.vhost = payload[5:qpos].decode()
        method.queue = payload[qpos + 1:gpos].decode()
        method.group = payload[gpos + 1:kpos].decode()
        method.kind = payload[kpos]
        return method
    except (IndexError, UnicodeDecodeError):
        return None


register_fast_decoder(Quorum.index, decode_quorum)
