"""Which SASL mechanisms Connection.Start offers: RabbitMQ's ``auth_mechanisms`` setting.

``auth_mechanisms`` (``BrokerSettings.auth_mechanisms``; ``--auth-mechanisms`` in ``config``) names
the mechanisms a broker offers, from PLAIN and AMQPLAIN (a user name and password checked against
the broker's users, ``core.auth``) and EXTERNAL (the name in the TLS client certificate,
``core.external``). The default is PLAIN and AMQPLAIN, as RabbitMQ's (``auth_mechanisms`` in
rabbit.app, RabbitMQ "Access Control" and "Authentication Mechanisms"). They are offered in the
order given, most preferred first (RabbitMQ 4.0 "Authentication Mechanisms": "ordered in decreasing
level of preference"; RabbitMQ 3.10 offers them in its registry's order whatever the configured
one, "PLAIN AMQPLAIN EXTERNAL", its docs saying the list is "not considered to be in any particular
order"). EXTERNAL is offered only when listed and the connection is TLS with a verified client
certificate (the ``rabbitmq_auth_mechanism_ssl`` plugin's ``should_offer``: the socket has a peer
certificate).

A Start-Ok naming a mechanism that was not offered is what RabbitMQ's ``rabbit_reader``
(``auth_mechanism_to_module``) calls 503 COMMAND_INVALID "invalid authentication mechanism" (or
"unknown authentication mechanism" for a name it does not know). Before the connection is open
RabbitMQ does not send that error: it logs it, waits ``SILENT_CLOSE_DELAY`` (3 s) and closes the
socket (checked against RabbitMQ 3.10: no frame, the socket closed 3.0 s later); ``Connection``
does the same with this module's text. Must not know: sockets.
"""

from __future__ import annotations

from collections.abc import Sequence

from .auth import MECHANISMS
from .external import EXTERNAL, TlsPeer

__all__ = ["KNOWN_MECHANISMS", "DEFAULT_AUTH_MECHANISMS", "parse_auth_mechanisms",
           "offered_mechanisms", "mechanism_refusal"]

#: Every name ``auth_mechanisms`` may hold, in the order the error message lists them.
KNOWN_MECHANISMS = (*MECHANISMS, EXTERNAL)
#: RabbitMQ's default: PLAIN and AMQPLAIN (no EXTERNAL unless configured).
DEFAULT_AUTH_MECHANISMS = MECHANISMS


def parse_auth_mechanisms(value: str | Sequence[str]) -> tuple[str, ...]:
    """The mechanisms a setting names, in its order: ``"EXTERNAL,PLAIN"`` (comma-separated, as
    the flag and environment variable give it) or ``["EXTERNAL", "PLAIN"]`` (a TOML array)
    -> ``("EXTERNAL", "PLAIN")``. Names are SASL's upper case (``plain`` is read as PLAIN);
    a repeated name counts once, where it first appears. Raises ``ValueError`` naming the valid
    mechanisms for an unknown name, a non-string item, or an empty list."""
    items = value.split(",") if isinstance(value, str) else list(value)
    valid = ", ".join(KNOWN_MECHANISMS)
    out: list[str] = []
    for item in items:
        name = item.strip().upper() if isinstance(item, str) else None
        if name is None or name and name not in KNOWN_MECHANISMS:
            shown = item.strip() if isinstance(item, str) else item
            raise ValueError(f"unknown SASL mechanism {shown!r}: valid are {valid}")
        if name and name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"no SASL mechanism given: name one or more of {valid}")
    return tuple(out)


def offered_mechanisms(configured: Sequence[str], tls: TlsPeer | None) -> tuple[str, ...]:
    """The mechanisms Connection.Start offers a client, in ``configured`` order (the broker's
    ``auth_mechanisms``): every configured one, except EXTERNAL unless ``tls`` carries a
    verified client certificate (``TlsPeer.login`` set). May be empty (EXTERNAL alone on a
    connection without a certificate), as RabbitMQ's would be."""
    has_cert = tls is not None and tls.login is not None
    return tuple(m for m in configured if m != EXTERNAL or has_cert)


def mechanism_refusal(mechanism: str) -> str:
    """RabbitMQ's text for a Start-Ok whose mechanism was not offered (logged, never sent):
    "COMMAND_INVALID - invalid authentication mechanism 'EXTERNAL'" for a mechanism we have,
    "... unknown authentication mechanism 'X'" for one we do not."""
    kind = "invalid" if mechanism in KNOWN_MECHANISMS else "unknown"
    return f"COMMAND_INVALID - {kind} authentication mechanism '{mechanism}'"
