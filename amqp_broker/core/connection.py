"""One client connection, sans-IO: bytes in via ``receive_data``, bytes out via ``take_output``.

Owns the connection lifecycle of AMQP 0-9-1 §2.2.4 / class connection as a small state machine
(protocol header -> Start/Start-Ok -> Tune/Tune-Ok -> Open/Open-Ok -> open -> Close/Close-Ok), the
frame loop that hands frames to channels, heartbeats (§4.2.7: a peer silent for two intervals is
dropped), the output buffer with its high-water mark (credit flow), and Connection.Close on a
``ConnectionException``. The handshake's steps (Start-Ok, Secure-Ok, Tune-Ok, Open) are
``core.handshake``'s. Must not know: sockets or event loops; time comes from ``broker.clock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from pamqp import commands as cmd

from ..protocol import constants as c
from ..protocol.errors import ConnectionException
from ..protocol.framing import FRAME_BODY_VIEW, FrameSplitter
from ..protocol.methods import decode_method, encode_method, method_ids
from .channel import Channel
from .handshake import State, open_vhost, secure_ok, send_start, start_ok, tune_ok
from .timers import TIMER_SLACK

if TYPE_CHECKING:
    from pamqp.base import Frame

    from queues.queue_type import QueueType

    from .access import Account
    from .broker import Broker, PeerAuthServer
    from .external import TlsPeer
    from .vhost import VirtualHost

__all__ = ["LINGER_TIMEOUT", "Connection", "State"]

log = logging.getLogger(__name__)

#: Seconds we wait for the peer's Connection.Close-Ok before closing the socket (RabbitMQ: 3 s).
CLOSE_TIMEOUT = 3.0
#: Seconds we keep reading (and discarding) after the Close-Ok we sent for the peer's own
#: Connection.Close, until the peer closes its socket (RabbitMQ's reader: CLOSING_TIMEOUT, 30 s).
LINGER_TIMEOUT = 30.0
# Final: compiled code reads them as constants; pure code without a module attribute lookup
_METHOD: Final = c.FRAME_METHOD
_HEADER: Final = c.FRAME_HEADER
_BODY: Final = c.FRAME_BODY
#: Bytes ``take_output`` hands over at a time while large pieces wait (1 MiB).
TAKE_MAX: Final = 1 << 20
#: Average bytes per queued piece above which output counts as large pieces, and bytes from which
#: a piece is written as its own buffer, not joined (``take_output_parts``).
LARGE_PIECE: Final = 4096
#: Heartbeats (s) from which ours are sent on whole seconds (``Connection._heartbeat_due``):
#: at 4 s, one every 1-2 s, while the peer waits two intervals (8 s) before it gives up.
HEARTBEAT_GRID_MIN = 4


class Connection:
    """A client connection accepted by the server layer.

    ``peer``: (host, port) of the client. ``on_writable``: called (no arguments) when output goes
    from empty to non-empty, so the I/O layer can wake its writer. ``send_now``: set by an I/O layer
    that can hand bytes to the socket at once (``data -> bool``, False when it cannot now); a
    heartbeat due on a connection with no queued output goes that way, not through the writer (an
    idle connection's heartbeat costs one send, issue 14). ``closed`` becomes True when the socket
    should be closed once the pending output is written.
    """

    def __init__(self, broker: Broker, peer: tuple[str, int], conn_id: int) -> None:
        self.broker = broker
        self.peer = peer
        self.id = conn_id
        self.name = f"{peer[0]}:{peer[1]}"
        self.state = State.AWAIT_HEADER
        self.splitter = FrameSplitter(c.FRAME_MIN_SIZE, body_views=True)
        self.frame_max = c.FRAME_MIN_SIZE
        self.channel_max = broker.settings.channel_max
        self.heartbeat = 0
        self.high_water = broker.settings.output_high_water
        self.channels: dict[int, Channel] = {}
        self.vhost: VirtualHost | None = None
        self.user: Account | None = None
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.exclusive_queues: set[QueueType] = set()
        self.on_writable: Callable[[], None] | None = None
        self.send_now: Callable[[bytes], bool] | None = None
        self.closed = False
        #: The peer closed with Connection.Close: after our Close-Ok the I/O layer keeps reading
        #: and discarding until the peer closes its socket, at most ``LINGER_TIMEOUT`` s (RabbitMQ
        #: does the same, so a client still flushing frames behind its Close gets no reset).
        self.linger = False
        self.blocked = False  # blocked by a resource alarm (see Broker.set_alarm)
        self.block_announced = False  # Connection.Blocked sent (Unblocked is due when cleared)
        #: Set when a cluster peer authenticated: its node name (see ``_start_ok``).
        self.peer_node: str | None = None
        #: A cluster peer's authentication between Start-Ok and Secure-Ok (``core.handshake``).
        self.peer_auth_server: PeerAuthServer | None = None
        #: The TLS session (set by the server layer before any input), None on a plain socket.
        self.tls: TlsPeer | None = None
        self.auth_mechanism = ""  # the SASL mechanism the client logged in with
        self.has_published = False
        #: A client connection counted in ``broker.churn`` (set at Open-Ok; cleared when its
        #: close is counted). Peer links and in-process API connections never are.
        self.counted = False
        #: Queued output: bytes, and views of large bodies (``write_parts``).
        self._out: list[bytes | memoryview] = []
        self.output_size = 0
        self._header = b""
        self._framing_broken = False
        now = broker.clock()
        self.created_at = now
        self.last_received = now
        self.last_sent = now
        self.schedule_timer()  # the handshake timeout

    @property
    def is_peer(self) -> bool:
        """True for an authenticated cluster peer link."""
        return self.peer_node is not None

    @property
    def is_open(self) -> bool:
        """True between Connection.Open-Ok and any Close."""
        return self.state is State.OPEN

    # ----------------------------------------------------------------------------- output
    def write(self, data: bytes) -> None:
        """Queue ``data`` for the peer."""
        if not self._out:
            self._out.append(data)
            self.output_size += len(data)
            if self.on_writable is not None:
                self.on_writable()
            return
        self._out.append(data)
        self.output_size += len(data)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Queue several pieces of one write (a large delivery: envelopes and body slices, the
        slices views of the body, copied only when ``take_output`` joins them)."""
        out = self._out
        was_empty = not out
        out.extend(parts)
        self.output_size += sum(map(len, parts))
        if was_empty and self.on_writable is not None:
            self.on_writable()

    def send_method(self, channel: int, method: Frame) -> None:
        """Queue one method frame."""
        self.write(encode_method(channel, method))

    def take_output(self) -> bytes:
        """``take_output_parts`` joined into one bytes object (for a writer that takes one
        buffer: TLS streams, cluster links, the management API's in-process connections)."""
        parts = self.take_output_parts()
        if len(parts) == 1:
            first = parts[0]
            return first if isinstance(first, bytes) else bytes(first)
        return b"".join(parts)

    def take_output_parts(self) -> list[bytes | memoryview]:
        """The queued output as buffers to write in order with one ``sendmsg``/``writev`` (the
        caller writes them; empty list: nothing queued). Small pieces are joined into one buffer
        (a run of frames costs one iovec); a large piece (``LARGE_PIECE``, 4 KiB, or more: a
        delivery's body, or a view of one) is its own buffer, not copied, so a large body leaves
        as it was assembled (issue 28). All of it, or while more than the high-water mark
        (``high_water``, 4 MiB) and ``TAKE_MAX`` (1 MiB) of large pieces wait (over 4 KiB a piece
        on average: only a delivery over 1 MiB gets there, deliveries stop at the mark), the first
        ``TAKE_MAX`` or so, and ``on_writable`` is called for the rest: a 64 MiB delivery goes out
        in 1 MiB writes as the socket takes them. Everything when the connection is closed."""
        out = self._out
        if not out:
            return []
        size = self.output_size
        if len(out) * LARGE_PIECE < size:   # large pieces on average: keep them apart
            if size > self.high_water + TAKE_MAX and not self.closed:
                out = self._take_some(out)
            else:
                self._out = []
                self.output_size = 0
            self.last_sent = self.broker.clock()
            return _coalesce(out)
        self._out = []
        self.output_size = 0
        self.last_sent = self.broker.clock()
        if len(out) == 1:
            return out
        return [b"".join(out)]

    def _take_some(self, out: list[bytes | memoryview]) -> list[bytes | memoryview]:
        """``take_output_parts``'s first ``TAKE_MAX`` bytes or so (whole pieces, at least one),
        removed from ``out``."""
        taken = 0
        n = 0
        for piece in out:
            taken += len(piece)
            n += 1
            if taken >= TAKE_MAX:
                break
        first = out[:n]
        del out[:n]
        self.output_size -= taken
        if out and self.on_writable is not None:
            self.on_writable()
        return first

    def output_drained(self) -> None:
        """The I/O layer wrote everything: consumers blocked on output credit may go on."""
        for ch in self.channels.values():
            for consumer in ch.consumers.values():
                self.broker.needs_dispatch.add(consumer.queue)
        self.broker.run_dispatch()

    # ------------------------------------------------------------------------------ input
    def heartbeat_received(self) -> bool:
        """A lone heartbeat frame (``HEARTBEAT_FRAME``, 8 bytes) arrived on its own: when it
        stands between frames on an open connection, note that the peer is alive as
        ``receive_data`` would and return True; else return False (the I/O layer then hands it
        to ``receive_data``). Lets an idle connection's heartbeats skip the reader task (spec
        §4.2.7; issue 14)."""
        if self.state is not State.OPEN or self.splitter.buffered or self.closed:
            return False
        self.last_received = self.broker.clock()
        self.broker.note_input(len(c.HEARTBEAT_FRAME))
        return True

    def receive_data(self, data: bytes) -> None:
        """Process received bytes: every complete frame is handled before this returns."""
        if self.closed or self._framing_broken:
            return
        broker = self.broker
        if not broker.active:
            broker.note_activity()
        self.last_received = broker.clock()
        broker.note_input(len(data))
        if self.state is State.AWAIT_HEADER:
            data = self._protocol_header(data)
            if not data:
                return
        # the channel of the last content frame: a publish's header and body frames come together
        # (a method frame may open or close a channel: the next content frame looks it up anew)
        content_id = -1
        content_ch: Channel | None = None
        try:
            for ftype, channel, payload in self.splitter.feed(data):
                if ftype == _METHOD:
                    content_id = -1
                    if channel:
                        ch = self.channels.get(channel)
                        if ch is None:
                            self._open_channel(channel, payload)
                        else:
                            ch.on_method(payload)
                    else:
                        self._connection_method(payload)
                elif ftype == _BODY or ftype == _HEADER or ftype == FRAME_BODY_VIEW:
                    ch = content_ch if channel == content_id else self.channels.get(channel)
                    if ch is None:
                        if self.state is State.CLOSING:
                            if ftype == FRAME_BODY_VIEW:
                                self.splitter.views.popleft()
                            continue
                        raise ConnectionException(
                            c.CHANNEL_ERROR if channel else c.UNEXPECTED_FRAME,
                            f"{'CHANNEL_ERROR' if channel else 'UNEXPECTED_FRAME'} - content frame "
                            f"on {'unopened ' if channel else ''}channel {channel}")
                    content_id = channel
                    content_ch = ch
                    if ftype == _BODY:
                        ch.on_body(payload)
                    elif ftype == _HEADER:
                        ch.on_header(payload)
                    else:  # a full body frame, a view of the chunk (``FrameSplitter``)
                        ch.on_body_view(self.splitter.views.popleft())
                elif channel or payload:  # heartbeat: channel 0, empty payload (spec §4.2.7)
                    raise ConnectionException(
                        c.FRAME_ERROR, f"FRAME_ERROR - heartbeat on channel {channel} with "
                        f"{len(payload)} payload bytes")
                if self.closed:
                    break
        except ConnectionException as exc:
            if exc.reply_code == c.FRAME_ERROR:
                # The byte stream cannot be parsed any more (not even the peer's Close-Ok): send
                # our Close and drop whatever else arrives until the close timeout.
                self._framing_broken = True
            self.close_with(exc)
        except Exception:  # a bug must cost this connection only, never the broker
            log.exception("internal error on connection %s", self.name)
            self.close_with(ConnectionException(c.INTERNAL_ERROR, "INTERNAL_ERROR"))
        self.after_input()

    def after_input(self) -> None:
        """End of a batch of input: dispatch what became deliverable, send confirms."""
        self.broker.run_dispatch()
        for ch in self.channels.values():
            if ch.confirms is not None:
                ch.flush_confirms()

    def _protocol_header(self, data: bytes) -> bytes:
        self._header += data
        if len(self._header) < 8:
            if c.PROTOCOL_HEADER.startswith(self._header):
                return b""
        header, rest = self._header[:8], self._header[8:]
        self._header = b""
        if header != c.PROTOCOL_HEADER:
            # Spec §4.2.2: answer with the header we support, then close.
            self.write(c.PROTOCOL_HEADER)
            self.state = State.CLOSED
            self._mark_closed()
            return b""
        self.state = State.AWAIT_START_OK
        send_start(self)
        return rest

    # ------------------------------------------------------------------- connection class
    def _connection_method(self, payload: bytes) -> None:
        method = decode_method(payload)
        state = self.state
        if state is State.CLOSING:
            if isinstance(method, cmd.Connection.CloseOk | cmd.Connection.Close):
                if isinstance(method, cmd.Connection.Close):
                    self.send_method(0, cmd.Connection.CloseOk())
                    self.linger = True
                self._finish()
            return
        if isinstance(method, cmd.Connection.Close):
            self.send_method(0, cmd.Connection.CloseOk())
            self.linger = True
            self._finish()
            return
        cid, mid = method_ids(method)
        if state is State.AWAIT_START_OK and isinstance(method, cmd.Connection.StartOk):
            start_ok(self, method)
        elif state is State.AWAIT_SECURE_OK and isinstance(method, cmd.Connection.SecureOk):
            secure_ok(self, method)
        elif state is State.AWAIT_TUNE_OK and isinstance(method, cmd.Connection.TuneOk):
            tune_ok(self, method)
        elif state is State.AWAIT_OPEN and isinstance(method, cmd.Connection.Open):
            open_vhost(self, method)
        elif isinstance(method, cmd.Connection.CloseOk):
            self._finish()
        elif state is State.OPEN and isinstance(method, cmd.Connection.UpdateSecret):
            self.send_method(0, cmd.Connection.UpdateSecretOk())
        elif cid == c.CLASS_CONNECTION:
            raise ConnectionException(c.COMMAND_INVALID,
                                      f"COMMAND_INVALID - unexpected {method.name} in state "
                                      f"{state.name}", cid, mid)
        else:
            raise ConnectionException(c.CHANNEL_ERROR,
                                      f"CHANNEL_ERROR - {method.name} on channel 0", cid, mid)

    def _open_channel(self, channel_id: int, payload: bytes) -> None:
        method = decode_method(payload)
        if self.state is State.CLOSING:
            return
        if self.state is not State.OPEN:
            raise ConnectionException(c.CHANNEL_ERROR,
                                      f"CHANNEL_ERROR - channel {channel_id} before connection.open")
        if not isinstance(method, cmd.Channel.Open):
            cid, mid = method_ids(method)
            raise ConnectionException(c.CHANNEL_ERROR,  # RabbitMQ's text, clients match it
                                      "CHANNEL_ERROR - expected 'channel.open'", cid, mid)
        if self.channel_max and len(self.channels) >= self.channel_max:
            # channel_max bounds how many channels are open, not their numbers (RabbitMQ's
            # rabbit_reader:create_channel, checked against 3.10: channel 65535 opens)
            raise ConnectionException(
                c.NOT_ALLOWED, f"NOT_ALLOWED - number of channels opened ({len(self.channels)}) "
                f"has reached the negotiated channel_max ({self.channel_max})", 0, 0)
        self.channels[channel_id] = Channel(self, channel_id)
        if self.counted:
            self.broker.churn.channels_opened += 1
        self.send_method(channel_id, cmd.Channel.OpenOk())

    def channel_closed(self, channel_id: int) -> None:
        """Forget a channel whose close handshake finished."""
        ch = self.channels.pop(channel_id, None)
        if ch is not None and not ch.closing:
            ch.release()

    # ------------------------------------------------------------------------------ closing
    def close_with(self, exc: ConnectionException) -> None:
        """Send Connection.Close for ``exc`` and release everything; the peer's Close-Ok (or a
        timeout) ends it. Before Open-Ok there is nothing to release and the socket just closes
        after the Close is written (RabbitMQ does the same for auth failures)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        log.info("closing connection %s: %s", self.name, exc)
        text = exc.reply_text.encode()[:255].decode(errors="ignore")
        self.send_method(0, cmd.Connection.Close(exc.reply_code, text, exc.class_id, exc.method_id))
        handshaking = self.state is not State.OPEN
        self._release()
        self.state = State.CLOSING
        self.closing_since = self.broker.clock()
        self.schedule_timer()  # the close timeout
        if handshaking:
            self._mark_closed()

    def close_silently(self, why: str) -> None:
        """A handshake error RabbitMQ does not report (``rabbit_reader:handle_exception`` before
        the connection runs): log ``why``, send nothing, ignore all input, and close the socket
        after ``CLOSE_TIMEOUT`` (3 s, RabbitMQ's ``SILENT_CLOSE_DELAY``)."""
        log.warning("closing connection %s without a reply: %s", self.name, why)
        self._framing_broken = True  # nothing more is read (``receive_data`` drops it)
        self.state = State.CLOSING
        self.closing_since = self.broker.clock()
        self.schedule_timer()

    def _mark_closed(self) -> None:
        """The socket should close once pending output is written; wake the I/O layer."""
        self.closed = True
        if self.on_writable is not None:
            self.on_writable()

    def close_forced(self, text: str = "CONNECTION_FORCED - broker forced connection closure") -> None:
        """Close with 320 CONNECTION_FORCED (broker shutdown, admin action)."""
        self.close_with(ConnectionException(c.CONNECTION_FORCED, text))

    def _finish(self) -> None:
        self._release()
        self.state = State.CLOSED
        self._mark_closed()

    def _release(self) -> None:
        for ch in list(self.channels.values()):
            ch.release()
        self.channels.clear()
        if self.counted:
            self.counted = False
            self.broker.churn.connections_closed += 1
        if self.vhost is not None:
            self.vhost.connection_gone(self)

    def connection_lost(self) -> None:
        """The socket is gone (peer closed it, I/O error): free everything this connection held."""
        if self.state is not State.CLOSED:
            self._release()
            self.state = State.CLOSED
        self.closed = True
        self.broker.connection_gone(self)

    # ---------------------------------------------------------------------------- timers
    def next_deadline(self) -> float | None:
        """When ``tick`` may next have work (seconds, ``broker.clock``): the close timeout while
        closing, the handshake timeout before Open-Ok, the next heartbeat due or the peer's
        silence limit when open with heartbeats; None when closed or open without heartbeats.
        Never later than the real deadline (``last_sent``/``last_received`` only move on)."""
        if self.closed:
            return None
        state = self.state
        if state is State.CLOSING:
            return self.closing_since + CLOSE_TIMEOUT
        if state is not State.OPEN:
            return self.created_at + self.broker.settings.handshake_timeout
        hb = self.heartbeat
        if not hb:
            return None
        return min(self.last_received + 2 * hb, self._heartbeat_due())

    def _heartbeat_due(self) -> float:
        """When our next heartbeat is due (``clock`` s): ``heartbeat`` / 2 after we last sent
        anything (RabbitMQ: "about every heartbeat timeout / 2"); for a heartbeat of
        ``HEARTBEAT_GRID_MIN`` s or more, brought forward to a whole second, so idle connections
        share the broker's wake-ups (``Broker.tick_delay``) and send up to 1 s early, never late."""
        due = self.last_sent + self.heartbeat / 2
        if self.heartbeat >= HEARTBEAT_GRID_MIN:
            due = float(int(due))   # the clock is positive: int() rounds down
        return due

    def schedule_timer(self) -> None:
        """Put this connection's ``next_deadline`` on the broker's connection timers (a
        deadline that moved later is found when it fires: ``Broker.tick`` calls ``tick`` and
        this again); none when it has no deadline (open without heartbeats)."""
        when = self.next_deadline()
        if when is None:
            self.broker.connection_timers.cancel(self.id)
        else:
            self.broker.connection_timers.schedule(self.id, when - TIMER_SLACK)

    def tick(self, now: float) -> None:
        """Heartbeats and handshake / close timeouts; ``now`` in seconds from ``broker.clock``."""
        if self.closed:
            return
        if self.state is State.CLOSING:
            if now - self.closing_since > CLOSE_TIMEOUT:
                self._finish()
            return
        if self.state is not State.OPEN:
            if now - self.created_at > self.broker.settings.handshake_timeout:
                log.info("handshake timeout on %s", self.name)
                self._finish()
            return
        hb = self.heartbeat
        if hb:
            if now - self.last_received > 2 * hb:
                log.warning("missed heartbeats from %s, timeout: %ss", self.name, hb)
                self._finish()
                return
            if now + TIMER_SLACK >= self._heartbeat_due() and not self._out:
                send = self.send_now
                if send is None or not send(c.HEARTBEAT_FRAME):
                    self.write(c.HEARTBEAT_FRAME)
                self.last_sent = now   # the next one is due hb/2 from now, not at once


def _coalesce(pieces: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """``pieces`` with every run of pieces under ``LARGE_PIECE`` bytes joined into one bytes
    object and the larger ones kept as they are (uncopied): the buffers of one ``writev``."""
    parts: list[bytes | memoryview] = []
    run: list[bytes | memoryview] = []
    for piece in pieces:
        if len(piece) < LARGE_PIECE:
            run.append(piece)
            continue
        if run:
            parts.append(run[0] if len(run) == 1 else b"".join(run))
            run = []
        parts.append(piece)
    if run:
        parts.append(run[0] if len(run) == 1 else b"".join(run))
    return parts
