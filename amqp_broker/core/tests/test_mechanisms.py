"""Which SASL mechanisms Connection.Start offers (``core.mechanisms``, RabbitMQ's
``auth_mechanisms``): per setting and per connection (plain, TLS without and with a verified
client certificate, a cluster member), what a Start-Ok naming one that was not offered gets
(RabbitMQ's silent close), and the setting's parsing from flag, environment and TOML. Through the
sans-IO core; the server layer's ``TlsPeer`` is set on the connection by hand."""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
from pamqp import commands as cmd

from amqp_broker.core.broker import Broker
from amqp_broker.core.connection import CLOSE_TIMEOUT, State
from amqp_broker.core.external import TlsPeer
from amqp_broker.core.mechanisms import (
    mechanism_refusal,
    offered_mechanisms,
    parse_auth_mechanisms,
)

from .client import PROTOCOL_HEADER, Client
from .conftest import SETTINGS

PLAIN_TCP = None
TLS_NO_CERT = TlsPeer("TLSv1.3", "X")
TLS_CERT = TlsPeer("TLSv1.3", "X", "alice", "CN=alice")


def start(broker: Broker, tls: TlsPeer | None) -> tuple[Client, list[str]]:
    cl = Client(broker)
    cl.connect().tls = tls
    cl.send_raw(PROTOCOL_HEADER)
    return cl, cl.expect(cmd.Connection.Start, 0).mechanisms.split()


def broker_with(clock, mechanisms: str) -> Broker:
    settings = replace(SETTINGS, auth_mechanisms=parse_auth_mechanisms(mechanisms))
    return Broker(settings, clock=clock)


@pytest.mark.parametrize(("tls", "offered"), [
    (PLAIN_TCP, ["PLAIN", "AMQPLAIN"]),
    (TLS_NO_CERT, ["PLAIN", "AMQPLAIN"]),
    (TLS_CERT, ["PLAIN", "AMQPLAIN"]),  # a certificate alone does not bring EXTERNAL (issue 22)
])
def test_default_offers_plain_and_amqplain_only(broker, tls, offered) -> None:
    assert broker.settings.auth_mechanisms == ("PLAIN", "AMQPLAIN")
    assert start(broker, tls)[1] == offered


@pytest.mark.parametrize(("setting", "tls", "offered"), [
    ("EXTERNAL,PLAIN,AMQPLAIN", TLS_CERT, ["EXTERNAL", "PLAIN", "AMQPLAIN"]),
    ("EXTERNAL,PLAIN,AMQPLAIN", TLS_NO_CERT, ["PLAIN", "AMQPLAIN"]),
    ("EXTERNAL,PLAIN,AMQPLAIN", PLAIN_TCP, ["PLAIN", "AMQPLAIN"]),
    ("AMQPLAIN,PLAIN,EXTERNAL", TLS_CERT, ["AMQPLAIN", "PLAIN", "EXTERNAL"]),  # the order given
    ("PLAIN", TLS_CERT, ["PLAIN"]),
    ("EXTERNAL", TLS_CERT, ["EXTERNAL"]),
    ("EXTERNAL", PLAIN_TCP, []),
])
def test_configured_mechanisms_in_their_order(clock, setting, tls, offered) -> None:
    assert start(broker_with(clock, setting), tls)[1] == offered


def test_a_cluster_member_offers_the_peer_mechanism_last() -> None:
    # Connection.Start appends the cluster's own mechanism after the configured ones
    assert offered_mechanisms(("EXTERNAL", "PLAIN"), TLS_CERT) == ("EXTERNAL", "PLAIN")
    assert offered_mechanisms(("EXTERNAL", "PLAIN"), TLS_NO_CERT) == ("PLAIN",)


def start_ok(cl: Client, mechanism: str, response: str = "") -> None:
    cl.send(0, cmd.Connection.StartOk(client_properties={"product": "t"}, mechanism=mechanism,
                                      response=response))


@pytest.mark.parametrize(("setting", "tls", "mechanism"), [
    ("PLAIN,AMQPLAIN", TLS_CERT, "EXTERNAL"),   # known, not configured
    ("EXTERNAL,PLAIN", PLAIN_TCP, "EXTERNAL"),  # configured, but no certificate
    ("PLAIN", PLAIN_TCP, "AMQPLAIN"),
    ("PLAIN,AMQPLAIN", PLAIN_TCP, "CRAM-MD5"),  # unknown
])
def test_a_mechanism_not_offered_is_closed_without_a_reply(clock, setting, tls,
                                                           mechanism) -> None:
    """RabbitMQ's rabbit_reader: COMMAND_INVALID before the connection runs is not sent; the
    socket closes after SILENT_CLOSE_DELAY (3 s), whatever the client sends meanwhile."""
    broker = broker_with(clock, setting)
    cl, _ = start(broker, tls)
    start_ok(cl, mechanism, "\0alice\0secret")
    cl.send(0, cmd.Connection.TuneOk(2047, 131072, 0), cmd.Connection.Close(200, "bye", 0, 0))
    cl.expect_nothing()
    assert cl.conn is not None and not cl.conn.closed and cl.conn.user is None
    clock.advance(CLOSE_TIMEOUT - 0.1)
    broker.tick()
    assert not cl.conn.closed
    clock.advance(0.2)
    broker.tick()
    assert cl.conn.closed and cl.conn.state is State.CLOSED
    cl.expect_nothing()


