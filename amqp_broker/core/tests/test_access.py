"""core.access: RabbitMQ's salted SHA-256 password hashes, login, vhost access, permission regexes
and RabbitMQ's 403 texts."""

from __future__ import annotations

import base64
import hashlib

import pytest

from amqp_broker.core.access import (
    FULL,
    AccessControl,
    Account,
    Grant,
    hash_password,
    verify_password,
)
from amqp_broker.core.settings import User
from amqp_broker.protocol.errors import ChannelException


def test_hash_is_rabbitmq_sha256_layout() -> None:
    h = hash_password("secret", salt=b"\x01\x02\x03\x04")
    raw = base64.b64decode(h)
    assert raw[:4] == b"\x01\x02\x03\x04"
    assert raw[4:] == hashlib.sha256(b"\x01\x02\x03\x04secret").digest()
    assert verify_password(h, "rabbit_password_hashing_sha256", "secret")
    assert not verify_password(h, "rabbit_password_hashing_sha256", "nope")
    assert not verify_password("", "rabbit_password_hashing_sha256", "")


def test_known_rabbitmq_hash() -> None:
    # from RabbitMQ's docs ("Passwords"): guest's hash is made the same way; check a fixed one
    salt = bytes.fromhex("908dc60a")
    expected = base64.b64encode(salt + hashlib.sha256(salt + b"test12").digest()).decode()
    assert verify_password(expected, "rabbit_password_hashing_sha256", "test12")
    h512 = base64.b64encode(salt + hashlib.sha512(salt + b"x").digest()).decode()
    assert verify_password(h512, "rabbit_password_hashing_sha512", "x")


def test_from_settings_and_login() -> None:
    access = AccessControl.from_settings(
        [User("guest", "guest", ("*",), loopback_only=True), User("app", "pw", ("/a",))],
        ["/", "/a"])
    assert access.users["guest"].tags == ("administrator",)
    assert access.authenticate("guest", "guest", "127.0.0.1")[0] is not None
    user, why = access.authenticate("guest", "guest", "10.1.1.1")
    assert user is None and why == "ACCESS_REFUSED - user 'guest' can only connect via localhost"
    assert access.authenticate("app", "bad", "10.1.1.1")[1].startswith(
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")
    app = access.users["app"]
    assert access.can_open(app, "/a") and not access.can_open(app, "/")


def test_permission_regexes_and_texts() -> None:
    access = AccessControl()
    u = Account("u", hash_password("p"))
    access.put_user(u)
    access.set_permission("u", "/", Grant(configure="^q-", write="^$", read=".*"))
    access.check(u, "/", "configure", "queue", "q-1")
    access.check(u, "/", "read", "exchange", "anything")
    with pytest.raises(ChannelException) as err:
        access.check(u, "/", "write", "exchange", "x")
    assert err.value.reply_code == 403
    assert err.value.reply_text == ("ACCESS_REFUSED - write access to exchange 'x' in vhost '/' "
                                    "refused for user 'u'")
    with pytest.raises(ChannelException) as err:
        access.check(u, "/", "write", "exchange", "")
    assert "exchange 'amq.default'" in err.value.reply_text
    with pytest.raises(ChannelException):
        access.check(u, "/", "configure", "queue", "other")
    with pytest.raises(ChannelException):
        access.check(u, "/v", "read", "queue", "q")  # no permissions in that vhost
    access.check(None, "/", "write", "exchange", "x")  # a cluster peer link
    access.set_permission("u", "/", FULL)
    access.check(u, "/", "write", "exchange", "x")
    access.delete_user("u")
    assert ("u", "/") not in access.permissions
