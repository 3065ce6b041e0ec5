"""Sans-IO client side of an AMQP 0-9-1 connection: bytes in, events out; no sockets, no clocks.

Owns the client's half of the connection lifecycle (protocol header -> Start/Start-Ok ->
Tune/Tune-Ok -> Open/Open-Ok -> open -> Close/Close-Ok, AMQP 0-9-1 §2.2.4), channel-number
allocation, per-channel content assembly (Basic.Deliver / GetOk / Return -> header -> body, with the
broker's ``ContentAssembler``), and the replies the protocol itself requires (Close-Ok to a
Connection.Close or Channel.Close from the broker). ``receive_data(bytes)`` returns a list of
events; ``data_to_send()`` returns the bytes to write. Frames come from
``amqp_broker.protocol.framing.FrameSplitter``, methods from ``methods.decode_method`` (pamqp), with
a struct fast path for Basic.Deliver and Basic.Ack/Nack (the per-message methods).
A broker violating the protocol raises ``amqp_broker.protocol.errors.ConnectionException`` from
``receive_data`` (after queueing our Connection.Close for it). Must not know: anyio, time.
"""

from __future__ import annotations

import enum
import platform
import struct
from typing import Any, Protocol

from pamqp import commands as cmd

from amqp_broker.protocol import constants as c
from amqp_broker.protocol.assembler import ContentAssembler
from amqp_broker.protocol.errors import ConnectionException
from amqp_broker.protocol.framing import FrameSplitter
from amqp_broker.protocol.methods import decode_method, encode_method, method_ids

from .message import Message, encode_publish

__all__ = ["ClientProtocol", "SaslMechanism", "State", "Opened", "Closed", "Blocked", "Unblocked", "ChannelMethod",
           "Confirm", "CLIENT_PROPERTIES"]

_DELIVER = b"\x00\x3c\x00\x3c"
_ACK = b"\x00\x3c\x00\x50"
_NACK = b"\x00\x3c\x00\x78"
_TAG_BITS = struct.Struct(">QB")
_GET_OK = cmd.Basic.GetOk
_RETURN = cmd.Basic.Return

CLIENT_PROPERTIES: dict[str, Any] = {
    "product": "amqp-broker clients",
    "platform": f"Python {platform.python_version()}",
    "version": "0.1.0",
    "information": "clients/ of amqp-broker",
    "capabilities": {
        "publisher_confirms": True,
        "exchange_exchange_bindings": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
        "authentication_failure_close": True,
        "per_consumer_qos": True,
    },
}


class State(enum.Enum):
    """Where the client connection is in its lifecycle."""

    AWAIT_START = 0
    AWAIT_TUNE = 1
    AWAIT_OPEN_OK = 2
    OPEN = 3
    CLOSING = 4  # we sent Connection.Close and wait for Close-Ok
    CLOSED = 5


class Opened:
    """Connection.Open-Ok arrived. ``frame_max`` bytes, ``heartbeat`` seconds (0: none),
    ``channel_max``, ``server_properties`` (dict from Connection.Start)."""

    __slots__ = ("server_properties", "frame_max", "channel_max", "heartbeat")

    def __init__(self, server_properties: dict, frame_max: int, channel_max: int,
                 heartbeat: int) -> None:
        self.server_properties = server_properties
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = heartbeat


class Closed:
    """The connection is closed at the AMQP level: the broker sent Connection.Close (we answered
    Close-Ok; ``by_broker`` True) or answered our Close with Close-Ok (``by_broker`` False)."""

    __slots__ = ("reply_code", "reply_text", "class_id", "method_id", "by_broker")

    def __init__(self, reply_code: int, reply_text: str, class_id: int, method_id: int,
                 by_broker: bool) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker


