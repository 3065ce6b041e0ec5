"""The Spark-free half of the ``amqp`` sink: options, rows -> AMQP messages, confirmed publishing.

Owns the sink's option parsing (``SinkOptions``), turning columns of rows into
``(body, routing_key, encoded properties)`` triples (``MessageBuilder``), the deterministic
message ids that make a replayed task or batch re-send the *same* ids (``message_id``), and a
publisher that streams those triples to a broker through ``clients.blocking`` in confirm mode,
failing on the first nack, return (mandatory) or lost connection (``Publisher``). Nothing here
imports pyspark, so it is unit-tested without a JVM; ``spark.datasource`` wires it into Spark.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clients.message import Properties, encode_properties

from .common import (
    OwnsConnection,
    connect,
    lowered_options,
    option_bool,
    option_int,
    option_uris,
    uris_for_attempt,
)

__all__ = [
    "SinkOptions", "MessageBuilder", "Publisher", "PROPERTY_COLUMNS", "message_id",
    "SinkError", "uris_for_attempt",
]

#: Columns read as message properties when present (same names as ``clients.Properties``).
PROPERTY_COLUMNS = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type", "app_id",
)

_KNOWN_OPTIONS = {
    "uri", "exchange", "routing_key", "routing_key_column", "format", "body_column",
    "mandatory", "content_type", "delivery_mode", "message_id_mode", "batch_size",
    "confirm_timeout", "commit_log", "fail_first_attempt_for_test",
}


class SinkError(Exception):
    """A bad option or schema, or a publish the broker did not take (nack, return, lost)."""


def _bool(name: str, value: str) -> bool:
    return option_bool(name, value, SinkError)


def _int(name: str, value: str, lo: int, hi: int) -> int:
    return option_int(name, value, lo, hi, SinkError)


@dataclass(frozen=True)
class SinkOptions:
    """The ``.option(...)`` values of ``format("amqp")``; see docs/spark.md
    and ``SinkOptions.parse`` for defaults. Immutable and picklable."""

    uris: tuple[str, ...]
    exchange: str = ""
    routing_key: str = ""
    routing_key_column: str | None = None
    format: str = "body"  # "body": a body/value column; "json": the whole row as JSON
    body_column: str | None = None
    mandatory: bool = True
    content_type: str | None = None
    delivery_mode: int | None = 2
    message_id_mode: str = "position"  # "position" | "content" | "none"
    batch_size: int = 2000
    confirm_timeout: float = 30.0
    commit_log: str | None = None
    fail_first_attempt_for_test: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Options as Spark hands them (keys case-insensitive). Raises ``SinkError`` for a
        missing ``uri``, a bad value, or an unknown option that looks like a typo of ours."""
        opts = lowered_options(options, _KNOWN_OPTIONS, SinkError)
        uris = option_uris(opts, SinkError)
        fmt = opts.get("format", "body").lower()
        if fmt not in ("body", "json"):
            raise SinkError(f'option format: "body" or "json", got {fmt!r}')
        mode = opts.get("message_id_mode", "position").lower()
        if mode not in ("position", "content", "none"):
            raise SinkError(f'option message_id_mode: "position", "content" or "none", '
                            f"got {mode!r}")
        if "routing_key" in opts and "routing_key_column" in opts:
            raise SinkError("give routing_key or routing_key_column, not both")
        dm = opts.get("delivery_mode", "2")
        try:
            timeout = float(opts.get("confirm_timeout", "30"))
        except ValueError:
            raise SinkError("option confirm_timeout: expected seconds") from None
        return cls(
            uris=uris,
            exchange=opts.get("exchange", ""),
            routing_key=opts.get("routing_key", ""),
            routing_key_column=opts.get("routing_key_column") or None,
            format=fmt,
            body_column=opts.get("body_column") or None,
            mandatory=_bool("mandatory", opts.get("mandatory", "true")),
            content_type=opts.get("content_type") or ("application/json" if fmt == "json"
                                                       else None),
            delivery_mode=None if dm.lower() == "none" else _int("delivery_mode", dm, 1, 2),
            message_id_mode=mode,
            batch_size=_int("batch_size", opts.get("batch_size", "2000"), 1, 1_000_000),
            confirm_timeout=timeout,
            commit_log=opts.get("commit_log") or None,
            fail_first_attempt_for_test=_bool(
                "fail_first_attempt_for_test", opts.get("fail_first_attempt_for_test", "false")),
        )

    def resolve_body_column(self, columns: Sequence[str]) -> str | None:
        """The column holding the body in "body" format (``body_column``, else ``body``, else
        ``value``); None in "json" format. Raises ``SinkError`` when there is none."""
        if self.format == "json":
            return None
        if self.body_column:
            if self.body_column not in columns:
                raise SinkError(f"body_column {self.body_column!r} is not a column of "
                                f"{list(columns)}")
            return self.body_column
        for name in ("body", "value"):
            if name in columns:
                return name
        raise SinkError(f"no body: add a 'body' or 'value' column (binary or string), set "
                        f"body_column, or use option format=json; columns: {list(columns)}")


