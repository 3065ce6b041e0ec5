"""Peer authentication by a shared cluster secret, never sent in clear (issue 5, "Peers must authenticate").

Owns a SASL-style mechanism, ``CLUSTER-HMAC-SHA256``, run over AMQP 0-9-1's own challenge exchange
(spec §1.4.2.3/4 Connection.Secure / Connection.SecureOk):

    client  Connection.StartOk  mechanism="CLUSTER-HMAC-SHA256", response=NODE (UTF-8 node name)
    server  Connection.Secure   challenge=hex(nonce), nonce = 32 fresh random bytes
    client  Connection.SecureOk response=hex(HMAC-SHA256(secret, nonce || NODE))
    server  compares with ``hmac.compare_digest`` (constant time), then Connection.Tune, or
            Connection.Close 403 ACCESS_REFUSED

Challenge and response travel as lowercase hex text: pamqp decodes a longstr into ``str`` when it
happens to be valid UTF-8 and into ``bytes`` otherwise, so raw bytes would arrive as either. The
fresh nonce makes every answer single-use (a recorded answer is useless on another connection). What
it does not do: authenticate the server to the client (each broker is a client of every other, so
each direction is checked on its own link), nor hide the traffic (use the TLS listener for that).

Must not know: sockets, the broker core (the lead plugs ``SecretServer`` into the handshake where
``amqp_broker.core.auth`` checks PLAIN), the membership rules.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets as _random
from pathlib import Path

__all__ = ["MECHANISM", "AuthenticationFailed", "SecretClient", "SecretServer", "initial_response", "answer",
           "load_secret", "MIN_SECRET_BYTES"]

MECHANISM = "CLUSTER-HMAC-SHA256"
MIN_SECRET_BYTES = 16
_NONCE_BYTES = 32


class AuthenticationFailed(Exception):
    """The peer's answer is wrong, malformed, or came twice; refuse with 403 ACCESS_REFUSED."""


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


def _mac(secret: bytes, nonce: bytes, node: str) -> bytes:
    return hmac.new(secret, nonce + node.encode("utf-8"), hashlib.sha256).digest()


def load_secret(path: str | os.PathLike[str]) -> bytes:
    """Read a cluster secret file (surrounding whitespace stripped). Raises ``ValueError`` when it
    is shorter than ``MIN_SECRET_BYTES`` bytes, ``OSError`` when unreadable. Make one with e.g.
    ``python -c 'import secrets; print(secrets.token_hex(32))' > secret; chmod 600 secret``."""
    secret = Path(path).read_bytes().strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"cluster secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


def initial_response(node: str) -> str:
    """The client's Connection.StartOk ``response``: its node name."""
    if not node:
        raise ValueError("node name must not be empty")
    return node


def answer(secret: bytes, node: str, challenge: str | bytes) -> str:
    """The client's Connection.SecureOk ``response`` to a Connection.Secure ``challenge``.
    Raises ``ValueError`` for a challenge that is not 64 hex digits."""
    try:
        nonce = bytes.fromhex(_text(challenge))
    except (ValueError, UnicodeDecodeError):
        raise ValueError("challenge is not hex") from None
    if len(nonce) != _NONCE_BYTES:
        raise ValueError("challenge has the wrong length")
    return _mac(secret, nonce, node).hex()


class SecretClient:
    """The client's side as a SASL mechanism (``clients.protocol.SaslMechanism``): a peer link
    authenticating as ``node`` with ``secret``. ``answer`` raises ``ValueError`` for a malformed
    challenge."""

    mechanism = MECHANISM

    def __init__(self, secret: bytes, node: str) -> None:
        self._secret = secret
        self._node = node

    def initial_response(self) -> str:
        """The node name (Start-Ok)."""
        return initial_response(self._node)

    def answer(self, challenge: str | bytes) -> str:
        """The HMAC of the challenge (Secure-Ok)."""
        return answer(self._secret, self._node, challenge)


class SecretServer:
    """The server's side for one connection: ``challenge(initial)`` then ``verify(response)``.

    ``nonce`` may be given for tests; by default 32 bytes from ``secrets.token_bytes``.
    """

    mechanism = MECHANISM

    def __init__(self, secret: bytes, nonce: bytes | None = None) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"cluster secret must be at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret
        self._nonce = nonce if nonce is not None else _random.token_bytes(_NONCE_BYTES)
        if len(self._nonce) != _NONCE_BYTES:
            raise ValueError("nonce must be 32 bytes")
        self._node: str | None = None
        self._done = False

    def challenge(self, initial: str | bytes) -> str:
        """Take the StartOk response (the node name); returns the Connection.Secure challenge."""
        if self._node is not None or self._done:
            raise AuthenticationFailed("challenge already issued")
        try:
            node = _text(initial)
        except UnicodeDecodeError:
            raise AuthenticationFailed("node name is not UTF-8") from None
        if not node or len(node.encode()) > 255:
            raise AuthenticationFailed("bad node name")
        self._node = node
        return self._nonce.hex()

    def verify(self, response: str | bytes) -> str:
        """Check the SecureOk response; returns the authenticated node name. Raises
        ``AuthenticationFailed`` (wrong, malformed, before ``challenge`` or a second time)."""
        if self._node is None or self._done:
            raise AuthenticationFailed("no challenge outstanding")
        self._done = True
        expected = _mac(self._secret, self._nonce, self._node)
        try:
            given = bytes.fromhex(_text(response))
        except (ValueError, UnicodeDecodeError):
            given = b""
        if not hmac.compare_digest(given, expected):
            raise AuthenticationFailed(f"wrong cluster secret answer from {self._node!r}")
        return self._node
