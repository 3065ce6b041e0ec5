"""The cluster CA: peer links authenticate with mutual TLS (DESIGN §4, issue 5 "Peers must authenticate").

Owns the files of a cluster CA directory and the TLS contexts built from them:

    DIR/ca.key  DIR/ca.crt         EC P-256 CA key (mode 0600) and self-signed certificate
    DIR/NODE.key  DIR/NODE.crt     one node's key (0600) and certificate, signed by the CA

A node certificate's subject CN is the node name; its SubjectAltName holds ``DNS:NODE`` plus every
``--host`` (an IP address or a DNS name); extended key usage serverAuth and clientAuth, because
every broker is both server and client of every other (proposal "Overview"). Every certificate
carries subject and authority key identifiers, key usage and basic constraints, so verification
with ``ssl.VERIFY_X509_STRICT`` passes. ``server_ssl_context`` requires a client certificate from
the same CA (mTLS); note (DESIGN §5) that a TLS 1.3 client without a certificate completes its
handshake and only sees the server's refusal as EOF on its first read.

Must not know: sockets, the broker, the membership rules. Raises ``FileExistsError`` rather than
overwrite a key, ``FileNotFoundError`` when the CA is missing, ``ValueError`` for a bad node name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["init_ca", "issue_node", "server_ssl_context", "client_ssl_context", "peer_node_name",
           "node_paths"]

_NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_ONE_DAY = datetime.timedelta(days=1)


def _write(path: Path, data: bytes, private: bool, force: bool) -> None:
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists (use --force to replace it)")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if private:
        os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def node_paths(directory: str | os.PathLike[str], node: str) -> tuple[Path, Path]:
    """``(DIR/NODE.crt, DIR/NODE.key)``; raises ``ValueError`` when ``node`` is not a DNS label
    (letters, digits, inner hyphens, at most 63 characters: it goes in the certificate as DNS)."""
    if not _NODE_NAME.match(node) or node == "ca":
        raise ValueError(f"node name {node!r} must be a DNS label other than 'ca'")
    d = Path(directory)
    return d / f"{node}.crt", d / f"{node}.key"


def init_ca(directory: str | os.PathLike[str], name: str = "amqp-broker cluster CA",
            days: int = 3650, force: bool = False) -> Path:
    """Make a new CA in ``directory`` (created when missing); returns the path of ``ca.crt``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY).not_valid_after(now + days * _ONE_DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(d / "ca.key", _key_pem(key), private=True, force=force)
    _write(d / "ca.crt", cert.public_bytes(serialization.Encoding.PEM), private=False, force=True)
    return d / "ca.crt"


def _load_ca(d: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("ca.key is not an EC key")
    return cert, key


def _san(node: str, hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = [x509.DNSName(node)]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_node(directory: str | os.PathLike[str], node: str, hosts: Sequence[str] = (),
               days: int = 825, force: bool = False) -> tuple[Path, Path]:
    """Issue ``NODE.crt``/``NODE.key`` for ``node`` reachable at ``hosts`` (IPs or DNS names);
    returns their paths. Needs ``init_ca`` first (``FileNotFoundError`` otherwise)."""
    d = Path(directory)
    crt_path, key_path = node_paths(d, node)
    ca_cert, ca_key = _load_ca(d)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY).not_valid_after(now + days * _ONE_DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=True, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(_san(node, hosts), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(key_path, _key_pem(key), private=True, force=force)
    _write(crt_path, cert.public_bytes(serialization.Encoding.PEM), private=False, force=True)
    return crt_path, key_path


def _context(purpose: ssl.Purpose, directory: str | os.PathLike[str], node: str) -> ssl.SSLContext:
    d = Path(directory)
    crt, key = node_paths(d, node)
    proto = ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH else ssl.PROTOCOL_TLS_CLIENT
    ctx = ssl.SSLContext(proto)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(crt, key)
    ctx.load_verify_locations(cafile=d / "ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    return ctx


def server_ssl_context(directory: str | os.PathLike[str], node: str) -> ssl.SSLContext:
    """TLS server context for a peer listener: our node certificate, and a client certificate
    from the cluster CA is *required* (mTLS). Read the peer's name with ``peer_node_name``."""
    return _context(ssl.Purpose.CLIENT_AUTH, directory, node)


def client_ssl_context(directory: str | os.PathLike[str], node: str) -> ssl.SSLContext:
    """TLS client context for a peer link: presents our node certificate, verifies the server's
    chain and name. Connect with ``server_hostname`` = the peer's node name (its ``DNS:NODE``) or
    the IP it was issued for."""
    ctx = _context(ssl.Purpose.SERVER_AUTH, directory, node)
    ctx.check_hostname = True
    return ctx


def peer_node_name(peercert: dict[str, Any] | None) -> str | None:
    """The node name (subject CN) of a verified peer certificate, as ``SSLSocket.getpeercert()``
    or anyio's ``TLSAttribute.peer_certificate`` return it; None when there is none."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
