"""FrameSplitter / encode_frame / encode_body_frames against pamqp's own frame marshalling."""

from __future__ import annotations

import string
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header, heartbeat

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.framing import FrameSplitter, encode_body_frames, encode_frame

FRAME_MAX = 131072

channels = st.integers(0, 0xFFFF)
names = st.text(string.ascii_letters + string.digits + "-_.:", max_size=40)


def _method(draw) -> commands.Basic.Ack | commands.Basic.Publish | commands.Queue.Declare:
    kind = draw(st.sampled_from(["ack", "publish", "declare", "channel_open", "close"]))
    if kind == "ack":
        return commands.Basic.Ack(draw(st.integers(0, 2**63 - 1)), draw(st.booleans()))
    if kind == "publish":
        return commands.Basic.Publish(exchange=draw(names), routing_key=draw(names),
                                      mandatory=draw(st.booleans()))
    if kind == "declare":
        return commands.Queue.Declare(queue=draw(names), durable=draw(st.booleans()),
                                      arguments={"x-max-length": draw(st.integers(0, 1000))})
    if kind == "channel_open":
        return commands.Channel.Open()
    return commands.Channel.Close(draw(st.integers(200, 541)), draw(names), 60, 40)


@st.composite
def pamqp_frames(draw) -> tuple[bytes, tuple[int, int, bytes]]:
    """One frame marshalled by pamqp plus the (type, channel, payload) FrameSplitter must yield."""
    kind = draw(st.sampled_from([c.FRAME_METHOD, c.FRAME_HEADER, c.FRAME_BODY, c.FRAME_HEARTBEAT]))
    channel = draw(channels)
    if kind == c.FRAME_METHOD:
        method = _method(draw)
        raw = frame.marshal(method, channel)
        payload = struct.pack(">I", method.index) + method.marshal()
    elif kind == c.FRAME_HEADER:
        props = commands.Basic.Properties(content_type=draw(names) or None,
                                          delivery_mode=draw(st.sampled_from([None, 1, 2])),
                                          priority=draw(st.none() | st.integers(0, 9)))
        hdr = header.ContentHeader(0, draw(st.integers(0, 2**40)), props)
        raw = frame.marshal(hdr, channel)
        payload = hdr.marshal()
    elif kind == c.FRAME_BODY:
        payload = draw(st.binary(max_size=600))
        raw = frame.marshal(body.ContentBody(payload), channel)
    else:
        channel = 0
        raw = frame.marshal(heartbeat.Heartbeat(), channel)
        payload = b""
    # sanity: pamqp's framing matches the triple we expect the splitter to produce
    assert raw[0] == kind and raw[-1] == c.FRAME_END and raw[7:-1] == payload
    return raw, (kind, channel, payload)


@st.composite
def stream_and_cuts(draw):
    frames = draw(st.lists(pamqp_frames(), min_size=1, max_size=12))
    data = b"".join(raw for raw, _ in frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=30)))
    return data, [t for _, t in frames], cuts


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@given(stream_and_cuts())
@settings(max_examples=300, deadline=None)
def test_frames_survive_any_chunking(case) -> None:
    data, expected, cuts = case
    splitter = FrameSplitter(FRAME_MAX)
    out: list[tuple[int, int, bytes]] = []
    for chunk in _chunks(data, cuts):
        out += splitter.feed(chunk)
        assert splitter.buffered < len(data)
    assert out == expected
    assert splitter.buffered == 0
    assert all(isinstance(p, bytes) for _, _, p in out)


@given(st.lists(pamqp_frames(), min_size=1, max_size=4))
@settings(max_examples=50, deadline=None)
def test_frames_byte_by_byte(frames) -> None:
    data = b"".join(raw for raw, _ in frames)
    splitter = FrameSplitter(FRAME_MAX)
    out = []
    for i in range(len(data)):
        out += splitter.feed(data[i:i + 1])
    assert out == [t for _, t in frames]
    assert splitter.buffered == 0


