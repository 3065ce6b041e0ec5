"""Bad input never crashes the broker nor disturbs other clients.

Raw TCP sockets (``interop_tests/rawamqp.py``, frames built with ``pamqp``)
do a valid handshake and then send malformed or out-of-order data; each test
asserts the reply the AMQP 0-9-1 specification asks for, and afterwards that
the broker still accepts a new connection.  Sources: AMQP 0-9-1 spec §4.2.2
(protocol header negotiation), §2.3.5 / §4.2.3 (frame format, frame-end
octet, frame-max, unknown frame types), §4.2.6 (content framing), §4.2.7
(heartbeats), §2.3.7 / "Constants" in amqp0-9-1.xml (reply codes: 501
FRAME_ERROR, 502 SYNTAX_ERROR, 503 COMMAND_INVALID, 504 CHANNEL_ERROR, 505
UNEXPECTED_FRAME, 540 NOT_IMPLEMENTED ...).

Every expectation was validated against RabbitMQ 3.10.8; where RabbitMQ's
answer differs from the code the spec names, the test accepts both and the
comment records what RabbitMQ does:

- wrong protocol header: the server writes ``AMQP\\x00\\x00\\x09\\x01`` and
  closes the socket (RabbitMQ also accepts the legacy 0-8/0-9 headers
  ``AMQP\\x01\\x01\\x08\\x00`` / ``AMQP\\x01\\x01\\x00\\x09``: not tested).
- frame-end octet not 0xCE: Connection.Close 501.
- frame larger than frame_max: Connection.Close 501 as soon as the frame
  header is read (RabbitMQ tolerates payloads up to frame_max, i.e. 8
  bytes over; a payload of frame_max + 1 is rejected by both).
- unknown frame type: Connection.Close 501 (the spec also allows a bare close).
- method on a channel that is not open / second Channel.Open: 504.
- content header/body with no Basic.Publish, or a method where content is
  expected: 505.
- unknown class/method id: the spec's codes are 540 NOT_IMPLEMENTED or
  503 COMMAND_INVALID.  RabbitMQ's connection process crashes and the socket
  is closed without a Connection.Close; that is accepted only when the
  server says it is RabbitMQ.
- truncated or over-long method arguments: RabbitMQ says 501 ("cannot
  decode"); the spec's 502 SYNTAX_ERROR is accepted too.
- body larger than the header's body-size: RabbitMQ keeps waiting for body
  frames and answers the next method frame with 505; the message is never
  routed.  An immediate 501/505 is accepted too.
- heartbeat on a non-zero channel: RabbitMQ 505, spec §4.2.7 501.

The hypothesis test fuzzes frames after a valid handshake while a pika client
publishes with confirms and consumes on another connection; every confirmed
message must be consumed exactly once and the pika client must see no error.
Every loop and wait is bounded in time.
"""

from __future__ import annotations

import collections
import os
import struct
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from interop_tests.rawamqp import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    FRAME_ERROR,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PROTOCOL_HEADER,
    RESOURCE_ERROR,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    Closed,
    RawConnection,
    Timeout,
    connect_and_handshake,
    method_frame,
    raw_frame,
)

pytestmark = pytest.mark.timeout(180)

CLOSE_TIMEOUT = 10.0  # RabbitMQ waits up to 3 s for CloseOk after a frame error


# --------------------------------------------------------------- helpers
def _name(prefix: str) -> str:
    return f"interop-bad-{prefix}-{uuid.uuid4().hex[:10]}"


def is_rabbitmq(conn: RawConnection) -> bool:
    product = conn.server_properties.get("product", b"")
    if isinstance(product, bytes):
        product = product.decode(errors="replace")
    return str(product) == "RabbitMQ"


def handshake(broker, **kw) -> RawConnection:
    return connect_and_handshake(broker.host, broker.port, **kw)


