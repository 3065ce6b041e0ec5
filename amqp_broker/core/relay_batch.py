"""The body of a Cluster.RelayBatch: messages of one shared queue relayed to one member, as records,
both ways.

The sender (``cluster.driver.ClusterDriver.relay``) collects the transfers it deals to a member's
consumers of one queue during one turn of its event loop into a ``BatchBuilder``; the peer link's
writer sends it as one Cluster.RelayBatch method frame (vhost, queue, record count) and one
content (``cluster.relay_wire.encode_batch``), instead of three frames per message. The receiver
reads the records back here (``receive_batch``) and hands each message to ``core.relay_inbox``
exactly as a single Cluster.Relay's: every record is one transfer, settled on its own delivery tag.

Record (big-endian, AMQP 0-9-1 §4.2.5 field encodings): delivery tag u64 (> 0), flags u8 (bit 0:
redelivered), content header length u32, body length u32, the original exchange and routing key
(two short strings, as Basic.Deliver carries them), the content header payload as it came in
(class, weight, body size, properties), the body.

Must not know: links, sockets. Source: issue 10 (CPU per relayed message); Qpid ClusteringHA
proposal ("Basic.Publish": the message is relayed).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from queues.message import Message

from ..protocol import constants as c
from ..protocol.delivery import encode_routing
from ..protocol.errors import ConnectionException
from .relay_inbox import RelayOrigin

if TYPE_CHECKING:
    from .channel import Channel
    from .vhost import VirtualHost

__all__ = ["BATCH_BYTES", "BATCH_RECORDS", "RECORD_OVERHEAD", "BatchBuilder", "RelayedBatch",
           "receive_batch"]

_RECORD: Final = struct.Struct(">QBII")
_pack_record: Final = _RECORD.pack
#: Bytes of a record's fixed part (tag, flags, two lengths).
RECORD_OVERHEAD: Final = 17
#: A batch takes no more records once it holds this many bytes of records ...
BATCH_BYTES: Final = 128 * 1024
#: ... or this many records (a remote consumer's credit is ``core.relay.RELAY_WINDOW``).
BATCH_RECORDS: Final = 256
_MIN_HEADER: Final = 14  # class, weight, body size, property flags


class BatchBuilder:
    """Records for one Cluster.RelayBatch to one member: shared queue ``queue`` of ``vhost``;
    ``prefix`` is the method payload up to the record count (``cluster.relay_wire.batch_prefix``).
    ``parts`` the records' pieces in order, ``count`` records, ``size`` their bytes. ``sealed``
    once the link took it (written, or dropped with the link): then nothing may be added."""

    __slots__ = ("vhost", "queue", "prefix", "parts", "count", "size", "sealed")

    def __init__(self, vhost: str, queue: str, prefix: bytes) -> None:
        self.vhost = vhost
        self.queue = queue
        self.prefix = prefix
        self.parts: list[bytes] = []
        self.count = 0
        self.size = 0
        self.sealed = False

    def takes(self, vhost: str, queue: str) -> bool:
        """True when a transfer for ``queue`` of ``vhost`` may still be added."""
        return (not self.sealed and self.count < BATCH_RECORDS and self.size < BATCH_BYTES
                and self.queue == queue and self.vhost == vhost)

    def add(self, delivery_tag: int, redelivered: bool, message: Message) -> None:
        """Append transfer ``delivery_tag`` (> 0) of ``message``."""
        routing_raw = message.routing_raw
        if routing_raw is None:
            routing_raw = encode_routing(message.exchange, message.routing_key)
        header = message.header_payload
        body = message.body
        parts = self.parts
        parts.append(_pack_record(delivery_tag, 1 if redelivered else 0, len(header), len(body)))
        parts.append(routing_raw)
        parts.append(header)
        parts.append(body)
        self.count += 1
        self.size += RECORD_OVERHEAD + len(routing_raw) + len(header) + len(body)


class RelayedBatch:
    """A received Cluster.RelayBatch as the peer handler hands it to the channel
    (``Channel.relay_target``; decoded by ``cluster.relay_wire`` into its subclass): ``count``
    records for shared queue ``queue`` of ``vhost`` follow as its content's body."""

    __slots__ = ("vhost", "queue", "count")

    def __init__(self, vhost: str, queue: str, count: int) -> None:
        self.vhost = vhost
        self.queue = queue
        self.count = count


def _malformed(what: str) -> ConnectionException:
    return ConnectionException(c.SYNTAX_ERROR, f"SYNTAX_ERROR - Cluster.RelayBatch: {what}", 0, 0)


def receive_batch(vhost: VirtualHost | None, channel: Channel, batch: RelayedBatch,
                  data: bytes) -> int:
    """The records ``data`` of ``batch``, relayed to us over peer ``channel``: each goes to
    ``core.relay_inbox`` as one transfer (a shared queue we do not have, or ``vhost`` None, gives
    them back to the sender). Returns how many. Raises ``ConnectionException`` 502 SYNTAX_ERROR
    for records that do not parse or do not number ``batch.count`` (the link closes; the sender
    requeues what we had not settled)."""
    broker = channel.connection.broker
    inbox = broker.relay_inbox
    link = inbox.link(channel)
    q = vhost.queues.get(batch.queue) if vhost is not None else None
    if q is not None and q.exclusive_owner is not None:
        q = None
    n = len(data)
    pos = 0
    count = 0
    routing_raw = b""
    exchange = routing_key = ""
    while pos < n:
        rpos = pos + RECORD_OVERHEAD
        if rpos >= n:
            raise _malformed("truncated record")
        if data[pos] & 0x80:  # a tag of 2**63 or more (not a longlong)
            raise _malformed("bad delivery tag")
        tag = 0
        for i in range(pos, pos + 8):  # u64, big-endian (native ints when compiled)
            tag = (tag << 8) | data[i]
        redelivered = bool(data[pos + 8] & 1)
        hlen = ((data[pos + 9] << 24) | (data[pos + 10] << 16) | (data[pos + 11] << 8)
                | data[pos + 12])
        blen = ((data[pos + 13] << 24) | (data[pos + 14] << 16) | (data[pos + 15] << 8)
                | data[pos + 16])
        kpos = rpos + 1 + data[rpos]
        if kpos >= n:
            raise _malformed("truncated record")
        hpos = kpos + 1 + data[kpos]
        bpos = hpos + hlen
        end = bpos + blen
        if end > n or hlen < _MIN_HEADER or tag == 0:
            raise _malformed("bad record")
        raw = data[rpos:hpos]
        if raw != routing_raw:  # a batch's records mostly share them: decoded once
            try:
                exchange = data[rpos + 1:kpos].decode()
                routing_key = data[kpos + 1:hpos].decode()
            except UnicodeDecodeError:
                raise _malformed("exchange or routing key not UTF-8") from None
            routing_raw = raw
        message = Message(exchange, routing_key, data[hpos:bpos], data[bpos:end])
        message.routing_raw = routing_raw
        link.received(tag)
        origin = RelayOrigin(link, tag)
        if q is None:
            origin.settle("requeue")
        else:
            inbox.receive(broker, q, message, origin, redelivered)
        count += 1
        pos = end
    if count != batch.count:
        raise _malformed(f"{count} records, {batch.count} announced")
    return count
