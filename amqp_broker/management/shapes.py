"""JSON shapes of the management API's objects, as RabbitMQ 3.x returns them (pure: broker state
in, dicts out). Source: rabbitmq-management's priv/www/api/index.html ("Management HTTP API"),
checked against RabbitMQ 3.10's answers: field names and types (counts are integers, rates are
``{"rate": float}`` under ``<field>_details``, flags are booleans, a missing value is null).

One deliberate difference: the queue fields RabbitMQ computes as the empty atom ``''`` when
there is nothing to say (``policy``, ``operator_policy``, ``exclusive_consumer_tag``,
``single_active_consumer_tag``: ``rabbit_amqqueue:info``) are ``""`` here, where RabbitMQ 3.10's
JSON encoder turns them into null (``rabbit_mgmt_format:format_nulls``). Its own
``rabbitmqadmin list queues name policy`` crashes on that null (``TypeError: object of type
'NoneType' has no len()``: checked against Debian's RabbitMQ 3.10.8); on ours it prints an empty
cell, and a client that tests the field's truth reads the same either way. A field RabbitMQ
leaves out when it has no value (``idle_since`` of a busy queue, ``owner_pid_details`` of a
queue without an owner) is left out here too, never null.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import TYPE_CHECKING, Any

from routing.binding import Binding

from ..core.access import Account, Grant
from ..core.policies import declared_arguments, effective_definition
from ..core.stats import QUEUE_STATS
from .direct import is_direct
from .object_rates import channel_counters, queue_counters

if TYPE_CHECKING:
    from queues.queue_type import QueueType
    from routing.exchange import Exchange

    from ..core.broker import Broker
    from ..core.channel import Channel
    from ..core.connection import Connection

__all__ = ["jsonable", "queue_json", "exchange_json", "binding_json", "connection_json",
           "channel_json", "consumer_json", "connection_name", "user_json", "permission_json", "props_key",
           "rate", "visible_connections"]


def jsonable(value: Any) -> Any:
    """An AMQP field value as JSON: bytes as UTF-8 text (base64 when not text), Decimal as float,
    timestamps as seconds, tables and arrays recursively."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def rate(value: float) -> dict[str, float]:
    """RabbitMQ's ``*_details`` object."""
    return {"rate": round(float(value), 1)}