def assert_broker_alive(broker) -> None:
    """A fresh client can connect, open a channel, declare and close cleanly."""
    pid = getattr(broker, "pid", None)
    if pid:
        import psutil

        assert psutil.pid_exists(pid), "broker process is gone"
        alive = getattr(broker, "alive", None)
        assert alive is None or alive(), "broker process exited"
    with handshake(broker) as conn:
        conn.send_method(commands.Queue.Declare(queue="", exclusive=True, auto_delete=True), 1)
        ch, ok = conn.read_method(5.0)
        assert (ch, type(ok)) == (1, commands.Queue.DeclareOk), ok
        conn.send_method(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        deadline = time.monotonic() + 5.0
        while True:
            ch, m = conn.read_method(max(0.0, deadline - time.monotonic()))
            if isinstance(m, commands.Connection.CloseOk):
                break
        # Whoever receives Close-Ok closes the socket (RabbitMQ waits for the client).


def expect_close(conn: RawConnection, codes: set[int], what: str) -> int:
    """The server answers with Connection.Close(code in codes) and then closes."""
    try:
        close = conn.expect_connection_close(CLOSE_TIMEOUT)
    except Closed:
        pytest.fail(f"{what}: socket closed without Connection.Close (seen: {conn.seen})")
    except Timeout:
        pytest.fail(f"{what}: no Connection.Close within {CLOSE_TIMEOUT} s (seen: {conn.seen})")
    assert close.reply_code in codes, (
        f"{what}: got {close.reply_code} {close.reply_text!r}, want one of {sorted(codes)}"
    )
    assert conn.wait_closed(CLOSE_TIMEOUT), (
        f"{what}: socket not closed after Connection.Close/CloseOk"
    )
    return close.reply_code


def check_bad(broker, data: bytes, codes: set[int], what: str, **hs) -> int:
    with handshake(broker, **hs) as conn:
        conn.send(data)
        code = expect_close(conn, codes, what)
    assert_broker_alive(broker)
    return code


def publish(routing_key: str = "x", channel: int = 1) -> bytes:
    return method_frame(commands.Basic.Publish(exchange="", routing_key=routing_key), channel)


def content_header(size: int, channel: int = 1) -> bytes:
    return pframe.marshal(pheader.ContentHeader(0, size, commands.Basic.Properties()), channel)


def content_body(data: bytes, channel: int = 1) -> bytes:
    return pframe.marshal(pbody.ContentBody(data), channel)


def qos(channel: int = 1) -> bytes:
    return method_frame(commands.Basic.Qos(prefetch_count=1), channel)


def payload_of(frame: bytes) -> bytes:
    return frame[7:-1]


# ----------------------------------------------------- protocol header
@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x00\x00\x08\x00",
        b"AMQP\x00\x00\x09\x02",
        b"AMQP\x00\x00\x0a\x00",
        b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
        b"AMQP\x03\x01\x00\x00",  # AMQP 1.0 SASL
        b"AMQP\xff\xff\xff\xff",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00" * 8,
    ],
    ids=lambda h: h[:12].hex(),
)
def test_wrong_protocol_header(broker, header):
    """§4.2.2: reply with the supported protocol header, then close."""
    with RawConnection(broker.host, broker.port) as conn:
        conn.send(header)
        assert conn.read_exact(8, 5.0) == PROTOCOL_HEADER
        assert conn.wait_closed(CLOSE_TIMEOUT), "socket not closed after a bad protocol header"
    assert_broker_alive(broker)


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


# ------------------------------------------------------------ channels
def test_method_on_unopened_channel(broker):
    """A method on a channel that was never opened -> 504 CHANNEL_ERROR."""
    check_bad(
        broker,
        method_frame(commands.Queue.Declare(queue="x"), 2),
        {CHANNEL_ERROR},
        "unopened channel 2",
    )


def test_method_before_channel_open(broker):
    check_bad(
        broker,
        method_frame(commands.Basic.Qos(prefetch_count=1), 1),
        {CHANNEL_ERROR},
        "channel 1 before open",
        channel=None,
    )


def test_second_channel_open(broker):
    """Channel.Open on an open channel -> 504 CHANNEL_ERROR (spec: channel.open rule)."""
    check_bad(
        broker, method_frame(commands.Channel.Open(), 1), {CHANNEL_ERROR}, "second channel.open"
    )


def test_method_on_closed_channel(broker):
    with handshake(broker) as conn:
        conn.send_method(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        )
        ch, m = conn.read_method(5.0)
        assert (ch, type(m)) == (1, commands.Channel.CloseOk)
        conn.send(qos())
        expect_close(conn, {CHANNEL_ERROR}, "method on closed channel")
    assert_broker_alive(broker)


def test_channel_method_on_channel_zero(broker):
    """RabbitMQ: 504; the spec's COMMAND_INVALID (503) is accepted too."""
    check_bad(
        broker,
        method_frame(commands.Queue.Declare(queue="x"), 0),
        {CHANNEL_ERROR, COMMAND_INVALID},
        "channel 0",
    )


