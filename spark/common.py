"""What the source (``spark.consume``) and the sink (``spark.publish``) share: the connection to the
first answering broker of a ``uri`` list, round after round (``connect``), and option parsing.
No pyspark import."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Self

__all__ = ["OwnsConnection", "connect", "lowered_options", "option_uris", "option_int",
           "option_bool", "uris_for_attempt", "CONNECT_ROUNDS", "CONNECT_BACKOFF_MAX"]

#: Rounds over the ``uri`` list a Spark task's connect makes before it fails (backoff 0.1 s
#: doubling to ``CONNECT_BACKOFF_MAX``): a member changing its view may refuse for a moment.
CONNECT_ROUNDS = 3
CONNECT_BACKOFF_MAX = 1.0

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class OwnsConnection:
    """A holder of one ``clients.blocking.BlockingConnection`` in ``self.conn``: ``close()`` closes
    it, and so does the end of a ``with`` block (an error while closing is raised only when the
    block itself did not raise: it must not hide that error)."""

    conn: Any

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - closing after an error must not hide that error
            if exc[0] is None:
                raise


def connect(uris: Sequence[str], name: str, operation_timeout: float, *,
            rounds: int = CONNECT_ROUNDS, connect_timeout: float | None = None) -> Any:
    """A ``clients.blocking.BlockingConnection`` (client property ``connection_name``: ``name``)
    to the first answering broker of ``uris`` (AMQP URIs, ``clients.uri``), in order, ``rounds``
    rounds over the list (backoff 0.1 s doubling to ``CONNECT_BACKOFF_MAX`` s between rounds);
    ``operation_timeout``: seconds per request; ``connect_timeout``: at most this many seconds
    per address (TCP + AMQP handshake; a URI's ``connection_timeout`` when lower; None: the
    URI's). No reconnect: a stream consumer re-registered after a reconnect would start over at
    its ``x-stream-offset`` argument, and a publisher must not lose track of its confirms; a lost
    connection fails the Spark task, whose retry starts one broker further on
    (``uris_for_attempt``). Raises ``clients.NoBrokerAvailable`` when no broker answered in
    ``rounds`` rounds, ``ValueError`` for a bad URI. Source: RabbitMQ "Connections"
    (client-provided connection name)."""
    from clients.blocking import BlockingConnection
    from clients.uri import parse_uri

    params = [parse_uri(u) for u in uris]
    if connect_timeout is not None:
        params = [dataclasses.replace(p, connection_timeout=min(p.connection_timeout,
                                                                connect_timeout))
                  for p in params]
    return BlockingConnection(params, reconnect=False, operation_timeout=operation_timeout,
                              connect_attempts=rounds, backoff_max=CONNECT_BACKOFF_MAX,
                              client_properties={"connection_name": name})


# --------------------------------------------------------------------------- options
# Each raises ``error`` (the caller's: ``SourceError`` or ``SinkError``) for a bad value.
def lowered_options(options: Mapping[str, Any], known: set[str],
                    error: type[Exception]) -> dict[str, Any]:
    """``options`` as Spark hands them, keys lower-cased and None values left out; an unknown key
    that looks like a typo of one of ``known`` is an error."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    for key in opts:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            if near:
                raise error(f"unknown option {key!r}: did you mean {near[0]!r}?")
    return opts


def option_uris(opts: Mapping[str, Any], error: type[Exception]) -> tuple[str, ...]:
    """The comma-separated ``uri`` option (several: failover); required."""
    uris = tuple(u.strip() for u in opts.get("uri", "").split(",") if u.strip())
    if not uris:
        raise error('option "uri" is required: amqp://user:pass@host:port/vhost[,amqp://...]')
    return uris


def uris_for_attempt(uris: Sequence[str], attempt: int) -> tuple[str, ...]:
    """The broker list an ``attempt`` (0 first: a Spark task's attempt, or a source probe's
    retry) connects through, in order: ``uris`` turned by ``attempt`` places, so a retry starts
    at the broker after the one the failed attempt started at (a member that is frozen or
    unreachable, rather than refusing, would cost every retry its ``connection_timeout`` first)
    and goes round the rest."""
    k = attempt % len(uris) if uris else 0
    return tuple(uris[k:]) + tuple(uris[:k])


def option_int(name: str, value: str, lo: int, hi: int, error: type[Exception]) -> int:
    try:
        n = int(value)
    except ValueError:
        raise error(f"option {name}: expected an integer, got {value!r}") from None
    if not lo <= n <= hi:
        raise error(f"option {name}: must be in {lo}..{hi}, got {n}")
    return n


def option_bool(name: str, value: str, error: type[Exception]) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise error(f"option {name}: expected true or false, got {value!r}")
