"""The connection handshake's steps (AMQP 0-9-1 §2.2.4, class connection): Start, Start-Ok (or a
cluster peer's Secure / Secure-Ok), Tune / Tune-Ok and Open, each a function of the
``core.connection.Connection`` it advances.

Owns what each step checks and answers: the SASL login (``core.auth``, ``core.external``,
``core.mechanisms``), cluster-peer authentication (issue 5), the negotiation of frame_max and
channel_max (RabbitMQ's ``rabbit_reader``: 530 NOT_ALLOWED outside the offer) and the vhost check
of Connection.Open. ``Connection`` keeps the state machine and calls these; they raise
``ConnectionException`` (403 ACCESS_REFUSED, 530 NOT_ALLOWED, 320 CONNECTION_FORCED) with
RabbitMQ's texts. Must not know: sockets, frames.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

from pamqp import commands as cmd

from .. import __version__
from ..protocol import constants as c
from ..protocol.errors import ConnectionException
from .access import Account
from .auth import parse_response
from .external import EXTERNAL, external_login, peer_link_refusal
from .mechanisms import mechanism_refusal, offered_mechanisms

if TYPE_CHECKING:
    from pamqp.common import FieldTable

    from .connection import Connection

__all__ = ["CAPABILITIES", "State", "negotiated", "open_vhost", "secure_ok", "send_start",
           "start_ok", "tune_ok"]

log = logging.getLogger(__name__)


class State(enum.Enum):
    """Where a connection is in its lifecycle (``core.connection.Connection.state``)."""

    AWAIT_HEADER = 0
    AWAIT_START_OK = 1
    AWAIT_SECURE_OK = 7  # cluster peer: challenge sent
    AWAIT_TUNE_OK = 2
    AWAIT_OPEN = 3
    OPEN = 4
    CLOSING = 5  # we sent Connection.Close; only Close-Ok (or Close) counts now
    CLOSED = 6

#: The server capabilities of Connection.Start (RabbitMQ's names, "Connection.Start" in its
#: protocol extensions guide).
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


def negotiated(field: str, value: int, minimum: int, maximum: int) -> int:
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


def send_start(conn: Connection) -> None:
    """Connection.Start after a good protocol header: server properties (product, version,
    ``CAPABILITIES``, cluster and node names) and the SASL mechanisms offered (plus the cluster
    peer mechanism when clustering is on)."""
    broker = conn.broker
    s = broker.settings
    mechanisms = offered_mechanisms(s.auth_mechanisms, conn.tls)
    if broker.peer_auth is not None:
        mechanisms = (*mechanisms, broker.peer_auth.mechanism)
    conn.send_method(0, cmd.Connection.Start(
        0, 9, {
            "product": "amqp-broker",
            "version": __version__,
            "platform": "Python",
            "copyright": "amqp-broker contributors",
            "information": "Licensed under the Apache License 2.0",
            "capabilities": CAPABILITIES,
            "cluster_name": s.cluster_name,
            "node_name": s.node_name,
            **broker.cluster_properties,
        }, " ".join(mechanisms), "en_US"))


def start_ok(conn: Connection, method: cmd.Connection.StartOk) -> None:
    """Connection.Start-Ok: log the client in and send Tune, or (a cluster peer) send Secure.
    Raises 403 ACCESS_REFUSED for bad credentials or a peer that does not authenticate as one; an
    unoffered mechanism closes silently, as RabbitMQ does."""
    conn.client_properties = method.client_properties or {}
    caps = conn.client_properties.get("capabilities")
    conn.capabilities = caps if isinstance(caps, dict) else {}
    broker = conn.broker
    peer_auth = broker.peer_auth
    claims_peer = bool(conn.capabilities.get("cluster-peer"))
    if claims_peer or (peer_auth is not None and method.mechanism == peer_auth.mechanism):
        # Issue 5: a connection claiming cluster-peer must authenticate as one, or is refused.
        if peer_auth is None or method.mechanism != peer_auth.mechanism or not claims_peer:
            log.warning("refused cluster-peer connection from %s: mechanism %s, clustering %s",
                        conn.name, method.mechanism, "on" if peer_auth is not None else "off")
            raise ConnectionException(
                c.ACCESS_REFUSED, "ACCESS_REFUSED - cluster-peer connections must "
                "authenticate with the cluster secret", 10, 11)
        refusal = peer_link_refusal(conn.tls, broker.settings.peer_tls_required)
        if refusal:
            log.warning("refused cluster-peer connection from %s: %s", conn.name, refusal)
            raise ConnectionException(c.ACCESS_REFUSED, refusal, 10, 11)
        server = conn.peer_auth_server = peer_auth.new_server()
        try:
            challenge = server.challenge(method.response)
        except Exception:
            raise ConnectionException(c.ACCESS_REFUSED, "ACCESS_REFUSED - bad cluster peer "
                                      "name", 10, 11) from None
        conn.state = State.AWAIT_SECURE_OK
        conn.send_method(0, cmd.Connection.Secure(challenge))
        return
    if method.mechanism not in offered_mechanisms(broker.settings.auth_mechanisms, conn.tls):
        conn.close_silently(mechanism_refusal(method.mechanism))
        return
    if method.mechanism == EXTERNAL:
        login, user, why = external_login(broker.access, conn.tls, conn.peer[0])
    else:
        creds = parse_response(method.mechanism, method.response)
        login = creds[0] if creds else None
        user, why = (None, "ACCESS_REFUSED - malformed credentials") if creds is None else \
            broker.access.authenticate(creds[0], creds[1], conn.peer[0], method.mechanism)
    if user is None:
        log.warning("authentication failed for %s from %s: %s", login or "?", conn.name, why)
        raise ConnectionException(c.ACCESS_REFUSED, why, 10, 11)
    conn.user = user
    conn.auth_mechanism = method.mechanism
    _send_tune(conn)


def secure_ok(conn: Connection, method: cmd.Connection.SecureOk) -> None:
    """A cluster peer's Connection.Secure-Ok: verify it, name the link after the peer's node and
    send Tune. Raises 403 ACCESS_REFUSED when the response or the peer's TLS identity fails."""
    try:
        peer_auth = conn.peer_auth_server
        if peer_auth is None:  # only AWAIT_SECURE_OK leads here, and start_ok set it
            raise AttributeError("no cluster peer authentication in progress")
        # pamqp types every argument Optional (its constructors' default); a decoded
        # Secure-Ok always carries its response string
        node = peer_auth.verify(method.response)  # type: ignore[arg-type]
    except Exception as exc:
        log.warning("cluster peer from %s failed authentication: %s", conn.name, exc)
        raise ConnectionException(c.ACCESS_REFUSED, "ACCESS_REFUSED - cluster peer "
                                  "authentication failed", 10, 21) from None
    refusal = peer_link_refusal(conn.tls, conn.broker.settings.peer_tls_required, node)
    if refusal:
        log.warning("cluster peer from %s refused: %s", conn.name, refusal)
        raise ConnectionException(c.ACCESS_REFUSED, refusal, 10, 21)
    conn.peer_auth_server = None
    conn.peer_node = node
    conn.name = f"{conn.name} (peer {node})"
    conn.user = Account(f"cluster:{node}", "")
    _send_tune(conn)


