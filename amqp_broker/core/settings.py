"""Broker settings the core needs (pure values; loading them from TOML/env/CLI is ``config.py``'s job).

Source for defaults: RabbitMQ's configuration guide (frame_max 131072, channel_max 2047, heartbeat
60 s, guest/guest from loopback only, vhost "/").
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BrokerSettings", "RelayPolicy", "User", "parse_relay_policy"]


@dataclass(frozen=True, slots=True)
class User:
    """An account: ``name``, ``password`` (plain text from config), ``vhosts`` it may open
    (``("*",)`` for all), ``loopback_only``: refused from non-loopback peers (RabbitMQ "guest")."""

    name: str
    password: str
    vhosts: tuple[str, ...] = ("*",)
    loopback_only: bool = False


@dataclass(frozen=True, slots=True)
class RelayPolicy:
    """What to do with a relayed message whose queue has no local consumer: ``kind`` is
    "pass-on", "hold" (for ``hold_s`` seconds, then pass on) or "drop"."""

    kind: str = "pass-on"
    hold_s: float = 0.0


def parse_relay_policy(text: str) -> RelayPolicy:
    """``pass-on`` | ``hold:SECONDS`` | ``drop`` -> ``RelayPolicy``; ``ValueError`` otherwise."""
    text = text.strip()
    if text in ("pass-on", "drop"):
        return RelayPolicy(text)
    kind, sep, seconds = text.partition(":")
    if kind == "hold" and sep:
        try:
            hold = float(seconds)
        except ValueError:
            hold = -1.0
        if hold > 0:
            return RelayPolicy("hold", hold)
    raise ValueError(f"relay policy {text!r} is not pass-on, hold:SECONDS (> 0) or drop")


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Limits and identities. Units: ``frame_max`` bytes, ``heartbeat`` seconds, ``*_bytes`` bytes,
    ``handshake_timeout`` seconds, ``output_high_water`` bytes queued for one connection before its
    consumers stop getting deliveries (credit flow) and its reads pause."""

    node_name: str = "amqp-broker@localhost"
    cluster_name: str = "amqp-broker"
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    handshake_timeout: float = 10.0
    output_high_water: int = 4 * 1024 * 1024
    vhosts: tuple[str, ...] = ("/",)
    users: tuple[User, ...] = field(
        default_factory=lambda: (User("guest", "guest", ("*",), loopback_only=True),))
    memory_high_watermark_bytes: int = 0  # 0: no memory alarm
    #: Ready body bytes a durable queue keeps in RAM; stored (persistent) messages beyond it wait
    #: on disk only and are read back as consumers need them. 0: no paging (issue 4).
    queue_memory_budget: int = 64 * 1024 * 1024
    disk_free_limit_bytes: int = 0  # free bytes under which the disk alarm is raised; 0: off
    #: What a relayed message whose queue has no local consumer meets (``core.relay_inbox``).
    relay_policy: RelayPolicy = field(default_factory=RelayPolicy)
    #: A connection claiming ``cluster-peer`` must present a certificate from the cluster CA
    #: (``--cluster-tls-dir``; ``core.external.peer_link_refusal``), else 403.
    peer_tls_required: bool = False
    #: SASL mechanisms Connection.Start offers, most preferred first (RabbitMQ's
    #: ``auth_mechanisms``, default PLAIN and AMQPLAIN; EXTERNAL only when listed, and then only
    #: to TLS clients with a verified certificate: ``core.mechanisms``).
    auth_mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    #: The largest message body a client may publish, bytes (RabbitMQ's ``max_message_size``); a
    #: larger one closes the channel with 406 (``protocol.assembler``). Default 16 MiB as RabbitMQ
    #: 4.x (3.x had 128 MiB; 4.0 lowered it because bodies that large hurt the broker, and ours
    #: holds a body in memory whole too); at most ``MAX_MESSAGE_SIZE`` (512 MiB), as RabbitMQ.
    max_message_size: int = 16 * 1024 * 1024