def queue_json(broker: Broker, vhost: str, q: QueueType, rates: dict[str, float] | None = None,
               members: list[str] | None = None,
               stats: dict[str, int] | None = None) -> dict[str, Any]:
    """A queue as in ``GET /api/queues``: counts, flags, arguments, node, state, consumers, memory
    (bytes of ready bodies), ``messages_details`` rates; for a replicated queue the fields of
    ``replica_json`` (``leader``, ``members``, ``online``, ``members_in_sync``,
    ``synchronised_slave_nodes``); ``policy`` and
    ``effective_policy_definition`` for a queue a policy applied to ("" and {} without one;
    ``arguments`` are those its client declared; ``type`` is ``quorum`` for a queue mirrored by
    ``ha-mode``); ``exclusive_consumer_tag`` / ``single_active_consumer_tag`` ("" without one);
    ``consumer_utilisation`` and ``consumer_capacity`` (0 without consumers, else 1.0 when one
    could take a message now, 0.0 when none could); ``owner_pid_details`` only for an exclusive
    queue; ``message_stats`` from ``stats`` (the queue's entry of
    ``core.stats.queue_message_stats``) and ``rates``: see ``_queue_stats``."""
    rates = rates or {}
    ready = q.message_count
    unacked = q.unacked_count
    node = broker.settings.node_name
    owner = q.exclusive_owner
    qtype = getattr(q.settings, "queue_type", "classic") or "classic"
    active = (getattr(q, "active_consumer", None)
              if getattr(q.settings, "single_active_consumer", False) else None)
    consumers = list(q.consumers()) if q.consumer_count else []
    exclusive = next((c for c in consumers if getattr(c, "exclusive", False)), None)
    # RabbitMQ: the share of time the queue could hand a message to a consumer at once (0 with
    # none); here the same, read now: 1.0 when a consumer could take one, else 0.0
    utilisation = 1.0 if any(c.can_deliver() for c in consumers) else 0.0 if consumers else 0
    out: dict[str, Any] = {
        "name": q.name, "vhost": vhost, "type": qtype, "durable": q.durable,
        "auto_delete": q.auto_delete, "exclusive": owner is not None,
        "arguments": jsonable(declared_arguments(q.arguments)), "node": node,
        "state": "running",
        "consumers": q.consumer_count, "messages": ready + unacked,
        "messages_ready": ready, "messages_unacknowledged": unacked,
        "messages_details": rate(rates.get("messages", 0.0)),
        "messages_ready_details": rate(rates.get("messages_ready", 0.0)),
        "messages_unacknowledged_details": rate(rates.get("messages_unacknowledged", 0.0)),
        "message_bytes": q.message_bytes, "message_bytes_ready": q.message_bytes,
        "memory": q.message_bytes, "policy": "", "operator_policy": "",
        "effective_policy_definition": {},
        "exclusive_consumer_tag": getattr(exclusive, "tag", ""),
        "single_active_consumer_tag": getattr(active, "tag", ""),
        "consumer_utilisation": utilisation, "consumer_capacity": utilisation,
    }
    if message_stats := _queue_stats(q, rates, stats):
        out["message_stats"] = message_stats
    if owner is not None:
        out["owner_pid_details"] = {"name": getattr(owner, "name", "")}
    policy, definition = effective_definition(q.arguments, broker.policies, vhost)
    if policy is not None:
        out.update({"policy": policy, "effective_policy_definition": definition})
    if members is None and getattr(q.capabilities, "replicated", False):
        members = [m for m in str((q.arguments or {}).get("x-quorum-members", "")).split(",")
                   if m]
    if members is not None:
        out.update(replica_json(broker, getattr(q, "group", None), members))
    return out


def _queue_stats(q: QueueType, rates: dict[str, float],
                 stats: dict[str, int] | None) -> dict[str, Any]:
    """A queue's ``message_stats`` as RabbitMQ 3.10 shows them (rates mode basic; checked in
    interop_tests/test_queue_message_stats.py): ``publish`` once a message was published to it
    (``object_rates.queue_counters``), and ``ack``, ``deliver``, ``deliver_get``,
    ``deliver_no_ack``, ``get``, ``get_empty``, ``get_no_ack``, ``redeliver``, zeros included, once
    any of them is non-zero; each with ``<name>_details: {"rate": r}`` (per second, ``rates``).
    Empty for a queue with none (the caller then leaves ``message_stats`` out, as RabbitMQ).
    Counted on this member only (its own clients'): ``cluster_stats`` sums the members'."""
    counts = queue_counters(q, stats)
    out: dict[str, Any] = {}
    keys = [k for k in ("publish",) if counts.get(k)]
    if any(counts.get(k) for k in QUEUE_STATS):
        keys.extend(QUEUE_STATS)
    for key in sorted(keys):
        out[key] = counts.get(key, 0)
        out[f"{key}_details"] = rate(rates.get(key, 0.0))
    return out


def replica_json(broker: Broker, group: Any, members: list[str]) -> dict[str, Any]:
    """The replica fields of a replicated queue, as this broker knows them: ``leader`` (the
    member whose replica leads; null when unknown, e.g. during an election), ``members`` (the
    group's current configuration; ``members`` as declared when this broker holds no replica),
    ``online`` (the members in this broker's cluster view), ``members_in_sync`` (the online
    members whose Raft log holds every entry the leader had committed one status round, 1 s,
    earlier: ``cluster.quorum.group.QuorumGroup.in_sync``; null when this broker cannot know,
    as outside the group or before the leader told it) and ``synchronised_slave_nodes`` (the
    same without the leader: RabbitMQ 3.x mirrored queues' field)."""
    leader = getattr(group, "leader", None)
    known = list(getattr(group, "members", None) or members)
    runtime = getattr(broker, "quorum", None)
    view = getattr(runtime, "view", None) or {broker.settings.node_name}
    in_sync = getattr(group, "in_sync", None)
    synced = None if in_sync is None else [m for m in in_sync if m in view]
    return {"leader": leader if isinstance(leader, str) else None, "members": known,
            "online": [m for m in known if m in view], "members_in_sync": synced,
            "synchronised_slave_nodes": None if synced is None else
            [m for m in synced if m != leader]}