def test_partial_frame_is_kept_until_complete() -> None:
    raw = frame.marshal(body.ContentBody(b"hello world"), 7)
    splitter = FrameSplitter()
    assert splitter.feed(raw[:3]) == []
    assert splitter.buffered == 3
    assert splitter.feed(raw[3:-1]) == []  # everything but the frame-end octet
    assert splitter.buffered == len(raw) - 1
    assert splitter.feed(raw[-1:] + raw[:9]) == [(c.FRAME_BODY, 7, b"hello world")]
    assert splitter.buffered == 9
    assert splitter.feed(raw[9:]) == [(c.FRAME_BODY, 7, b"hello world")]
    assert splitter.buffered == 0


def test_large_bodies_across_socket_sized_reads() -> None:
    """64 KiB body frames in 256 KiB reads (the server's read size): frames straddle reads, some
    over three reads when a read is short, and every body comes out whole and as bytes."""
    bodies = [bytes([i]) * 65536 for i in range(9)]
    data = b"".join(frame.marshal(body.ContentBody(b), 1) for b in bodies)
    splitter = FrameSplitter(FRAME_MAX)
    out: list[tuple[int, int, bytes]] = []
    for size in (262144, 1000, 40000, 262144):
        out += splitter.feed(data[:size])
        data = data[size:]
    out += splitter.feed(data)
    assert [p for _, _, p in out] == bodies
    assert all(type(p) is bytes for _, _, p in out)
    assert splitter.buffered == 0


@pytest.mark.parametrize("cut", [3, 7, 100, 65543])
def test_bad_frame_end_of_a_frame_split_across_reads(cut: int) -> None:
    raw = bytearray(frame.marshal(body.ContentBody(b"z" * 65536), 1))
    raw[-1] = 0x00
    splitter = FrameSplitter(FRAME_MAX)
    assert splitter.feed(bytes(raw[:cut])) == []
    with pytest.raises(ConnectionException) as exc_info:
        splitter.feed(bytes(raw[cut:]))
    _assert_frame_error(exc_info)


def test_empty_feed_returns_nothing() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(b"") == []
    assert splitter.buffered == 0


def _assert_frame_error(exc_info: pytest.ExceptionInfo[ConnectionException]) -> None:
    assert type(exc_info.value) is ConnectionException
    assert exc_info.value.reply_code == c.FRAME_ERROR == 501


@pytest.mark.parametrize("frame_max", [c.FRAME_MIN_SIZE, 10_000, FRAME_MAX])
def test_frame_of_exactly_frame_max_is_accepted(frame_max: int) -> None:
    payload = b"x" * (frame_max - c.FRAME_OVERHEAD)
    raw = encode_frame(c.FRAME_BODY, 1, payload)
    assert len(raw) == frame_max
    assert FrameSplitter(frame_max).feed(raw) == [(c.FRAME_BODY, 1, payload)]


@pytest.mark.parametrize("frame_max", [c.FRAME_MIN_SIZE, 10_000, FRAME_MAX])
def test_oversize_frame_is_501_from_its_header_alone(frame_max: int) -> None:
    raw = encode_frame(c.FRAME_BODY, 1, b"x" * (frame_max - c.FRAME_OVERHEAD + 1))
    splitter = FrameSplitter(frame_max)
    with pytest.raises(ConnectionException) as exc_info:
        splitter.feed(raw[:7])  # must not wait for (possibly gigabytes of) payload
    _assert_frame_error(exc_info)
    with pytest.raises(ConnectionException) as exc_info:
        FrameSplitter(frame_max).feed(raw)
    _assert_frame_error(exc_info)


@given(st.integers(c.FRAME_MIN_SIZE - 7, 2**32 - 1))
def test_any_declared_size_over_limit_is_501(size: int) -> None:
    with pytest.raises(ConnectionException) as exc_info:
        FrameSplitter().feed(struct.pack(">BHI", c.FRAME_METHOD, 1, size))
    _assert_frame_error(exc_info)


def test_oversize_frame_after_good_frames_in_same_chunk() -> None:
    good = frame.marshal(commands.Basic.Ack(1), 1)
    bad = struct.pack(">BHI", c.FRAME_BODY, 1, c.FRAME_MIN_SIZE)
    with pytest.raises(ConnectionException) as exc_info:
        FrameSplitter().feed(good + bad)
    _assert_frame_error(exc_info)