def test_connection_method_on_channel_one(broker):
    """RabbitMQ: 503 COMMAND_INVALID; 504 accepted too."""
    check_bad(
        broker,
        method_frame(commands.Connection.Open(), 1),
        {CHANNEL_ERROR, COMMAND_INVALID},
        "connection.open on 1",
    )


def test_connection_open_twice(broker):
    """A second Connection.Open once open -> RabbitMQ 504; 503/505 accepted."""
    check_bad(
        broker,
        method_frame(commands.Connection.Open(), 0),
        {CHANNEL_ERROR, COMMAND_INVALID, UNEXPECTED_FRAME},
        "second connection.open",
    )


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
    queue = _name("oversize")
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


# ------------------------------------------------------ methods / args
UNKNOWN_METHODS = {
    "unknown-class": (1, struct.pack(">HH", 999, 10)),
    "unknown-method": (1, struct.pack(">HH", 50, 999)),
    "unknown-class-ch0": (0, struct.pack(">HH", 999, 10)),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN_METHODS))
def test_unknown_class_or_method(broker, case):
    """540 NOT_IMPLEMENTED or 503 COMMAND_INVALID.

    RabbitMQ 3.10 crashes the connection process ({unknown_method_id, ...})
    and drops the socket without Connection.Close; that is accepted for
    RabbitMQ only.
    """
    channel, payload = UNKNOWN_METHODS[case]
    with handshake(broker) as conn:
        rabbit = is_rabbitmq(conn)
        conn.send(raw_frame(1, channel, payload))
        kind, code, text = conn.outcome(CLOSE_TIMEOUT)
        if kind == "eof" and rabbit:
            pass
        else:
            assert kind == "close", f"{case}: {kind} (seen {conn.seen})"
            assert code in {NOT_IMPLEMENTED, COMMAND_INVALID}, (code, text)
            assert conn.wait_closed(CLOSE_TIMEOUT)
    assert_broker_alive(broker)


_QD = payload_of(method_frame(commands.Queue.Declare(queue="interop-trunc-q"), 1))
_QD_ARGS = payload_of(
    method_frame(commands.Queue.Declare(queue="interop-trunc-q", arguments={"x": 1}), 1)
)
_X = _QD_ARGS.index(b"\x01x")  # shortstr key "x" in the table
MALFORMED_ARGS = {
    "empty-payload": b"",
    "one-byte": b"\x00",
    "ids-only": _QD[:4],
    "cut-8": _QD[:8],
    "cut-1": _QD[:-1],
    "extra-bytes": _QD + b"\x00\x00",
    "shortstr-len-past-end": _QD[:6] + b"\xff" + _QD[7:],
    "table-len-past-end": _QD_ARGS[: _X - 4] + struct.pack(">I", 1000) + _QD_ARGS[_X:],
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ARGS))
def test_malformed_method_arguments(broker, case):
    """RabbitMQ: 501 FRAME_ERROR ("cannot decode"); spec 502 SYNTAX_ERROR accepted."""
    check_bad(broker, raw_frame(1, 1, MALFORMED_ARGS[case]), {FRAME_ERROR, SYNTAX_ERROR}, case)


def test_bad_field_table_type(broker):
    """Unknown field-value type tag in a table: 501/502 (RabbitMQ drops the socket)."""
    bad = _QD_ARGS[: _X + 2] + b"Z" + _QD_ARGS[_X + 3 :]
    with handshake(broker) as conn:
        rabbit = is_rabbitmq(conn)
        conn.send(raw_frame(1, 1, bad))
        kind, code, text = conn.outcome(CLOSE_TIMEOUT)
        if not (kind == "eof" and rabbit):
            assert kind == "close", f"{kind} (seen {conn.seen})"
            assert code in {FRAME_ERROR, SYNTAX_ERROR}, (code, text)
    assert_broker_alive(broker)


def test_unknown_exchange_type_is_connection_error(broker):
    """Exchange.Declare with an unknown type -> 503 COMMAND_INVALID (RabbitMQ)."""
    data = method_frame(
        commands.Exchange.Declare(exchange=_name("x"), exchange_type="no-such-type"), 1
    )
    check_bad(broker, data, {COMMAND_INVALID}, "unknown exchange type")


