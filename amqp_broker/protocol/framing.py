"""Frame splitting and encoding: a byte stream in, (type, channel, payload) triples out.

Owns the general frame layout (AMQP 0-9-1 §4.2.3: type u8, channel u16, size u32, payload, 0xCE)
and its limits: a frame larger than the negotiated frame_max, a bad frame-end octet or an unknown
frame type is a 501 FRAME_ERROR connection exception. Must not know: what a method means, sockets.

``FrameSplitter.feed`` is on the hot path: it slices payloads straight out of the received chunk and
keeps only an incomplete tail between calls.
"""

from __future__ import annotations

import struct
from typing import Final

from . import constants as c
from .errors import ConnectionException

__all__ = ["FrameSplitter", "encode_frame", "encode_body_frames"]

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
    an unknown frame type (spec §4.2.3, §2.3.5.1). Source: AMQP 0-9-1 §4.2.3.
    """

    __slots__ = ("frame_max", "_pending")

    def __init__(self, frame_max: int = c.FRAME_MIN_SIZE) -> None:
        self.frame_max = frame_max
        self._pending = b""

    def set_frame_max(self, frame_max: int) -> None:
        """Negotiated frame_max in bytes (0 means no limit, which we never grant)."""
        self.frame_max = frame_max

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """Append ``data`` and return every complete frame in order (see class docstring)."""
        pending = self._pending
        if pending:
            if len(pending) >= 7:
                # Complete the pending frame from the head of ``data`` and parse the rest in
                # place: a big frame split across reads costs one copy of itself, not of the
                # whole received chunk.
                need = 8 + _unpack_head(pending, 0)[2] - len(pending)
                if need > len(data):  # (its size was checked when its header arrived)
                    self._pending = pending + data
                    return []
                self._pending = b""
                frames = self._split(pending + data[:need])
                if self._pending:  # cannot happen: the joined part is exactly one frame
                    raise AssertionError("frame split left a tail")
                if need < len(data):
                    frames += self._split(data, need)
                return frames
            data = pending + data
        return self._split(data)

    def _split(self, data: bytes, pos: int = 0) -> list[tuple[int, int, bytes]]:
        frames: list[tuple[int, int, bytes]] = []
        end = len(data)
        limit = self.frame_max - c.FRAME_OVERHEAD
        while end - pos >= 7:
            # the envelope read byte by byte: native ints when compiled (struct returns objects)
            ftype = data[pos]
            channel = (data[pos + 1] << 8) | data[pos + 2]
            size = ((data[pos + 3] << 24) | (data[pos + 4] << 16) | (data[pos + 5] << 8)
                    | data[pos + 6])
            if size > limit:
                raise ConnectionException(
                    c.FRAME_ERROR,
                    f"FRAME_ERROR - frame size {size + c.FRAME_OVERHEAD} > frame_max "
                    f"{self.frame_max}")
            stop = pos + 7 + size
            if stop >= end:
                break  # incomplete: need the frame-end octet too
            if data[stop] != c.FRAME_END:
                raise ConnectionException(c.FRAME_ERROR,
                                          f"FRAME_ERROR - bad frame end octet {data[stop]:#x}")
            if (ftype != c.FRAME_METHOD and ftype != c.FRAME_HEADER and ftype != c.FRAME_BODY
                    and ftype != c.FRAME_HEARTBEAT):
                raise ConnectionException(c.FRAME_ERROR, f"FRAME_ERROR - unknown frame type {ftype}")
            frames.append((ftype, channel, data[pos + 7:stop]))
            pos = stop + 1
        self._pending = data[pos:] if pos < end else b""
        return frames


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One frame: envelope + ``payload`` + 0xCE. Source: AMQP 0-9-1 §4.2.3."""
    return _pack_head(frame_type, channel, len(payload)) + payload + c.FRAME_END_BYTE


def encode_body_frames(channel: int, body: bytes, frame_max: int) -> list[bytes]:
    """Body frames for ``body`` split so that no frame exceeds ``frame_max`` bytes (§4.2.6.2)."""
    step = frame_max - c.FRAME_OVERHEAD
    if len(body) <= step:
        return [_pack_head(c.FRAME_BODY, channel, len(body)) + body + c.FRAME_END_BYTE]
    out = []
    for i in range(0, len(body), step):
        chunk = body[i:i + step]
        out.append(_pack_head(c.FRAME_BODY, channel, len(chunk)) + chunk + c.FRAME_END_BYTE)
    return out
