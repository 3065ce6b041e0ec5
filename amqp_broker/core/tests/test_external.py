"""SASL EXTERNAL over TLS (``core.external``): offered only when ``auth_mechanisms`` lists it and
with a verified client certificate, the certificate's name must be a broker user, cluster-peer
connections and the cluster CA. Through the sans-IO core: the server layer's ``TlsPeer`` is set
on the connection by hand. (Which mechanisms are offered for which setting: test_mechanisms.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
from pamqp import commands as cmd

from amqp_broker.core.broker import Broker
from amqp_broker.core.connection import State
from amqp_broker.core.external import EXTERNAL, TlsPeer, external_login, peer_link_refusal
from amqp_broker.core.mechanisms import offered_mechanisms
from amqp_broker.protocol import constants as c

from .client import PROTOCOL_HEADER, Client
from .conftest import SETTINGS

WITH_EXTERNAL = ("EXTERNAL", "PLAIN", "AMQPLAIN")


@pytest.fixture
def broker(clock) -> Broker:
    """The core tests' broker with ``auth_mechanisms`` EXTERNAL,PLAIN,AMQPLAIN."""
    return Broker(replace(SETTINGS, auth_mechanisms=WITH_EXTERNAL), clock=clock)


def start_ok_external(broker, tls: TlsPeer | None, peer_host: str = "127.0.0.1",
                      ) -> tuple[Client, cmd.Connection.Start]:
    cl = Client(broker, peer_host)
    cl.connect().tls = tls
    cl.send_raw(PROTOCOL_HEADER)
    start = cl.expect(cmd.Connection.Start, 0)
    cl.send(0, cmd.Connection.StartOk(client_properties={"product": "t"}, mechanism=EXTERNAL,
                                      response=""))
    cl.pump()
    return cl, start


def test_external_offered_only_with_a_verified_certificate() -> None:
    assert EXTERNAL not in offered_mechanisms(WITH_EXTERNAL, None)
    assert EXTERNAL not in offered_mechanisms(WITH_EXTERNAL, TlsPeer("TLSv1.3", "X"))  # no cert
    assert offered_mechanisms(WITH_EXTERNAL, TlsPeer("TLSv1.3", "X", "alice"))[0] == EXTERNAL


def test_start_lists_external_on_a_tls_connection_with_a_certificate(broker) -> None:
    cl = Client(broker)
    cl.connect().tls = TlsPeer("TLSv1.3", "X", "alice", "CN=alice")
    cl.send_raw(PROTOCOL_HEADER)
    start = cl.expect(cmd.Connection.Start, 0)
    assert start.mechanisms.split() == ["EXTERNAL", "PLAIN", "AMQPLAIN"]


def test_external_logs_in_as_the_certificate_cn(broker) -> None:
    cl, _ = start_ok_external(broker, TlsPeer("TLSv1.3", "X", "alice", "CN=alice"),
                              peer_host="10.0.0.5")
    cl.expect(cmd.Connection.Tune, 0)
    cl.send(0, cmd.Connection.TuneOk(2047, 131072, 0), cmd.Connection.Open("/"))
    cl.expect(cmd.Connection.OpenOk, 0)
    assert cl.conn is not None and cl.conn.state is State.OPEN
    assert cl.conn.user is not None and cl.conn.user.name == "alice"
    assert cl.conn.auth_mechanism == EXTERNAL


def test_external_for_an_unknown_user_is_403(broker) -> None:
    cl, _ = start_ok_external(broker, TlsPeer("TLSv1.3", "X", "mallory", "CN=mallory"))
    close = cl.expect(cmd.Connection.Close, 0)
    assert close.reply_code == c.ACCESS_REFUSED
    assert close.reply_text == ("ACCESS_REFUSED - Login was refused using authentication "
                                "mechanism EXTERNAL. For details see the broker logfile.")
    assert cl.conn is not None and cl.conn.closed


def test_external_without_a_certificate_is_not_accepted(broker) -> None:
    for tls in (None, TlsPeer("TLSv1.3", "X")):
        cl, start = start_ok_external(broker, tls)
        assert EXTERNAL not in start.mechanisms.split()
        cl.expect_nothing()  # not offered: closed without a reply, as RabbitMQ (test_mechanisms)
        assert cl.conn is not None and cl.conn.user is None and cl.conn.state is State.CLOSING
    assert external_login(broker.access, None, "127.0.0.1")[1] is None


def test_external_keeps_guest_on_loopback(broker) -> None:
    tls = TlsPeer("TLSv1.3", "X", "guest", "CN=guest")
    login, user, why = external_login(broker.access, tls, "10.0.0.5")
    assert (login, user) == ("guest", None)
    assert why == "ACCESS_REFUSED - user 'guest' can only connect via localhost"
    login, user, why = external_login(broker.access, tls, "127.0.0.1")
    assert user is not None and user.name == "guest" and why == ""


def test_plain_still_works_on_a_tls_connection(broker) -> None:
    cl = Client(broker)
    cl.connect().tls = TlsPeer("TLSv1.3", "X", "alice", "CN=alice")
    cl.handshake("alice", "secret")
    assert cl.conn is not None and cl.conn.state is State.OPEN
    assert cl.conn.auth_mechanism == "PLAIN"


def test_peer_link_refusal() -> None:
    assert peer_link_refusal(None, required=False) is None
    assert "cluster CA" in (peer_link_refusal(None, required=True) or "")
    client_cert = TlsPeer("TLSv1.3", "X", "n1", "CN=n1")  # from the client CA, not the cluster's
    assert "cluster CA" in (peer_link_refusal(client_cert, required=True) or "")
    node_cert = TlsPeer("TLSv1.3", "X", None, "CN=n1", "n1")
    assert peer_link_refusal(node_cert, required=True) is None
    assert peer_link_refusal(node_cert, required=True, node="n1") is None
    assert "n2" in (peer_link_refusal(node_cert, required=True, node="n2") or "")
