"""Body views (issue 28): the full body frames of a large body are handed over as views of the chunk
they were read in and copied once, into the body's buffer, by the assembler; the body that comes out
is the one sent, across any cut of the stream into reads, every other frame is as before, and
neither the reads nor more than about twice what arrived are held while a body is assembled."""

from __future__ import annotations

import os
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame, header

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.assembler import FIRST_BUFFER, ContentAssembler
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


def test_a_large_body_lets_go_of_the_reads_it_came_in() -> None:
    """Past FIRST_BUFFER a body's views are copied into its buffer and let go: every read it came
    in is free (a bytearray with a live view of it cannot be cleared) once the body is past that
    size, the later ones at once, and the body is intact."""
    frame_payload = 131072 - c.FRAME_OVERHEAD
    body = os.urandom(FIRST_BUFFER + 5 * frame_payload + 7)
    asm: ContentAssembler[str] = ContentAssembler()
    asm.start("publish")
    asm.header(header.ContentHeader(0, len(body), commands.Basic.Properties()).marshal())
    reads: list[bytearray] = []
    done = None
    for i in range(0, len(body), frame_payload):
        chunk = bytearray(b"xx" + body[i:i + frame_payload] + b"yy")   # a read, the frame inside
        done = asm.body_view(memoryview(chunk)[2:-2])
        reads.append(chunk)
        if i + frame_payload > FIRST_BUFFER:
            for read in reads:
                read.clear()   # BufferError if the assembler still held a view of it
    assert done is not None and done[0] == "publish" and done[2] == body
    assert type(done[2]) is bytes


def test_a_body_larger_than_its_first_buffer_grows_and_comes_out_whole() -> None:
    frame_payload = 131072 - c.FRAME_OVERHEAD
    for size in (FIRST_BUFFER, FIRST_BUFFER + 1, 5 * FIRST_BUFFER + 3 * frame_payload + 11):
        body = os.urandom(size)
        asm: ContentAssembler[str] = ContentAssembler()
        for _ in range(2):   # and the assembler is reusable after such a body
            asm.start("publish")
            asm.header(header.ContentHeader(0, len(body), commands.Basic.Properties()).marshal())
            results = [asm.body(body[i:i + frame_payload])
                       for i in range(0, len(body), frame_payload)]
            assert results[:-1] == [None] * (len(results) - 1)
            assert results[-1] is not None and results[-1][2] == body
            assert not asm.expecting_content


def test_a_large_declared_body_holds_about_what_arrived_not_its_size() -> None:
    """A client declaring a 512 MiB body and sending a few MiB of it does not make the broker
    allocate 512 MiB: memory held is never more than about twice what arrived."""
    asm: ContentAssembler[str] = ContentAssembler()
    asm.start("publish")
    asm.header(header.ContentHeader(0, 512 * 1024 * 1024, commands.Basic.Properties()).marshal())
    tracemalloc.start()
    try:
        arrived = 0
        for mib in (1, 5, 9):   # held as they came; past FIRST_BUFFER in a buffer; grown once
            while arrived < mib * 1024 * 1024:
                assert asm.body(os.urandom(STEP)) is None
                arrived += STEP
            held, _peak = tracemalloc.get_traced_memory()
            assert held <= 2 * arrived + 65536, (mib, held)
    finally:
        tracemalloc.stop()
    asm.reset()   # the channel closed mid-body
    assert not asm.expecting_content
    # the next message does not land in the dropped body's buffer
    body = os.urandom(2 * STEP + 5)
    asm.start("next")
    asm.header(header.ContentHeader(0, len(body), commands.Basic.Properties()).marshal())
    assert asm.body(body[:STEP]) is None
    assert asm.body(body[STEP:2 * STEP]) is None
    done = asm.body(body[2 * STEP:])
    assert done is not None and done[0] == "next" and done[2] == body


def test_a_large_body_overrunning_its_declared_size_is_505() -> None:
    """Past FIRST_BUFFER (the body in its buffer) a frame running past the declared size is still
    505 UNEXPECTED_FRAME (§4.2.6), and nothing of it is written."""
    frame_payload = 131072 - c.FRAME_OVERHEAD
    size = FIRST_BUFFER + 2 * frame_payload + 10   # the last frames sent go into the buffer
    asm: ContentAssembler[str] = ContentAssembler()
    asm.start("publish")
    asm.header(header.ContentHeader(0, size, commands.Basic.Properties()).marshal())
    sent = 0
    while sent + frame_payload <= size:
        assert asm.body(bytes(frame_payload)) is None
        sent += frame_payload
    assert sent > FIRST_BUFFER
    with pytest.raises(ConnectionException) as err:
        asm.body_view(memoryview(bytes(frame_payload)))
    assert err.value.reply_code == c.UNEXPECTED_FRAME
