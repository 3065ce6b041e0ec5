"""``clients.uri``: RabbitMQ URI spec cases."""

import pytest

from clients.uri import parse_uri


def test_defaults():
    p = parse_uri("amqp://")
    assert (p.host, p.port, p.username, p.password, p.vhost, p.tls) == (
        "127.0.0.1", 5672, "guest", "guest", "/", False)


def test_full_uri_with_encoded_vhost_and_params():
    p = parse_uri("amqps://us%40r:p%3Ass@broker.example:5999/%2Fprod?heartbeat=10&frame_max=8192"
                  "&channel_max=100&connection_timeout=2500&verify=verify_none")
    assert p.tls and p.port == 5999 and p.host == "broker.example"
    assert (p.username, p.password, p.vhost) == ("us@r", "p:ss", "/prod")
    assert (p.heartbeat, p.frame_max, p.channel_max) == (10, 8192, 100)
    assert p.connection_timeout == 2.5 and p.verify is False
    assert p.ssl_context() is not None


@pytest.mark.parametrize("uri,vhost", [("amqp://h/", "/"), ("amqp://h/%2F", "/"),
                                       ("amqp://h/dev", "dev"), ("amqp://h", "/")])
def test_vhost(uri, vhost):
    assert parse_uri(uri).vhost == vhost


def test_amqps_default_port_and_ipv6():
    assert parse_uri("amqps://h").port == 5671
    p = parse_uri("amqp://[::1]:5673/")
    assert p.host == "::1" and p.address == "[::1]:5673"


@pytest.mark.parametrize("bad", ["http://h/", "amqp://h:notaport/", "amqp://h/?heartbeat=x",
                                 "amqp://h/?bogus=1", "amqp://h/?verify=maybe",
                                 "amqp://h/?heartbeat=-1"])
def test_rejects(bad):
    with pytest.raises(ValueError):
        parse_uri(bad)
