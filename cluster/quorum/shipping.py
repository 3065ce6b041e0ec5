"""Consumers on a broker outside a quorum queue's group: what the leader ships to that broker and
what that broker reports back. Pure: bytes and dataclasses in and out.

Owns: the two payloads of the "remote consumer" exchange and the leader's side of it.

* ``Ship`` (leader -> the broker of a consumer outside the group): the deliveries the leader's
  replica checked out to that broker's consumers (message content included: that broker holds no
  replica to read it from) and the consumers the group cancelled (Down, a newer incarnation).
* ``Holding`` (that broker -> the leader, every ``HOLDING_MS`` while it has consumers): for each
  of its consumers whose Checkout was applied, the deliveries (msg id, delivery count) it holds or
  whose settle is not applied yet. The leader answers with a ``Ship`` of what is checked out to
  those consumers and missing there (a ship lost with a broken link, or sent by a leader that
  died), and of the consumers it does not know any more (cancelled). The answer is sent even when
  empty: it tells that broker who leads.

A delivery is named by (msg id, delivery count): the msg id is the Raft index of the message's
Enqueue and the count grows on every return, so a re-ship of the same delivery is recognised and
dropped by the receiver (``remote.RemoteGroup.received``) while a real redelivery is not.
A new leader re-ships everything checked out to consumers outside the group once it has applied
its term's first entry (``QuorumGroup.leader_duties``): the checkouts are in the replicated state,
so the delivering survives the old leader. Must not know: sockets, Raft messages, clocks.

Layout (big-endian; str = u16 length + utf-8): Ship = count u32 of deliveries, each consumer
(str), msg id u64, delivery count u32, header length u32, header, body length u32, body; then
count u32 of cancelled consumers (str each). Holding = origin (str), count u32 of consumers, each
consumer (str), count u32, (msg id u64, delivery count u32) each.
Sources: RabbitMQ "Quorum Queues" (consumers may be connected to any node: the leader delivers),
``rabbit_fifo`` (checkout state replicated, deliveries sent by the leader to the consumer's
node).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster.raft import fifo as f

__all__ = ["Ship", "Holding", "HOLDING_MS", "encode_ship", "decode_ship", "encode_holding",
           "decode_holding", "missing"]

#: A broker with consumers outside the group reports what it holds this often (ms).
HOLDING_MS = 1000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_QI = struct.Struct(">QI")


@dataclass(frozen=True, slots=True)
class Ship:
    """Send ``payload`` (``encode_ship``) to member ``to``, outside the group."""

    to: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Holding:
    """Send ``payload`` (``encode_holding``) to member ``to`` (the leader, as far as known)."""

    to: str
    payload: bytes


def _str(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def encode_ship(deliveries: Iterable[f.Deliver], cancelled: Iterable[str] = ()) -> bytes:
    """The ``Ship`` payload of ``deliveries`` and ``cancelled`` consumer ids."""
    parts: list[bytes] = []
    deliveries = list(deliveries)
    parts.append(_U32.pack(len(deliveries)))
    for d in deliveries:
        parts += (_str(d.consumer), _QI.pack(d.msg_id, d.delivery_count),
                  _U32.pack(len(d.header)), d.header, _U32.pack(len(d.body)), d.body)
    cancelled = list(cancelled)
    parts.append(_U32.pack(len(cancelled)))
    parts += (_str(c) for c in cancelled)
    return b"".join(parts)


def decode_ship(data: bytes) -> tuple[list[f.Deliver], list[str]]:
    """(deliveries, cancelled consumer ids) of a ``Ship`` payload. Raises ``ValueError`` when
    malformed."""
    r = f.Reader(bytes(data))
    try:
        out = []
        for _ in range(r.take(_U32)[0]):
            consumer = r.str()
            msg_id, count = r.take(_QI)
            header = r.raw(r.take(_U32)[0])
            body = r.raw(r.take(_U32)[0])
            out.append(f.Deliver(consumer, msg_id, header, body, count))
        cancelled = [r.str() for _ in range(r.take(_U32)[0])]
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a ship payload: {exc}") from exc
    return out, cancelled


def encode_holding(origin: str, held: Mapping[str, Iterable[tuple[int, int]]]) -> bytes:
    """The ``Holding`` payload of ``origin``: consumer id -> (msg id, delivery count) pairs."""
    parts = [_str(origin), _U32.pack(len(held))]
    for cid, pairs in held.items():
        pairs = list(pairs)
        parts += (_str(cid), _U32.pack(len(pairs)))
        parts += (_QI.pack(i, n) for i, n in pairs)
    return b"".join(parts)


def decode_holding(data: bytes) -> tuple[str, dict[str, set[tuple[int, int]]]]:
    """(origin, consumer id -> set of (msg id, delivery count)) of a ``Holding`` payload.
    Raises ``ValueError`` when malformed."""
    r = f.Reader(bytes(data))
    try:
        origin = r.str()
        held: dict[str, set[tuple[int, int]]] = {}
        for _ in range(r.take(_U32)[0]):
            cid = r.str()
            held[cid] = {r.take(_QI) for _ in range(r.take(_U32)[0])}
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a holding payload: {exc}") from exc
    return origin, held


def missing(fifo: f.FifoQueue, held: Mapping[str, set[tuple[int, int]]]
            ) -> tuple[list[f.Deliver], list[str]]:
    """The leader's answer to a ``Holding``: deliveries checked out in ``fifo`` to the consumers
    of ``held`` that are not in it (in msg id order), and the consumers ``fifo`` does not know
    (cancelled by the group)."""
    out: list[f.Deliver] = []
    cancelled: list[str] = []
    for cid, pairs in held.items():
        c = fifo.consumers.get(cid)
        if c is None:
            cancelled.append(cid)
            continue
        out += (f.Deliver(cid, m.msg_id, m.header, fifo.body(m), m.delivery_count)
                for m in sorted(c.out.values(), key=lambda m: m.msg_id)
                if (m.msg_id, m.delivery_count) not in pairs)
    return out, cancelled
