"""The AMQPS listener's pure parts: certificate names (CN, RFC 4514 DN) and the server contexts
built from ``cluster-ca`` made files (verify modes, TLS 1.2 minimum, SNI switch for peers)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from amqp_broker.server.tls import TlsOptions, cert_names, client_facing_context, server_context
from cluster import ca


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ca.init_ca(d)
    ca.issue_node(d, "localhost", ["127.0.0.1"])
    ca.issue_node(d, "alice")
    ca.issue_node(d, "n1", ["127.0.0.1"])
    return d


def der(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(
        serialization.Encoding.DER)


def test_cert_names_reads_cn_and_dn(pki) -> None:
    assert cert_names(der(pki / "alice.crt")) == ("alice", "CN=alice")


def test_cert_names_of_garbage() -> None:
    assert cert_names(b"not a certificate") == (None, "")


@pytest.mark.parametrize("verify,fail,mode", [
    ("verify_none", False, ssl.CERT_NONE),
    ("verify_peer", False, ssl.CERT_OPTIONAL),
    ("verify_peer", True, ssl.CERT_REQUIRED),
])
def test_verify_modes(pki, verify, fail, mode) -> None:
    ctx = client_facing_context(TlsOptions(str(pki / "localhost.crt"), str(pki / "localhost.key"),
                                           str(pki / "ca.crt"), verify, fail))
    assert ctx.verify_mode == mode
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_cluster_dir_alone_serves_with_the_node_certificate(pki) -> None:
    ctx, cluster = server_context(TlsOptions(cluster_dir=str(pki), node="n1"))
    assert ctx is cluster and ctx.verify_mode == ssl.CERT_REQUIRED


def test_client_context_switches_to_the_cluster_one_by_sni(pki) -> None:
    ctx, cluster = server_context(TlsOptions(str(pki / "localhost.crt"),
                                             str(pki / "localhost.key"), cluster_dir=str(pki),
                                             node="n1"))
    assert ctx is not cluster and ctx.sni_callback is not None

    class Sock:
        context = ctx

    sock = Sock()
    ctx.sni_callback(sock, "localhost", ctx)  # type: ignore[arg-type]
    assert sock.context is ctx
    ctx.sni_callback(sock, "n1", ctx)  # type: ignore[arg-type]
    assert sock.context is cluster


def test_no_certificate_at_all_is_an_error() -> None:
    with pytest.raises(ValueError):
        server_context(TlsOptions())


# ------------------------------------------------------------------------ the TLS configuration
def test_tls_config_flags_and_env() -> None:
    from amqp_broker.config import load_config
    cfg = load_config(["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem",
                       "--tls-verify", "verify_peer", "--tls-fail-if-no-peer-cert"], environ={})
    assert cfg.tls_enabled and cfg.tls_port == 5671 and cfg.tls_fail_if_no_peer_cert
    assert not load_config([], environ={}).tls_enabled
    env = {"AMQP_BROKER_TLS_CERT": "c", "AMQP_BROKER_TLS_KEY": "k", "AMQP_BROKER_TLS_CA": "a",
           "AMQP_BROKER_TLS_VERIFY": "verify_peer",
           "AMQP_BROKER_TLS_FAIL_IF_NO_PEER_CERT": "true"}
    assert load_config([], environ=env).tls_fail_if_no_peer_cert is True


@pytest.mark.parametrize("argv", [
    ["--tls-cert", "c.pem"],                                              # no key
    ["--tls-cert", "c", "--tls-key", "k", "--tls-verify", "verify_peer"],  # no CA
    ["--tls-cert", "c", "--tls-key", "k", "--tls-fail-if-no-peer-cert"],  # not verify_peer
    ["--management-tls"],                                                 # no certificate
    ["--cluster-tls-dir", "/nonexistent", "--node-name", "n1"],           # no node certificate
    ["--cluster-tls-dir", "/nonexistent", "--node-name", "a@b"],          # not a DNS label
])
def test_inconsistent_tls_config_is_refused(argv) -> None:
    from amqp_broker.config import ConfigError, load_config
    with pytest.raises(ConfigError):
        load_config(argv, environ={})


def test_bool_env_must_be_a_bool() -> None:
    from amqp_broker.config import ConfigError, load_config
    with pytest.raises(ConfigError):
        load_config([], environ={"AMQP_BROKER_MANAGEMENT_TLS": "maybe"})
