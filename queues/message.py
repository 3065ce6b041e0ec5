"""The message value that flows from a publisher through exchanges into queues and out to consumers.

Owns: one published message as the broker holds it: the exchange and routing key it was published
with, its content header payload *exactly as it came in* and its body bytes. Properties are decoded
lazily (and only the bits needed: expiration, priority, delivery mode, headers) so that the publish ->
deliver hot path never pays for a full decode (DESIGN.md §5).

Must not know: sockets, channels, frames beyond the content header payload layout (AMQP 0-9-1 §4.2.6.1:
class-id u16, weight u16, body-size u64, property flags u16..., property list).
"""

from __future__ import annotations

import struct
from typing import Final

from pamqp import commands
from pamqp.common import FieldTable
from pamqp.header import ContentHeader

__all__ = ["Message", "encode_header_payload"]

# Final: the compiled hot path reads them as constants, not from the module's dict per call
_FLAG_HEADERS: Final = 0x2000
_FLAG_DELIVERY_MODE: Final = 0x1000
_FLAG_PRIORITY: Final = 0x0800
_FLAG_EXPIRATION: Final = 0x0100
_FLAG_MESSAGE_ID: Final = 0x0080
_FLAG_USER_ID: Final = 0x0010
_PROPERTY_FLAGS_AT: Final = 12  # class-id u16 + weight u16 + body-size u64


def encode_header_payload(properties: commands.Basic.Properties, body_size: int) -> bytes:
    """Encode a content header frame *payload* (no frame envelope) for ``properties``.

    Shapes: ``body_size`` in bytes. Returns class-id 60, weight 0, body size, flags and property list.
    Source: AMQP 0-9-1 §4.2.6.1. Raises ``ValueError`` from pamqp when a property is invalid.
    """
    return ContentHeader(0, body_size, properties).marshal()


class Message:
    """One published message: routing facts plus raw content header payload and body.

    ``header_payload`` is the content header frame payload as received (bytes, starts with class-id
    60); ``body`` is the concatenated body (bytes, ``len(body)`` equals the header's body size).
    ``properties`` decodes the header with pamqp on first use and caches it.
    ``with_properties`` returns a copy with re-encoded properties (used by dead-lettering to add
    ``x-death``). Instances are treated as immutable once routed: a queue never mutates one.

    Source: AMQP 0-9-1 §2.1.4 (content), §4.2.6 (content header); RabbitMQ "Publishers" guide.
    """

    __slots__ = ("exchange", "routing_key", "header_payload", "body", "_properties", "_flags",
                 "store_id", "routing_raw")

    def __init__(self, exchange: str, routing_key: str, header_payload: bytes, body: bytes) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.header_payload = header_payload
        self.body = body
        self._properties: commands.Basic.Properties | None = None
        # The first property-flags word; 0 when the header is shorter than the fixed part.
        if len(header_payload) >= _PROPERTY_FLAGS_AT + 2:
            self._flags = (header_payload[_PROPERTY_FLAGS_AT] << 8) | header_payload[
                _PROPERTY_FLAGS_AT + 1]
        else:
            self._flags = 0
        #: Identifier given by a message store once the message is persisted (None: not stored).
        self.store_id: int | None = None
        #: ``exchange`` and ``routing_key`` encoded as two AMQP short strings, as they came in the
        #: publish frame (set by the broker; None until known), reused verbatim in Basic.Deliver.
        self.routing_raw: bytes | None = None

    @classmethod
    def build(cls, exchange: str, routing_key: str, body: bytes,
              properties: commands.Basic.Properties | None = None) -> Message:
        """Make a message from decoded properties (tests, dead-lettering, broker-made messages)."""
        props = properties if properties is not None else commands.Basic.Properties()
        msg = cls(exchange, routing_key, encode_header_payload(props, len(body)), body)
        msg._properties = props
        return msg

    @property
    def body_size(self) -> int:
        """Body length in bytes."""
        return len(self.body)

    @property
    def properties(self) -> commands.Basic.Properties:
        """The decoded ``Basic.Properties`` (decoded once, then cached).

        Raises ``ValueError`` (or pamqp's ``struct.error``) when the header payload is malformed;
        the protocol layer validates headers before a Message is built, so a routed message never does.
        """
        props = self._properties
        if props is None:
            header = ContentHeader()
            header.unmarshal(self.header_payload)
            props = self._properties = header.properties
        return props

    def with_properties(self, properties: commands.Basic.Properties, *, exchange: str | None = None,
                        routing_key: str | None = None) -> Message:
        """A copy carrying ``properties`` re-encoded; body shared, routing facts optionally replaced."""
        msg = Message(self.exchange if exchange is None else exchange,
                      self.routing_key if routing_key is None else routing_key,
                      encode_header_payload(properties, len(self.body)), self.body)
        msg._properties = properties
        return msg

    @property
    def persistent(self) -> bool:
        """True when delivery-mode is 2 (persistent). Read straight from the header bytes when no
        variable-length property precedes it (the common case), else from decoded properties."""
        flags = self._flags
        if not flags & _FLAG_DELIVERY_MODE:
            return False
        if not flags & 0xE000 and len(self.header_payload) > 14:  # no content-type/-encoding/headers
            return self.header_payload[14] == 2
        return self.properties.delivery_mode == 2

    @property
    def priority(self) -> int:
        """The priority property (0-255), 0 when absent."""
        if not self._flags & _FLAG_PRIORITY:
            return 0
        return self.properties.priority or 0

    @property
    def expiration(self) -> str | None:
        """The raw per-message TTL string (milliseconds as decimal text), None when absent."""
        if not self._flags & _FLAG_EXPIRATION:
            return None
        return self.properties.expiration

    @property
    def has_headers(self) -> bool:
        """True when the headers property is present (known without decoding)."""
        return bool(self._flags & _FLAG_HEADERS)

    @property
    def headers(self) -> FieldTable | None:
        """The headers table, None when absent (decodes properties on first use)."""
        if not self._flags & _FLAG_HEADERS:
            return None
        return self.properties.headers

    @property
    def message_id(self) -> str | None:
        """The message-id property, None when absent."""
        if not self._flags & _FLAG_MESSAGE_ID:
            return None
        return self.properties.message_id

    @property
    def user_id(self) -> str | None:
        """The user-id property, None when absent."""
        if not self._flags & _FLAG_USER_ID:
            return None
        return self.properties.user_id

    def __repr__(self) -> str:
        return (f"Message(exchange={self.exchange!r}, routing_key={self.routing_key!r}, "
                f"body_size={len(self.body)})")


def body_size_of(header_payload: bytes) -> int:
    """Read the body size (bytes, u64) from a content header payload; raises ``struct.error``."""
    return struct.unpack_from(">Q", header_payload, 4)[0]
