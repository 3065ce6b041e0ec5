"""Bad input at the protocol-header and method level never crashes the broker.

Raw TCP sockets (``interop_tests/rawamqp.py``, frames built with ``pamqp``)
send a wrong protocol header or wrong credentials, or do a valid handshake
and then send methods that are out of place or malformed; each test asserts the reply the AMQP
0-9-1 specification asks for, and afterwards that the broker still accepts a
new connection.  Frame-level cases are in ``test_bad_frames.py``, the fuzz
test in ``test_fuzz.py`` (all three were one module before).  Sources: AMQP
0-9-1 spec §4.2.2 (protocol header negotiation), §2.3.7 / "Constants" in
amqp0-9-1.xml (reply codes: 501 FRAME_ERROR, 502 SYNTAX_ERROR, 503
COMMAND_INVALID, 504 CHANNEL_ERROR, 505 UNEXPECTED_FRAME, 540
NOT_IMPLEMENTED ...).

Every expectation was validated against RabbitMQ 3.10.8; where RabbitMQ's
answer differs from the code the spec names, the test accepts both and the
comment records what RabbitMQ does:

- wrong protocol header: the server writes ``AMQP\\x00\\x00\\x09\\x01`` and
  closes the socket (RabbitMQ also accepts the legacy 0-8/0-9 headers
  ``AMQP\\x01\\x01\\x08\\x00`` / ``AMQP\\x01\\x01\\x00\\x09``: not tested).
- method on a channel that is not open / second Channel.Open: 504.
- unknown class/method id: the spec's codes are 540 NOT_IMPLEMENTED or
  503 COMMAND_INVALID.  RabbitMQ's connection process crashes and the socket
  is closed without a Connection.Close; that is accepted only when the
  server says it is RabbitMQ.
- truncated or over-long method arguments: RabbitMQ says 501 ("cannot
  decode"); the spec's 502 SYNTAX_ERROR is accepted too.

Every loop and wait is bounded in time.
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands

from interop_tests.rawamqp import (
    CHANNEL_ERROR,
    CLOSE_TIMEOUT,
    COMMAND_INVALID,
    FRAME_ERROR,
    NOT_IMPLEMENTED,
    PROTOCOL_HEADER,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    RawConnection,
    assert_broker_alive,
    check_bad,
    expect_close,
    handshake,
    interop_name,
    is_rabbitmq,
    method_frame,
    qos,
    raw_frame,
)

pytestmark = pytest.mark.timeout(180)


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
        commands.Exchange.Declare(exchange=interop_name("x"), exchange_type="no-such-type"), 1
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
