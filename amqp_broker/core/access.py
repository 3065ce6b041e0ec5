"""Users, their vhost permissions and password hashes: who may log in, open a vhost, and
configure / write / read which resource (pure: no I/O; persisting it is the caller's job).

Passwords are kept as RabbitMQ keeps them ("Passwords" / "Credentials and Passwords" guide,
``rabbit_password_hashing_sha256``): base64(salt[4] + SHA-256(salt + UTF-8 password)), so
definitions exported from RabbitMQ import here and their users log in, and ours import there.
Also verified: ``rabbit_password_hashing_sha512`` and ``rabbit_password_hashing_md5``.

Permissions are RabbitMQ's three regular expressions per (user, vhost) ("Access Control",
"How Permissions Work"): ``configure`` for declare/delete, ``write`` for publish and the
destination of a bind, ``read`` for get/consume/purge and the source of a bind. RabbitMQ matches
with an unanchored ``re:run`` (``^$`` denies everything, ``.*`` allows everything, an empty
string denies); we do the same with ``re.search``.
The default exchange is named ``amq.default`` in checks and texts, as RabbitMQ.
Refusals raise ``ChannelException(403, "ACCESS_REFUSED - write access to exchange 'x' in vhost '/'
refused for user 'u'")``, RabbitMQ's text.

Tags (RabbitMQ management): ``administrator``, ``monitoring``, ``policymaker``, ``management``,
``impersonator``; the management API checks them (``amqp_broker.management.auth``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal

from ..protocol import constants as c
from ..protocol.errors import ChannelException
from .auth import is_loopback, login_refused, loopback_refused
from .settings import User

if TYPE_CHECKING:
    from .channel import Channel

__all__ = ["Account", "Grant", "AccessControl", "hash_password", "verify_password",
           "SHA256", "FULL", "permit", "permit_bind"]

SHA256 = "rabbit_password_hashing_sha256"
_ALGORITHMS = {SHA256: hashlib.sha256, "rabbit_password_hashing_sha512": hashlib.sha512,
               "rabbit_password_hashing_md5": hashlib.md5}

Perm = Literal["configure", "write", "read"]


def hash_password(password: str, salt: bytes | None = None, algorithm: str = SHA256) -> str:
    """RabbitMQ's password hash: base64(salt + H(salt + password)), ``salt`` 4 random bytes."""
    salt = os.urandom(4) if salt is None else salt
    digest = _ALGORITHMS[algorithm](salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def verify_password(password_hash: str, algorithm: str, password: str) -> bool:
    """True when ``password`` matches the stored ``password_hash`` (constant-time compare); False
    for an empty hash (a user without a password cannot log in with one) or unknown algorithm."""
    fn = _ALGORITHMS.get(algorithm)
    if fn is None or not password_hash:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(fn(salt + password.encode("utf-8")).digest(), digest)


@dataclass(frozen=True, slots=True)
class Account:
    """A broker user: ``name``, ``password_hash`` (base64, see ``hash_password``),
    ``hashing_algorithm``, ``tags`` (management tags), ``loopback_only`` (RabbitMQ's
    ``loopback_users``: may log in from 127.0.0.0/8 and ::1 only, as ``guest``)."""

    name: str
    password_hash: str
    hashing_algorithm: str = SHA256
    tags: tuple[str, ...] = ()
    loopback_only: bool = False


@dataclass(frozen=True, slots=True)
class Grant:
    """One user's permissions in one vhost: three regular expressions."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


FULL = Grant()


#: Bumped by every change of any AccessControl: channels' cached "may do anything" goes stale.
_GENERATION: Final = [0]


@lru_cache(maxsize=4096)
def _matches(pattern: str, name: str) -> bool:
    if pattern == "":
        return False
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


class AccessControl:
    """Users and permissions of one broker. ``users``: name -> Account; ``permissions``:
    (user, vhost) -> Grant. Mutate through the methods so the fast-path set stays right."""

    def __init__(self) -> None:
        self.users: dict[str, Account] = {}
        self.permissions: dict[tuple[str, str], Grant] = {}
        #: (user, vhost) pairs whose three regexes are ".*": checks return at once.
        self._unrestricted: set[tuple[str, str]] = set()

    @classmethod
    def from_settings(cls, users: Iterable[User], vhosts: Iterable[str]) -> AccessControl:
        """From the configuration's users (plain-text passwords, hashed here; ``vhosts`` "*"
        grants every vhost in ``vhosts``). ``guest`` gets the ``administrator`` tag (RabbitMQ's
        default user); other configured users too unless they name ``tags``."""
        access = cls()
        vhost_names = list(vhosts)
        for user in users:
            tags = getattr(user, "tags", None) or ("administrator",)
            access.put_user(Account(user.name, hash_password(user.password), SHA256, tuple(tags),
                                    user.loopback_only))
            for vhost in (vhost_names if "*" in user.vhosts else user.vhosts):
                access.set_permission(user.name, vhost, FULL)
        return access

    # ---------------------------------------------------------------------------- changes
    def put_user(self, account: Account) -> None:
        """Create or replace a user (its permissions stay)."""
        self.users[account.name] = account
        _GENERATION[0] += 1

    def delete_user(self, name: str) -> bool:
        """Delete a user and its permissions; False when there was none."""
        if self.users.pop(name, None) is None:
            return False
        for key in [k for k in self.permissions if k[0] == name]:
            self.clear_permission(*key)
        return True

    def set_password(self, name: str, password: str) -> None:
        """Change a user's password (hashed with SHA-256); KeyError when there is no such user."""
        self.users[name] = replace(self.users[name], password_hash=hash_password(password),
                                   hashing_algorithm=SHA256)

    def set_permission(self, user: str, vhost: str, grant: Grant) -> None:
        """Set ``user``'s permissions in ``vhost``."""
        self.permissions[(user, vhost)] = grant
        _GENERATION[0] += 1
        if grant == FULL:
            self._unrestricted.add((user, vhost))
        else:
            self._unrestricted.discard((user, vhost))

    def clear_permission(self, user: str, vhost: str) -> bool:
        """Remove ``user``'s permissions in ``vhost``; False when there were none."""
        self._unrestricted.discard((user, vhost))
        _GENERATION[0] += 1
        return self.permissions.pop((user, vhost), None) is not None

    def vhost_deleted(self, vhost: str) -> None:
        """Forget every permission in ``vhost``."""
        for key in [k for k in self.permissions if k[1] == vhost]:
            self.clear_permission(*key)

    # ----------------------------------------------------------------------------- checks
    def authenticate(self, username: str, password: str, peer_host: str,
                     mechanism: str = "PLAIN") -> tuple[Account | None, str]:
        """(account, "") or (None, RabbitMQ's refusal text): wrong user or password is "Login was
        refused using authentication mechanism PLAIN"; a loopback-only user from elsewhere is
        "user 'guest' can only connect via localhost"."""
        account = self.users.get(username)
        if account is not None and verify_password(account.password_hash,
                                                   account.hashing_algorithm, password):
            if account.loopback_only and not is_loopback(peer_host):
                return None, loopback_refused(username)
            return account, ""
        return None, login_refused(mechanism)

    def can_open(self, user: Account | None, vhost: str) -> bool:
        """True when ``user`` has any permissions in ``vhost`` (Connection.Open's check)."""
        return user is not None and (user.name, vhost) in self.permissions

    def check(self, user: Account | None, vhost: str, perm: Perm, kind: str, name: str) -> None:
        """Raise 403 ACCESS_REFUSED unless ``user`` has ``perm`` on resource ``kind`` (queue or
        exchange) ``name`` in ``vhost``. ``user`` None (a cluster peer link) is always allowed."""
        if user is None:
            return
        key = (user.name, vhost)
        if key in self._unrestricted:
            return
        grant = self.permissions.get(key)
        shown = name if name or kind != "exchange" else "amq.default"
        if grant is None or not _matches(getattr(grant, perm), shown):
            raise ChannelException(
                c.ACCESS_REFUSED, f"ACCESS_REFUSED - {perm} access to {kind} '{shown}' in vhost "
                f"'{vhost}' refused for user '{user.name}'")


def permit(ch: Channel, perm: Perm, kind: str, name: str) -> None:
    """The handlers' one-line check: 403 unless ``ch``'s user has ``perm`` on ``kind`` ``name``
    in the channel's vhost (cluster peer links and the broker's own direct connections pass).
    Fast path (every publish): a channel whose user may do anything in its vhost remembers it
    (``Channel.access_gen``) until any permission changes anywhere (``_GENERATION``)."""
    if ch.access_gen == _GENERATION[0]:
        return
    conn = ch.connection
    user = conn.user
    if user is None or conn.peer_node is not None:
        ch.access_gen = _GENERATION[0]
        return
    access = conn.broker.access
    if (user.name, ch.vhost.name) in access._unrestricted:
        ch.access_gen = _GENERATION[0]
        return
    access.check(user, ch.vhost.name, perm, kind, name)


def permit_bind(ch: Channel, source: str, kind: str, destination: str) -> None:
    """Queue.Bind / Exchange.Bind (and Unbind): write on the destination, read on the source
    exchange, in that order, as RabbitMQ's ``binding_action``."""
    permit(ch, "write", kind, destination)
    permit(ch, "read", "exchange", source)
