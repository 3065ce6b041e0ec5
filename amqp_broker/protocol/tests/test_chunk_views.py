"""Chunks fed as memoryviews (issue 28: the plain listener reads into its own buffer and hands the
reads on as views): once the chunks carry large frames, every body frame of ``VIEW_MIN`` bytes or
more comes as a view of the chunk (``FRAME_BODY_VIEW``), the other frames as ``bytes`` copied out
of it; the bodies that come out are the ones sent across any cut of the stream, and bad input is
the same 501 FRAME_ERROR as from bytes."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import frame

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.framing import FRAME_BODY_VIEW, VIEW_MIN, FrameSplitter

from .test_body_views import assemble, publish_frames

FRAME_MAX = 131072
STEP = FRAME_MAX - c.FRAME_OVERHEAD


def _publish_frames(body: bytes) -> bytes:
    return publish_frames(body, STEP)


def _feed_views(stream: bytes, cuts: list[int]) -> tuple[list[int], list[bytes]]:
    return assemble(stream, cuts, FRAME_MAX, as_views=True)


def test_after_a_chunk_of_large_frames_bodies_come_as_views() -> None:
    bodies = [os.urandom(VIEW_MIN), os.urandom(16), os.urandom(2 * STEP + 5)]
    stream = b"".join(_publish_frames(b) for b in bodies)
    # the first chunk is copied (nothing says its frames are large yet): no views in it
    first = _publish_frames(os.urandom(60000))
    types, got = _feed_views(first + stream, [len(first)])
    assert types[:3] == [c.FRAME_METHOD, c.FRAME_HEADER, c.FRAME_BODY]
    assert types[3:] == [c.FRAME_METHOD, c.FRAME_HEADER, FRAME_BODY_VIEW,
                         c.FRAME_METHOD, c.FRAME_HEADER, c.FRAME_BODY,
                         c.FRAME_METHOD, c.FRAME_HEADER, FRAME_BODY_VIEW, FRAME_BODY_VIEW,
                         c.FRAME_BODY]   # its last 5 bytes: under VIEW_MIN, copied
    assert got[1:] == bodies


def test_chunks_of_small_frames_are_split_as_bytes() -> None:
    stream = _publish_frames(b"x" * 16) * 50
    types, got = _feed_views(stream, [len(stream) // 2])
    assert FRAME_BODY_VIEW not in types and got == [b"x" * 16] * 50


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0, 16, VIEW_MIN - 1, VIEW_MIN, 70000, STEP, STEP + 1,
                                 3 * STEP]), min_size=1, max_size=6),
       st.lists(st.integers(1, 4 * FRAME_MAX), max_size=10))
def test_any_cut_of_the_stream_gives_the_bodies_sent(sizes: list[int], cuts: list[int]) -> None:
    bodies = [os.urandom(n) for n in sizes]
    stream = _publish_frames(os.urandom(STEP)) + b"".join(_publish_frames(b) for b in bodies)
    _types, got = _feed_views(stream, [x for x in cuts if x < len(stream)])
    assert got[1:] == bodies


def _large_splitter() -> FrameSplitter:
    splitter = FrameSplitter(FRAME_MAX, body_views=True)
    splitter.feed(memoryview(bytearray(_publish_frames(os.urandom(STEP)))))   # large frames seen
    splitter.views.clear()
    return splitter


def test_a_bad_frame_end_in_a_view_chunk_is_501() -> None:
    data = bytearray(_publish_frames(os.urandom(VIEW_MIN)))
    data[-1] = 0
    with pytest.raises(ConnectionException) as err:
        _large_splitter().feed(memoryview(data))
    assert err.value.reply_code == c.FRAME_ERROR


def test_a_body_frame_over_frame_max_in_a_view_chunk_is_501() -> None:
    data = frame.marshal(pbody.ContentBody(bytes(STEP + 1)), 1)
    with pytest.raises(ConnectionException) as err:
        _large_splitter().feed(memoryview(bytearray(data[:VIEW_MIN])))   # its head is enough
    assert err.value.reply_code == c.FRAME_ERROR


def test_a_method_frame_over_frame_max_in_a_view_chunk_is_501_at_its_header() -> None:
    head = bytes([c.FRAME_METHOD, 0, 1]) + (STEP + 1).to_bytes(4, "big")
    with pytest.raises(ConnectionException) as err:
        _large_splitter().feed(memoryview(bytearray(head + bytes(100))))
    assert err.value.reply_code == c.FRAME_ERROR