def test_bad_credentials_refused(broker):
    """Wrong password with authentication_failure_close -> 403 ACCESS_REFUSED."""
    with RawConnection(broker.host, broker.port) as conn:
        conn.send(PROTOCOL_HEADER)
        _, start = conn.read_method(5.0)
        assert isinstance(start, commands.Connection.Start)
        conn.send_method(
            commands.Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism="PLAIN",
                response="\x00guest\x00definitely-wrong",
            )
        )
        kind, code, _ = conn.outcome(CLOSE_TIMEOUT)
        assert (kind, code) == ("close", 403)
        assert conn.wait_closed(CLOSE_TIMEOUT)
    assert_broker_alive(broker)


# ================================================================ fuzzing
FUZZ_CODES = {
    FRAME_ERROR,
    SYNTAX_ERROR,
    COMMAND_INVALID,
    CHANNEL_ERROR,
    UNEXPECTED_FRAME,
    RESOURCE_ERROR,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    CONNECTION_FORCED,
}
FUZZ_BUDGET_S = 45.0  # stop doing real work after this (examples then pass trivially)


def _base_frames() -> list[bytes]:
    q = "interop-fuzz-q"
    return [
        method_frame(commands.Queue.Declare(queue=q, exclusive=True, auto_delete=True), 1),
        method_frame(
            commands.Queue.Declare(
                queue=q,
                exclusive=True,
                arguments={
                    "x-int": 7,
                    "x-str": "s",
                    "x-bool": True,
                    "x-list": [1, "a"],
                    "x-tab": {"k": 1.5},
                },
            ),
            1,
        ),
        method_frame(
            commands.Exchange.Declare(
                exchange="interop-fuzz-x", exchange_type="topic", auto_delete=True
            ),
            1,
        ),
        method_frame(commands.Queue.Bind(queue=q, exchange="amq.topic", routing_key="a.#"), 1),
        method_frame(commands.Basic.Qos(prefetch_count=10), 1),
        method_frame(commands.Basic.Consume(queue=q, consumer_tag="fz"), 1),
        method_frame(commands.Basic.Get(queue=q), 1),
        method_frame(commands.Basic.Ack(delivery_tag=1), 1),
        method_frame(commands.Basic.Reject(delivery_tag=1, requeue=True), 1),
        method_frame(commands.Confirm.Select(), 1),
        method_frame(commands.Tx.Select(), 1),
        method_frame(commands.Channel.Flow(active=True), 1),
        method_frame(commands.Channel.Open(), 2),
        method_frame(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        ),
        raw_frame(8, 0, b""),
        publish("interop-fuzz-q")
        + pframe.marshal(
            pheader.ContentHeader(
                0,
                5,
                commands.Basic.Properties(
                    content_type="text/plain", headers={"h": "v"}, delivery_mode=1, message_id="m"
                ),
            ),
            1,
        )
        + content_body(b"hello"),
    ]


BASE_FRAMES = _base_frames()


