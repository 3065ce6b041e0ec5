"""Bad input at the frame level never crashes the broker.

Raw TCP sockets (``interop_tests/rawamqp.py``, frames built with ``pamqp``)
do a valid handshake and then send malformed frames, content frames out of
order, or bad heartbeats; each test asserts the reply the AMQP 0-9-1
specification asks for, and afterwards that the broker still accepts a new
connection.  Split out of ``test_bad_input.py`` (which keeps the protocol
header and method-level cases).  Sources: AMQP 0-9-1 spec §2.3.5 / §4.2.3
(frame format, frame-end octet, frame-max, unknown frame types), §4.2.6
(content framing), §4.2.7 (heartbeats), §2.3.7 / "Constants" in
amqp0-9-1.xml (reply codes: 501 FRAME_ERROR, 504 CHANNEL_ERROR, 505
UNEXPECTED_FRAME).

Every expectation was validated against RabbitMQ 3.10.8; where RabbitMQ's
answer differs from the code the spec names, the test accepts both and the
comment records what RabbitMQ does:

- frame-end octet not 0xCE: Connection.Close 501.
- frame larger than frame_max: Connection.Close 501 as soon as the frame
  header is read (RabbitMQ tolerates payloads up to frame_max, i.e. 8
  bytes over; a payload of frame_max + 1 is rejected by both).
- unknown frame type: Connection.Close 501 (the spec also allows a bare close).
- content header/body with no Basic.Publish, or a method where content is
  expected: 505.
- body larger than the header's body-size: RabbitMQ keeps waiting for body
  frames and answers the next method frame with 505; the message is never
  routed.  An immediate 501/505 is accepted too.
- heartbeat on a non-zero channel: RabbitMQ 505, spec §4.2.7 501.

Every loop and wait is bounded in time.
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands

from interop_tests.rawamqp import (
    CHANNEL_ERROR,
    FRAME_ERROR,
    UNEXPECTED_FRAME,
    assert_broker_alive,
    check_bad,
    content_body,
    content_header,
    expect_close,
    handshake,
    interop_name,
    publish,
    qos,
    raw_frame,
)

pytestmark = pytest.mark.timeout(180)


# ------------------------------------------------------------- framing
@pytest.mark.parametrize("end", [0x00, 0xCD, 0xFF])
def test_bad_frame_end(broker, end):
    """§4.2.3: frame-end must be 0xCE -> 501 FRAME_ERROR."""
    data = qos()[:-1] + bytes([end])
    assert check_bad(broker, data, {FRAME_ERROR}, "bad frame end") == FRAME_ERROR


@pytest.mark.parametrize("ftype", [1, 3])
def test_frame_larger_than_frame_max(broker, ftype):
    """§4.2.3: a frame larger than the negotiated frame_max -> 501."""
    with handshake(broker) as conn:
        fm = conn.frame_max
        assert fm > 0
        filler = b"\x00\x3c\x00\x28" if ftype == 1 else b""  # Basic.Publish ids
        conn.send(raw_frame(ftype, 1, filler + b"a" * (fm + 1 - len(filler))))
        expect_close(conn, {FRAME_ERROR}, "frame > frame_max")
    assert_broker_alive(broker)


def test_huge_frame_size_rejected_from_header(broker):
    """A 4 GB size field must be refused from the header alone (no buffering)."""
    with handshake(broker) as conn:
        conn.send(struct.pack(">BHI", 1, 1, 0xFFFFFFF0) + b"\x00\x3c\x00\x28")
        expect_close(conn, {FRAME_ERROR}, "huge size field")
    assert_broker_alive(broker)


@pytest.mark.parametrize("ftype", [0, 4, 9, 0xFF])
def test_unknown_frame_type(broker, ftype):
    """§4.2.3: unknown frame type -> 501 (RabbitMQ sends Close 501)."""
    check_bad(broker, raw_frame(ftype, 1, b"abc"), {FRAME_ERROR}, f"frame type {ftype}")


# ------------------------------------------------------------- content
def test_content_header_without_publish(broker):
    """§4.2.6: content frames only after a content method -> 505."""
    check_bad(broker, content_header(3), {UNEXPECTED_FRAME}, "header without publish")


def test_content_body_without_publish(broker):
    check_bad(broker, content_body(b"abc"), {UNEXPECTED_FRAME}, "body without publish")


def test_publish_then_method_instead_of_header(broker):
    check_bad(broker, publish() + qos(), {UNEXPECTED_FRAME}, "publish then method")


def test_publish_then_body_instead_of_header(broker):
    check_bad(broker, publish() + content_body(b"abc"), {UNEXPECTED_FRAME}, "publish then body")


def test_publish_header_then_method_instead_of_body(broker):
    check_bad(
        broker, publish() + content_header(3) + qos(), {UNEXPECTED_FRAME}, "header then method"
    )


def test_content_header_on_channel_zero(broker):
    """RabbitMQ: 505; 501/504 accepted."""
    check_bad(
        broker,
        content_header(3, channel=0),
        {UNEXPECTED_FRAME, FRAME_ERROR, CHANNEL_ERROR},
        "header on channel 0",
    )


def test_body_larger_than_declared_size(broker, pika_conn_factory):
    """Body bytes beyond the header's body-size: never routed; 501/505.

    RabbitMQ keeps waiting for more body frames and answers the following
    method frame with 505 UNEXPECTED_FRAME.
    """
    queue = interop_name("oversize")
    with pika_conn_factory() as ch:
        ch.queue_declare(queue, auto_delete=False)
    try:
        data = publish(queue) + content_header(3) + content_body(b"abcdef") + qos()
        check_bad(broker, data, {FRAME_ERROR, UNEXPECTED_FRAME}, "oversized body")
        with pika_conn_factory() as ch:
            assert ch.queue_declare(queue, passive=True).method.message_count == 0
    finally:
        with pika_conn_factory() as ch:
            ch.queue_delete(queue)


# ------------------------------------------------------------ heartbeat
def test_heartbeat_on_nonzero_channel(broker):
    """§4.2.7 says 501; RabbitMQ answers 505."""
    check_bad(
        broker, raw_frame(8, 1, b""), {FRAME_ERROR, UNEXPECTED_FRAME}, "heartbeat on channel 1"
    )


def test_heartbeat_with_payload(broker):
    """RabbitMQ: 501."""
    check_bad(broker, raw_frame(8, 0, b"abc"), {FRAME_ERROR}, "heartbeat with payload")


def test_valid_heartbeat_keeps_connection(broker):
    with handshake(broker) as conn:
        conn.send(raw_frame(8, 0, b""))
        conn.send_method(commands.Queue.Declare(queue="", exclusive=True), 1)
        ch, ok = conn.read_method(5.0)
        assert (ch, type(ok)) == (1, commands.Queue.DeclareOk), ok


# ----------------------------------------------------------- fixtures
@pytest.fixture
def pika_conn_factory(broker):
    """Context manager giving a pika channel on a short-lived connection."""
    pika = pytest.importorskip("pika")
    import contextlib

    @contextlib.contextmanager
    def factory():
        conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
        try:
            yield conn.channel()
        finally:
            if conn.is_open:
                conn.close()

    return factory
