"""Peer authentication: the cluster CA with a real mutual-TLS handshake on 127.0.0.1, the CLI, and the
shared-secret HMAC challenge-response."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from cluster import ca, ca_cli, secret


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ca")
    ca.init_ca(d)
    ca.issue_node(d, "node-a", ["127.0.0.1"])
    ca.issue_node(d, "node-b", ["127.0.0.1", "broker-b.example"])
    return d


class _Server:
    """A one-connection TLS echo server on 127.0.0.1 (a thread); records what happened."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.peer: str | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(5)
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                self.peer = ca.peer_node_name(tls.getpeercert())
                tls.sendall(tls.recv(100))
        except (ssl.SSLError, OSError) as exc:
            self.error = exc
        finally:
            self.sock.close()

    def join(self) -> None:
        self.thread.join(5)


def _talk(ctx: ssl.SSLContext, port: int, hostname: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=hostname) as tls:
        tls.sendall(b"ping")
        return tls.recv(100)


def test_mutual_tls_handshake_names_both_peers(ca_dir: Path) -> None:
    server = _Server(ca.server_ssl_context(ca_dir, "node-a"))
    assert _talk(ca.client_ssl_context(ca_dir, "node-b"), server.port, "node-a") == b"ping"
    server.join()
    assert server.error is None and server.peer == "node-b"
    ctx = ca.server_ssl_context(ca_dir, "node-a")
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.verify_flags & ssl.VERIFY_X509_STRICT


def test_server_is_verified_by_ip_too(ca_dir: Path) -> None:
    server = _Server(ca.server_ssl_context(ca_dir, "node-a"))
    assert _talk(ca.client_ssl_context(ca_dir, "node-b"), server.port, "127.0.0.1") == b"ping"
    server.join()


def test_client_without_certificate_is_refused(ca_dir: Path) -> None:
    server = _Server(ca.server_ssl_context(ca_dir, "node-a"))
    ctx = ssl.create_default_context(cafile=ca_dir / "ca.crt")   # trusts the CA, has no cert
    # DESIGN §5: under TLS 1.3 the client's handshake completes; the refusal shows on first read
    with pytest.raises((ssl.SSLError, ConnectionError)) as err:
        data = _talk(ctx, server.port, "node-a")
        if data == b"":
            raise ConnectionError("EOF on first read")
    server.join()
    assert server.error is not None and server.peer is None
    assert err.value is not None


def test_certificate_from_another_ca_is_refused(ca_dir: Path, tmp_path: Path) -> None:
    ca.init_ca(tmp_path)
    ca.issue_node(tmp_path, "node-b", ["127.0.0.1"])
    server = _Server(ca.server_ssl_context(ca_dir, "node-a"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        data = _talk(ca.client_ssl_context(tmp_path, "node-b"), server.port, "node-a")
        if data == b"":
            raise ConnectionError("EOF on first read")
    server.join()
    assert server.error is not None


def test_wrong_server_name_is_refused_by_the_client(ca_dir: Path) -> None:
    server = _Server(ca.server_ssl_context(ca_dir, "node-a"))
    with pytest.raises(ssl.SSLCertVerificationError):
        _talk(ca.client_ssl_context(ca_dir, "node-b"), server.port, "node-b")
    server.join()


def test_certificate_contents(ca_dir: Path) -> None:
    cert = x509.load_pem_x509_certificate((ca_dir / "node-b.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["node-b", "broker-b.example"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    cacert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = cacert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    for name in ("ca.key", "node-a.key"):
        assert stat.S_IMODE((ca_dir / name).stat().st_mode) == 0o600


def test_refuses_to_overwrite_and_checks_names(ca_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileExistsError):
        ca.init_ca(ca_dir)
    with pytest.raises(FileExistsError):
        ca.issue_node(ca_dir, "node-a")
    for bad in ("", "ca", "a_b", "-x", "x" * 64, "../evil"):
        with pytest.raises(ValueError):
            ca.issue_node(ca_dir, bad)
    with pytest.raises(FileNotFoundError):
        ca.issue_node(tmp_path, "node-a")


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "cluster-ca"
    assert ca_cli.main(["init", "--dir", str(d)]) == 0
    assert ca_cli.main(["issue", "node-c", "--dir", str(d), "--host", "127.0.0.2"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(d / "ca.crt"), str(d / "ca.key"), str(d / "node-c.crt"),
                   str(d / "node-c.key")]
    assert ca_cli.main(["issue", "node-c", "--dir", str(d)]) == 1
    assert "exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        ca_cli.main(["bogus"])
    assert exc.value.code == 2


# ------------------------------------------------------------------ shared secret

SECRET = b"correct horse battery staple 42"


def test_hmac_exchange_accepts_the_right_secret() -> None:
    server = secret.SecretServer(SECRET)
    challenge = server.challenge(secret.initial_response("node-b"))
    assert len(challenge) == 64 and SECRET.hex() not in challenge
    response = secret.answer(SECRET, "node-b", challenge)
    assert SECRET not in response.encode() and SECRET.hex() not in response
    assert server.verify(response) == "node-b"


def test_hmac_exchange_through_pamqp_types() -> None:
    # pamqp hands longstr fields back as str (valid UTF-8) or bytes: both work
    server = secret.SecretServer(SECRET)
    challenge = server.challenge(b"node-b")
    assert server.verify(secret.answer(SECRET, "node-b", challenge.encode()).encode()) == "node-b"


@pytest.mark.parametrize("case", ["wrong secret", "other node", "garbage", "replay", "twice"])
def test_hmac_exchange_rejects(case: str) -> None:
    server = secret.SecretServer(SECRET)
    challenge = server.challenge("node-b")
    if case == "wrong secret":
        response = secret.answer(b"x" * 32, "node-b", challenge)
    elif case == "other node":
        response = secret.answer(SECRET, "node-c", challenge)
    elif case == "garbage":
        response = "zz" * 32
    elif case == "replay":   # an answer recorded on another connection
        other = secret.SecretServer(SECRET)
        response = secret.answer(SECRET, "node-b", other.challenge("node-b"))
    else:
        response = secret.answer(SECRET, "node-b", challenge)
        assert server.verify(response) == "node-b"
    with pytest.raises(secret.AuthenticationFailed):
        server.verify(response)


def test_secret_rules(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        secret.SecretServer(b"short")
    with pytest.raises(secret.AuthenticationFailed):
        secret.SecretServer(SECRET).verify("00")
    with pytest.raises(ValueError):
        secret.answer(SECRET, "n", "not hex")
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    assert secret.load_secret(path) == SECRET
    path.write_bytes(b"tiny\n")
    with pytest.raises(ValueError):
        secret.load_secret(path)