def _send_tune(conn: Connection) -> None:
    s = conn.broker.settings
    conn.state = State.AWAIT_TUNE_OK
    conn.send_method(0, cmd.Connection.Tune(s.channel_max, s.frame_max, s.heartbeat))


def tune_ok(conn: Connection, method: cmd.Connection.TuneOk) -> None:
    """Connection.Tune-Ok: take the client's frame_max, channel_max (``negotiated``: 530 outside
    our offer) and heartbeat (s)."""
    s = conn.broker.settings
    frame_max = negotiated("frame_max", method.frame_max, c.FRAME_MIN_SIZE, s.frame_max)
    channel_max = negotiated("channel_max", method.channel_max, 1, s.channel_max)
    conn.frame_max = frame_max
    conn.splitter.set_frame_max(frame_max)
    conn.channel_max = channel_max
    conn.heartbeat = method.heartbeat
    conn.state = State.AWAIT_OPEN


def open_vhost(conn: Connection, method: cmd.Connection.Open) -> None:
    """Connection.Open: enter the vhost and send Open-Ok. Raises 530 NOT_ALLOWED for an unknown
    vhost or one the user may not open (RabbitMQ's texts), 320 CONNECTION_FORCED while this node
    joins a cluster or is in maintenance mode (clients only; peers always open)."""
    broker = conn.broker
    vhost = broker.vhosts.get(method.virtual_host)
    allowed = conn.is_peer or broker.access.can_open(conn.user, method.virtual_host)
    if vhost is None:
        raise ConnectionException(
            c.NOT_ALLOWED, f"NOT_ALLOWED - vhost {method.virtual_host} not found", 10, 40)
    if not broker.accepting_clients and not conn.is_peer:
        raise ConnectionException(c.CONNECTION_FORCED, "CONNECTION_FORCED - this node is "
                                  "joining the cluster; connect to another member", 10, 40)
    if broker.draining and not conn.is_peer:
        raise ConnectionException(c.CONNECTION_FORCED, "CONNECTION_FORCED - this node is in "
                                  "maintenance mode; connect to another member", 10, 40)
    if not allowed:
        raise ConnectionException(
            c.NOT_ALLOWED,
            f"NOT_ALLOWED - access to vhost '{method.virtual_host}' refused for user "
            f"'{conn.user.name if conn.user else ''}'", 10, 40)
    conn.vhost = vhost
    conn.state = State.OPEN
    if not conn.is_peer:
        conn.counted = True
        broker.churn.connections_opened += 1
    conn.schedule_timer()  # heartbeats from now on
    conn.send_method(0, cmd.Connection.OpenOk())
    if broker.alarms:
        broker.block(conn)
