"""Message properties, received messages, and the Basic.Publish fast path.

Owns the byte layout of the content header (class 60, weight 0, body size u64, property flags u16,
then the present properties in flag order: AMQP 0-9-1 §4.2.6.1 and the basic class property list)
and of Basic.Publish (60.40: ticket u16, exchange shortstr, routing-key shortstr, bits octet), built
with ``struct`` so publishing never creates a pamqp object; tested byte-for-byte against pamqp.
Field tables use pamqp's codec. Must not know: sockets, channels' state.
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any

from pamqp import decode as _pdecode
from pamqp import encode as _pencode

from amqp_broker.protocol import constants as c

__all__ = ["Properties", "Message", "encode_properties", "decode_properties", "encode_publish",
           "EMPTY_PROPERTIES"]

_HEAD = struct.Struct(">BHI")
_pack_head = _HEAD.pack
_CONTENT = struct.Struct(">HHQ")
_pack_content = _CONTENT.pack
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_END = c.FRAME_END_BYTE
_PUBLISH = b"\x00\x3c\x00\x28\x00\x00"  # class 60, method 40, ticket 0

# (attribute, flag bit, kind) in wire order.
_FIELDS = (
    ("content_type", 15, "s"), ("content_encoding", 14, "s"), ("headers", 13, "t"),
    ("delivery_mode", 12, "o"), ("priority", 11, "o"), ("correlation_id", 10, "s"),
    ("reply_to", 9, "s"), ("expiration", 8, "s"), ("message_id", 7, "s"),
    ("timestamp", 6, "q"), ("type", 5, "s"), ("user_id", 4, "s"), ("app_id", 3, "s"),
    ("cluster_id", 2, "s"),
)


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(raw),)) + raw


class Properties:
    """Basic properties of a message (all optional; ``None`` means absent).

    ``delivery_mode``: 1 transient, 2 persistent. ``priority``: 0-255. ``expiration``: per-message
    TTL in milliseconds, as a decimal string (AMQP's type). ``timestamp``: seconds since the epoch
    (int; a ``datetime`` is accepted and converted). ``headers``: dict of AMQP field values.
    """

    __slots__ = tuple(f[0] for f in _FIELDS)

    def __init__(self, content_type: str | None = None, content_encoding: str | None = None,
                 headers: dict[str, Any] | None = None, delivery_mode: int | None = None,
                 priority: int | None = None, correlation_id: str | None = None,
                 reply_to: str | None = None, expiration: str | None = None,
                 message_id: str | None = None, timestamp: int | _dt.datetime | None = None,
                 type: str | None = None, user_id: str | None = None,  # noqa: A002
                 app_id: str | None = None, cluster_id: str | None = None) -> None:
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.headers = headers
        self.delivery_mode = delivery_mode
        self.priority = priority
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.expiration = expiration
        self.message_id = message_id
        if isinstance(timestamp, _dt.datetime):
            timestamp = int(timestamp.timestamp())
        self.timestamp = timestamp
        self.type = type
        self.user_id = user_id
        self.app_id = app_id
        self.cluster_id = cluster_id

    def as_dict(self) -> dict[str, Any]:
        """The present properties as a plain dict (for JSON output)."""
        return {name: getattr(self, name) for name in self.__slots__
                if getattr(self, name) is not None}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Properties) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Properties({inner})"


def encode_properties(props: Properties | None) -> bytes:
    """Property flags u16 + the present property fields (the content header after body size).

    Raises ``ValueError`` for a short string over 255 bytes or an octet out of 0..255.
    """
    if props is None:
        return b"\x00\x00"
    flags = 0
    parts: list[bytes] = []
    for name, bit, kind in _FIELDS:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= 1 << bit
        if kind == "s":
            parts.append(_shortstr(value))
        elif kind == "o":
            if not 0 <= value <= 255:
                raise ValueError(f"{name} must be 0..255, got {value}")
            parts.append(bytes((value,)))
        elif kind == "q":
            parts.append(_U64.pack(value))
        else:
            parts.append(_pencode.field_table(value))
    return _U16.pack(flags) + b"".join(parts)


def decode_properties(header_payload: bytes) -> Properties:
    """Properties from a whole content header payload (class, weight, size, flags, fields).

    Raises ``ValueError`` when the payload is truncated or malformed.
    """
    try:
        flags = _U16.unpack_from(header_payload, 12)[0]
        props = Properties()
        if not flags:
            return props
        pos = 14
        for name, bit, kind in _FIELDS:
            if not flags & (1 << bit):
                continue
            if kind == "s":
                n = header_payload[pos]
                value: Any = header_payload[pos + 1:pos + 1 + n].decode()
                pos += 1 + n
            elif kind == "o":
                value = header_payload[pos]
                pos += 1
            elif kind == "q":
                value = _U64.unpack_from(header_payload, pos)[0]
                pos += 8
            else:
                used, value = _pdecode.field_table(header_payload[pos:])
                pos += used
            setattr(props, name, value)
        return props
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed content header: {exc}") from None


EMPTY_PROPERTIES = b"\x00\x00"


def encode_publish(channel: int, routing: bytes, body: bytes, props_raw: bytes,
                   frame_max: int) -> bytes:
    """Basic.Publish + content header + body frames, as one bytes object.

    ``routing``: exchange shortstr + routing-key shortstr + bits octet (mandatory=1, immediate=2),
    see ``encode_routing``; ``props_raw`` from ``encode_properties``; ``frame_max`` in bytes bounds
    every frame (bodies are split). Source: AMQP 0-9-1 basic.publish, §4.2.6.
    """
    n = len(body)
    hlen = 12 + len(props_raw)
    step = frame_max - c.FRAME_OVERHEAD
    if 0 < n <= step:
        return b"".join((_pack_head(1, channel, 6 + len(routing)), _PUBLISH, routing, _END,
                         _pack_head(2, channel, hlen), _pack_content(60, 0, n), props_raw, _END,
                         _pack_head(3, channel, n), body, _END))
    parts = [_pack_head(1, channel, 6 + len(routing)), _PUBLISH, routing, _END,
             _pack_head(2, channel, hlen), _pack_content(60, 0, n), props_raw, _END]
    for i in range(0, n, step):
        chunk = body[i:i + step]
        parts += (_pack_head(3, channel, len(chunk)), chunk, _END)
    return b"".join(parts)


def encode_routing(exchange: str, routing_key: str, mandatory: bool = False,
                   immediate: bool = False) -> bytes:
    """The Basic.Publish tail: exchange and routing key short strings, then the bits octet."""
    return (_shortstr(exchange) + _shortstr(routing_key)
            + bytes((int(mandatory) | (int(immediate) << 1),)))


class Message:
    """A message received with Basic.Deliver, Basic.GetOk or Basic.Return.

    ``body``: bytes; ``properties``: ``Properties`` (decoded on first access); ``delivery_tag``:
    channel-scoped tag for ack/nack (0 for a return); ``redelivered``; ``exchange``,
    ``routing_key``; ``consumer_tag`` (deliveries); ``message_count`` (get: messages left);
    ``reply_code``/``reply_text`` (returns, e.g. 312 NO_ROUTE); ``kind``: "deliver", "get" or
    "return". ``channel``: the receiving ``clients.channel.Channel`` (set by the async layer) and
    ``epoch``: its connection generation, so a tag from before a reconnect is never acked.
    """

    __slots__ = ("kind", "channel_id", "body", "header", "delivery_tag", "redelivered", "exchange",
                 "routing_key", "consumer_tag", "message_count", "reply_code", "reply_text",
                 "_props", "channel", "epoch")

    def __init__(self, kind: str, channel_id: int, delivery_tag: int = 0, redelivered: bool = False,
                 exchange: str = "", routing_key: str = "", consumer_tag: str = "",
                 message_count: int = 0, reply_code: int = 0, reply_text: str = "") -> None:
        self.kind = kind
        self.channel_id = channel_id
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.exchange = exchange
        self.routing_key = routing_key
        self.consumer_tag = consumer_tag
        self.message_count = message_count
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.body = b""
        self.header = b""
        self._props: Properties | None = None
        self.channel: Any = None
        self.epoch = 0

    @property
    def properties(self) -> Properties:
        """The message's properties (decoded lazily from the content header)."""
        if self._props is None:
            self._props = decode_properties(self.header) if self.header else Properties()
        return self._props

    async def ack(self, multiple: bool = False) -> bool:
        """Basic.Ack this delivery; False (nothing sent) when the channel reconnected since."""
        return await self.channel.basic_ack(self.delivery_tag, multiple, epoch=self.epoch)

    async def nack(self, requeue: bool = True, multiple: bool = False) -> bool:
        """Basic.Nack this delivery (requeue or dead-letter/drop); False when stale."""
        return await self.channel.basic_nack(self.delivery_tag, multiple, requeue,
                                             epoch=self.epoch)

    async def reject(self, requeue: bool = True) -> bool:
        """Basic.Reject this delivery; False when stale."""
        return await self.channel.basic_reject(self.delivery_tag, requeue, epoch=self.epoch)

    def __repr__(self) -> str:
        return (f"Message({self.kind}, tag={self.delivery_tag}, exchange={self.exchange!r}, "
                f"routing_key={self.routing_key!r}, body={self.body[:40]!r})")