def test_refusal_text_is_rabbitmqs() -> None:
    assert mechanism_refusal("EXTERNAL") == ("COMMAND_INVALID - invalid authentication "
                                             "mechanism 'EXTERNAL'")
    assert mechanism_refusal("FOO") == "COMMAND_INVALID - unknown authentication mechanism 'FOO'"


def test_external_when_configured_logs_in_and_plain_still_works(clock) -> None:
    broker = broker_with(clock, "EXTERNAL,PLAIN")
    cl, _ = start(broker, TLS_CERT)
    start_ok(cl, "EXTERNAL")
    cl.expect(cmd.Connection.Tune, 0)
    other = Client(broker, port=50001)
    other.connect().tls = TLS_CERT
    other.handshake("alice", "secret")
    assert other.conn is not None and other.conn.auth_mechanism == "PLAIN"


@pytest.mark.parametrize(("value", "parsed"), [
    ("PLAIN,AMQPLAIN", ("PLAIN", "AMQPLAIN")),
    (" external , plain ", ("EXTERNAL", "PLAIN")),
    (["AMQPLAIN", "EXTERNAL"], ("AMQPLAIN", "EXTERNAL")),
    ("PLAIN,PLAIN,AMQPLAIN,", ("PLAIN", "AMQPLAIN")),
])
def test_parse(value, parsed) -> None:
    assert parse_auth_mechanisms(value) == parsed


@pytest.mark.parametrize("value", ["PLAIN,CRAM-MD5", "", " , ", ["PLAIN", 3], "ANONYMOUS"])
def test_parse_refuses_and_names_the_valid_ones(value) -> None:
    with pytest.raises(ValueError, match="PLAIN, AMQPLAIN, EXTERNAL"):
        parse_auth_mechanisms(value)


# ------------------------------------------------------------ the setting in amqp_broker.config
# (loaded with importlib: config imports socket, which the core's import contract forbids here)
config = importlib.import_module("amqp_broker.config")


def test_setting_from_flag_env_and_toml(tmp_path) -> None:
    assert config.load_config([], {}).broker_settings().auth_mechanisms == ("PLAIN", "AMQPLAIN")
    flag = config.load_config(["--auth-mechanisms", "EXTERNAL,PLAIN,AMQPLAIN"], {})
    assert flag.broker_settings().auth_mechanisms == ("EXTERNAL", "PLAIN", "AMQPLAIN")
    env = config.load_config([], {"AMQP_BROKER_AUTH_MECHANISMS": "AMQPLAIN,EXTERNAL"})
    assert env.broker_settings().auth_mechanisms == ("AMQPLAIN", "EXTERNAL")
    for toml in ('auth_mechanisms = ["EXTERNAL", "PLAIN"]\n',
                 'auth_mechanisms = "EXTERNAL,PLAIN"\n',
                 'auth-mechanisms = ["EXTERNAL", "PLAIN"]\n'):
        path = tmp_path / "broker.toml"
        path.write_text(toml)
        from_file = config.load_config(["--config", str(path)], {})
        assert from_file.broker_settings().auth_mechanisms == ("EXTERNAL", "PLAIN")
    both = config.load_config(["--config", str(path), "--auth-mechanisms", "PLAIN"], {})
    assert both.broker_settings().auth_mechanisms == ("PLAIN",)  # the flag beats the file


@pytest.mark.parametrize(("argv", "env", "toml"), [
    (["--auth-mechanisms", "PLAIN,KERBEROS"], {}, None),
    ([], {"AMQP_BROKER_AUTH_MECHANISMS": ""}, None),
    ([], {}, 'auth_mechanisms = ["PLAIN", "SCRAM-SHA-256"]\n'),
    ([], {}, "auth_mechanisms = []\n"),
])
def test_unknown_mechanisms_are_a_config_error(tmp_path, argv, env, toml) -> None:
    if toml is not None:
        path = tmp_path / "broker.toml"
        path.write_text(toml)
        argv = ["--config", str(path)]
    with pytest.raises(config.ConfigError, match="auth_mechanisms: .*PLAIN, AMQPLAIN, EXTERNAL"):
        config.load_config(argv, env)
