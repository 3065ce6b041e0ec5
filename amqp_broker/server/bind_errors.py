"""Bind errors that name the socket that failed and the setting that moves it.

A broker opens up to four listeners at start (AMQP, AMQPS, management HTTP, Prometheus); an
``[Errno 98] Address already in use`` alone does not say which. ``naming(...)`` wraps a bind and
turns its ``OSError`` into a ``BindError`` whose text is, for example,
``management HTTP listener on 127.0.0.1:15672: [Errno 98] Address already in use (set
--management-port, 0 = off)``. ``BindError`` is an ``OSError`` with the original ``errno``, so
code that handles ``OSError`` (``amqp_broker.__main__``: exit code 1, one line on stderr) keeps
working. Source: issue 22 item 2 (a bind error always names the socket that failed).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BindError", "naming", "AMQP", "AMQPS", "MANAGEMENT", "PROMETHEUS"]

#: (what the listener is, the hint naming the flag that sets its port)
AMQP = ("AMQP listener", "set --port, 0 = a free port")
AMQPS = ("AMQPS (TLS) listener", "set --tls-port, 0 = a free port")
MANAGEMENT = ("management HTTP listener", "set --management-port, 0 = off")
PROMETHEUS = ("Prometheus listener", "set --prometheus-port, 0 = off")


def address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (``[::1]:5672``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class BindError(OSError):
    """A listener could not bind ``host``:``port``. ``errno`` is the cause's (98 EADDRINUSE, 13
    EACCES, 99 EADDRNOTAVAIL...); ``str()`` names the listener, its address, the cause and the
    flag to set (module docstring)."""

    def __init__(self, what: str, host: str, port: int, hint: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.what, self.host, self.port, self.hint = what, host, port, hint
        if isinstance(cause.errno, int) and cause.errno > 0:
            # asyncio's create_server puts its own sentence in strerror; the OS's is shorter
            # (a name lookup's gaierror has a negative errno: its own text is kept)
            self.reason = f"[Errno {cause.errno}] {os.strerror(cause.errno)}"
        else:
            self.reason = str(cause) or type(cause).__name__

    def __str__(self) -> str:
        return f"{self.what} on {address(self.host, self.port)}: {self.reason} ({self.hint})"


@contextmanager
def naming(listener: tuple[str, str], host: str, port: int) -> Iterator[None]:
    """Run a bind of ``listener`` (``AMQP``, ``AMQPS``, ``MANAGEMENT``, ``PROMETHEUS``) on
    ``host``:``port``; an ``OSError`` it raises comes out as ``BindError`` (chained), whose hint
    names ``--host`` instead when the address is the problem (an unknown name, EADDRNOTAVAIL)."""
    try:
        yield
    except BindError:
        raise
    except OSError as exc:
        what, hint = listener
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            hint = "set --host to an address of this machine"   # the port is not the problem
        raise BindError(what, host, port, hint, exc) from exc
