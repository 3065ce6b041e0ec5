"""Fast encoding of the frames that carry a message to a consumer: Basic.Deliver / Basic.GetOk /
Basic.Return, each followed by the content header (as it came in) and body frames.

Owns the byte layout of those three methods (AMQP 0-9-1 class basic: deliver = 60.60, get-ok = 60.71,
return = 60.50) so the hot path never builds a pamqp object; tested byte-for-byte against pamqp.
Must not know: queues, channels, sockets.
"""

from __future__ import annotations

import struct
from typing import Final

from . import constants as c

__all__ = ["encode_shortstr", "deliver_prefix", "encode_content", "encode_deliver",
           "encode_deliver_parts", "encode_get_ok", "encode_return", "encode_routing",
           "DeliverEncoder"]

# Final: compiled code reads them as constants, not from the module's dict on every call
_HEAD: Final = struct.Struct(">BHI")
_pack_head: Final = _HEAD.pack
_TAG_BIT: Final = struct.Struct(">QB")
_pack_tag_bit: Final = _TAG_BIT.pack
_END: Final = c.FRAME_END_BYTE
_DELIVER: Final = b"\x00\x3c\x00\x3c"
_GET_OK: Final = b"\x00\x3c\x00\x47"
_RETURN: Final = b"\x00\x3c\x00\x32"


def encode_shortstr(value: str) -> bytes:
    """AMQP short string: length u8 + UTF-8 bytes; raises ``ValueError`` over 255 bytes (§4.2.5.3)."""
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError("short string longer than 255 bytes")
    return bytes((len(raw),)) + raw


def encode_routing(exchange: str, routing_key: str) -> bytes:
    """``exchange`` and ``routing_key`` as two short strings (the tail of Deliver/GetOk/Return)."""
    return encode_shortstr(exchange) + encode_shortstr(routing_key)


def deliver_prefix(consumer_tag: str) -> bytes:
    """Method id + consumer tag short string: constant per consumer, computed once at Consume."""
    return _DELIVER + encode_shortstr(consumer_tag)


