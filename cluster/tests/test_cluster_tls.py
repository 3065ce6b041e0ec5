"""Peer links over mutual TLS (issue 13): two broker processes with ``--cluster-tls-dir`` (a CA and
node certificates made by ``cluster.ca``, as ``amqp-broker cluster-ca init/issue`` does) form one
view whose addresses are their TLS ports, a declaration propagates over the TLS links, and the
listener refuses peers that do not hold the cluster CA's certificate for the name they claim:
a ``cluster-peer`` connection with the right secret on the plain port is 403, one over TLS whose
certificate names another node is 403, one with a certificate from another CA fails the handshake.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import anyio
import pika
import pytest

from cluster import ca
from cluster.links import LinkError, PeerLinks
from cluster.secret import load_secret
from cluster.tests.processes import Cluster, Member, free_port, wait_for

pytestmark = pytest.mark.timeout(90)


def start(cluster: Cluster, octet: int, ca_dir: Path, seed: str | None = None,
          ) -> tuple[Member, str]:
    host = f"127.0.0.{octet}"
    tls_port = free_port(host)
    args = ["--cluster-tls-dir", str(ca_dir), "--tls-port", str(tls_port)]
    if seed:
        args += ["--seed", seed]
    member = cluster.start(octet, None, *args, wait=False)
    address = f"{host}:{tls_port}"
    wait_for(lambda: address in (member.members() or []), 20,
             f"n{octet} did not come up:\n{member.log_tail()}")
    return member, address


def peer_handshake(secret: bytes, me: str, host: str, port: int,
                   context: ssl.SSLContext | None, server_name: str) -> None:
    """Open a cluster-peer connection as ``me``; raises LinkError / OSError when refused."""
    links = PeerLinks(me, secret, on_failure=lambda _n: None)

    async def main() -> None:
        with anyio.fail_after(10):
            if context is None:
                stream = await anyio.connect_tcp(host, port)
            else:
                stream = await anyio.connect_tcp(host, port, ssl_context=context,
                                                 tls_hostname=server_name,
                                                 tls_standard_compatible=False)
            async with stream:
                await links._handshake(stream)

    anyio.run(main)


@pytest.fixture
def ca_dir(tmp_path) -> Path:
    d = tmp_path / "ca"
    ca.init_ca(d)
    for octet in (2, 3, 4):
        ca.issue_node(d, f"n{octet}", [f"127.0.0.{octet}"])
    return d


def test_peer_links_over_mutual_tls(cluster, ca_dir, tmp_path) -> None:
    n2, a2 = start(cluster, 2, ca_dir)
    n3, a3 = start(cluster, 3, ca_dir, seed=a2)
    wait_for(lambda: n2.members() == [a2, a3] and n3.members() == [a2, a3], 15,
             f"no common view:\n{n2.log_tail()}\n{n3.log_tail()}")
    # a joiner serves clients once it follows the metadata log (320 "joining" until then)
    wait_for(lambda: n3.serving() and n2.serving(), 30, f"not serving:\n{n3.log_tail()}")
    conn = n3.connect()
    conn.channel().queue_declare("over-tls", durable=True)
    conn.close()
    conn = n2.connect()
    conn.channel().queue_declare("over-tls", passive=True)  # 404 if it had not propagated
    conn.close()

    secret = load_secret(cluster.secret_file)
    host2, tls2 = a2.rsplit(":", 1)
    # the right secret, but on the plain port: no cluster CA certificate, 403
    with pytest.raises(LinkError, match="ACCESS_REFUSED - cluster-peer connections must present"):
        peer_handshake(secret, "n4", n2.host, n2.port, None, "n2")
    # n4's certificate from the cluster CA and the secret: accepted (a member-to-be)
    peer_handshake(secret, "n4", host2, int(tls2), ca.client_ssl_context(ca_dir, "n4"), "n2")
    # n4's certificate while claiming to be n9: 403
    with pytest.raises(LinkError, match="'n9' presented the certificate of 'n4'"):
        peer_handshake(secret, "n9", host2, int(tls2), ca.client_ssl_context(ca_dir, "n4"), "n2")
    # a certificate from another CA: the TLS handshake fails (or the first read, TLS 1.3)
    other = tmp_path / "other-ca"
    ca.init_ca(other)
    ca.issue_node(other, "n4", ["127.0.0.4"])
    ctx = ca.client_ssl_context(other, "n4")
    ctx.load_verify_locations(cafile=ca_dir / "ca.crt")  # it trusts our server; we don't trust it
    with pytest.raises((OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream)):
        peer_handshake(secret, "n4", host2, int(tls2), ctx, "n2")
    # both still serve clients and agree on the view
    assert n2.members() == [a2, a3] and n3.members() == [a2, a3]
    pika.BlockingConnection(pika.URLParameters(n2.uri)).close()
