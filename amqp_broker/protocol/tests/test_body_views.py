"""Body views (issue 28): the full body frames of a large body are handed over as views of the chunk
they were read in and joined once by the assembler; the body that comes out is the one sent, across
any cut of the stream into reads, and every other frame is as before."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame, header

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.assembler import ContentAssembler
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.framing import FRAME_BODY_VIEW, FrameSplitter

FRAME_MAX = 4096
STEP = FRAME_MAX - c.FRAME_OVERHEAD


def _publish_frames(body: bytes) -> bytes:
    parts = [frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1),
             frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)]
    parts += [frame.marshal(pbody.ContentBody(body[i:i + STEP]), 1)
              for i in range(0, len(body), STEP)]
    return b"".join(parts)


def _assemble(stream: bytes, cuts: list[int]) -> tuple[list[int], list[bytes]]:
    """Feed ``stream`` cut at ``cuts`` to a splitter with body views; the frame types seen and the
    bodies the assembler made."""
    splitter = FrameSplitter(FRAME_MAX, body_views=True)
    asm: ContentAssembler[str] = ContentAssembler()
    types, bodies = [], []
    bounds = [0, *sorted(set(cuts)), len(stream)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        for ftype, _channel, payload in splitter.feed(stream[lo:hi]):
            types.append(ftype)
            if ftype == c.FRAME_METHOD:
                asm.start("publish")
                continue
            if ftype == c.FRAME_HEADER:
                done = asm.header(payload)
            elif ftype == c.FRAME_BODY:
                done = asm.body(payload)
            else:
                assert ftype == FRAME_BODY_VIEW and payload == b""
                done = asm.body_view(splitter.views.popleft())
            if done is not None:
                assert isinstance(done[2], bytes)
                bodies.append(done[2])
    assert not splitter.views
    return types, bodies


def test_full_body_frames_come_as_views_and_the_body_is_joined_intact() -> None:
    body = os.urandom(3 * STEP + 100)
    types, bodies = _assemble(_publish_frames(body) * 2, [])
    one = [c.FRAME_METHOD, c.FRAME_HEADER, FRAME_BODY_VIEW, FRAME_BODY_VIEW, FRAME_BODY_VIEW,
           c.FRAME_BODY]
    assert types == one * 2
    assert bodies == [body, body]


def test_without_body_views_every_body_frame_is_bytes() -> None:
    body = os.urandom(2 * STEP)
    frames = FrameSplitter(FRAME_MAX).feed(_publish_frames(body))
    assert [t for t, _, _ in frames] == [c.FRAME_METHOD, c.FRAME_HEADER, c.FRAME_BODY, c.FRAME_BODY]
    assert b"".join(p for t, _, p in frames if t == c.FRAME_BODY) == body


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4 * STEP), st.lists(st.integers(1, 6 * FRAME_MAX), max_size=8))
def test_any_cut_of_the_stream_gives_the_bodies_sent(size: int, cuts: list[int]) -> None:
    first, second = os.urandom(size), os.urandom(STEP)
    stream = _publish_frames(first) + _publish_frames(second)
    _types, bodies = _assemble(stream, [x for x in cuts if x < len(stream)])
    assert bodies == [first, second]


def test_a_view_overrunning_the_declared_size_is_505() -> None:
    asm: ContentAssembler[str] = ContentAssembler()
    asm.start("publish")
    asm.header(header.ContentHeader(0, 10, commands.Basic.Properties()).marshal())
    with pytest.raises(ConnectionException) as err:
        asm.body_view(memoryview(bytes(STEP)))
    assert err.value.reply_code == c.UNEXPECTED_FRAME