def encode_content(channel: int, header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """A content header frame (``header_payload``) and the body frames of ``body``, each frame at
    most ``frame_max`` bytes (the 8 of the envelope included; none when ``body`` is empty).
    Source: AMQP 0-9-1 §4.2.6."""
    step = frame_max - c.FRAME_OVERHEAD
    n = len(body)
    if n <= step:
        if n == 0:
            return _pack_head(c.FRAME_HEADER, channel, len(header_payload)) + header_payload + _END
        return b"".join((_pack_head(c.FRAME_HEADER, channel, len(header_payload)), header_payload,
                         _END, _pack_head(c.FRAME_BODY, channel, n), body, _END))
    parts = [_pack_head(c.FRAME_HEADER, channel, len(header_payload)), header_payload, _END]
    _add_body_frames(parts, channel, body, frame_max)
    return b"".join(parts)


def encode_deliver(channel: int, prefix: bytes, delivery_tag: int, redelivered: bool,
                   routing_raw: bytes, header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """Basic.Deliver + content header + body frames as one bytes object.

    ``prefix`` from ``deliver_prefix``; ``routing_raw`` from ``encode_routing`` (or the publish
    frame's own bytes); ``frame_max`` in bytes bounds each frame. Source: AMQP 0-9-1 basic.deliver.
    """
    size = len(prefix) + 9 + len(routing_raw)
    step = frame_max - c.FRAME_OVERHEAD
    n = len(body)
    if 0 < n <= step:  # the common case, one join
        return b"".join((_pack_head(c.FRAME_METHOD, channel, size), prefix,
                         _pack_tag_bit(delivery_tag, redelivered), routing_raw, _END,
                         _pack_head(c.FRAME_HEADER, channel, len(header_payload)), header_payload,
                         _END, _pack_head(c.FRAME_BODY, channel, n), body, _END))
    return b"".join((_pack_head(c.FRAME_METHOD, channel, size), prefix,
                     _pack_tag_bit(delivery_tag, redelivered), routing_raw, _END,
                     encode_content(channel, header_payload, body, frame_max)))


class DeliverEncoder:
    """``encode_deliver`` for one consumer on one channel, in one ``struct`` pack a message.

    ``channel``: the channel number; ``consumer_tag``: the consumer's tag; ``frame_max``: the
    connection's negotiated frame size in bytes (envelope included). A delivery is the method
    frame, the content header frame and one body frame (AMQP 0-9-1 §4.2.6); for one consumer
    only the delivery tag, the redelivered bit and the message's own bytes (routing short
    strings, header payload, body) change, and their lengths rarely do. So the encoder keeps a
    ``struct.Struct`` whose format has the lengths of the last deliveries built in (the frame
    envelopes and the consumer's prefix as precomputed bytes) and packs each delivery with one
    call: four ``struct`` packs and an eleven-piece join become one pack (issue 28, the 16 B
    path). A length that changes is packed the old way until it repeats (two deliveries in a
    row), then a new format is built: bodies of every size cost no more than before.
    Output is byte for byte ``encode_deliver``'s."""

    __slots__ = ("channel", "prefix", "frame_max", "_r", "_h", "_n", "_next_rh", "_next_n",
                 "_head", "_mid", "_tail", "_pack_base", "_pack_full")

    def __init__(self, channel: int, consumer_tag: str, frame_max: int) -> None:
        self.channel = channel
        self.prefix = deliver_prefix(consumer_tag)
        self.frame_max = frame_max
        self._r = -1      # routing_raw length the formats are for
        self._h = -1      # header payload length
        self._n = -1      # body length of ``_pack_full``
        self._next_rh = -1  # (r << 32 | h) seen last and not yet built
        self._next_n = -1   # body length seen last and not yet built
        self._head = b""  # method frame envelope + the consumer's prefix
        self._mid = b""   # the method frame's end + the header frame's envelope
        self._tail = b""  # the header frame's end + the body frame's envelope (of ``_n``)
        self._pack_base = _HEAD.pack
        self._pack_full = _HEAD.pack

    def encode(self, delivery_tag: int, redelivered: bool, routing_raw: bytes,
               header_payload: bytes, body: bytes) -> bytes:
        """Basic.Deliver (``delivery_tag`` < 2**64) + content header (``header_payload`` as it
        came in) + body frames, as one bytes object; ``routing_raw`` from ``encode_routing``."""
        r = len(routing_raw)
        h = len(header_payload)
        n = len(body)
        if r != self._r or h != self._h:
            rh = (r << 32) | h
            if rh != self._next_rh:
                self._next_rh = rh
                return encode_deliver(self.channel, self.prefix, delivery_tag, redelivered,
                                      routing_raw, header_payload, body, self.frame_max)
            self._build_base(r, h)
        if n == self._n:
            return self._pack_full(self._head, delivery_tag, redelivered, routing_raw, self._mid,
                                   header_payload, self._tail, body, _END)
        if n == self._next_n and 0 < n <= self.frame_max - c.FRAME_OVERHEAD:
            self._build_full(n)
            return self._pack_full(self._head, delivery_tag, redelivered, routing_raw, self._mid,
                                   header_payload, self._tail, body, _END)
        self._next_n = n
        parts = [self._pack_base(self._head, delivery_tag, redelivered, routing_raw, self._mid,
                                 header_payload), _END]
        _add_body_frames(parts, self.channel, body, self.frame_max)
        return b"".join(parts)

    def _build_base(self, r: int, h: int) -> None:
        """Formats for routing strings of ``r`` bytes and a header payload of ``h`` bytes."""
        size = len(self.prefix) + 9 + r
        self._head = _pack_head(c.FRAME_METHOD, self.channel, size) + self.prefix
        self._mid = _END + _pack_head(c.FRAME_HEADER, self.channel, h)
        base = f">{len(self._head)}sQ?{r}s{len(self._mid)}s{h}s"
        self._pack_base = struct.Struct(base).pack
        self._r = r
        self._h = h
        self._n = -1
        self._next_n = -1

    def _build_full(self, n: int) -> None:
        """The one-pack format for a body of ``n`` bytes (0 < n <= frame_max - 8)."""
        self._tail = _END + _pack_head(c.FRAME_BODY, self.channel, n)
        r, h = self._r, self._h
        self._pack_full = struct.Struct(
            f">{len(self._head)}sQ?{r}s{len(self._mid)}s{h}s{len(self._tail)}s{n}s1s").pack
        self._n = n


def _add_body_frames(parts: list[bytes], channel: int, body: bytes, frame_max: int) -> None:
    """Append the body frames of ``body`` to ``parts`` (none when empty), each at most
    ``frame_max`` bytes, envelope included (§4.2.6.2)."""
    step = frame_max - c.FRAME_OVERHEAD
    n = len(body)
    if n <= step:
        if n:
            parts += (_pack_head(c.FRAME_BODY, channel, n), body, _END)
        return
    for i in range(0, n, step):
        chunk = body[i:i + step]
        parts += (_pack_head(c.FRAME_BODY, channel, len(chunk)), chunk, _END)


def encode_deliver_parts(channel: int, prefix: bytes, delivery_tag: int, redelivered: bool,
                         routing_raw: bytes, header_payload: bytes, body: bytes,
                         frame_max: int = 131072) -> list[bytes | memoryview]:
    """``encode_deliver`` as a list of pieces, queued as they are and joined once with the rest
    of the connection's output: a body that fits one frame (``frame_max`` bytes, the 8 of the
    envelope included) is a piece of its own, uncopied until that join; a longer one is cut into
    frame_max - 8 byte slices, views of ``body`` (no copy), between the frames' envelopes
    (§4.2.6.2). ``body`` must not be empty (an empty body has no body frame: use
    ``encode_deliver``)."""
    size = len(prefix) + 9 + len(routing_raw)
    step = frame_max - c.FRAME_OVERHEAD
    n = len(body)
    head = b"".join((_pack_head(c.FRAME_METHOD, channel, size), prefix,
                     _pack_tag_bit(delivery_tag, redelivered), routing_raw, _END,
                     _pack_head(c.FRAME_HEADER, channel, len(header_payload)), header_payload,
                     _END, _pack_head(c.FRAME_BODY, channel, n if n <= step else step)))
    if n <= step:
        return [head, body, _END]
    view = memoryview(body)
    parts: list[bytes | memoryview] = [head, view[:step]]
    for i in range(step, n, step):
        chunk = view[i:i + step]
        parts.append(_END + _pack_head(c.FRAME_BODY, channel, len(chunk)))
        parts.append(chunk)
    parts.append(_END)
    return parts


def encode_get_ok(channel: int, delivery_tag: int, redelivered: bool, routing_raw: bytes,
                  message_count: int, header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """Basic.GetOk (+ content) ; ``message_count`` is the ready count left in the queue."""
    payload = b"".join((_GET_OK, _pack_tag_bit(delivery_tag, redelivered), routing_raw,
                        struct.pack(">I", message_count)))
    return b"".join((_pack_head(c.FRAME_METHOD, channel, len(payload)), payload, _END,
                     encode_content(channel, header_payload, body, frame_max)))


def encode_return(channel: int, reply_code: int, reply_text: str, routing_raw: bytes,
                  header_payload: bytes, body: bytes, frame_max: int) -> bytes:
    """Basic.Return (+ content), e.g. 312 NO_ROUTE for an unroutable mandatory message."""
    payload = b"".join((_RETURN, struct.pack(">H", reply_code), encode_shortstr(reply_text),
                        routing_raw))
    return b"".join((_pack_head(c.FRAME_METHOD, channel, len(payload)), payload, _END,
                     encode_content(channel, header_payload, body, frame_max)))
