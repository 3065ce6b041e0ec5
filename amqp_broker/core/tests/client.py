"""A test client for the sans-IO core: encodes client frames with pamqp, feeds them to a core
``Connection`` and decodes what the broker wrote (also with pamqp) into ``(channel, frame)`` pairs.

Nothing here touches a socket: the peer address is only the string the core sees.

Usage::

    cl = Client(broker)
    cl.handshake()                   # guest/guest on "/" from 127.0.0.1
    cl.open_channel(1)
    cl.call(1, commands.Queue.Declare(queue="q"))   # send and expect Declare-Ok
    cl.publish(1, "", "q", b"hi")
    msg = cl.expect_message()        # Basic.Deliver/Get-Ok/Return + header + body
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pamqp import body as pbody
from pamqp import commands, frame, header, heartbeat
from pamqp.encode import field_table

from amqp_broker.core.broker import Broker
from amqp_broker.core.connection import Connection
from amqp_broker.protocol import constants as c

__all__ = ["Client", "Message", "DEFAULT_CAPABILITIES", "PROTOCOL_HEADER"]

PROTOCOL_HEADER = c.PROTOCOL_HEADER

#: What a modern client (pika, aio-pika, the Java client) announces in Start-Ok.
DEFAULT_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
}

T = TypeVar("T")

#: The method classes that are followed by a content header and body frames.
CONTENT_METHODS = (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)


@dataclass
class Message:
    """A content-bearing method as the client saw it: the method, its properties and body."""

    channel: int
    method: Any
    properties: commands.Basic.Properties
    body: bytes

    @property
    def headers(self) -> dict:
        return self.properties.headers or {}


def plain_response(user: str, password: str) -> str:
    """SASL PLAIN: ``\\0user\\0password`` (RFC 4616)."""
    return f"\0{user}\0{password}"


def amqplain_response(user: str, password: str) -> str:
    """RabbitMQ's AMQPLAIN: a field table with LOGIN and PASSWORD, without the length prefix
    (as ``str`` because pamqp's Start-Ok wants one; the table's bytes are valid UTF-8 for the
    short names used in tests)."""
    return field_table({"LOGIN": user, "PASSWORD": password})[4:].decode()


class Client:
    """One simulated client connection to ``broker``.

    Received frames accumulate in ``inbox`` (oldest first); ``expect`` pops them one at a time.
    """

    def __init__(self, broker: Broker, peer_host: str = "127.0.0.1", port: int = 50000) -> None:
        self.broker = broker
        self.peer = (peer_host, port)
        self.conn: Connection | None = None
        self.inbox: list[tuple[int, Any]] = []
        self.frame_max = c.FRAME_MIN_SIZE
        self.last_channel = 0  # channel of the frame ``expect`` popped last

    # ---------------------------------------------------------------------------- raw I/O
    def connect(self) -> Connection:
        if self.conn is None:
            self.conn = self.broker.open_connection(self.peer)
        return self.conn

    def send_raw(self, data: bytes) -> None:
        """Feed bytes to the connection as one received chunk."""
        self.connect().receive_data(data)

    @staticmethod
    def encode(channel: int, method: Any) -> bytes:
        return frame.marshal(method, channel)

    def send(self, channel: int, *methods: Any) -> None:
        """Send methods on ``channel`` in one chunk."""
        self.send_raw(b"".join(frame.marshal(m, channel) for m in methods))

    def encode_publish(self, channel: int, exchange: str, routing_key: str, body: bytes = b"",
                       properties: commands.Basic.Properties | None = None,
                       mandatory: bool = False, immediate: bool = False) -> bytes:
        """Basic.Publish + content header + body frames (split at the negotiated frame_max)."""
        props = properties or commands.Basic.Properties()
        parts = [
            frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                                 mandatory=mandatory, immediate=immediate),
                          channel),
            frame.marshal(header.ContentHeader(0, len(body), props), channel),
        ]
        step = self.frame_max - c.FRAME_OVERHEAD
        for i in range(0, len(body), step):
            parts.append(frame.marshal(pbody.ContentBody(body[i:i + step]), channel))
        return b"".join(parts)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes = b"",
                properties: commands.Basic.Properties | None = None, mandatory: bool = False,
                immediate: bool = False) -> None:
        self.send_raw(self.encode_publish(channel, exchange, routing_key, body, properties,
                                          mandatory, immediate))

    # ----------------------------------------------------------------------------- output
    def pump(self) -> list[tuple[int, Any]]:
        """Decode everything the broker wrote since the last call; append it to ``inbox``."""
        pieces = []
        while self.conn is not None:  # large output comes in several takes (take_output)
            piece = self.conn.take_output()
            if not piece:
                break
            pieces.append(piece)
        data = b"".join(pieces)
        new: list[tuple[int, Any]] = []
        while data:
            consumed, channel, value = frame.unmarshal(data)
            new.append((channel, value))
            data = data[consumed:]
        self.inbox.extend(new)
        return new

    def frames(self) -> list[tuple[int, Any]]:
        """All pending frames (and clears the inbox)."""
        self.pump()
        out, self.inbox = self.inbox, []
        return out

    def methods(self) -> list[tuple[int, Any]]:
        """Pending frames without content headers/bodies/heartbeats (clears the inbox)."""
        return [(ch, f) for ch, f in self.frames()
                if not isinstance(f, header.ContentHeader | pbody.ContentBody
                                  | heartbeat.Heartbeat)]

    def expect(self, cls: type[T] | tuple[type, ...], channel: int | None = None) -> T:
        """Pop the next received frame and assert it is a ``cls`` (on ``channel`` if given)."""
        self.pump()
        assert self.inbox, f"expected {_names(cls)}, got nothing"
        ch, value = self.inbox.pop(0)
        assert isinstance(value, cls), f"expected {_names(cls)}, got {value!r} on channel {ch}"
        if channel is not None:
            assert ch == channel, f"{_names(cls)} on channel {ch}, expected {channel}"
        self.last_channel = ch
        return value

    def expect_nothing(self) -> None:
        self.pump()
        assert not self.inbox, f"unexpected frames: {self.inbox!r}"

    def expect_message(self, cls: type = CONTENT_METHODS, channel: int | None = None) -> Message:
        """Pop a content-bearing method (Deliver/Get-Ok/Return by default) and its content."""
        method = self.expect(cls, channel)
        ch = self.last_channel
        hdr = self.expect(header.ContentHeader, ch)
        data = b""
        while len(data) < hdr.body_size:
            data += self.expect(pbody.ContentBody, ch).value
        return Message(ch, method, hdr.properties, data)

    def messages(self) -> list[Message]:
        """Pop every pending delivery (asserting the inbox holds only messages)."""
        self.pump()
        out = []
        while self.inbox:
            out.append(self.expect_message())
        return out

    def call(self, channel: int, method: Any, reply: type[T] | None = None) -> T:
        """Send ``method`` and expect its ``-Ok`` reply (``reply`` or the pamqp class + Ok)."""
        self.send(channel, method)
        if reply is None:
            reply = _ok_class(method)
        return self.expect(reply, channel)

    # ---------------------------------------------------------------------------- flows
    def handshake(self, user: str = "guest", password: str = "guest", vhost: str = "/",
                  peer_host: str | None = None, *, mechanism: str = "PLAIN",
                  capabilities: dict | None = None, heartbeat: int | None = None,
                  frame_max: int | None = None, channel_max: int | None = None,
                  expect_open: bool = True) -> commands.Connection.Start:
        """Protocol header -> Start/Start-Ok -> Tune/Tune-Ok -> Open/Open-Ok. Returns Start.

        ``heartbeat``/``frame_max`` default to the broker's offer. With ``expect_open=False``
        stop after sending Connection.Open (for error cases: the caller expects the Close)."""
        if peer_host is not None:
            self.peer = (peer_host, self.peer[1])
        self.send_raw(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start, 0)
        props = {"product": "core-test-client", "capabilities":
                 DEFAULT_CAPABILITIES if capabilities is None else capabilities}
        response = (plain_response(user, password) if mechanism == "PLAIN"
                    else amqplain_response(user, password))
        self.send(0, commands.Connection.StartOk(client_properties=props, mechanism=mechanism,
                                                 response=response))
        self.pump()
        if not self.inbox or not isinstance(self.inbox[0][1], commands.Connection.Tune):
            return start  # refused: the caller looks at the Close
        tune = self.expect(commands.Connection.Tune, 0)
        fm = tune.frame_max if frame_max is None else frame_max
        hb = tune.heartbeat if heartbeat is None else heartbeat
        if channel_max is None:
            channel_max = tune.channel_max
        self.send(0, commands.Connection.TuneOk(channel_max, fm, hb),
                  commands.Connection.Open(vhost))
        if fm >= c.FRAME_MIN_SIZE:
            self.frame_max = fm
        if expect_open:
            self.expect(commands.Connection.OpenOk, 0)
        return start

    def open_channel(self, n: int = 1) -> None:
        self.call(n, commands.Channel.Open())

    def declare_queue(self, channel: int, name: str = "", **kw: Any) -> commands.Queue.DeclareOk:
        return self.call(channel, commands.Queue.Declare(queue=name, **kw))

    def consume(self, channel: int, queue: str, tag: str = "", **kw: Any) -> str:
        return self.call(channel, commands.Basic.Consume(queue=queue, consumer_tag=tag,
                                                         **kw)).consumer_tag

    def close(self) -> None:
        """Client-initiated Connection.Close -> Close-Ok."""
        self.call(0, commands.Connection.Close(200, "bye", 0, 0))


def _ok_class(method: Any) -> type:
    name = type(method).__name__
    module = getattr(commands, type(method).__qualname__.split(".")[0])
    return getattr(module, name + "Ok")


def _names(cls: Any) -> str:
    if isinstance(cls, tuple):
        return " or ".join(x.__name__ for x in cls)
    return cls.__name__
