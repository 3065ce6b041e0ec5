"""Frame splitting and encoding: a byte stream in, (type, channel, payload) triples out.

Owns the general frame layout (AMQP 0-9-1 §4.2.3: type u8, channel u16, size u32, payload, 0xCE)
and its limits: a frame larger than the negotiated frame_max, a bad frame-end octet or an unknown
frame type is a 501 FRAME_ERROR connection exception. Must not know: what a method means, sockets.

``FrameSplitter.feed`` is on the hot path: it slices payloads straight out of the received chunk and
keeps only an incomplete tail between calls (as views of the chunks it came in, joined once). With
``body_views`` (the broker's connections) a full-size body frame (frame_max - 8 payload bytes: a
body of several frames) is not copied out of its chunks: it comes as ``FRAME_BODY_VIEW`` (one per
read it spans) and its payload, memoryviews, waits in ``views``; the assembler joins a body's views
once (past 4 MiB it copies each into the body's buffer as it comes, and the read is let go).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Final

from . import constants as c
from .errors import ConnectionException

__all__ = ["FRAME_BODY_VIEW", "FrameSplitter", "encode_frame", "encode_body_frames"]

#: The frame type ``feed`` gives a body frame whose payload waits in ``FrameSplitter.views``
#: (never on the wire: frame types are one octet).
FRAME_BODY_VIEW: Final = 0x103
_METHOD: Final = c.FRAME_METHOD
_HEADER: Final = c.FRAME_HEADER
_BODY: Final = c.FRAME_BODY
_HEARTBEAT: Final = c.FRAME_HEARTBEAT

# Final: compiled code reads them as constants, not from the module's dict on every call
_HEAD: Final = struct.Struct(">BHI")
_unpack_head: Final = _HEAD.unpack_from
_pack_head: Final = _HEAD.pack


class FrameSplitter:
    """Buffers received bytes and splits them into frames.

    ``frame_max`` (bytes, whole frame including the 8 bytes of envelope) bounds every frame; it
    starts at the spec minimum 4096 until Tune-Ok raises it (``set_frame_max``). ``feed(data)``
    returns a list of ``(frame_type, channel, payload_bytes)``; an incomplete tail is kept.
    Raises ``ConnectionException`` 501 FRAME_ERROR on an oversized frame, a wrong frame-end octet or
    an unknown frame type (spec §4.2.3, §2.3.5.1). ``body_views``: a full body frame (frame_max - 8
    payload bytes: one of a body of several frames) lying whole in a fed chunk comes as
    ``(FRAME_BODY_VIEW, channel, b"")``, its payload a memoryview of the chunk appended to
    ``views`` (the caller takes them in order; ``feed`` drops any left from the previous call);
    one split across reads comes as one such frame per piece (each a view of its read).
    Source: AMQP 0-9-1 §4.2.3.
    """

    __slots__ = ("frame_max", "_tail", "_tail_len", "body_views", "views")

    def __init__(self, frame_max: int = c.FRAME_MIN_SIZE, body_views: bool = False) -> None:
        self.frame_max = frame_max
        #: The incomplete frame at the end of what was fed: pieces of the received chunks
        #: (memoryviews, not copies) and their total length in bytes.
        self._tail: list[bytes | memoryview] = []
        self._tail_len = 0
        self.body_views = body_views
        #: The payloads of the ``FRAME_BODY_VIEW`` frames of the last ``feed``, in order.
        self.views: deque[memoryview] = deque()

    def set_frame_max(self, frame_max: int) -> None:
        """Negotiated frame_max in bytes (0 means no limit, which we never grant)."""
        self.frame_max = frame_max

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return self._tail_len

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """Append ``data`` and return every complete frame in order (see class docstring).

        A frame split across reads is kept as pieces of the chunks (views where large) until its
        last byte arrives, then joined straight into its payload: a 64 KiB body straddling two
        256 KiB reads costs one to two copies of itself, not three. With body views a full body
        frame is not joined: its pieces come as views (class docstring)."""
        if self.views:
            self.views.clear()
        tail = self._tail
        if not tail:
            return self._split(data, 0)
        held = self._tail_len
        if held < 7:  # not even the frame header yet: a few bytes, join and parse afresh
            self._tail = []
            self._tail_len = 0
            return self._split(b"".join(tail) + data, 0)
        first = tail[0]  # holds the whole header (``_split`` keeps a tail in one piece)
        ftype, channel, size = _unpack_head(first, 0)
        need = 8 + size - held  # bytes of ``data`` that complete the frame (size checked already)
        if need > len(data):
            tail.append(data)
            self._tail_len = held + len(data)
            return []
        _check_frame(data[need - 1], ftype)
        tail[0] = memoryview(first)[7:]
        tail.append(memoryview(data)[:need - 1])
        if ftype == _BODY and self.body_views and size == self.frame_max - c.FRAME_OVERHEAD:
            # a full body frame across reads: its pieces as views, one FRAME_BODY_VIEW each (the
            # assembler counts bytes, not frames), so it is not copied before the body's join
            frames: list[tuple[int, int, bytes]] = []
            views = self.views
            for piece in tail:
                if len(piece):
                    frames.append((FRAME_BODY_VIEW, channel, b""))
                    views.append(memoryview(piece))
        else:
            frames = [(ftype, channel, b"".join(tail))]
        self._tail = []
        self._tail_len = 0
        if need < len(data):
            frames += self._split(data, need)
        return frames

    def _split(self, data: bytes, pos: int) -> list[tuple[int, int, bytes]]:
        frames: list[tuple[int, int, bytes]] = []
        end = len(data)
        full = self.frame_max - c.FRAME_OVERHEAD  # a full frame's payload, the largest allowed
        while end - pos >= 7:
            # the envelope read byte by byte: native ints when compiled (struct returns objects)
            ftype = data[pos]
            channel = (data[pos + 1] << 8) | data[pos + 2]
            size = ((data[pos + 3] << 24) | (data[pos + 4] << 16) | (data[pos + 5] << 8)
                    | data[pos + 6])
            if size >= full:  # a full frame (a body's: a view, not a copy) or one too large
                if size > full:
                    raise ConnectionException(
                        c.FRAME_ERROR,
                        f"FRAME_ERROR - frame size {size + c.FRAME_OVERHEAD} > frame_max "
                        f"{self.frame_max}")
                stop = pos + 7 + size
                if stop >= end:
                    break
                _check_frame(data[stop], ftype)
                if ftype == _BODY and self.body_views:
                    frames.append((FRAME_BODY_VIEW, channel, b""))
                    self.views.append(memoryview(data)[pos + 7:stop])
                else:
                    frames.append((ftype, channel, data[pos + 7:stop]))
                pos = stop + 1
                continue
            stop = pos + 7 + size
            if stop >= end:
                break  # incomplete: need the frame-end octet too
            if data[stop] != c.FRAME_END:
                raise ConnectionException(c.FRAME_ERROR,
                                          f"FRAME_ERROR - bad frame end octet {data[stop]:#x}")
            if ftype != _METHOD and ftype != _HEADER and ftype != _BODY and ftype != _HEARTBEAT:
                raise ConnectionException(c.FRAME_ERROR, f"FRAME_ERROR - unknown frame type {ftype}")
            frames.append((ftype, channel, data[pos + 7:stop]))
            pos = stop + 1
        if pos < end:
            # A view, not a copy, when the tail is at least a quarter of the chunk (a large
            # frame's head): its bytes are copied once, when the frame is complete, and the view
            # holds at most four times its size. A small tail is copied, not to hold the chunk.
            held = end - pos
            self._tail = [memoryview(data)[pos:] if held >= 7 and 4 * held >= end
                          else data[pos:]]
            self._tail_len = held
        return frames


def _check_frame(end_octet: int, ftype: int) -> None:
    """Raise 501 FRAME_ERROR for a frame-end octet other than 0xCE or an unknown frame type."""
    if end_octet != c.FRAME_END:
        raise ConnectionException(c.FRAME_ERROR, f"FRAME_ERROR - bad frame end octet {end_octet:#x}")
    if ftype != _METHOD and ftype != _HEADER and ftype != _BODY and ftype != _HEARTBEAT:
        raise ConnectionException(c.FRAME_ERROR, f"FRAME_ERROR - unknown frame type {ftype}")


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One frame: envelope + ``payload`` + 0xCE. Source: AMQP 0-9-1 §4.2.3."""
    return _pack_head(frame_type, channel, len(payload)) + payload + c.FRAME_END_BYTE


def encode_body_frames(channel: int, body: bytes, frame_max: int) -> list[bytes]:
    """Body frames for ``body`` split so that no frame exceeds ``frame_max`` bytes (§4.2.6.2)."""
    step = frame_max - c.FRAME_OVERHEAD
    if len(body) <= step:   # joined: one copy of the body (a + b + c makes two)
        return [b"".join((_pack_head(c.FRAME_BODY, channel, len(body)), body, c.FRAME_END_BYTE))]
    out = []
    for i in range(0, len(body), step):
        chunk = body[i:i + step]
        out.append(b"".join((_pack_head(c.FRAME_BODY, channel, len(chunk)), chunk,
                             c.FRAME_END_BYTE)))
    return out