class Blocked:
    """Connection.Blocked from the broker (resource alarm); ``reason`` is its text."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Unblocked:
    """Connection.Unblocked from the broker."""

    __slots__ = ()


class ChannelMethod:
    """A method (pamqp command) arrived on ``channel``: replies to our requests, Channel.Close (we
    already answered Close-Ok), Channel.Flow, a broker-side Basic.Cancel, ..."""

    __slots__ = ("channel", "method")

    def __init__(self, channel: int, method: Any) -> None:
        self.channel = channel
        self.method = method


class Confirm:
    """Basic.Ack (``ack`` True) or Basic.Nack on a confirm-mode channel for ``delivery_tag``
    (and every earlier one when ``multiple``)."""

    __slots__ = ("channel", "delivery_tag", "multiple", "ack")

    def __init__(self, channel: int, delivery_tag: int, multiple: bool, ack: bool) -> None:
        self.channel = channel
        self.delivery_tag = delivery_tag
        self.multiple = multiple
        self.ack = ack


def _shortstr_at(data: bytes, pos: int) -> tuple[str, int]:
    n = data[pos]
    return data[pos + 1:pos + 1 + n].decode(), pos + 1 + n


class SaslMechanism(Protocol):
    """A SASL mechanism with a challenge (AMQP 0-9-1 §1.4.2.2-3, Connection.Secure/Secure-Ok):
    ``mechanism`` (the name in Connection.Start's list), ``initial_response()`` for Start-Ok and
    ``answer(challenge)`` for each Secure; raise to give up (the connection then fails)."""

    mechanism: str

    def initial_response(self) -> str:
        """The Start-Ok response."""
        ...

    def answer(self, challenge: str | bytes) -> str:
        """The Secure-Ok response to ``challenge``."""
        ...


class ClientProtocol:
    """The client connection state machine.

    ``username``/``password``: PLAIN (or AMQPLAIN) credentials; ``vhost``: virtual host name;
    ``heartbeat``: seconds we want (``None``: take the broker's, 0: none); ``frame_max``: bytes,
    largest frame we accept (0: the broker's); ``channel_max``: 0 takes the broker's. Call
    ``start()`` then write ``data_to_send()``; feed received bytes to ``receive_data``.
    """

    def __init__(self, username: str = "guest", password: str = "guest", vhost: str = "/",
                 heartbeat: int | None = None, frame_max: int = 131072, channel_max: int = 0,
                 client_properties: dict[str, Any] | None = None,
                 sasl: SaslMechanism | None = None) -> None:
        #: A SASL mechanism of its own (e.g. a cluster peer's challenge-response) instead of
        #: PLAIN/AMQPLAIN with ``username``/``password``; the broker must offer it.
        self.sasl = sasl
        self.username = username
        self.password = password
        self.vhost = vhost
        self.want_heartbeat = heartbeat
        self.want_frame_max = frame_max
        self.want_channel_max = channel_max
        self.client_properties = dict(client_properties or CLIENT_PROPERTIES)
        self.state = State.AWAIT_START
        self.splitter = FrameSplitter(c.FRAME_MIN_SIZE)
        self.frame_max = c.FRAME_MIN_SIZE
        self.channel_max = 2047
        self.heartbeat = 0
        self.server_properties: dict[str, Any] = {}
        self.assemblers: dict[int, ContentAssembler[Message]] = {}
        self._next_channel = 1
        self._out: list[bytes] = []
        self.buffered = 0
        self.bytes_received = 0

    # ------------------------------------------------------------------------------ output
    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self.buffered += len(data)

    def data_to_send(self) -> bytes:
        """All bytes queued for the broker (resets the buffer)."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self.buffered = 0
        return data

    def start(self) -> None:
        """Queue the protocol header ``AMQP\\x00\\x00\\x09\\x01`` (§4.2.2)."""
        self._write(c.PROTOCOL_HEADER)

    def send_method(self, channel: int, method: Any) -> None:
        """Queue one method frame (pamqp command); raises ``ValueError`` if pamqp rejects it."""
        self._write(encode_method(channel, method))

    def send_publish(self, channel: int, routing: bytes, body: bytes, props_raw: bytes) -> None:
        """Queue Basic.Publish + header + body (see ``message.encode_publish``)."""
        data = encode_publish(channel, routing, body, props_raw, self.frame_max)
        self._out.append(data)
        self.buffered += len(data)

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame (§4.2.7)."""
        self._write(c.HEARTBEAT_FRAME)

    def open_channel(self) -> int:
        """Allocate a channel number and queue Channel.Open; raises ``ConnectionException`` 504
        when all ``channel_max`` numbers are in use."""
        number = self._next_channel
        limit = self.channel_max or 65535
        for _ in range(limit):
            if number > limit:
                number = 1
            if number not in self.assemblers:
                break
            number += 1
        else:
            raise ConnectionException(c.CHANNEL_ERROR, f"CHANNEL_ERROR - all {limit} channels in use")
        self._next_channel = number + 1
        self.assemblers[number] = ContentAssembler()
        self.send_method(number, cmd.Channel.Open())
        return number

    def channel_gone(self, channel: int) -> None:
        """Forget a channel whose close handshake finished (its number may be reused)."""
        self.assemblers.pop(channel, None)

    def close(self, reply_code: int = c.REPLY_SUCCESS, reply_text: str = "Normal shutdown",
              class_id: int = 0, method_id: int = 0) -> None:
        """Queue Connection.Close; a ``Closed`` event follows when the broker answers Close-Ok."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.send_method(0, cmd.Connection.Close(reply_code, reply_text[:255], class_id, method_id))
        self.state = State.CLOSING

    # ------------------------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> list[Any]:
        """Process received bytes; returns events in arrival order (``Opened``, ``Closed``,
        ``Blocked``, ``Unblocked``, ``ChannelMethod``, ``Confirm``, ``Message``).

        Raises ``ConnectionException`` when the broker violates the protocol (the matching
        Connection.Close is already queued)."""
        events: list[Any] = []
        if self.state is State.CLOSED:
            return events
        self.bytes_received += len(data)
        try:
            for ftype, channel, payload in self.splitter.feed(data):
                if ftype == 1:
                    if channel:
                        self._channel_method(channel, payload, events)
                    else:
                        self._connection_method(payload, events)
                elif ftype == 3 or ftype == 2:
                    asm = self.assemblers.get(channel)
                    if asm is None:
                        if self.state is State.CLOSING:
                            continue
                        raise ConnectionException(
                            c.CHANNEL_ERROR, f"CHANNEL_ERROR - content frame on unopened channel "
                            f"{channel}")
                    done = asm.body(payload) if ftype == 3 else asm.header(payload)
                    if done is not None:
                        msg, header, body = done
                        msg.header = header
                        msg.body = body
                        events.append(msg)
                elif channel:
                    raise ConnectionException(c.FRAME_ERROR,
                                              f"FRAME_ERROR - heartbeat on channel {channel}")
                if self.state is State.CLOSED:
                    break
        except ConnectionException as exc:
            self.close(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id)
            raise
        return events

    def _channel_method(self, channel: int, payload: bytes, events: list[Any]) -> None:
        asm = self.assemblers.get(channel)
        if asm is None:
            if self.state is State.CLOSING:
                return
            raise ConnectionException(c.CHANNEL_ERROR,
                                      f"CHANNEL_ERROR - method on unopened channel {channel}")
        prefix = payload[:4]
        if prefix == _DELIVER:
            try:
                tag, pos = _shortstr_at(payload, 4)
                dtag, bits = _TAG_BITS.unpack_from(payload, pos)
                exchange, pos = _shortstr_at(payload, pos + 9)
                rkey, _ = _shortstr_at(payload, pos)
            except (IndexError, struct.error, UnicodeDecodeError):
                raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - malformed basic.deliver",
                                          60, 60) from None
            if asm.expecting_content:
                raise asm.unexpected("method frame")
            asm.start(Message("deliver", channel, dtag, bool(bits & 1), exchange, rkey, tag))
            return
        if prefix == _ACK or prefix == _NACK:
            if len(payload) != 13:
                raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - malformed basic.ack",
                                          60, payload[3])
            if asm.expecting_content:
                raise asm.unexpected("method frame")
            dtag, bits = _TAG_BITS.unpack_from(payload, 4)
            events.append(Confirm(channel, dtag, bool(bits & 1), prefix == _ACK))
            return
        method = decode_method(payload)
        if asm.expecting_content:
            raise asm.unexpected("method frame")
        # pamqp types every argument Optional (its constructors' default); decoded ones are set
        if isinstance(method, _GET_OK):
            asm.start(Message("get", channel, method.delivery_tag,  # type: ignore[arg-type]
                              method.redelivered, method.exchange,
                              method.routing_key, "", method.message_count))  # type: ignore[arg-type]
            return
        if isinstance(method, _RETURN):
            asm.start(Message("return", channel, 0, False, method.exchange,
                              method.routing_key, "", 0,  # type: ignore[arg-type]
                              method.reply_code, method.reply_text))  # type: ignore[arg-type]
            return
        if isinstance(method, cmd.Channel.Close):
            self.send_method(channel, cmd.Channel.CloseOk())
            asm.reset()
            self.assemblers.pop(channel, None)
        elif isinstance(method, cmd.Channel.CloseOk):
            self.assemblers.pop(channel, None)
        events.append(ChannelMethod(channel, method))

    def _connection_method(self, payload: bytes, events: list[Any]) -> None:
        method = decode_method(payload)
        state = self.state
        if isinstance(method, cmd.Connection.Close):
            if state is not State.CLOSING:
                self.send_method(0, cmd.Connection.CloseOk())
            self.state = State.CLOSED
            # pamqp types every argument Optional (its constructors' default); decoded ones are set
            events.append(Closed(method.reply_code,  # type: ignore[arg-type]
                                 method.reply_text, method.class_id,  # type: ignore[arg-type]
                                 method.method_id, True))  # type: ignore[arg-type]
        elif isinstance(method, cmd.Connection.CloseOk):
            self.state = State.CLOSED
            events.append(Closed(c.REPLY_SUCCESS, "Normal shutdown", 0, 0, False))
        elif state is State.CLOSING:
            return
        elif state is State.AWAIT_START and isinstance(method, cmd.Connection.Start):
            self._on_start(method)
        elif state is State.AWAIT_TUNE and isinstance(method, cmd.Connection.Tune):
            self._on_tune(method)
        elif (state is State.AWAIT_TUNE and isinstance(method, cmd.Connection.Secure)
              and self.sasl is not None):  # §1.4.2.3: a challenge of our mechanism
            # pamqp types every argument Optional (its constructors' default); a decoded
            # Secure has its challenge
            answer = self.sasl.answer(method.challenge)  # type: ignore[arg-type]
            self.send_method(0, cmd.Connection.SecureOk(answer))
        elif state is State.AWAIT_OPEN_OK and isinstance(method, cmd.Connection.OpenOk):
            self.state = State.OPEN
            events.append(Opened(self.server_properties, self.frame_max, self.channel_max,
                                 self.heartbeat))
        elif state is State.OPEN and isinstance(method, cmd.Connection.Blocked):
            events.append(Blocked(method.reason))
        elif state is State.OPEN and isinstance(method, cmd.Connection.Unblocked):
            events.append(Unblocked())
        elif isinstance(method, cmd.Connection.UpdateSecretOk):
            events.append(ChannelMethod(0, method))
        else:
            class_id, method_id = method_ids(method)  # (a Publish has no method index)
            raise ConnectionException(c.COMMAND_INVALID,
                                      f"COMMAND_INVALID - unexpected {method.name} in state "
                                      f"{state.name}", class_id, method_id)

    def _on_start(self, method: cmd.Connection.Start) -> None:
        self.server_properties = dict(method.server_properties or {})
        mechanisms = (method.mechanisms or "").split()
        sasl = self.sasl
        if sasl is not None:
            if sasl.mechanism not in mechanisms:
                raise ConnectionException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - the broker does "
                                          f"not offer {sasl.mechanism} ({mechanisms})")
            mechanism, response = sasl.mechanism, sasl.initial_response()
        elif "PLAIN" in mechanisms:
            mechanism, response = "PLAIN", f"\0{self.username}\0{self.password}"
        elif "AMQPLAIN" in mechanisms:
            from pamqp import encode
            mechanism = "AMQPLAIN"
            table = encode.field_table({"LOGIN": self.username, "PASSWORD": self.password})[4:]
            # pamqp sends a longstr given as str UTF-8 encoded: the table's bytes go through
            # unchanged when they are valid UTF-8, i.e. each credential under 128 bytes.
            try:
                response = table.decode("utf-8")
            except UnicodeDecodeError:
                raise ConnectionException(
                    c.ACCESS_REFUSED, "ACCESS_REFUSED - AMQPLAIN credentials over 127 bytes are "
                    "not supported by this client; offer PLAIN") from None
        else:
            raise ConnectionException(c.ACCESS_REFUSED,
                                      f"ACCESS_REFUSED - no supported mechanism in {mechanisms}")
        self.state = State.AWAIT_TUNE
        self.send_method(0, cmd.Connection.StartOk(self.client_properties, mechanism, response,
                                                   "en_US"))

    def _on_tune(self, method: cmd.Connection.Tune) -> None:
        def negotiate(ours: int, theirs: int) -> int:
            return max(ours, theirs) if not ours or not theirs else min(ours, theirs)

        self.channel_max = negotiate(self.want_channel_max, method.channel_max) or 2047
        self.frame_max = negotiate(self.want_frame_max, method.frame_max) or 131072
        hb = self.want_heartbeat
        self.heartbeat = method.heartbeat if hb is None else (
            0 if hb == 0 else negotiate(hb, method.heartbeat))
        self.splitter.set_frame_max(self.frame_max)
        self.state = State.AWAIT_OPEN_OK
        self.send_method(0, cmd.Connection.TuneOk(self.channel_max, self.frame_max, self.heartbeat))
        self.send_method(0, cmd.Connection.Open(self.vhost))
