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
