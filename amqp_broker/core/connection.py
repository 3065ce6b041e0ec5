"""One client connection, sans-IO: bytes in via ``receive_data``, bytes out via ``take_output``.

Owns the connection lifecycle of AMQP 0-9-1 §2.2.4 / class connection as a small state machine
(protocol header -> Start/Start-Ok -> Tune/Tune-Ok -> Open/Open-Ok -> open -> Close/Close-Ok), the
frame loop that hands frames to channels, heartbeats (§4.2.7: a peer silent for two intervals is
dropped), the output buffer with its high-water mark (credit flow), and Connection.Close on a
``ConnectionException``. Must not know: sockets or event loops; time comes from ``broker.clock``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands as cmd

from .. import __version__
from ..protocol import constants as c
from ..protocol.errors import ConnectionException
from ..protocol.framing import FrameSplitter
from ..protocol.methods import decode_method, encode_method, method_ids
from .access import Account
from .auth import parse_response
from .channel import Channel
from .external import EXTERNAL, TlsPeer, external_login, peer_link_refusal
from .mechanisms import mechanism_refusal, offered_mechanisms
from .timers import TIMER_SLACK

if TYPE_CHECKING:
    from pamqp.base import Frame
    from pamqp.common import FieldTable

    from queues.queue_type import QueueType

    from .broker import Broker, PeerAuthServer
    from .vhost import VirtualHost

__all__ = ["LINGER_TIMEOUT", "Connection", "State"]

log = logging.getLogger(__name__)

CAPABILITIES: FieldTable = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": False,
}


#: Seconds we wait for the peer's Connection.Close-Ok before closing the socket (RabbitMQ: 3 s).
CLOSE_TIMEOUT = 3.0
#: Seconds we keep reading (and discarding) after the Close-Ok we sent for the peer's own
#: Connection.Close, until the peer closes its socket (RabbitMQ's reader: CLOSING_TIMEOUT, 30 s).
LINGER_TIMEOUT = 30.0
#: Heartbeats (s) from which ours are sent on whole seconds (``Connection._heartbeat_due``):
#: at 4 s, one every 1-2 s, while the peer waits two intervals (8 s) before it gives up.
HEARTBEAT_GRID_MIN = 4


def _negotiated(field: str, value: int, minimum: int, maximum: int) -> int:
    """The client's Tune-Ok ``value`` of ``field`` when it lies in [minimum, maximum]; 0 (no
    limit) is above any maximum of ours. Raises 530 NOT_ALLOWED with RabbitMQ's text otherwise
    (``rabbit_reader:validate_negotiated_integer_value``; a Tune-Ok with channel_max 0 is refused
    by RabbitMQ 3.10 too)."""
    if value and value < minimum:
        raise ConnectionException(c.NOT_ALLOWED, f"NOT_ALLOWED - negotiated {field} = {value} is "
                                  f"lower than the minimum allowed value ({minimum})", 10, 31)
    if maximum and (value == 0 or value > maximum):
        detail = " (no limit)" if field == "channel_max" and value == 0 else ""
        raise ConnectionException(c.NOT_ALLOWED, f"NOT_ALLOWED - negotiated {field} = {value}"
                                  f"{detail} is higher than the maximum allowed value ({maximum})",
                                  10, 31)
    return value


class State(enum.Enum):
    """Where the connection is in its lifecycle."""

    AWAIT_HEADER = 0
    AWAIT_START_OK = 1
    AWAIT_SECURE_OK = 7  # cluster peer: challenge sent
    AWAIT_TUNE_OK = 2
    AWAIT_OPEN = 3
    OPEN = 4
    CLOSING = 5  # we sent Connection.Close; only Close-Ok (or Close) counts now
    CLOSED = 6


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
        self.splitter = FrameSplitter(c.FRAME_MIN_SIZE)
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
        self._peer_auth: PeerAuthServer | None = None
        #: The TLS session (set by the server layer before any input), None on a plain socket.
        self.tls: TlsPeer | None = None
        self.auth_mechanism = ""  # the SASL mechanism the client logged in with
        self.has_published = False
        #: A client connection counted in ``broker.churn`` (set at Open-Ok; cleared when its
        #: close is counted). Peer links and in-process API connections never are.
        self.counted = False
        self._out: list[bytes] = []
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

    def write_parts(self, parts: list[bytes]) -> None:
        """Queue several pieces of one write (a large delivery: envelopes and body slices)."""
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
        """All queued bytes (the caller writes them); resets the buffer."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self.output_size = 0
        self.last_sent = self.broker.clock()
        return data

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
        try:
            for ftype, channel, payload in self.splitter.feed(data):
                if ftype == c.FRAME_METHOD:
                    if channel:
                        ch = self.channels.get(channel)
                        if ch is None:
                            self._open_channel(channel, payload)
                        else:
                            ch.on_method(payload)
                    else:
                        self._connection_method(payload)
                elif ftype == c.FRAME_BODY or ftype == c.FRAME_HEADER:
                    ch = self.channels.get(channel)
                    if ch is None:
                        if self.state is State.CLOSING:
                            continue
                        raise ConnectionException(
                            c.CHANNEL_ERROR if channel else c.UNEXPECTED_FRAME,
                            f"{'CHANNEL_ERROR' if channel else 'UNEXPECTED_FRAME'} - content frame "
                            f"on {'unopened ' if channel else ''}channel {channel}")
                    if ftype == c.FRAME_BODY:
                        ch.on_body(payload)
                    else:
                        ch.on_header(payload)
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
        s = self.broker.settings
        mechanisms = offered_mechanisms(s.auth_mechanisms, self.tls)
        if self.broker.peer_auth is not None:
            mechanisms = (*mechanisms, self.broker.peer_auth.mechanism)
        self.send_method(0, cmd.Connection.Start(
            0, 9, {
                "product": "amqp-broker",
                "version": __version__,
                "platform": "Python",
                "copyright": "amqp-broker contributors",
                "information": "Licensed under the Apache License 2.0",
                "capabilities": CAPABILITIES,
                "cluster_name": s.cluster_name,
                "node_name": s.node_name,
                **self.broker.cluster_properties,
            }, " ".join(mechanisms), "en_US"))
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
            self._start_ok(method)
        elif state is State.AWAIT_SECURE_OK and isinstance(method, cmd.Connection.SecureOk):
            self._secure_ok(method)
        elif state is State.AWAIT_TUNE_OK and isinstance(method, cmd.Connection.TuneOk):
            self._tune_ok(method)
        elif state is State.AWAIT_OPEN and isinstance(method, cmd.Connection.Open):
            self._open(method)
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

    def _start_ok(self, method: cmd.Connection.StartOk) -> None:
        self.client_properties = method.client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        peer_auth = self.broker.peer_auth
        claims_peer = bool(self.capabilities.get("cluster-peer"))
        if claims_peer or (peer_auth is not None and method.mechanism == peer_auth.mechanism):
            # Issue 5: a connection claiming cluster-peer must authenticate as one, or is refused.
            if peer_auth is None or method.mechanism != peer_auth.mechanism or not claims_peer:
                log.warning("refused cluster-peer connection from %s: mechanism %s, clustering %s",
                            self.name, method.mechanism,
                            "on" if peer_auth is not None else "off")
                raise ConnectionException(
                    c.ACCESS_REFUSED, "ACCESS_REFUSED - cluster-peer connections must "
                    "authenticate with the cluster secret", 10, 11)
            refusal = peer_link_refusal(self.tls, self.broker.settings.peer_tls_required)
            if refusal:
                log.warning("refused cluster-peer connection from %s: %s", self.name, refusal)
                raise ConnectionException(c.ACCESS_REFUSED, refusal, 10, 11)
            self._peer_auth = peer_auth.new_server()
            try:
                challenge = self._peer_auth.challenge(method.response)
            except Exception:
                raise ConnectionException(c.ACCESS_REFUSED, "ACCESS_REFUSED - bad cluster peer "
                                          "name", 10, 11) from None
            self.state = State.AWAIT_SECURE_OK
            self.send_method(0, cmd.Connection.Secure(challenge))
            return
        if method.mechanism not in offered_mechanisms(self.broker.settings.auth_mechanisms,
                                                      self.tls):
            self._close_silently(mechanism_refusal(method.mechanism))
            return
        if method.mechanism == EXTERNAL:
            login, user, why = external_login(self.broker.access, self.tls, self.peer[0])
        else:
            creds = parse_response(method.mechanism, method.response)
            login = creds[0] if creds else None
            user, why = (None, "ACCESS_REFUSED - malformed credentials") if creds is None else \
                self.broker.access.authenticate(creds[0], creds[1], self.peer[0], method.mechanism)
        if user is None:
            log.warning("authentication failed for %s from %s: %s", login or "?", self.name, why)
            raise ConnectionException(c.ACCESS_REFUSED, why, 10, 11)
        self.user = user
        self.auth_mechanism = method.mechanism
        s = self.broker.settings
        self.state = State.AWAIT_TUNE_OK
        self.send_method(0, cmd.Connection.Tune(s.channel_max, s.frame_max, s.heartbeat))

    def _secure_ok(self, method: cmd.Connection.SecureOk) -> None:
        try:
            peer_auth = self._peer_auth
            if peer_auth is None:  # only AWAIT_SECURE_OK leads here, and _start_ok set it
                raise AttributeError("no cluster peer authentication in progress")
            # pamqp types every argument Optional (its constructors' default); a decoded
            # Secure-Ok always carries its response string
            node = peer_auth.verify(method.response)  # type: ignore[arg-type]
        except Exception as exc:
            log.warning("cluster peer from %s failed authentication: %s", self.name, exc)
            raise ConnectionException(c.ACCESS_REFUSED, "ACCESS_REFUSED - cluster peer "
                                      "authentication failed", 10, 21) from None
        refusal = peer_link_refusal(self.tls, self.broker.settings.peer_tls_required, node)
        if refusal:
            log.warning("cluster peer from %s refused: %s", self.name, refusal)
            raise ConnectionException(c.ACCESS_REFUSED, refusal, 10, 21)
        self._peer_auth = None
        self.peer_node = node
        self.name = f"{self.name} (peer {node})"
        self.user = Account(f"cluster:{node}", "")
        s = self.broker.settings
        self.state = State.AWAIT_TUNE_OK
        self.send_method(0, cmd.Connection.Tune(s.channel_max, s.frame_max, s.heartbeat))

    def _tune_ok(self, method: cmd.Connection.TuneOk) -> None:
        s = self.broker.settings
        frame_max = _negotiated("frame_max", method.frame_max, c.FRAME_MIN_SIZE, s.frame_max)
        channel_max = _negotiated("channel_max", method.channel_max, 1, s.channel_max)
        self.frame_max = frame_max
        self.splitter.set_frame_max(frame_max)
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self.state = State.AWAIT_OPEN

    def _open(self, method: cmd.Connection.Open) -> None:
        vhost = self.broker.vhosts.get(method.virtual_host)
        allowed = self.is_peer or self.broker.access.can_open(self.user, method.virtual_host)
        if vhost is None:
            raise ConnectionException(
                c.NOT_ALLOWED, f"NOT_ALLOWED - vhost {method.virtual_host} not found", 10, 40)
        if not self.broker.accepting_clients and not self.is_peer:
            raise ConnectionException(c.CONNECTION_FORCED, "CONNECTION_FORCED - this node is "
                                      "joining the cluster; connect to another member", 10, 40)
        if self.broker.draining and not self.is_peer:
            raise ConnectionException(c.CONNECTION_FORCED, "CONNECTION_FORCED - this node is in "
                                      "maintenance mode; connect to another member", 10, 40)
        if not allowed:
            raise ConnectionException(
                c.NOT_ALLOWED,
                f"NOT_ALLOWED - access to vhost '{method.virtual_host}' refused for user "
                f"'{self.user.name if self.user else ''}'", 10, 40)
        self.vhost = vhost
        self.state = State.OPEN
        if not self.is_peer:
            self.counted = True
            self.broker.churn.connections_opened += 1
        self.schedule_timer()  # heartbeats from now on
        self.send_method(0, cmd.Connection.OpenOk())
        if self.broker.alarms:
            self.broker.block(self)

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

    def _close_silently(self, why: str) -> None:
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
