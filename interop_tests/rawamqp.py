"""Minimal raw-socket AMQP 0-9-1 client for the bad-input tests.

It speaks just enough of the protocol to do a valid handshake (protocol
header, Connection.Start/StartOk with PLAIN, Tune/TuneOk, Open/OpenOk and
optionally Channel.Open) and then lets a test write arbitrary bytes and read
the server's frames back with a timeout.  Frames are encoded/decoded with
``pamqp``; the general frame layout it relies on is AMQP 0-9-1 §2.3.5 / §4.2.3:

    type:octet  channel:short  size:long  payload:size octets  frame-end:0xCE

At the end are the helpers the bad-input test modules share (``test_bad_input.py``,
``test_bad_frames.py``, ``test_fuzz.py``; moved here when that module was split):
``handshake(broker)``, ``assert_broker_alive``, ``expect_close`` / ``check_bad`` (the server must
answer with Connection.Close and one of the given reply codes, then close the socket), and
builders for Basic.Publish, content header/body and Basic.Qos frames.

Every read is bounded by a deadline; nothing here can block forever.
"""

from __future__ import annotations

import select
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8

# Reply codes (AMQP 0-9-1 spec, §1.x "Constants" / amqp0-9-1.xml).
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

# The hard errors a server may close a *connection* with in reaction to bad
# input (plus 320 CONNECTION_FORCED, e.g. when a server shuts down).
CONNECTION_ERROR_CODES = frozenset(
    {
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
)


class Closed(Exception):
    """The server closed the TCP connection (EOF or reset)."""


class Timeout(Exception):
    """No complete frame arrived before the deadline."""


@dataclass
class RawFrame:
    """One frame as read from the wire."""

    type: int
    channel: int
    payload: bytes
    end: int

    def decode(self) -> Any:
        """Decode with pamqp (method, content header, body or heartbeat).

        Connection.Close / Channel.Close are decoded by hand so that a
        reply-text that is not valid UTF-8 (RabbitMQ echoes the raw octets
        of a bad frame in it) does not make the test client fail.
        """
        if self.type == FRAME_METHOD and len(self.payload) >= 4:
            ids = struct.unpack_from(">HH", self.payload)
            if ids in ((10, 50), (20, 40)):
                return _decode_close(ids, self.payload)
        raw = (
            struct.pack(">BHI", self.type, self.channel, len(self.payload))
            + self.payload
            + bytes([self.end])
        )
        _, _, value = pframe.unmarshal(raw)
        return value


def _decode_close(ids: tuple[int, int], payload: bytes) -> Any:
    (code,) = struct.unpack_from(">H", payload, 4)
    tlen = payload[6]
    text = payload[7 : 7 + tlen].decode("utf-8", errors="replace")
    class_id, method_id = struct.unpack_from(">HH", payload, 7 + tlen)
    cls = commands.Connection.Close if ids == (10, 50) else commands.Channel.Close
    return cls(reply_code=code, reply_text=text, class_id=class_id, method_id=method_id)


def method_frame(method: Any, channel: int = 0) -> bytes:
    return pframe.marshal(method, channel)


def raw_frame(
    ftype: int, channel: int, payload: bytes, end: int = FRAME_END, size: int | None = None
) -> bytes:
    """Build a frame by hand; ``size`` overrides the length field."""
    return (
        struct.pack(">BHI", ftype, channel, len(payload) if size is None else size)
        + payload
        + bytes([end])
    )


class RawConnection:
    """A TCP connection to an AMQP broker with frame-level access."""

    def __init__(self, host: str, port: int, connect_timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.eof = False
        self.frame_max = 0
        self.server_properties: dict = {}
        # (channel, decoded frame) of everything read by expect_connection_close
        self.seen: list[tuple[int, Any]] = []

    # ------------------------------------------------------------------ io
    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes, timeout: float = 10.0) -> int:
        """Write bytes (see send_draining); a reset by the server is not an error."""
        return self.send_draining(data, timeout)

    def buffered_connection_close(self) -> bool:
        """True if a complete Connection.Close frame is already buffered."""
        pos = 0
        while len(self.buf) - pos >= 7:
            ftype, _, size = struct.unpack_from(">BHI", self.buf, pos)
            if len(self.buf) - pos < 7 + size + 1:
                return False
            if ftype == FRAME_METHOD and self.buf[pos + 7 : pos + 11] == b"\x00\x0a\x00\x32":
                return True
            pos += 7 + size + 1
        return False

    def send_draining(self, data: bytes, timeout: float = 10.0) -> int:
        """Write ``data`` while reading whatever the server sends meanwhile.

        Stops early (without error) when the server closed the socket or has
        sent Connection.Close (after which it need not read any more), so a
        server that stops reading cannot deadlock the test.  Returns the
        number of bytes written.
        """
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        sent = 0
        self.sock.settimeout(0)
        try:
            while sent < len(data) and not self.eof and not self.buffered_connection_close():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                r, w, _ = select.select([self.sock], [self.sock], [], min(remaining, 0.5))
                if r:
                    try:
                        chunk = self.sock.recv(65536)
                    except BlockingIOError:
                        chunk = None
                    except OSError:
                        self.eof = True
                        break
                    if chunk == b"":
                        self.eof = True
                        break
                    if chunk:
                        self.buf += chunk
                if w:
                    try:
                        sent += self.sock.send(view[sent : sent + 65536])
                    except BlockingIOError:
                        pass
                    except OSError:
                        break
        finally:
            self.sock.settimeout(5.0)
        return sent

    def send_method(self, method: Any, channel: int = 0) -> None:
        self.send(method_frame(method, channel))

    def _fill(self, n: int, deadline: float) -> None:
        while len(self.buf) < n:
            if self.eof:
                raise Closed(f"EOF with {len(self.buf)} buffered bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"waited for {n} bytes, have {len(self.buf)}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise Timeout(f"waited for {n} bytes, have {len(self.buf)}") from None
            except (ConnectionResetError, ConnectionAbortedError, OSError):
                self.eof = True
                continue
            if not chunk:
                self.eof = True
            else:
                self.buf += chunk

    def read_exact(self, n: int, timeout: float = 5.0) -> bytes:
        self._fill(n, time.monotonic() + timeout)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_frame(self, timeout: float = 5.0) -> RawFrame:
        deadline = time.monotonic() + timeout
        self._fill(7, deadline)
        ftype, channel, size = struct.unpack(">BHI", self.buf[:7])
        self._fill(7 + size + 1, deadline)
        payload = bytes(self.buf[7 : 7 + size])
        end = self.buf[7 + size]
        del self.buf[: 7 + size + 1]
        return RawFrame(ftype, channel, payload, end)

    def read_method(self, timeout: float = 5.0, skip_heartbeats: bool = True) -> tuple[int, Any]:
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if skip_heartbeats and f.type == FRAME_HEARTBEAT:
                continue
            return f.channel, f.decode()

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """Discard incoming data until EOF; True if the socket got closed in time."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except OSError:
                self.eof = True
                break
            if not chunk:
                self.eof = True
            else:
                self.buf += chunk
        return True

    # ------------------------------------------------------------ protocol
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        frame_max: int = 131072,
        heartbeat: int = 0,
        channel: int | None = 1,
        timeout: float = 5.0,
    ) -> None:
        """Do a full valid handshake; optionally open ``channel``."""
        self.send(PROTOCOL_HEADER)
        _, start = self.read_method(timeout)
        assert isinstance(start, commands.Connection.Start), start
        self.server_properties = dict(start.server_properties or {})
        self.send_method(
            commands.Connection.StartOk(
                client_properties={"product": "amqp-broker interop_tests rawamqp"},
                mechanism="PLAIN",
                response=f"\x00{user}\x00{password}",
                locale="en_US",
            )
        )
        _, tune = self.read_method(timeout)
        assert isinstance(tune, commands.Connection.Tune), tune
        fm = frame_max
        if tune.frame_max and (fm == 0 or tune.frame_max < fm):
            fm = tune.frame_max
        self.frame_max = fm
        self.send_method(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max or 2047, frame_max=fm, heartbeat=heartbeat
            )
        )
        self.send_method(commands.Connection.Open(virtual_host=vhost))
        _, open_ok = self.read_method(timeout)
        assert isinstance(open_ok, commands.Connection.OpenOk), open_ok
        if channel is not None:
            self.send_method(commands.Channel.Open(), channel)
            ch, ok = self.read_method(timeout)
            assert isinstance(ok, commands.Channel.OpenOk) and ch == channel, (ch, ok)

    def expect_connection_close(self, timeout: float = 5.0) -> commands.Connection.Close:
        """Read frames until Connection.Close; reply CloseOk; return the Close.

        Raises Closed if the server dropped the socket without a Close, and
        Timeout if neither happened in time.
        """
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if f.type != FRAME_METHOD:
                continue
            value = f.decode()
            self.seen.append((f.channel, value))
            if isinstance(value, commands.Connection.Close):
                self.send_method(commands.Connection.CloseOk())
                return value

    def outcome(self, timeout: float = 5.0) -> tuple[str, int | None, str]:
        """Classify what the server does next.

        Returns ("close", reply_code, reply_text) when it sent Connection.Close,
        ("eof", None, "") when it dropped the socket without one, and
        ("open", None, "") when nothing happened within ``timeout``.
        """
        try:
            close = self.expect_connection_close(timeout)
        except Closed:
            return "eof", None, ""
        except Timeout:
            return "open", None, ""
        return "close", close.reply_code, close.reply_text


def connect_and_handshake(host: str, port: int, **kw: Any) -> RawConnection:
    conn = RawConnection(host, port)
    try:
        conn.handshake(**kw)
    except BaseException:
        conn.close()
        raise
    return conn


# ------------------------------------------------ helpers shared by the bad-input test modules
# (test_bad_input.py, test_bad_frames.py, test_fuzz.py): a handshake against the ``broker``
# fixture, the Connection.Close assertions, and builders for common frames.
CLOSE_TIMEOUT = 10.0  # RabbitMQ waits up to 3 s for CloseOk after a frame error


def interop_name(prefix: str) -> str:
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
