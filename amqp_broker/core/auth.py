"""SASL mechanisms PLAIN and AMQPLAIN and the account check.

Source: RFC 4616 (PLAIN: ``\\0user\\0password``); RabbitMQ's AMQPLAIN (a field table with LOGIN and
PASSWORD, without the table's length prefix); RabbitMQ "Access Control": the guest user may connect
from loopback only. Must not know: sockets (the peer address is given as a string).
"""

from __future__ import annotations

import hmac
import ipaddress

from pamqp import decode

from .settings import User

__all__ = ["MECHANISMS", "parse_response", "authenticate", "is_loopback", "login_refused",
           "loopback_refused"]

MECHANISMS = ("PLAIN", "AMQPLAIN")


def parse_response(mechanism: str, response: bytes | str) -> tuple[str, str] | None:
    """(username, password) from a Start-Ok response, None when it cannot be parsed."""
    raw = response.encode("utf-8", "surrogateescape") if isinstance(response, str) else response
    try:
        if mechanism == "PLAIN":
            parts = raw.split(b"\x00")
            if len(parts) != 3:
                return None
            return parts[1].decode(), parts[2].decode()
        if mechanism == "AMQPLAIN":
            _, table = decode.field_table(len(raw).to_bytes(4, "big") + raw)
            login, password = table.get("LOGIN"), table.get("PASSWORD")
            if isinstance(login, bytes):
                login = login.decode()
            if isinstance(password, bytes):
                password = password.decode()
            if isinstance(login, str) and isinstance(password, str):
                return login, password
    except (ValueError, UnicodeDecodeError):
        return None
    return None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def authenticate(users: tuple[User, ...], username: str, password: str,
                 peer_host: str, mechanism: str = "PLAIN") -> tuple[User | None, str]:
    """Check credentials. Returns (user, "") or (None, reason) where reason is RabbitMQ's text."""
    for user in users:
        if user.name == username:
            if not hmac.compare_digest(user.password.encode(), password.encode()):
                break
            if user.loopback_only and not is_loopback(peer_host):
                return None, loopback_refused(username)
            return user, ""
    return None, login_refused(mechanism)


def loopback_refused(username: str) -> str:
    """RabbitMQ's text for a loopback-only user (guest) connecting from elsewhere."""
    return f"ACCESS_REFUSED - user '{username}' can only connect via localhost"


def login_refused(mechanism: str) -> str:
    """RabbitMQ's text for a wrong user name or password."""
    return (f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
            f"For details see the broker logfile.")
