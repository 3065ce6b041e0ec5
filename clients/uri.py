"""Parsing ``amqp://`` and ``amqps://`` URIs into ``ConnectionParams``.

Follows RabbitMQ's "AMQP 0-9-1 URI Specification" and its query parameters: userinfo and vhost are
percent-decoded (``%2F`` is ``/``); the default port is 5672 (amqp) or 5671 (amqps); user and
password default to guest/guest. The vhost is the path without its leading ``/``; a missing or
empty path means ``/`` (as pika and most clients read it; the spec's literal reading of an empty
path as the vhost "" is never what people mean). Query parameters: ``heartbeat`` (seconds, 0
disables), ``frame_max`` (bytes), ``channel_max``, ``connection_timeout`` (milliseconds, as in
RabbitMQ's spec), ``cacertfile``, ``certfile``, ``keyfile``, ``verify`` (``verify_peer`` or
``verify_none``), ``server_name_indication``. Raises ``ValueError`` on anything else. No I/O.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["ConnectionParams", "parse_uri"]

_INT_PARAMS = ("heartbeat", "frame_max", "channel_max", "connection_timeout")
_STR_PARAMS = ("cacertfile", "certfile", "keyfile", "verify", "server_name_indication")


@dataclass(frozen=True, slots=True)
class ConnectionParams:
    """One broker address and how to log in.

    ``heartbeat``: seconds, ``None`` takes the broker's proposal, 0 disables heartbeats.
    ``frame_max``: bytes, largest frame we accept (0 takes the broker's). ``channel_max``: 0 takes
    the broker's. ``connection_timeout``: seconds for TCP + TLS + AMQP handshake.
    """

    host: str = "127.0.0.1"
    port: int = 5672
    username: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    tls: bool = False
    heartbeat: int | None = None
    frame_max: int = 131072
    channel_max: int = 0
    connection_timeout: float = 10.0
    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True
    server_name: str | None = None

    @property
    def address(self) -> str:
        """``host:port`` for messages (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context for amqps (CA file, client cert, verify mode), else None."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.cacertfile)
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def parse_uri(uri: str) -> ConnectionParams:
    """Parse one AMQP URI, e.g. ``amqp://guest:guest@127.0.0.1:5672/%2F?heartbeat=10``.

    Raises ``ValueError`` for another scheme, a bad port, an unknown or malformed query parameter.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in ("amqp", "amqps"):
        raise ValueError(f"not an AMQP URI (scheme must be amqp or amqps): {uri!r}")
    tls = scheme == "amqps"
    try:
        port = parts.port or (5671 if tls else 5672)
    except ValueError as exc:
        raise ValueError(f"bad port in {uri!r}: {exc}") from None
    host = parts.hostname or "127.0.0.1"
    username = unquote(parts.username) if parts.username is not None else "guest"
    password = unquote(parts.password) if parts.password is not None else "guest"
    path = parts.path
    vhost = unquote(path[1:]) if path.startswith("/") else unquote(path)
    if vhost == "":
        vhost = "/"
    kw: dict = {}
    for key, values in parse_qs(parts.query, keep_blank_values=True).items():
        value = values[-1]
        if key in _INT_PARAMS:
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"query parameter {key} must be an integer: {value!r}") from None
            if number < 0:
                raise ValueError(f"query parameter {key} must not be negative: {number}")
            kw[key] = number / 1000.0 if key == "connection_timeout" else number
        elif key in _STR_PARAMS:
            if key == "verify":
                if value not in ("verify_peer", "verify_none"):
                    raise ValueError(f"verify must be verify_peer or verify_none: {value!r}")
                kw["verify"] = value == "verify_peer"
            elif key == "server_name_indication":
                kw["server_name"] = value
            else:
                kw[key] = value
        else:
            raise ValueError(f"unknown query parameter {key!r} in {uri!r}")
    return ConnectionParams(host=host, port=port, username=username, password=password,
                            vhost=vhost, tls=tls, **kw)
