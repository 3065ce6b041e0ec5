"""The AMQPS listener's TLS: server context from the operator's files, and the session facts the
core gets (``core.external.TlsPeer``).

``server_context(options)`` builds a TLS 1.2+ server ``ssl.SSLContext`` from ``--tls-cert`` /
``--tls-key`` and, for client certificates, ``--tls-ca`` with RabbitMQ's ``ssl_options.verify``
(``verify_none``: no client certificate asked for; ``verify_peer``: one is asked for and, when
presented, must chain to the CA) and ``fail_if_no_peer_cert`` (a client without a certificate
fails the handshake; with TLS 1.3 the client sees the refusal as an alert on its first read).
With a cluster CA directory (``cluster.ca``, ``--cluster-tls-dir``) the listener also serves peer
links: a client whose SNI server name is this node's name gets the cluster context (our node
certificate, a client certificate from the cluster CA required), picked in ``sni_callback``;
without ``--tls-cert`` the cluster context is the listener's only one. ``tls_peer(stream,
options)`` reads a handshaken stream into plain data. Source: RabbitMQ "TLS Support"
(ssl_options.*), Python ``ssl`` (SSLContext.sni_callback). Raises ``OSError`` /
``ssl.SSLError`` for unreadable or mismatched files.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

from anyio.abc import ByteStream
from anyio.streams.tls import TLSAttribute
from cryptography import x509
from cryptography.x509.oid import NameOID

from ..core.external import TlsPeer

__all__ = ["TlsOptions", "server_context", "tls_peer", "cert_names", "VERIFY_MODES"]

log = logging.getLogger(__name__)

VERIFY_MODES = ("verify_none", "verify_peer")


@dataclass(frozen=True)
class TlsOptions:
    """The listener's TLS settings: PEM file paths (``ca`` "" for none), ``verify`` one of
    ``VERIFY_MODES``, ``login_from`` "common_name" | "distinguished_name" (EXTERNAL's user name),
    ``cluster_dir`` the cluster CA directory ("" for none) and ``node`` this node's name in it."""

    cert: str = ""
    key: str = ""
    ca: str = ""
    verify: str = "verify_none"
    fail_if_no_peer_cert: bool = False
    login_from: str = "common_name"
    cluster_dir: str = ""
    node: str = ""


def _base(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def client_facing_context(options: TlsOptions) -> ssl.SSLContext:
    """The context for AMQP clients (``--tls-cert``/``--tls-key``/``--tls-ca``, verify mode)."""
    ctx = _base(options.cert, options.key)
    if options.ca:
        ctx.load_verify_locations(cafile=options.ca)
    if options.verify == "verify_peer":
        ctx.verify_mode = ssl.CERT_REQUIRED if options.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def server_context(options: TlsOptions) -> tuple[ssl.SSLContext, ssl.SSLContext | None]:
    """``(listener context, cluster context or None)``. The listener context is the client-facing
    one, switching to the cluster context for SNI name ``options.node``; or, without
    ``options.cert``, the cluster context itself."""
    cluster: ssl.SSLContext | None = None
    if options.cluster_dir:
        from cluster.ca import server_ssl_context
        cluster = server_ssl_context(options.cluster_dir, options.node)
    if not options.cert:
        if cluster is None:
            raise ValueError("a TLS listener needs --tls-cert and --tls-key or --cluster-tls-dir")
        return cluster, cluster
    ctx = client_facing_context(options)
    if cluster is not None:
        cluster_ctx, node = cluster, options.node

        def pick(sock: Any, name: str | None, _ctx: ssl.SSLContext) -> None:
            if name == node:
                sock.context = cluster_ctx

        ctx.sni_callback = pick
    return ctx, cluster


def cert_names(der: bytes) -> tuple[str | None, str]:
    """``(subject CN or None, subject DN in RFC 4514 form)`` of a DER certificate, e.g.
    ``("alice", "CN=alice,O=example")``; ``(None, "")`` when it cannot be parsed."""
    try:
        subject = x509.load_der_x509_certificate(der).subject
    except ValueError:
        return None, ""
    cns = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = cns[0].value if cns else None
    return (str(cn) if cn is not None else None), subject.rfc4514_string()


def tls_peer(stream: ByteStream, options: TlsOptions,
             cluster: ssl.SSLContext | None = None) -> TlsPeer:
    """The session facts of a handshaken ``TLSStream`` (any other stream's extras missing give
    an empty ``TlsPeer``). A client certificate counts only when the context verified it (its
    verify mode was not CERT_NONE); one verified by the ``cluster`` context names a peer node."""
    try:
        obj: ssl.SSLObject = stream.extra(TLSAttribute.ssl_object)
        der = stream.extra(TLSAttribute.peer_certificate_binary)
    except Exception:
        return TlsPeer()
    cipher = obj.cipher()
    protocol, name = obj.version() or "", cipher[0] if cipher else ""
    if der is None or obj.context.verify_mode == ssl.CERT_NONE:
        return TlsPeer(protocol, name)
    cn, dn = cert_names(der)
    if cluster is not None and obj.context is cluster:
        return TlsPeer(protocol, name, None, dn, cn)
    login = dn if options.login_from == "distinguished_name" else cn
    return TlsPeer(protocol, name, login or None, dn)
