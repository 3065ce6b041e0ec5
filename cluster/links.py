"""Peer links: one outgoing AMQP 0-9-1 connection from this broker to each other member (the Qpid
proposal: "each broker is a client of every other"), the I/O half of the cluster.

A link connects to the member's AMQP port and opens with the project's own AMQP client protocol
(``clients.protocol.ClientProtocol``): it announces the ``cluster-peer`` capability, authenticates
with the cluster secret as its SASL mechanism (``cluster.secret``: CLUSTER-HMAC-SHA256 over
Connection.Secure/SecureOk), opens vhost "/" and channel 1, then writes what the driver queues: Cluster methods and replayed or
propagated AMQP methods. Replies to propagated methods (Declare-Ok, Bind-Ok, ... or a Channel.Close
with the member's reply code) come back in order on the same channel and are reported to the
request's ``on_reply``; after a Channel.Close the channel is reopened and later requests are resent.
Basic.Ack / Nack / Reject from the member settle messages we relayed to it (``on_settle``); when a
link's connection ends, or the member closed its channel, ``on_down`` lets the broker take back
what it had not settled.
A link that cannot connect or breaks reports ``send_failed`` to the driver (a suspicion) and fails
its waiting requests with 320. With an ``ssl_context`` (``cluster.ca.client_ssl_context``,
``--cluster-tls-dir``) a link is mutual TLS to the member's address (then its TLS port): SNI and
the verified name are the member's node name, our node certificate is presented, and the cluster
secret exchange still runs inside (anyio's TLS stream, a writer task). A plain-TCP link uses the
client port's asyncio protocol (``server.plain_socket``) and writes by callback (``_Flusher``):
no task wake-up per write. Must not know: membership rules, the broker core.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
from pamqp import commands as cmd

from amqp_broker.core.relay_batch import BatchBuilder
from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import AMQPException, ConnectionException
from amqp_broker.protocol.framing import FrameSplitter
from amqp_broker.protocol.methods import decode_method, encode_method
from amqp_broker.server.plain_socket import PlainSocket
from clients.protocol import ChannelMethod, ClientProtocol, Closed, Opened

from . import secret as peer_secret
from .relay_wire import encode_batch

if TYPE_CHECKING:
    pass

__all__ = ["PeerLinks", "LinkError", "Settle"]

log = logging.getLogger(__name__)

OnReply = Callable[[tuple[int, str] | None], None]
CONNECT_TIMEOUT = 2.0
_REPLIES = (cmd.Exchange.DeclareOk, cmd.Exchange.DeleteOk, cmd.Exchange.BindOk,
            cmd.Exchange.UnbindOk, cmd.Queue.DeclareOk, cmd.Queue.BindOk, cmd.Queue.UnbindOk,
            cmd.Queue.PurgeOk, cmd.Queue.DeleteOk, cmd.Basic.ConsumeOk, cmd.Basic.CancelOk)


_TAG_BITS = struct.Struct(">QB")
#: method id (class 60) -> outcome of a settle without / with its requeue bit
_OUTCOMES = {80: ("ack", "ack"), 120: ("reject", "requeue"), 90: ("reject", "requeue")}


class Settle(NamedTuple):
    """A member settled messages we relayed to it (``core.relay``): Basic.Ack (``"ack"``),
    Basic.Nack or Basic.Reject with requeue (``"requeue"``) or without (``"reject"``), for
    ``delivery_tag`` and, with ``multiple`` (Ack and Nack only), every earlier tag."""

    delivery_tag: int
    multiple: bool
    outcome: str


def _decode_settle(payload: bytes) -> Settle | None:
    """Basic.Ack / Nack / Reject (a member settling relayed messages: one per message, so they
    skip pamqp's generic decoder) -> ``Settle``; None for any other method or a malformed one
    (the generic decoder then reports it). Layouts: AMQP 0-9-1 §1.8 (basic.ack: delivery-tag
    longlong, multiple bit; basic.nack: delivery-tag, multiple, requeue; basic.reject:
    delivery-tag, requeue)."""
    if len(payload) != 13 or payload[:3] != b"\x00\x3c\x00":
        return None
    outcomes = _OUTCOMES.get(payload[3])
    if outcomes is None:
        return None
    tag, bits = _TAG_BITS.unpack_from(payload, 4)
    if payload[3] == 90:  # reject: its only bit is requeue
        return Settle(tag, False, outcomes[bits & 1])
    return Settle(tag, bool(bits & 1), outcomes[(bits >> 1) & 1])


def _seal_open(queue: deque[tuple[Any, OnReply | None]]) -> None:
    """Something other than a batch is queued after the batches at the tail: no record may be
    added to them now (a relay must not overtake what was queued after it). Batches of
    different queues may stay open together (order matters within a queue only)."""
    for i in range(len(queue) - 1, -1, -1):
        item = queue[i][0]
        if not isinstance(item, BatchBuilder) or item.sealed:
            return
        item.sealed = True


def _seal_all(queue: deque[tuple[Any, OnReply | None]]) -> None:
    """The link will not write ``queue``: no record may be added to its batches."""
    for item, _cb in queue:
        if isinstance(item, BatchBuilder):
            item.sealed = True
            item.parts.clear()  # not written: what it held comes back with the link


class LinkError(Exception):
    """The link could not be opened or broke (handshake refused, socket closed)."""


def _key(node: str, address: str) -> str:
    """The key of ``node``'s link: its name, or ``"@host:port"`` for a node of unknown name."""
    return node if node else "@" + address


class _Link:
    __slots__ = ("node", "address", "queue", "inflight", "wake", "closed", "task_running",
                 "connected", "flusher")

    def __init__(self, node: str, address: str) -> None:
        self.node = node
        self.address = address
        self.queue: deque[tuple[Any, OnReply | None]] = deque()
        self.inflight: deque[tuple[Any, OnReply]] = deque()
        self.wake = anyio.Event()
        self.closed = False
        self.task_running = False
        self.connected = False
        #: A plain-TCP link's writer (``_Flusher``); None: a writer task woken by ``wake``.
        self.flusher: _Flusher | None = None

    def kick(self, urgent: bool = True) -> None:
        """Something was queued: have it written; a batch of relays (not ``urgent``) may wait
        for more on a plain link (``COALESCE_S``)."""
        flusher = self.flusher
        if flusher is not None:
            flusher.schedule(urgent)
        else:
            self.wake.set()


def _take_output(link: _Link) -> bytes:
    """Encode everything queued on ``link`` for one write; requests awaiting a reply move to
    ``inflight``; batches are sealed (and emptied: the driver may still hold them)."""
    out = []
    queue = link.queue
    while queue:
        method, on_reply = queue.popleft()
        if isinstance(method, bytes):
            out.append(method)
            continue
        if isinstance(method, BatchBuilder):
            method.sealed = True
            out.append(encode_batch(method))
            method.parts.clear()
            continue
        if on_reply is not None:
            link.inflight.append((method, on_reply))
        out.append(encode_method(1, method))
    return b"".join(out)


#: Seconds a plain link lets batches of relays gather after its last write: a batch queued
#: sooner than this after the previous write goes ``COALESCE_S`` after it, with whatever was
#: relayed meanwhile. Anything else queued (Raft, membership, replies) goes at once and takes
#: the batches with it. A relayed message then waits at most 1 ms more, and only in a steady
#: flow (more than one write a millisecond); in exchange both brokers pay the fixed cost of a
#: write, a read and a loop turn per millisecond instead of per message (at 20,000 msg/s, what
#: made a relayed message cost 1.5-1.6x a local one). The same trade as read pacing
#: (``server.read_pacing``) and a NIC's interrupt moderation; RabbitMQ's inter-node links
#: buffer too (Erlang distribution).
COALESCE_S = 0.001


class _Flusher:
    """A plain-TCP link's writer, by callback (as ``server.connection_io`` writes to clients):
    ``schedule`` arranges one ``flush`` for the next turn of the loop (a batch of relays in a
    steady flow: up to ``COALESCE_S`` later), which writes all that is queued in one write,
    straight to the transport; while the kernel has not taken everything
    (``PlainSocket.writing_paused``) items wait in the link's queue (so ``can_send`` sees the
    backlog) and the socket's drain flushes again. No task is woken per write."""

    __slots__ = ("link", "sock", "loop", "scheduled", "delayed", "last")

    def __init__(self, link: _Link, sock: PlainSocket) -> None:
        self.link = link
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.scheduled = False
        #: The pending flush when it waits for ``COALESCE_S`` (None: it runs next turn).
        self.delayed: asyncio.TimerHandle | None = None
        self.last = 0.0  # loop time of the last write
        sock.on_drained = self.schedule

    def schedule(self, urgent: bool = True) -> None:
        """Flush on the next turn of the loop (once, however often asked); a batch of relays
        (not ``urgent``) within ``COALESCE_S`` of the last write: at ``last + COALESCE_S``."""
        if self.scheduled:
            delayed = self.delayed
            if urgent and delayed is not None:  # no more waiting: something else is queued
                delayed.cancel()
                self.delayed = None
                self.loop.call_soon(self.flush)
            return
        self.scheduled = True
        if not urgent:
            due = self.last + COALESCE_S
            if due > self.loop.time():
                self.delayed = self.loop.call_at(due, self.flush)
                return
        self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what the link has queued, unless the socket is gone or its buffer is full."""
        self.scheduled = False
        self.delayed = None
        sock, link = self.sock, self.link
        if sock.lost or sock.writing_paused or link.closed:
            return
        data = _take_output(link)
        if data:
            sock.write(data)
            self.last = self.loop.time()


class _PlainStream:
    """The awaitable send/receive the handshake and the reader use, over a ``PlainSocket``."""

    __slots__ = ("sock",)

    def __init__(self, sock: PlainSocket) -> None:
        self.sock = sock

    async def send(self, data: bytes) -> None:
        """Write ``data`` (after whatever was written before it). Raises
        ``anyio.BrokenResourceError`` when the socket is gone."""
        if self.sock.lost:
            raise anyio.BrokenResourceError
        self.sock.write(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next chunk the member sent (``PlainSocket.receive``)."""
        return await self.sock.receive(max_bytes)


class PeerLinks:
    """All outgoing links of node ``me``. ``start(task_group)`` before use; ``send`` never blocks.
    ``on_failure(node)`` is called (in the event loop) when a link to ``node`` fails."""

    def __init__(self, me: str, secret: bytes, on_failure: Callable[[str], None],
                 on_settle: Callable[[str, list[Settle]], None] | None = None,
                 on_down: Callable[[str], None] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.me = me
        #: Mutual TLS for every link (None: plain TCP).
        self.ssl_context = ssl_context
        self.secret = secret
        self.on_failure = on_failure
        #: ``on_settle(node, settles)``: the member settled relayed messages (Basic.Ack, Nack or
        #: Reject on channel 1; ``core.relay``): each run of settles read together, in order.
        self.on_settle = on_settle
        #: ``on_down(node)``: a link's connection, or its channel, ended, whatever the reason
        #: (what was relayed over it and not settled must be taken back).
        self.on_down = on_down
        self._links: dict[str, _Link] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Links run their tasks in ``task_group``."""
        self._tg = task_group

    def send(self, node: str, address: str, method: Any, on_reply: OnReply | None = None) -> None:
        """Queue ``method`` to ``node`` (opened to ``address`` "host:port" when needed).
        ``on_reply`` gets the member's answer: None, or (reply code, text); 320 if the link broke.
        A node of unknown name (``""``: a seed) gets a link per address: else a Join meant for
        one seed went over the link open to another (two restarted brokers seeding each other
        sent their Joins only to each other, for good; found by the power-loss-majority
        nemesis)."""
        key = _key(node, address)
        link = self._links.get(key)
        if link is None or (address and link.address != address and not link.task_running):
            if link is not None:
                _seal_all(link.queue)  # not written: its transfers come back with the link
            link = self._links[key] = _Link(node, address or (link.address if link else ""))
        _seal_open(link.queue)
        link.queue.append((method, on_reply))
        link.kick()
        if not link.task_running and self._tg is not None and link.address:
            link.task_running = True
            self._tg.start_soon(self._run, link)

    def connect(self, node: str, address: str) -> None:
        """Open the link to ``node`` at ``address`` unless it is open or opening (a relay waits
        for it: a link that broke is reopened when the next message is due)."""
        key = _key(node, address)
        link = self._links.get(key)
        if link is not None and link.task_running:
            return
        if link is None:
            link = self._links[key] = _Link(node, address)
        if self._tg is not None and link.address:
            link.task_running = True
            self._tg.start_soon(self._run, link)

    def can_send(self, node: str, backlog: int = 512) -> bool:
        """True when the link to ``node`` is up and holds fewer than ``backlog`` unsent items."""
        link = self._links.get(node)
        return link is not None and link.connected and len(link.queue) < backlog

    def send_raw(self, node: str, data: bytes) -> None:
        """Queue already-encoded frames (channel 1) on an open link; dropped when there is none."""
        link = self._links.get(node)
        if link is not None and link.connected:
            _seal_open(link.queue)
            link.queue.append((data, None))
            link.kick()

    def send_batch(self, node: str, batch: BatchBuilder) -> None:
        """Queue a batch of relays (``core.relay_batch``) on an open link: encoded when the
        writer takes it, so records added until then go with it. Sealed at once when there is
        no open link (dropped: the transfers it holds come back when the link is down)."""
        link = self._links.get(node)
        if link is None or not link.connected:
            batch.sealed = True
            return
        link.queue.append((batch, None))
        link.kick(urgent=False)

    def close(self, node: str) -> None:
        """Stop the link to ``node`` and fail what it still holds."""
        link = self._links.pop(node, None)
        if link is not None:
            link.closed = True
            link.wake.set()
            if link.flusher is not None:
                link.flusher.sock.close()
            self._fail(link)

    def _fail(self, link: _Link) -> None:
        _seal_all(link.queue)
        pending = [cb for _m, cb in link.inflight] + [cb for _m, cb in link.queue]
        link.inflight.clear()
        link.queue.clear()
        for cb in pending:
            if cb is not None:
                cb((320, f"CONNECTION_FORCED - link to {link.node} lost"))

    async def _run(self, link: _Link) -> None:
        try:
            host, _, port = link.address.rpartition(":")
            if self.ssl_context is None:
                await self._run_plain(link, host, int(port))
            else:
                with anyio.fail_after(CONNECT_TIMEOUT):
                    stream: Any = await anyio.connect_tcp(
                        host, int(port), ssl_context=self.ssl_context, tls_hostname=link.node,
                        tls_standard_compatible=False)
                async with stream:
                    pending: deque[tuple[int, Any]] = deque()
                    with anyio.fail_after(CONNECT_TIMEOUT):
                        splitter = await self._handshake(stream)
                    link.connected = True
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._reader, link, stream, splitter, pending, tg)
                        try:
                            await self._writer(link, stream)
                        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                            pass
                        tg.cancel_scope.cancel()
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, TimeoutError, LinkError,
                ValueError, AMQPException) as exc:
            if not link.closed:
                log.info("link to %s (%s) failed: %s", link.node, link.address, exc)
        finally:
            link.task_running = False
            link.connected = False
            failed = not link.closed
            self._fail(link)
            key = _key(link.node, link.address)
            if self._links.get(key) is link:
                del self._links[key]
            if self.on_down is not None:
                self.on_down(link.node)
            if failed:
                self.on_failure(link.node)

    async def _run_plain(self, link: _Link, host: str, port: int) -> None:
        """A plain-TCP link: the asyncio protocol of ``server.plain_socket`` (reads on demand
        for the handshake and the reader task, writes by callback: ``_Flusher``) instead of
        anyio's stream and a writer task, which cost a task wake-up and two checkpoints per
        write. Relays gather for up to ``COALESCE_S`` in a steady flow (TLS links do not
        coalesce: their writer task writes whenever it runs)."""
        loop = asyncio.get_running_loop()
        sock = PlainSocket(lambda _s: None)
        with anyio.fail_after(CONNECT_TIMEOUT):
            await loop.create_connection(lambda: sock, host, port)
        try:
            stream = _PlainStream(sock)
            pending: deque[tuple[int, Any]] = deque()
            with anyio.fail_after(CONNECT_TIMEOUT):
                splitter = await self._handshake(stream)
            link.connected = True
            link.flusher = _Flusher(link, sock)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._reader, link, stream, splitter, pending, tg)
                link.flusher.schedule()  # what was queued during the handshake
                while not link.closed:  # until the reader ends (it cancels) or ``close``
                    await link.wake.wait()
                    link.wake = anyio.Event()
                tg.cancel_scope.cancel()
        finally:
            link.flusher = None
            sock.close()

    async def _read_method(self, stream: Any, splitter: FrameSplitter,
                           pending: deque[tuple[int, Any]]) -> tuple[int, Any]:
        while not pending:
            data = await stream.receive(65536)
            for ftype, channel, payload in splitter.feed(data):
                if ftype == c.FRAME_METHOD:
                    settle = _decode_settle(payload)
                    pending.append((channel, settle if settle is not None
                                    else decode_method(payload)))
        return pending.popleft()

    async def _handshake(self, stream: Any) -> FrameSplitter:
        """Open the link with the project's own client protocol (``clients.protocol``): the
        ``cluster-peer`` capability, the shared secret's challenge-response as its SASL
        mechanism, vhost "/", no heartbeats, then channel 1. Returns the frame splitter, with
        whatever it already buffered, for the link's reader. Raises ``LinkError`` when refused."""
        props = {"product": "amqp-broker cluster link", "node": self.me,
                 "capabilities": {"cluster-peer": True, "consumer_cancel_notify": True}}
        proto = ClientProtocol(vhost="/", heartbeat=0, frame_max=131072, client_properties=props,
                               sasl=peer_secret.SecretClient(self.secret, self.me))
        proto.start()
        channel = 0
        while True:
            out = proto.data_to_send()
            if out:
                await stream.send(out)
            try:
                events = proto.receive_data(await stream.receive(65536))
            except ConnectionException as exc:
                raise LinkError(f"peer broke the handshake: {exc.reply_text}") from None
            for event in events:
                if isinstance(event, Closed):
                    raise LinkError(f"peer refused the link: {event.reply_code} "
                                    f"{event.reply_text}")
                if isinstance(event, Opened):
                    channel = proto.open_channel()
                elif isinstance(event, ChannelMethod) and event.channel == channel:
                    if not isinstance(event.method, cmd.Channel.OpenOk):
                        raise LinkError(f"peer refused channel {channel}: {event.method!r}")
                    if channel != 1:
                        raise LinkError(f"expected channel 1, got {channel}")
                    return proto.splitter

    async def _writer(self, link: _Link, stream: Any) -> None:
        """A TLS link's writer task: everything queued, one send at a time."""
        while not link.closed:
            if not link.queue:
                await link.wake.wait()
                link.wake = anyio.Event()
                continue
            await stream.send(_take_output(link))

    async def _reader(self, link: _Link, stream: Any, splitter: FrameSplitter,
                      pending: deque[tuple[int, Any]], tg: anyio.abc.TaskGroup) -> None:
        try:
            while True:
                channel, method = await self._read_method(stream, splitter, pending)
                if method.__class__ is Settle:
                    # the run of settles read together goes in one call, so the broker applies
                    # them per queue and dispatches once, not once per settle
                    batch = [method]
                    while pending and pending[0][1].__class__ is Settle:
                        batch.append(pending.popleft()[1])
                    if self.on_settle is not None:
                        self.on_settle(link.node, batch)
                elif isinstance(method, _REPLIES):
                    if link.inflight:
                        _m, cb = link.inflight.popleft()
                        cb(None)
                elif isinstance(method, cmd.Channel.Close):
                    # The member refused the head request; later in-flight ones were discarded
                    # by it: answer the first, reopen the channel, resend the rest.
                    if link.inflight:
                        _m, cb = link.inflight.popleft()
                        # pamqp types every argument Optional; a decoded Close has its code
                        cb((method.reply_code, method.reply_text))  # type: ignore[arg-type]
                    resend = list(link.inflight)
                    link.inflight.clear()
                    await stream.send(encode_method(1, cmd.Channel.CloseOk())
                                      + encode_method(1, cmd.Channel.Open()))
                    while True:
                        _ch, reply = await self._read_method(stream, splitter, pending)
                        if isinstance(reply, cmd.Channel.OpenOk):
                            break
                    for item in reversed(resend):
                        link.queue.appendleft(item)
                    link.kick()
                    # What we relayed on the closed channel can no longer be settled (the
                    # member dropped its settle state with the channel, and discarded what
                    # arrived before our Open): take it all back, as when the link goes down.
                    # Transfers it got on the new channel may come back too (at least once).
                    if self.on_down is not None:
                        self.on_down(link.node)
                elif isinstance(method, cmd.Connection.Close):
                    log.info("%s closed the link: %s %s", link.node, method.reply_code,
                             method.reply_text)
                    return
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                ValueError, AMQPException) as exc:
            # AMQPException: the member sent what is not AMQP (bad frame, unknown or truncated
            # method): the link fails like a broken socket, the broker goes on
            log.info("link to %s: %s", link.node, exc)
        finally:
            tg.cancel_scope.cancel()