def exchange_json(vhost: str, ex: Exchange, counts: dict[str, int] | None = None,
                  rates: dict[str, float] | None = None) -> dict[str, Any]:
    """An exchange as in ``GET /api/exchanges`` (the default exchange's name is ""), with the
    ``message_stats`` of ``counts`` (``object_rates.exchange_counters``) and ``rates`` (per
    second: ``object_rates.ObjectRates.exchange``) as RabbitMQ 3.10 shows them: none before a
    client published to it, then ``publish_in`` (messages published to it) and, once one of
    those reached a queue, ``publish_out`` (one per queue reached), each with
    ``<key>_details.rate``."""
    out = {"name": ex.name, "vhost": vhost, "type": ex.type, "durable": ex.durable,
           "auto_delete": ex.auto_delete, "internal": ex.internal,
           "arguments": jsonable(dict(ex.arguments or {})),
           "user_who_performed_action": "rmq-internal"}
    if counts is not None:
        rates = rates or {}
        out["message_stats"] = {k: v for key, count in counts.items()
                                if count or key == "publish_in"
                                for k, v in ((key, count),
                                             (f"{key}_details", rate(rates.get(key, 0.0))))}
    return out


def props_key(routing_key: str, arguments: dict | None) -> str:
    """RabbitMQ's ``properties_key`` naming one binding in URLs: "~" for an empty key without
    arguments, the key itself without arguments, else key + "~" + a hash of the arguments."""
    if not arguments:
        return routing_key or "~"
    import hashlib
    digest = hashlib.sha1(repr(sorted(jsonable(arguments).items())).encode()).digest()
    return f"{routing_key}~{base64.urlsafe_b64encode(digest[:12]).decode().rstrip('=')}"


def binding_json(vhost: str, b: Binding) -> dict[str, Any]:
    """A binding as in ``GET /api/bindings``."""
    args = dict(b.arguments or {})
    return {"source": b.source, "vhost": vhost, "destination": b.destination.name,
            "destination_type": b.destination.kind, "routing_key": b.binding_key,
            "arguments": jsonable(args), "properties_key": props_key(b.binding_key, args)}


def visible_connections(broker: Broker) -> list[Connection]:
    """Client connections (open or closing), without the API's own in-process ones."""
    return [c for c in broker.connections.values() if not is_direct(c) and c.vhost is not None]


def connection_name(conn: Connection, listen: tuple[str, int]) -> str:
    """RabbitMQ's connection name: "peer_host:peer_port -> host:port"."""
    return f"{conn.peer[0]}:{conn.peer[1]} -> {listen[0]}:{listen[1]}"


def connection_json(broker: Broker, conn: Connection, now_ms: int,
                    listen: tuple[str, int]) -> dict[str, Any]:
    """A connection as in ``GET /api/connections``: name "host:port -> host:port", user, vhost,
    peer and local addresses, channels, client properties, protocol, state, connected_at (ms)."""
    host, port = conn.peer
    name = connection_name(conn, listen)
    started = now_ms - int((broker.clock() - conn.created_at) * 1000)
    return {
        "name": name, "node": broker.settings.node_name, "vhost": conn.vhost.name if conn.vhost
        else None, "user": conn.user.name if conn.user else None, "peer_host": host,
        "peer_port": port, "host": listen[0], "port": listen[1], "channels": len(conn.channels),
        "channel_max": conn.channel_max, "frame_max": conn.frame_max, "timeout": conn.heartbeat,
        "client_properties": jsonable(conn.client_properties), "protocol": "AMQP 0-9-1",
        "type": "network", "auth_mechanism": conn.auth_mechanism or "PLAIN",
        **tls_json(conn),
        "state": "blocked" if conn.blocked else ("running" if conn.is_open else "closing"),
        "connected_at": started, "send_pend": conn.output_size, "user_who_performed_action":
        conn.user.name if conn.user else None,
        "cluster_peer": conn.peer_node,
    }


