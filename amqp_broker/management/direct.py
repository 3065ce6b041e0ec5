"""An in-process AMQP connection for the management API's actions (RabbitMQ's management plugin
does the same with its "direct" Erlang client connection).

Every change the API makes (declare, delete, bind, purge, publish, get) is an ordinary AMQP method
fed to a core ``Connection`` as bytes, so it runs through the very handlers a client's method does:
equivalence checks, permissions, durability (definitions.db, the message store) and cluster
propagation (the Ok comes once the members replied, so the HTTP answer waits for it too). The
connection is logged in as the HTTP user, never touches a socket, and is hidden from
``/api/connections`` (``is_direct``). Errors: a Channel.Close or Connection.Close from the broker
becomes ``AMQPError(code, text)``; no reply within ``TIMEOUT`` seconds is ``TimeoutError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from pamqp import commands as cmd
from pamqp import header as pheader

from ..core.access import Account
from ..core.broker import Broker
from ..core.connection import Connection, State
from ..protocol import constants as c
from ..protocol.framing import FrameSplitter, encode_body_frames, encode_frame
from ..protocol.methods import decode_method, encode_method

__all__ = ["AMQPError", "DirectChannel", "direct_channel", "is_direct", "GotMessage", "TIMEOUT"]

#: Seconds to wait for the broker's reply (a cluster may take a moment to confirm a change).
TIMEOUT = 30.0
_DIRECT_IDS: set[int] = set()


def is_direct(conn: Connection) -> bool:
    """True for the management API's own in-process connections."""
    return conn.id in _DIRECT_IDS


class AMQPError(Exception):
    """The broker refused a method: ``code`` (AMQP reply code) and ``text`` (its reply text)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text


@dataclass
class GotMessage:
    """A Basic.Get-Ok (or Basic.Return) with its content: ``method``, ``properties``, ``body``."""

    method: Any
    properties: cmd.Basic.Properties
    body: bytes


class DirectChannel:
    """Channel 1 of an in-process connection logged in as ``user`` on ``vhost`` (None: the
    broker itself, e.g. a definitions import, which permissions do not restrict)."""

    def __init__(self, broker: Broker, user: Account | None, vhost: str, peer_host: str) -> None:
        conn = broker.open_connection((peer_host, 0))
        _DIRECT_IDS.add(conn.id)
        conn.name = f"{peer_host} (management)"
        conn.user = user
        conn.vhost = broker.vhosts[vhost]
        conn.client_properties = {"product": "amqp-broker management API"}
        conn.frame_max = broker.settings.frame_max
        conn.splitter.set_frame_max(conn.frame_max)
        conn.state = State.OPEN
        conn.on_writable = self._wake
        self.conn = conn
        self._splitter = FrameSplitter(conn.frame_max)
        self._frames: list[tuple[int, int, bytes]] = []
        self._event = anyio.Event()
        self._feed(encode_method(1, cmd.Channel.Open()))

    # ------------------------------------------------------------------------ plumbing
    def _wake(self) -> None:
        self._event.set()

    def _feed(self, data: bytes) -> None:
        self.conn.receive_data(data)

    def _pump(self) -> None:
        data = self.conn.take_output()
        if data:
            self._frames.extend(self._splitter.feed(data))

    def _next_frame(self) -> tuple[int, int, bytes] | None:
        self._pump()
        return self._frames.pop(0) if self._frames else None

    async def _frame(self) -> tuple[int, int, bytes]:
        with anyio.fail_after(TIMEOUT):
            while True:
                frame = self._next_frame()
                if frame is not None:
                    return frame
                if self.conn.closed:
                    raise AMQPError(c.CONNECTION_FORCED, "CONNECTION_FORCED - connection closed")
                await self._event.wait()
                self._event = anyio.Event()

    async def _content(self, method: Any) -> GotMessage:
        ftype, _, payload = await self._frame()
        if ftype != c.FRAME_HEADER:
            raise AMQPError(c.UNEXPECTED_FRAME, "UNEXPECTED_FRAME - content header expected")
        head = pheader.ContentHeader()
        head.unmarshal(payload)
        parts = []
        size = 0
        while size < head.body_size:
            ftype, _, payload = await self._frame()
            parts.append(payload)
            size += len(payload)
        return GotMessage(method, head.properties, b"".join(parts))

    async def expect(self, *types: type) -> Any:
        """The next reply of one of ``types`` (methods), skipping channel-0 noise such as
        Connection.Blocked; content-bearing replies come as ``GotMessage``."""
        while True:
            ftype, channel, payload = await self._frame()
            if ftype != c.FRAME_METHOD:
                continue
            method = decode_method(payload)
            if isinstance(method, cmd.Channel.Close):
                self._feed(encode_method(1, cmd.Channel.CloseOk()))
                raise AMQPError(method.reply_code or 0, method.reply_text or "")
            if isinstance(method, cmd.Connection.Close):
                raise AMQPError(method.reply_code or 0, method.reply_text or "")
            if isinstance(method, cmd.Basic.GetOk | cmd.Basic.Return):
                got = await self._content(method)
                if isinstance(method, types):
                    return got
                continue
            if isinstance(method, types):
                return method

    # ------------------------------------------------------------------------- methods
    async def call(self, method: Any, *reply: type) -> Any:
        """Send ``method``; return its reply (one of ``reply``) or raise ``AMQPError``."""
        self._feed(encode_method(1, method))
        return await self.expect(*reply)

    def send(self, method: Any) -> None:
        """Send a method that has no reply (Basic.Ack / Nack)."""
        self._feed(encode_method(1, method))

    async def open(self) -> None:
        """Wait for Channel.Open-Ok."""
        await self.expect(cmd.Channel.OpenOk)

    async def publish(self, exchange: str, routing_key: str, body: bytes,
                      properties: cmd.Basic.Properties) -> bool:
        """Publish with confirms and ``mandatory``; True when routed to some queue. Raises
        ``AMQPError`` for a refusal (404 no exchange, 403 no write permission, a nack: 406)."""
        await self.call(cmd.Confirm.Select(), cmd.Confirm.SelectOk)
        head = pheader.ContentHeader(0, len(body), properties)
        data = [encode_method(1, cmd.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                                   mandatory=True)),
                encode_frame(c.FRAME_HEADER, 1, head.marshal()),
                *encode_body_frames(1, body, self.conn.frame_max)]
        self._feed(b"".join(data))
        routed = True
        while True:
            reply = await self.expect(cmd.Basic.Return, cmd.Basic.Ack, cmd.Basic.Nack)
            if isinstance(reply, GotMessage):
                routed = False
            elif isinstance(reply, cmd.Basic.Nack):
                raise AMQPError(c.PRECONDITION_FAILED, "PRECONDITION_FAILED - message refused "
                                "by a queue (x-overflow reject-publish)")
            else:
                return routed

    def close(self) -> None:
        """Release the connection (its unsettled deliveries are requeued)."""
        conn = self.conn
        conn.on_writable = None
        conn.connection_lost()
        _DIRECT_IDS.discard(conn.id)


@contextmanager
def direct_channel(broker: Broker, user: Account | None, vhost: str,
                   peer_host: str = "127.0.0.1") -> Iterator[DirectChannel]:
    """A ``DirectChannel`` for the duration of a request (``await ch.open()`` before use);
    ``KeyError`` when ``vhost`` does not exist."""
    if vhost not in broker.vhosts:
        raise KeyError(vhost)
    ch = DirectChannel(broker, user, vhost, peer_host)
    try:
        yield ch
    finally:
        ch.close()
