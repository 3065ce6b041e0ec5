"""SASL EXTERNAL over TLS, and what the core knows of a connection's TLS session.

The server layer terminates TLS and hands the core a ``TlsPeer`` (plain data: no ``ssl`` object)
when it opens the connection. EXTERNAL is offered in Connection.Start only when the broker's
``auth_mechanisms`` lists it and on a TLS connection whose client presented a certificate the
listener verified (``core.mechanisms.offered_mechanisms``); the login name is that certificate's
subject common name (``login_from`` "common_name") or its distinguished name in RFC 4514 form
("distinguished_name", e.g. ``CN=alice,O=example``): RabbitMQ's ``rabbitmq_auth_mechanism_ssl``
with ``ssl_cert_login_from``. The response field of Start-Ok is ignored, as RabbitMQ does. The
account must exist in the broker's users (no password is checked; a loopback-only account is
still refused from elsewhere); else 403 ACCESS_REFUSED "Login was refused using authentication
mechanism EXTERNAL". Source: RabbitMQ "TLS Support" and "Access Control" (x509 certificate-based
user authentication). Must not know: sockets, ``ssl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .auth import is_loopback, login_refused, loopback_refused

if TYPE_CHECKING:
    from .access import AccessControl, Account

__all__ = ["EXTERNAL", "TlsPeer", "external_login", "peer_link_refusal"]

EXTERNAL = "EXTERNAL"


@dataclass(frozen=True, slots=True)
class TlsPeer:
    """A TLS connection's session as the core sees it.

    ``protocol`` ("TLSv1.3") and ``cipher`` (OpenSSL's name) for the management API;
    ``login``: the name EXTERNAL logs in as (the verified client certificate's CN or DN, per the
    listener's ``login_from``), None when the client presented no verified certificate;
    ``subject``: that certificate's subject DN (RFC 4514) for display, "" without one;
    ``cluster_node``: the subject CN when the certificate was verified against the *cluster* CA
    (a peer link's node certificate, ``cluster.ca``), else None.
    """

    protocol: str = ""
    cipher: str = ""
    login: str | None = None
    subject: str = ""
    cluster_node: str | None = None


def external_login(access: AccessControl, tls: TlsPeer | None,
                   peer_host: str) -> tuple[str | None, Account | None, str]:
    """EXTERNAL's Start-Ok: ``(login, account, "")`` when the certificate's name is a broker user
    who may connect from ``peer_host``; ``(login, None, reason)`` otherwise, ``reason`` being
    RabbitMQ's 403 text ("Login was refused using authentication mechanism EXTERNAL", or the
    loopback-only text). ``login`` is None without a verified certificate (EXTERNAL is then
    not offered, and ``Connection`` refuses it before asking here)."""
    if tls is None or tls.login is None:
        return None, None, f"ACCESS_REFUSED - unsupported mechanism {EXTERNAL}"
    account = access.users.get(tls.login)
    if account is None:
        return tls.login, None, login_refused(EXTERNAL)
    if account.loopback_only and not is_loopback(peer_host):
        return tls.login, None, loopback_refused(tls.login)
    return tls.login, account, ""


def peer_link_refusal(tls: TlsPeer | None, required: bool, node: str | None = None) -> str | None:
    """Whether a connection claiming ``cluster-peer`` may go on: None, or the 403 text. With
    ``required`` (the broker has a cluster CA: ``--cluster-tls-dir``) it must have come over TLS
    with a certificate from the cluster CA; once the shared-secret exchange names the peer's
    ``node``, that name must be the certificate's CN (a member cannot pose as another)."""
    if not required:
        return None
    if tls is None or tls.cluster_node is None:
        return ("ACCESS_REFUSED - cluster-peer connections must present a certificate from the "
                "cluster CA")
    if node is not None and node != tls.cluster_node:
        return (f"ACCESS_REFUSED - cluster peer '{node}' presented the certificate of "
                f"'{tls.cluster_node}'")
    return None
