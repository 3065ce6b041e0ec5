"""HTTP basic auth for the management API with broker users and RabbitMQ's management tags.

Levels (RabbitMQ "Management Plugin", "Permissions"): ``management`` (and every tag above it) may
use the API and sees the vhosts it has permissions in; ``policymaker`` also policies;
``monitoring`` sees every vhost's objects and the node figures; ``administrator`` may do
everything (users, vhosts, permissions, definitions). A user without any of these tags is
refused (401 "Not management user"). ``guest`` (a loopback-only user) is refused unless the HTTP
client connects from loopback, as on AMQP. Errors, as RabbitMQ 3.10 answers (checked against
it): no credentials: 401 with ``WWW-Authenticate: Basic realm="RabbitMQ Management"`` and no
body; a wrong user or password: 401 ``{"error": "not_authorized", "reason": "Login failed"}``
with the same challenge; a user without the tag: 401 ``{"error": "not_authorised", "reason":
"Not management user"}`` without it (``http.HTTPError.response``). The web page's requests
are made so that the browser never answers a challenge with its own dialog (``static/app.js``).
"""

from __future__ import annotations

import base64
import binascii

from starlette.requests import Request

from ..core.access import AccessControl, Account
from .http import HTTPError

__all__ = ["authenticate", "require", "sees_all", "visible_vhosts", "LEVELS"]

#: tag -> rank; a user's level is its highest tag's
LEVELS = {"management": 1, "policymaker": 2, "monitoring": 3, "administrator": 4}


def _level(user: Account) -> int:
    return max((LEVELS.get(t, 0) for t in user.tags), default=0)


def authenticate(request: Request, access: AccessControl) -> Account:
    """The user the request's ``Authorization: Basic`` header names, with its password checked;
    401 when missing, wrong, not a management user, or guest from a non-loopback address (see
    the module docstring for the answers)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if not header.strip():
        raise HTTPError(401, "not_authorised", "Login failed", challenge=True, empty=True)
    failed = HTTPError(401, "not_authorized", "Login failed", challenge=True)
    if scheme.lower() != "basic" or not value:
        raise failed
    try:
        username, _, password = base64.b64decode(value.strip()).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise failed from None
    peer = request.client.host if request.client else ""
    user, why = access.authenticate(username, password, peer)
    if user is None:
        if "localhost" in why:
            raise HTTPError(401, "not_authorised", "User can only log in via localhost")
        raise failed
    if _level(user) == 0:
        raise HTTPError(401, "not_authorised", "Not management user")
    return user


def require(user: Account, tag: str) -> None:
    """401 unless ``user``'s level reaches ``tag``'s (``administrator`` / ``monitoring`` ...)."""
    if _level(user) < LEVELS[tag]:
        raise HTTPError(401, "not_authorised", f"Not {tag} user")


def sees_all(user: Account) -> bool:
    """True for monitoring and administrator users (every vhost's objects)."""
    return _level(user) >= LEVELS["monitoring"]


def visible_vhosts(user: Account, access: AccessControl, vhosts: list[str]) -> list[str]:
    """The vhosts ``user`` may list objects of."""
    if sees_all(user):
        return vhosts
    return [v for v in vhosts if (user.name, v) in access.permissions]