def message_id(prefix: str, index: int) -> str:
    """The deterministic id of the ``index``-th row of the task identified by ``prefix``."""
    return f"{prefix}:{index}"


def _content_key(routing_key: str, body: bytes) -> str:
    return hashlib.blake2b(routing_key.encode() + b"\x00" + body, digest_size=12).hexdigest()


def _as_dict(value: Any) -> dict | None:
    """A map value as Arrow (list of pairs) or Row (dict) hands it, as a dict."""
    if value is None or isinstance(value, dict):
        return value
    return dict(value)


class MessageBuilder:
    """Turns column chunks (``{column: [values]}``) into ``(body, routing_key, props_raw)``.

    ``columns``: the DataFrame's column names; ``to_json``: in "json" format, a function from a
    row dict to JSON bytes (``spark.datasource`` builds it from the schema). ``id_prefix``: the
    task's identity for derived message ids (None: no derived ids). Rows are numbered from 0 in
    the order they reach ``build`` across calls, which is what ``message_id_mode=position``
    relies on; ``content`` mode numbers equal (routing key, body) pairs instead, so the id does
    not depend on the order of rows within the task.
    """

    def __init__(self, opts: SinkOptions, columns: Sequence[str], *,
                 to_json: Callable[[dict], bytes] | None = None,
                 id_prefix: str | None = None) -> None:
        self.opts = opts
        self.columns = list(columns)
        self.body_column = opts.resolve_body_column(self.columns)
        if opts.format == "json" and to_json is None:
            raise SinkError("json format needs a row encoder")
        self.to_json = to_json
        rk = opts.routing_key_column
        if rk is not None and rk not in self.columns:
            raise SinkError(f"routing_key_column {rk!r} is not a column of {self.columns}")
        self.prop_columns = [c for c in PROPERTY_COLUMNS if c in self.columns]
        # A message_id column is the rows' own id (and dedup key): no derived ids then.
        self.id_prefix = (id_prefix if opts.message_id_mode != "none"
                          and "message_id" not in self.columns else None)
        self.index = 0
        self._seen: dict[str, int] = {}
        base = Properties(content_type=opts.content_type, delivery_mode=opts.delivery_mode)
        self._constant_raw = encode_properties(base) if not self.prop_columns else None

    def build(self, chunk: Mapping[str, list]) -> list[tuple[bytes, str, bytes]]:
        """Messages of one chunk of rows (every column's list has the same length)."""
        opts = self.opts
        n = len(next(iter(chunk.values()))) if chunk else 0
        if n == 0:
            return []
        bodies = self._bodies(chunk, n)
        if opts.routing_key_column is not None:
            keys = ["" if k is None else str(k) for k in chunk[opts.routing_key_column]]
        else:
            keys = [opts.routing_key] * n
        ids = self._ids(keys, bodies, n)
        if self._constant_raw is not None and ids is None:
            raw = self._constant_raw
            return [(b, k, raw) for b, k in zip(bodies, keys, strict=True)]
        if not self.prop_columns:  # only the id varies: the fast common case
            ct, dm = opts.content_type, opts.delivery_mode
            raws = [encode_properties(Properties(content_type=ct, delivery_mode=dm, message_id=i))
                    for i in ids]
            return list(zip(bodies, keys, raws, strict=True))
        return list(zip(bodies, keys, self._properties(chunk, n, ids), strict=True))

    # ------------------------------------------------------------------ internals
    def _bodies(self, chunk: Mapping[str, list], n: int) -> list[bytes]:
        if self.body_column is None:
            names = self.columns
            cols = [chunk[c] for c in names]
            to_json = self.to_json
            return [to_json(dict(zip(names, row, strict=True)))
                    for row in zip(*cols, strict=True)]
        out = []
        for v in chunk[self.body_column]:
            if v is None:
                out.append(b"")
            elif isinstance(v, bytes):
                out.append(v)
            elif isinstance(v, str):
                out.append(v.encode())
            elif isinstance(v, bytearray | memoryview):
                out.append(bytes(v))
            else:
                raise SinkError(f"body column {self.body_column!r} must be binary or string, "
                                f"got {type(v).__name__}")
        return out

    def _ids(self, keys: list[str], bodies: list[bytes], n: int) -> list[str] | None:
        prefix = self.id_prefix
        if prefix is None:
            return None
        start = self.index
        self.index = start + n
        if self.opts.message_id_mode == "position":
            return [f"{prefix}:{i}" for i in range(start, start + n)]
        seen = self._seen
        ids = []
        for k, b in zip(keys, bodies, strict=True):
            key = _content_key(k, b)
            count = seen.get(key, 0)
            seen[key] = count + 1
            ids.append(f"{prefix}:{key}:{count}")
        return ids

    def _properties(self, chunk: Mapping[str, list], n: int,
                    ids: list[str] | None) -> list[bytes]:
        opts = self.opts
        cols = {c: chunk[c] for c in self.prop_columns}
        out = []
        for i in range(n):
            p = Properties(content_type=opts.content_type, delivery_mode=opts.delivery_mode)
            for name, values in cols.items():
                v = values[i]
                if v is None:
                    continue
                if name == "headers":
                    v = _as_dict(v)
                elif name == "expiration":
                    v = str(v)
                elif name == "timestamp" and isinstance(v, _dt.datetime):
                    v = int(v.timestamp())
                elif name in ("priority", "delivery_mode"):
                    v = int(v)
                setattr(p, name, v)
            if ids is not None and p.message_id is None:
                p.message_id = ids[i]
            try:
                out.append(encode_properties(p))
            except (ValueError, TypeError) as exc:
                raise SinkError(f"row {i}: bad message property: {exc}") from exc
        return out