def test_set_frame_max_raises_the_limit() -> None:
    payload = b"y" * 5000
    raw = encode_frame(c.FRAME_BODY, 2, payload)
    with pytest.raises(ConnectionException):
        FrameSplitter().feed(raw)
    splitter = FrameSplitter()
    splitter.set_frame_max(8192)
    assert splitter.frame_max == 8192
    assert splitter.feed(raw) == [(c.FRAME_BODY, 2, payload)]


@given(st.integers(0, 255).filter(lambda b: b != c.FRAME_END), st.binary(max_size=50))
def test_bad_frame_end_is_501(end: int, payload: bytes) -> None:
    raw = encode_frame(c.FRAME_BODY, 3, payload)[:-1] + bytes((end,))
    splitter = FrameSplitter()
    assert splitter.feed(raw[:-1]) == []  # not judged before the end octet arrives
    with pytest.raises(ConnectionException) as exc_info:
        splitter.feed(raw[-1:])
    _assert_frame_error(exc_info)


@given(st.integers(0, 255).filter(
    lambda t: t not in (c.FRAME_METHOD, c.FRAME_HEADER, c.FRAME_BODY, c.FRAME_HEARTBEAT)),
    st.binary(max_size=50))
def test_unknown_frame_type_is_501(ftype: int, payload: bytes) -> None:
    raw = encode_frame(ftype, 0, payload)
    with pytest.raises(ConnectionException) as exc_info:
        FrameSplitter().feed(raw)
    _assert_frame_error(exc_info)


def test_known_types_are_accepted() -> None:
    data = b"".join(encode_frame(t, 0, b"p") for t in (1, 2, 3, 8))
    assert [f[0] for f in FrameSplitter().feed(data)] == [1, 2, 3, 8]
    assert FrameSplitter().feed(c.HEARTBEAT_FRAME) == [(c.FRAME_HEARTBEAT, 0, b"")]


# -- encoding -----------------------------------------------------------------------------------


@given(pamqp_frames())
def test_encode_frame_matches_pamqp(case) -> None:
    raw, (ftype, channel, payload) = case
    assert encode_frame(ftype, channel, payload) == raw


def test_heartbeat_constant_matches_pamqp() -> None:
    assert c.HEARTBEAT_FRAME == frame.marshal(heartbeat.Heartbeat(), 0)
    assert c.HEARTBEAT_FRAME == encode_frame(c.FRAME_HEARTBEAT, 0, b"")


def _pamqp_body_frames(channel: int, data: bytes, frame_max: int) -> list[bytes]:
    step = frame_max - 8
    return [frame.marshal(body.ContentBody(data[i:i + step]), channel)
            for i in range(0, len(data), step)]


@given(channels, st.binary(min_size=1, max_size=3000), st.integers(9, 700))
@settings(max_examples=300)
def test_encode_body_frames_matches_pamqp_split_at_frame_max_minus_8(
        channel: int, data: bytes, frame_max: int) -> None:
    frames = encode_body_frames(channel, data, frame_max)
    assert frames == _pamqp_body_frames(channel, data, frame_max)
    assert all(len(f) <= frame_max for f in frames)
    assert len(frames) == -(-len(data) // (frame_max - 8))
    # and they round-trip through the splitter
    out = FrameSplitter(frame_max).feed(b"".join(frames))
    assert b"".join(p for _, _, p in out) == data
    assert {(t, ch) for t, ch, _ in out} == {(c.FRAME_BODY, channel)}


@pytest.mark.parametrize("size", [1, 4087, 4088, 4089, 8176, 8177, 20000])
def test_encode_body_frames_boundaries(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    frames = encode_body_frames(5, data, c.FRAME_MIN_SIZE)
    assert frames == _pamqp_body_frames(5, data, c.FRAME_MIN_SIZE)
    assert [len(f) - 8 for f in frames][:-1] == [4088] * (len(frames) - 1)
    assert max(len(f) for f in frames) <= c.FRAME_MIN_SIZE