@st.composite
def mutated_frames(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(BASE_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(["truncate", "bitflip", "length", "byte", "insert", "delete", "append"])
        )
        if not data:
            data += draw(st.binary(min_size=1, max_size=16))
            continue
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[pos:]
        elif kind == "bitflip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "length" and len(data) >= 7:
            size = draw(
                st.one_of(
                    st.integers(0, 0xFFFFFFFF),
                    st.sampled_from(
                        [0, 1, 3, 4, len(data) - 8, len(data), 131064, 131072, 131073, 0x7FFFFFFF]
                    ),
                )
            )
            data[3:7] = struct.pack(">I", max(0, size) & 0xFFFFFFFF)
        elif kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            data += draw(st.binary(min_size=1, max_size=32))
    return bytes(data)


FUZZ_INPUT = st.one_of(
    mutated_frames(),
    mutated_frames().map(lambda b: BASE_FRAMES[4] + b),  # after a valid frame
    st.binary(min_size=1, max_size=300),
)


class Traffic:
    """A well-behaved pika client: publish with confirms + consume, in threads."""

    def __init__(self, uri: str, max_seconds: float = 60.0, max_messages: int = 20000):
        self.uri = uri
        self.queue = _name("traffic")
        self.deadline = time.monotonic() + max_seconds
        self.max_messages = max_messages
        self.confirmed: list[str] = []
        self.received: list[str] = []
        self.errors: list[str] = []
        self.stop_publishing = threading.Event()
        self.publisher_done = threading.Event()
        self.ready = threading.Event()
        self.consumer = threading.Thread(target=self._consume, name="traffic-consumer", daemon=True)
        self.publisher = threading.Thread(
            target=self._publish, name="traffic-publisher", daemon=True
        )

    def start(self) -> None:
        self.consumer.start()
        if not self.ready.wait(15.0):
            self.errors.append("consumer not ready in 15 s")
        self.publisher.start()

    def _publish(self) -> None:
        import pika

        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.uri))
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                i = 0
                while (
                    not self.stop_publishing.is_set()
                    and time.monotonic() < self.deadline
                    and i < self.max_messages
                ):
                    mid = str(i)
                    # Raises (UnroutableError / NackError) unless confirmed.
                    ch.basic_publish(
                        "",
                        self.queue,
                        body=f"traffic-{mid}".encode(),
                        properties=pika.BasicProperties(message_id=mid),
                        mandatory=True,
                    )
                    self.confirmed.append(mid)
                    i += 1
                    time.sleep(0.002)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - recorded and asserted on
            self.errors.append(f"publisher: {exc!r}")
        finally:
            self.publisher_done.set()

    def _consume(self) -> None:
        import pika

        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.uri))
            try:
                ch = conn.channel()
                ch.queue_declare(self.queue, auto_delete=False)
                ch.basic_qos(prefetch_count=50)

                def on_message(ch_, method, props, body):
                    self.received.append(props.message_id)
                    ch_.basic_ack(method.delivery_tag)

                ch.basic_consume(self.queue, on_message)
                self.ready.set()
                drain_deadline = None
                while time.monotonic() < self.deadline + 20.0:
                    conn.process_data_events(time_limit=0.1)
                    if self.publisher_done.is_set():
                        if drain_deadline is None:
                            drain_deadline = time.monotonic() + 15.0
                        if (
                            len(self.received) >= len(self.confirmed)
                            or time.monotonic() > drain_deadline
                        ):
                            break
                # Let any duplicate (which would be a bug) arrive.
                conn.process_data_events(time_limit=0.3)
                ch.queue_delete(self.queue)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"consumer: {exc!r}")
            self.ready.set()

    def finish(self) -> None:
        self.stop_publishing.set()
        self.publisher.join(30.0)
        self.consumer.join(45.0)
        assert not self.publisher.is_alive(), "publisher thread did not stop"
        assert not self.consumer.is_alive(), "consumer thread did not stop"


def test_fuzz_frames_with_concurrent_client(broker):
    pytest.importorskip("pika")
    traffic = Traffic(broker.uri)
    traffic.start()
    started = time.monotonic()
    stats: collections.Counter = collections.Counter()

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        print_blob=True,
    )
    @given(data=FUZZ_INPUT)
    def one(data: bytes) -> None:
        if time.monotonic() - started > FUZZ_BUDGET_S:
            stats["skipped-over-budget"] += 1
            return
        with handshake(broker) as conn:
            rabbit = is_rabbitmq(conn)
            conn.send(data)
            # Flush: frame_max+16 zero octets complete any pending frame with a
            # bad frame-end (or form a type-0 frame), so a live server *must*
            # now answer -- a server that does not is hung.
            conn.send(b"\x00" * (conn.frame_max + 16))
            kind, code, text = conn.outcome(CLOSE_TIMEOUT)
            client_closed = any(isinstance(m, commands.Connection.CloseOk) for _, m in conn.seen)
            stats[f"{kind}:{code}"] += 1
            if os.environ.get("FUZZ_DEBUG") and kind == "eof":  # run with -s to see these
                print("EOF for", data[:60], conn.seen)
            assert kind != "open", (
                f"no answer within {CLOSE_TIMEOUT} s to {data!r} (seen {conn.seen})"
            )
            if kind == "close":
                assert code in FUZZ_CODES, f"unexpected reply code {code} {text!r} for {data!r}"
            else:  # eof
                assert client_closed or rabbit, (
                    f"socket dropped without Connection.Close for {data!r}"
                )
        if sum(stats.values()) % 25 == 0:
            assert_broker_alive(broker)

    try:
        one()
    finally:
        traffic.finish()
    print(f"fuzz outcomes: {dict(stats)}; traffic confirmed={len(traffic.confirmed)}")
    assert_broker_alive(broker)
    assert traffic.errors == [], traffic.errors
    assert traffic.confirmed, "the concurrent client published nothing"
    counts = collections.Counter(traffic.received)
    dups = {m: c for m, c in counts.items() if c > 1}
    assert not dups, f"messages consumed more than once: {list(dups)[:10]}"
    missing = set(traffic.confirmed) - set(counts)
    assert not missing, (
        f"{len(missing)} confirmed messages never consumed, e.g. {sorted(missing)[:10]}"
    )
    assert set(counts) <= set(traffic.confirmed)


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