def chunks_from_rows(rows: Iterable[Any], columns: Sequence[str],
                     size: int) -> Iterable[dict[str, list]]:
    """Column chunks of at most ``size`` rows from an iterator of tuples/Rows."""
    buf: list = []
    for row in rows:
        buf.append(row)
        if len(buf) >= size:
            yield {c: list(v) for c, v in zip(columns, zip(*buf, strict=True), strict=True)}
            buf = []
    if buf:
        yield {c: list(v) for c, v in zip(columns, zip(*buf, strict=True), strict=True)}


class Publisher(OwnsConnection):
    """One confirm-mode channel on a ``clients.blocking.BlockingConnection`` to the first
    answering broker of ``opts.uris``. ``send(messages)`` publishes a chunk and then waits for
    the confirms of the *previous* chunk (one chunk in flight while the next is built);
    ``flush()`` waits for the rest. Raises ``clients.PublishNacked``, ``clients.MessageReturned``
    (mandatory, unroutable), ``ConnectionClosed``/``ChannelClosed``, ``TimeoutError`` — the
    broker did not take a message and the Spark task must fail. Connects in ``CONNECT_ROUNDS``
    rounds over the list (a member changing its view may refuse for a moment). No reconnect: a
    lost connection fails the task, and Spark's retry (``spark.local``: on by default) re-sends with the same
    message ids, through the next broker first (``uris_for_attempt``)."""

    def __init__(self, opts: SinkOptions, client_name: str = "spark amqp sink") -> None:
        self.opts = opts
        self.conn = connect(opts.uris, client_name, opts.confirm_timeout)
        try:
            self.channel = self.conn.channel(confirm=True)
        except BaseException:
            self.conn.close()
            raise
        self._inflight: list = []
        self.published = 0

    def send(self, messages: list[tuple[bytes, str, bytes]]) -> None:
        """Publish ``messages`` (``(body, routing_key, props_raw)`` triples, as
        ``MessageBuilder.build`` makes them) to ``opts.exchange``, then wait for the confirms of
        the previous ``send`` (at most ``opts.confirm_timeout`` seconds). Raises as the class
        says; ``clients.ConfirmsLost`` when the connection dropped with messages unconfirmed."""
        if not messages:
            return
        opts = self.opts
        confirmations = self.channel.publish_batch(messages, opts.exchange,
                                                   mandatory=opts.mandatory)
        previous, self._inflight = self._inflight, confirmations
        self.channel.wait_confirmations(previous, opts.confirm_timeout)
        self.published += len(messages)

    def flush(self) -> None:
        """Wait until every message sent so far is confirmed (raises as the class says)."""
        if self._inflight:
            self.channel.wait_confirmations(self._inflight, self.opts.confirm_timeout)
            self._inflight = []
