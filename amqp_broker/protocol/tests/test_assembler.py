"""ContentAssembler: Basic.Publish -> content header -> body frames, and every order violation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame, header

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.assembler import ContentAssembler
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.methods import Publish, decode_method


def _publish(exchange: str = "ex", routing_key: str = "rk", mandatory: bool = False) -> Publish:
    method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                    mandatory=mandatory)
    got = decode_method(frame.marshal(method, 1)[7:-1])
    assert isinstance(got, Publish)
    return got


def _header(size: int, **props) -> bytes:
    return header.ContentHeader(0, size, commands.Basic.Properties(**props)).marshal()


def _expect(code: int) -> pytest.RaisesExc:
    return pytest.raises(ConnectionException, check=lambda e: (
        type(e) is ConnectionException and e.reply_code == code))


def test_single_body_frame() -> None:
    asm = ContentAssembler()
    assert not asm.expecting_content
    pub = _publish()
    asm.start(pub)
    assert asm.expecting_content
    hdr = _header(5, content_type="text/plain")
    assert asm.header(hdr) is None
    assert asm.expecting_content
    assert asm.body(b"hello") == (pub, hdr, b"hello")
    assert not asm.expecting_content


@st.composite
def body_and_cuts(draw) -> tuple[bytes, list[bytes]]:
    data = draw(st.binary(min_size=1, max_size=2000))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=20)))
    bounds = [0, *cuts, len(data)]
    parts = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    while not parts[-1]:  # empty frames may come before, but the last one carries bytes
        parts.pop()
    return data, parts


@given(st.lists(body_and_cuts(), min_size=1, max_size=4))
def test_multi_frame_bodies_assemble_and_assembler_is_reusable(messages) -> None:
    asm = ContentAssembler()
    for n, (data, parts) in enumerate(messages):
        pub = _publish(routing_key=f"k{n}")
        asm.start(pub)
        hdr = _header(len(data), message_id=f"m{n}")
        assert asm.header(hdr) is None
        results = [asm.body(p) for p in parts]
        # only the frame that completes the body returns the message (empty frames before it)
        *before, last = results
        assert before == [None] * len(before)
        assert last == (pub, hdr, data)
        assert type(last[2]) is bytes
        assert not asm.expecting_content


def test_zero_size_body_completes_at_header() -> None:
    asm = ContentAssembler()
    pub = _publish()
    asm.start(pub)
    hdr = _header(0, delivery_mode=2)
    assert asm.header(hdr) == (pub, hdr, b"")
    assert not asm.expecting_content
    with _expect(c.UNEXPECTED_FRAME):  # the message is done: no body frame may follow
        asm.body(b"")
    asm2 = ContentAssembler()
    asm2.start(pub)
    asm2.header(hdr)
    asm2.start(pub)  # a new publish may follow right away
    assert asm2.expecting_content


def test_header_before_publish_is_505() -> None:
    with _expect(c.UNEXPECTED_FRAME):
        ContentAssembler().header(_header(1))


@pytest.mark.parametrize("payload", [b"", b"x"])
def test_body_before_publish_is_505(payload: bytes) -> None:
    with _expect(c.UNEXPECTED_FRAME):
        ContentAssembler().body(payload)


@pytest.mark.parametrize("payload", [b"", b"x"])
def test_body_before_header_is_505(payload: bytes) -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    with _expect(c.UNEXPECTED_FRAME) as exc_info:
        asm.body(payload)
    assert (exc_info.value.class_id, exc_info.value.method_id) == (60, 40)


def test_second_publish_before_header_is_505() -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    with _expect(c.UNEXPECTED_FRAME):
        asm.start(_publish())


def test_second_publish_before_body_done_is_505() -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    asm.header(_header(10))
    asm.body(b"12345")
    with _expect(c.UNEXPECTED_FRAME):
        asm.start(_publish())


def test_second_header_is_505() -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    asm.header(_header(10))
    with _expect(c.UNEXPECTED_FRAME):
        asm.header(_header(10))


@given(st.integers(1, 500), st.integers(1, 100), st.integers(0, 3))
def test_body_overrunning_size_is_505(size: int, over: int, frames_before: int) -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    asm.header(_header(size))
    # some frames that fit, then one that crosses the declared size
    sent = 0
    for _ in range(frames_before):
        if size - sent > 1:
            asm.body(b"a")
            sent += 1
    with _expect(c.UNEXPECTED_FRAME):
        asm.body(b"b" * (size - sent + over))


@given(st.integers(0, 0xFFFF).filter(lambda cid: cid != c.CLASS_BASIC), st.integers(0, 100))
def test_header_for_other_class_is_505(class_id: int, size: int) -> None:
    payload = struct.pack(">HHQH", class_id, 0, size, 0)
    asm = ContentAssembler()
    asm.start(_publish())
    with _expect(c.UNEXPECTED_FRAME):
        asm.header(payload)


@given(st.binary(max_size=13))
def test_truncated_header_is_502(prefix: bytes) -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    with _expect(c.SYNTAX_ERROR):
        asm.header(prefix)


def test_truncated_real_header_is_502_at_every_cut() -> None:
    hdr = _header(3)
    for cut in range(14):
        asm = ContentAssembler()
        asm.start(_publish())
        with _expect(c.SYNTAX_ERROR):
            asm.header(hdr[:cut])


def test_minimal_14_byte_header_is_accepted() -> None:
    asm = ContentAssembler()
    pub = _publish()
    asm.start(pub)
    hdr = struct.pack(">HHQH", 60, 0, 2, 0)
    assert asm.header(hdr) is None
    assert asm.body(b"ok") == (pub, hdr, b"ok")


def test_unexpected_returns_a_505_without_raising() -> None:
    asm = ContentAssembler()
    exc = asm.unexpected("method frame")
    assert type(exc) is ConnectionException and exc.reply_code == c.UNEXPECTED_FRAME
    asm.start(_publish())
    exc = asm.unexpected("heartbeat")
    assert exc.reply_code == c.UNEXPECTED_FRAME
    assert "content header" in exc.reply_text
    asm.header(_header(2))
    assert "content body" in asm.unexpected("method frame").reply_text
    assert asm.expecting_content  # asking does not change state


def test_reset_drops_partial_message() -> None:
    asm = ContentAssembler()
    asm.start(_publish())
    asm.header(_header(10))
    asm.body(b"abc")
    asm.reset()
    assert not asm.expecting_content
    with _expect(c.UNEXPECTED_FRAME):
        asm.body(b"defghij")
    pub = _publish(routing_key="next")
    asm.start(pub)
    hdr = _header(2)
    asm.header(hdr)
    assert asm.body(b"xy") == (pub, hdr, b"xy")  # nothing of the dropped message leaks in
