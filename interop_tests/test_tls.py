"""AMQPS (issue 13, TLS): real clients over real TLS against our broker's ``--tls-port``.

The CA and server certificate (``localhost``/127.0.0.1) are those of
``interop_tests.rabbitmq_node.tls_pki``, which the private RabbitMQ node's AMQPS listener uses too;
client certificates whose CN is a broker user (guest: allowed from loopback) or not (nobody) are
issued from it with ``cluster.ca`` (``amqp-broker cluster-ca issue``). pika, aio-pika and py-amqp
publish and consume over TLS; with ``--auth-mechanisms EXTERNAL,PLAIN,AMQPLAIN`` SASL EXTERNAL logs
in as the client certificate's CN (pika, aio-pika's ``?auth=external``, py-amqp's
``amqp.sasl.EXTERNAL``), an unknown CN is 403; with ``--tls-fail-if-no-peer-cert`` a client without
a certificate is refused; a plain AMQP client on the TLS port fails cleanly and the broker keeps
serving; the management API over HTTPS lists the amqp/ssl listener and the connection's TLS fields.

Differential, against ours and RabbitMQ 3.10 (issue 22 item 6, ``auth_mechanisms``): with the
default mechanisms (PLAIN, AMQPLAIN) py-amqp presenting a client certificate logs in with its
password, and pika's EXTERNAL credentials are refused (EXTERNAL is not offered); with EXTERNAL
configured py-amqp (which prefers it) logs in as the certificate's CN, and an unknown CN is 403;
a Start-Ok naming a mechanism not offered gets the socket closed without a reply. Source:
RabbitMQ "TLS Support", "Access Control" (``auth_mechanisms``, EXTERNAL,
``rabbitmq_auth_mechanism_ssl``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import amqp
import pika
import pika.credentials
import pika.exceptions
import pytest
from pamqp import commands as pamqp_commands

from cluster import ca
from interop_tests.conftest import _free_port
from interop_tests.rabbitmq_node import (
    RabbitMQUnavailable,
    rabbitmq_auth_mechanisms,
    rabbitmq_tls_port,
    tls_pki,
)
from interop_tests.rawamqp import RawConnection

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki() -> Path:
    """ca.crt, localhost.crt/key (server: DNS localhost, IP 127.0.0.1; ``tls_pki()``, shared with
    the private RabbitMQ node), guest.crt/key and nobody.crt/key (clients)."""
    d = tls_pki()
    for client in ("guest", "nobody"):
        if not (d / f"{client}.crt").exists():
            ca.issue_node(d, client)
    return d


def tls_args(pki: Path, port: int, *extra: str) -> tuple[str, ...]:
    return ("--tls-port", str(port), "--tls-cert", str(pki / "localhost.crt"),
            "--tls-key", str(pki / "localhost.key"), "--tls-ca", str(pki / "ca.crt"), *extra)


def client_context(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return ctx


def pika_params(pki: Path, port: int, cert: str | None = None,
                external: bool = False) -> pika.ConnectionParameters:
    kw = {"credentials": pika.credentials.ExternalCredentials()} if external else {}
    return pika.ConnectionParameters(
        "127.0.0.1", port, ssl_options=pika.SSLOptions(client_context(pki, cert), "127.0.0.1"),
        connection_attempts=1, socket_timeout=5, blocked_connection_timeout=5, **kw)


#: ``--auth-mechanisms`` that offers EXTERNAL (to clients with a verified certificate).
WITH_EXTERNAL = ("--auth-mechanisms", "EXTERNAL,PLAIN,AMQPLAIN")


@pytest.fixture
def tls_broker(broker_factory, pki):
    """Our broker with an AMQPS listener asking for (not requiring) client certificates, and
    EXTERNAL offered."""
    port = _free_port()
    b = broker_factory(*tls_args(pki, port, "--tls-verify", "verify_peer", *WITH_EXTERNAL))
    b.tls_port = port
    return b


def pika_round_trip(params: pika.ConnectionParameters, queue: str) -> bytes:
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, auto_delete=True)
        ch.basic_publish("", queue, b"over tls")
        for method, _props, body in ch.consume(queue, inactivity_timeout=5):
            assert method is not None, "no delivery within 5 s"
            ch.basic_ack(method.delivery_tag)
            return body
        raise AssertionError("consume ended")
    finally:
        conn.close()


def test_pika_over_tls(tls_broker, pki, unique_name) -> None:
    assert pika_round_trip(pika_params(pki, tls_broker.tls_port), unique_name) == b"over tls"


def test_aio_pika_over_tls(tls_broker, pki, unique_name) -> None:
    import aio_pika

    async def main() -> bytes:
        conn = await aio_pika.connect(f"amqps://guest:guest@127.0.0.1:{tls_broker.tls_port}/",
                                      ssl_context=client_context(pki), timeout=5)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique_name, auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over tls"), unique_name)
            msg = await q.get(timeout=5, fail=True)
            assert msg is not None
            await msg.ack()
            return msg.body

    assert asyncio.run(asyncio.wait_for(main(), 20)) == b"aio over tls"


def test_aio_pika_external(tls_broker, pki) -> None:
    import aio_pika

    async def main() -> bool:
        conn = await aio_pika.connect(
            f"amqps://127.0.0.1:{tls_broker.tls_port}/?auth=external",
            ssl_context=client_context(pki, "guest"), timeout=5)
        async with conn:
            ch = await conn.channel()
            return not ch.is_closed

    assert asyncio.run(asyncio.wait_for(main(), 20))


def py_amqp_ssl(pki: Path, cert: str | None = None) -> dict:
    opts = {"ca_certs": str(pki / "ca.crt"), "cert_reqs": ssl.CERT_REQUIRED,
            "server_hostname": "127.0.0.1"}
    if cert:
        opts.update(certfile=str(pki / f"{cert}.crt"), keyfile=str(pki / f"{cert}.key"))
    return opts


def test_py_amqp_over_tls(tls_broker, pki, unique_name) -> None:
    with amqp.Connection(f"127.0.0.1:{tls_broker.tls_port}", ssl=py_amqp_ssl(pki),
                         connect_timeout=5) as conn:
        ch = conn.channel()
        ch.queue_declare(unique_name, auto_delete=True)
        ch.basic_publish(amqp.Message("py-amqp over tls"), "", unique_name)
        deadline = time.monotonic() + 5
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = ch.basic_get(unique_name, no_ack=True)
        assert msg is not None and msg.body == "py-amqp over tls"


def test_py_amqp_external(tls_broker, pki) -> None:
    with amqp.Connection(f"127.0.0.1:{tls_broker.tls_port}", ssl=py_amqp_ssl(pki, "guest"),
                         authentication=(amqp.sasl.EXTERNAL(),), connect_timeout=5) as conn:
        assert conn.connected
        assert b"EXTERNAL" in conn.mechanisms


def test_pika_external_logs_in_as_the_certificate_cn(tls_broker, pki, unique_name) -> None:
    params = pika_params(pki, tls_broker.tls_port, cert="guest", external=True)
    assert pika_round_trip(params, unique_name) == b"over tls"


def test_external_with_an_unknown_cn_is_403(tls_broker, pki) -> None:
    params = pika_params(pki, tls_broker.tls_port, cert="nobody", external=True)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "403" in str(info.value) and "EXTERNAL" in str(info.value)


def test_external_is_not_offered_without_a_certificate(tls_broker, pki) -> None:
    params = pika_params(pki, tls_broker.tls_port, external=True)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)


def test_client_without_certificate_refused_when_required(broker_factory, pki) -> None:
    port = _free_port()
    broker_factory(*tls_args(pki, port, "--tls-verify", "verify_peer",
                             "--tls-fail-if-no-peer-cert"))
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika_params(pki, port))
    # with a certificate from the CA it goes through (PLAIN still works on top of it)
    conn = pika.BlockingConnection(pika_params(pki, port, cert="nobody"))
    assert conn.is_open
    conn.close()


def test_client_with_a_certificate_from_another_ca_is_refused(broker_factory, pki,
                                                              tmp_path) -> None:
    other = tmp_path / "other-ca"
    ca.init_ca(other)
    ca.issue_node(other, "guest")
    port = _free_port()
    broker_factory(*tls_args(pki, port, "--tls-verify", "verify_peer"))
    ctx = client_context(pki)
    ctx.load_cert_chain(str(other / "guest.crt"), str(other / "guest.key"))
    params = pika.ConnectionParameters("127.0.0.1", port, ssl_options=pika.SSLOptions(
        ctx, "127.0.0.1"), connection_attempts=1, socket_timeout=5,
        credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)


def test_plain_amqp_on_the_tls_port_fails_cleanly(tls_broker, pki, unique_name) -> None:
    # raw AMQP header: the broker sends a TLS alert or just closes; never an AMQP frame
    for payload in (b"AMQP\x00\x00\x09\x01", b"\x16\x03\x01\x00\x05hello", b"\xff" * 4096):
        with socket.create_connection(("127.0.0.1", tls_broker.tls_port), timeout=5) as s:
            s.sendall(payload)
            data = b""
            try:
                while len(data) < 65536:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except (ConnectionResetError, TimeoutError):
                pass
            assert not data.startswith(b"\x01\x00\x00")  # no AMQP method frame
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", tls_broker.tls_port, connection_attempts=1, socket_timeout=3))
    # still serving, both listeners
    assert pika_round_trip(pika_params(pki, tls_broker.tls_port), unique_name) == b"over tls"
    conn = pika.BlockingConnection(pika.URLParameters(tls_broker.uri))
    conn.close()
    assert tls_broker.process.poll() is None


def test_management_over_https_lists_tls(broker_factory, pki) -> None:
    port, mgmt = _free_port(), _free_port()
    broker_factory(*tls_args(pki, port, "--tls-verify", "verify_peer", "--management-tls",
                             "--management-port", str(mgmt), *WITH_EXTERNAL))
    conn = pika.BlockingConnection(pika_params(pki, port, cert="guest", external=True))
    try:
        ctx = client_context(pki)
        req = urllib.request.Request(f"https://127.0.0.1:{mgmt}/api/overview")
        req.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    overview = json.load(resp)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        protocols = {x["protocol"]: x["port"] for x in overview["listeners"]}
        assert protocols["amqp/ssl"] == port and "https" in protocols
        req = urllib.request.Request(f"https://127.0.0.1:{mgmt}/api/connections")
        req.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            conns = json.load(resp)
        tls_conns = [c for c in conns if c["ssl"]]
        assert len(tls_conns) == 1
        c = tls_conns[0]
        assert c["auth_mechanism"] == "EXTERNAL" and c["user"] == "guest"
        assert c["peer_cert_subject"] == "CN=guest" and c["ssl_protocol"].startswith("tlsv1.")
    finally:
        conn.close()


# ------------------------------------------- differential: SASL mechanisms over TLS (issue 22)
@pytest.fixture(params=["ours", "rabbitmq"])
def tls_port_offering(request, broker_factory, pki):
    """``tls_port_offering(mechanisms)`` -> the TLS port (verify_peer, certificate optional, the
    ``pki`` server certificate) of our broker started with ``--auth-mechanisms mechanisms``, or
    of the private RabbitMQ node offering them (its ``auth_mechanisms``) until the test ends;
    ``None``: the default (PLAIN, AMQPLAIN) on both. The RabbitMQ run is skipped without it."""
    with contextlib.ExitStack() as stack:
        def offering(mechanisms: str | None) -> int:
            if request.param == "ours":
                port = _free_port()
                extra = ("--auth-mechanisms", mechanisms) if mechanisms else ()
                broker_factory(*tls_args(pki, port, "--tls-verify", "verify_peer", *extra))
                return port
            try:
                port = rabbitmq_tls_port()
            except RabbitMQUnavailable as exc:
                pytest.skip(str(exc))
            if mechanisms:
                stack.enter_context(rabbitmq_auth_mechanisms(*mechanisms.split(",")))
            return port

        yield offering


def test_differential_py_amqp_with_a_certificate_logs_in_with_its_password(
        tls_port_offering, pki, unique_name) -> None:
    """Issue 22 item 6: py-amqp prefers EXTERNAL when offered. By default it is not, so a client
    certificate whose CN is no user (nobody) does not matter: py-amqp logs in as guest/guest
    (AMQPLAIN, its next choice) and declares a queue."""
    port = tls_port_offering(None)
    with amqp.Connection(f"127.0.0.1:{port}", ssl=py_amqp_ssl(pki, "nobody"),
                         connect_timeout=5) as conn:
        assert sorted(conn.mechanisms) == [b"AMQPLAIN", b"PLAIN"]
        ch = conn.channel()
        assert ch.queue_declare(unique_name, auto_delete=True).queue == unique_name


def test_differential_pika_external_is_refused_by_default(tls_port_offering, pki) -> None:
    port = tls_port_offering(None)
    with pytest.raises(pika.exceptions.AuthenticationError, match="EXTERNAL"):
        # pika's own refusal: the server does not offer EXTERNAL
        pika.BlockingConnection(pika_params(pki, port, cert="guest", external=True))


def test_differential_py_amqp_external_when_configured(tls_port_offering, pki) -> None:
    port = tls_port_offering("EXTERNAL,PLAIN")
    # a user name and password that log nobody in: only the certificate's CN (guest) can
    with amqp.Connection(f"127.0.0.1:{port}", ssl=py_amqp_ssl(pki, "guest"), userid="no-such",
                         password="wrong", connect_timeout=5) as conn:
        assert sorted(conn.mechanisms) == [b"EXTERNAL", b"PLAIN"]
        assert conn.channel().is_open
    with pytest.raises(amqp.exceptions.AccessRefused, match="ACCESS_REFUSED - Login was refused "
                       "using authentication mechanism EXTERNAL"):
        with amqp.Connection(f"127.0.0.1:{port}", ssl=py_amqp_ssl(pki, "nobody"),
                             connect_timeout=5):
            pass


def test_differential_pika_over_tls_and_external(tls_port_offering, pki, unique_name) -> None:
    port = tls_port_offering("EXTERNAL,PLAIN,AMQPLAIN")
    assert pika_round_trip(pika_params(pki, port), unique_name) == b"over tls"
    assert pika_round_trip(pika_params(pki, port, cert="guest", external=True),
                           unique_name + ".ext") == b"over tls"
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(pika_params(pki, port, cert="nobody", external=True))
    assert ("ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For "
            "details see the broker logfile.") in str(info.value)


def test_differential_a_mechanism_not_offered_gets_no_reply(broker) -> None:
    """RabbitMQ's rabbit_reader: a Start-Ok naming a mechanism that was not offered (EXTERNAL on
    a plain connection) is COMMAND_INVALID, which before the connection runs is not sent: the
    socket is closed (after 3 s) without Connection.Close."""
    with RawConnection(broker.host, broker.port) as raw:
        raw.send(b"AMQP\x00\x00\x09\x01")
        _, start = raw.read_method()
        mechanisms = start.mechanisms
        if isinstance(mechanisms, bytes):
            mechanisms = mechanisms.decode()
        assert "EXTERNAL" not in mechanisms.split()
        raw.send_method(pamqp_commands.Connection.StartOk(
            client_properties={"product": "test_tls"}, mechanism="EXTERNAL", response="",
            locale="en_US"))
        assert raw.outcome(timeout=15) == ("eof", None, "")
