"""Authentication and vhost access: SASL PLAIN/AMQPLAIN, the guest loopback rule, vhost permissions,
first through the wire and then the auth module's pieces."""

from __future__ import annotations

import pytest
from pamqp import commands as cmd

from amqp_broker.core.auth import authenticate, is_loopback, parse_response
from amqp_broker.core.connection import State
from amqp_broker.core.settings import User
from amqp_broker.protocol import constants as c

from .client import PROTOCOL_HEADER, Client, amqplain_response, plain_response


def refused(cl: Client, code: int = c.ACCESS_REFUSED) -> cmd.Connection.Close:
    close = cl.expect(cmd.Connection.Close, 0)
    assert close.reply_code == code, close.reply_text
    cl.expect_nothing()
    assert cl.conn.closed  # during the handshake the socket closes right after the Close
    return close


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
@pytest.mark.parametrize("user,password,vhost", [("guest", "guest", "/"),
                                                 ("alice", "secret", "/"),
                                                 ("bob", "hunter2", "other")])
def test_mechanisms_log_in(broker, mechanism, user, password, vhost) -> None:
    cl = Client(broker)
    cl.handshake(user, password, vhost, mechanism=mechanism)
    assert cl.conn.state is State.OPEN
    assert cl.conn.user.name == user
    assert cl.conn.vhost is broker.vhosts[vhost]


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_bad_password_is_403_with_close_and_no_tune(broker, mechanism) -> None:
    cl = Client(broker)
    cl.handshake("alice", "wrong", mechanism=mechanism)
    close = refused(cl)
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused")
    assert (close.class_id, close.method_id) == (10, 11)


def test_unknown_user_is_403(broker) -> None:
    cl = Client(broker)
    cl.handshake("mallory", "x")
    refused(cl)


def test_refusal_text_names_the_mechanism_used(broker) -> None:
    cl = Client(broker)
    cl.handshake("alice", "wrong", mechanism="AMQPLAIN")
    assert "mechanism AMQPLAIN" in refused(cl).reply_text


def test_guest_from_a_remote_peer_is_403(broker) -> None:
    cl = Client(broker, "10.1.2.3", 5000)  # only a string the core sees; no network involved
    cl.handshake()
    close = refused(cl)
    assert "guest" in close.reply_text and "localhost" in close.reply_text


@pytest.mark.parametrize("host", ["127.0.0.1", "127.5.6.7", "::1", "::ffff:127.0.0.1",
                                  "localhost"])
def test_guest_from_loopback_addresses(broker, host) -> None:
    cl = Client(broker, host)
    cl.handshake()
    assert cl.conn.state is State.OPEN


def test_other_users_may_connect_remotely(broker) -> None:
    cl = Client(broker, "10.1.2.3", 5000)
    cl.handshake("alice", "secret")
    assert cl.conn.state is State.OPEN


@pytest.mark.parametrize("response", ["guest", "\0guest", "a\0b\0c\0d"])
def test_malformed_plain_response_is_403(broker, response) -> None:
    cl = Client(broker)
    cl.send_raw(PROTOCOL_HEADER)
    cl.expect(cmd.Connection.Start)
    cl.send(0, cmd.Connection.StartOk(mechanism="PLAIN", response=response))
    refused(cl)


def test_unknown_vhost_is_530(broker) -> None:
    cl = Client(broker)
    cl.handshake(vhost="nope", expect_open=False)
    close = refused(cl, c.NOT_ALLOWED)
    assert "nope" in close.reply_text
    assert (close.class_id, close.method_id) == (10, 40)


def test_vhost_the_user_may_not_open_is_530(broker) -> None:
    cl = Client(broker)
    cl.handshake("alice", "secret", "other", expect_open=False)
    refused(cl, c.NOT_ALLOWED)


def test_vhosts_are_separate(make_client) -> None:
    root = make_client()
    other = make_client(user="bob", password="hunter2", vhost="other")
    root.declare_queue(1, "shared-name")
    other.call(1, cmd.Queue.Declare(queue="shared-name", passive=True), cmd.Channel.Close)


def test_capabilities_are_recorded(broker) -> None:
    cl = Client(broker)
    cl.handshake(capabilities={"consumer_cancel_notify": True})
    assert cl.conn.capabilities == {"consumer_cancel_notify": True}


# ------------------------------------------------------------------------------ unit level
def test_parse_plain_with_authzid() -> None:
    assert parse_response("PLAIN", plain_response("u", "p")) == ("u", "p")
    assert parse_response("PLAIN", b"admin\0u\0p") == ("u", "p")
    assert parse_response("PLAIN", b"\0u") is None


def test_parse_amqplain() -> None:
    assert parse_response("AMQPLAIN", amqplain_response("u", "p").encode()) == ("u", "p")
    assert parse_response("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01u") is None  # no PASSWORD
    assert parse_response("AMQPLAIN", b"\xff\xff") is None
    assert parse_response("CRAM-MD5", b"x") is None


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.2")
    assert not is_loopback("10.0.0.1") and not is_loopback("::ffff:10.0.0.1")
    assert not is_loopback("example.com")


def test_authenticate() -> None:
    users = (User("a", "pw"), User("g", "g", loopback_only=True))
    assert authenticate(users, "a", "pw", "10.0.0.1")[0] == users[0]
    assert authenticate(users, "a", "nope", "127.0.0.1")[0] is None
    assert authenticate(users, "g", "g", "127.0.0.1")[0] == users[1]
    user, why = authenticate(users, "g", "g", "192.168.1.1")
    assert user is None and "localhost" in why