def tls_json(conn: Connection) -> dict[str, Any]:
    """A connection's TLS fields as RabbitMQ shows them: ``ssl`` (bool), ``ssl_protocol``
    ("tlsv1.3"), ``ssl_cipher``, ``peer_cert_subject`` (RFC 4514 DN or None)."""
    tls = conn.tls
    if tls is None:
        return {"ssl": False, "ssl_protocol": None, "ssl_cipher": None, "peer_cert_subject": None}
    return {"ssl": True, "ssl_protocol": tls.protocol.lower() or None,
            "ssl_cipher": tls.cipher or None, "peer_cert_subject": tls.subject or None}


def channel_json(broker: Broker, conn: Connection, ch: Channel,
                 listen: tuple[str, int], rates: dict[str, float] | None = None) -> dict[str, Any]:
    """A channel as in ``GET /api/channels``: "conn name (n)", counts and its message_stats
    (publish, ack, deliver_get, confirm, each with ``<key>_details.rate`` per second from
    ``rates``: ``object_rates.ObjectRates.channel``)."""
    cname = connection_name(conn, listen)
    rates = rates or {}
    return {
        "name": f"{cname} ({ch.id})", "number": ch.id, "node": broker.settings.node_name,
        "vhost": ch.vhost.name, "user": conn.user.name if conn.user else None,
        "connection_details": {"name": cname, "peer_host": conn.peer[0],
                               "peer_port": conn.peer[1]},
        "consumer_count": len(ch.consumers), "messages_unacknowledged": len(ch.unacked),
        "prefetch_count": ch.prefetch, "global_prefetch_count": ch.global_prefetch,
        "confirm": ch.confirms is not None, "transactional": ch.tx is not None,
        "state": "closing" if ch.closing else "running",
        "message_stats": {k: v for key, count in channel_counters(ch).items()
                          for k, v in ((key, count), (f"{key}_details",
                                                      rate(rates.get(key, 0.0))))},
    }


def consumer_json(conn: Connection, ch: Channel, consumer: Any,
                  listen: tuple[str, int]) -> dict[str, Any]:
    """A consumer as in ``GET /api/consumers``."""
    cname = connection_name(conn, listen)
    q = consumer.queue
    return {"consumer_tag": consumer.tag, "exclusive": consumer.exclusive,
            "ack_required": not consumer.no_ack, "prefetch_count": consumer.prefetch,
            "active": True, "activity_status": "up", "arguments": jsonable(consumer.arguments),
            "queue": {"name": q.name, "vhost": ch.vhost.name},
            "channel_details": {"name": f"{cname} ({ch.id})", "number": ch.id,
                                "connection_name": cname, "peer_host": conn.peer[0],
                                "peer_port": conn.peer[1],
                                "user": conn.user.name if conn.user else None}}


def user_json(account: Account) -> dict[str, Any]:
    """A user as in ``GET /api/users`` (tags as a list, as RabbitMQ 3.9+)."""
    return {"name": account.name, "password_hash": account.password_hash,
            "hashing_algorithm": account.hashing_algorithm, "tags": list(account.tags),
            "limits": {}}


def permission_json(user: str, vhost: str, grant: Grant) -> dict[str, Any]:
    """A permission as in ``GET /api/permissions``."""
    return {"user": user, "vhost": vhost, "configure": grant.configure, "write": grant.write,
            "read": grant.read}
