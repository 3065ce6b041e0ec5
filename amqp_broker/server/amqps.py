"""The AMQPS listener (RabbitMQ's ``listeners.ssl.default``, port 5671): TLS on accept, then the
same per-connection serving as the plain listener, the core told of the session (``TlsPeer``).

A failed or slow handshake (a plain AMQP client on this port, a client without a required
certificate, one whose certificate does not verify) closes that socket, is logged as one line,
and never disturbs other connections. Handshake time limit: the broker's ``handshake_timeout``.
Peer-link connections (SNI name = our node name, ``server.tls``) are served here too.
Source: RabbitMQ "TLS Support"; anyio ``TLSStream.wrap``.
"""

from __future__ import annotations

import logging
import socket
import ssl

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.tls import TLSStream

from ..core.broker import Broker
from .connection_io import serve_connection
from .tls import TlsOptions, tls_peer

__all__ = ["listen_tls", "TlsServer"]

log = logging.getLogger(__name__)


class TlsServer:
    """Serves accepted TCP streams over TLS: ``handle(stream)`` for ``Listener.serve``.
    ``context``: the listener's ``ssl.SSLContext``; ``cluster``: the peer-link context or None."""

    def __init__(self, broker: Broker, options: TlsOptions, context: ssl.SSLContext,
                 cluster: ssl.SSLContext | None) -> None:
        self.broker = broker
        self.options = options
        self.context = context
        self.cluster = cluster

    async def handle(self, stream: SocketStream) -> None:
        """Handshake (bounded by ``handshake_timeout``), then ``serve_connection``."""
        try:
            stream.extra(SocketAttribute.raw_socket).setsockopt(socket.IPPROTO_TCP,
                                                               socket.TCP_NODELAY, 1)
        except Exception:
            pass
        try:
            peer = stream.extra(SocketAttribute.remote_address)
        except Exception:
            peer = "?"
        try:
            with anyio.fail_after(self.broker.settings.handshake_timeout):
                tls = await TLSStream.wrap(stream, server_side=True, ssl_context=self.context,
                                           standard_compatible=False)
        except (OSError, ssl.SSLError, TimeoutError, anyio.BrokenResourceError,
                anyio.EndOfStream) as exc:
            log.info("TLS handshake with %s failed: %s", peer, exc or type(exc).__name__)
            await anyio.aclose_forcefully(stream)
            return
        try:
            await serve_connection(self.broker, tls, tls_peer(tls, self.options, self.cluster))
        except Exception:
            log.exception("TLS connection task failed")


async def listen_tls(host: str, port: int) -> anyio.abc.Listener[SocketStream]:
    """A TCP listener on ``host``:``port`` (0: a free one) for ``TlsServer.handle``. Raises
    ``OSError`` when the port is taken."""
    return await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False,
                                           backlog=1024)
