"""The Spark-free half of the ``amqp`` source: options, a stream queue's offsets learnt over AMQP
0-9-1, and reading an offset range as rows.

Owns the source's option parsing (``SourceOptions``), turning a ``startingOffset`` into a number
and finding the end of the stream (``StreamProbe``), and reading the offsets ``[start, end)`` of a
stream queue as row tuples of ``ROW_FIELDS`` (``read_range``). Nothing here imports pyspark;
``spark.source`` wires it into Spark.

How the offsets are learnt: AMQP 0-9-1 has no "what is the last offset" request and a stream's
Declare-Ok reports 0 messages, so the probe attaches a consumer and looks at the ``x-stream-offset``
header of what it is given. The end of the stream: a consumer at ``x-stream-offset: last`` (prefetch
``TAIL_PREFETCH``, never acked) gets the last message first on our broker and the first message of
the last chunk on RabbitMQ, followed by the rest of that chunk; the probe reads on until nothing
more comes for ``TAIL_SETTLE`` seconds and takes the highest offset seen. No delivery within
``probe_timeout`` seconds: the stream is empty (its end is offset 0). The first offset: a consumer
at ``first``; a timestamp: a consumer at that timestamp. Each probe is cancelled at once; stream
acks remove nothing, so probing changes nothing in the stream. The end found may trail the real
end (a publish racing the probe, or a last chunk larger than the prefetch): the next probe sees it.

Offsets are the stream's own (``x-stream-offset``, from 0, contiguous). A range is half-open:
``start`` is read, ``end`` is not. Within a range the offsets arrive in order; messages before
``start`` (RabbitMQ starts numeric offsets at their chunk) are acked and skipped; a first
delivery after ``start`` (the head of the range removed by retention before the read) fails the
read unless ``fail_on_data_loss`` is false. Retention only removes the head of a stream, so later
jumps are not losses and are passed over (our broker's offsets have none). Reads ack in groups of
half the prefetch: acks only return credit on a stream.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .common import OwnsConnection, connect, lowered_options, option_bool, option_int, option_uris

__all__ = [
    "SourceOptions", "SourceError", "StreamProbe", "read_range", "split_range", "ROW_FIELDS",
    "row_of",
]

log = logging.getLogger("spark.amqp.source")

#: The source's columns, in order (``spark.source.SCHEMA`` gives their Spark types).
ROW_FIELDS = ("offset", "timestamp", "exchange", "routing_key", "body", "content_type",
              "message_id", "headers")
#: The delivery header carrying a stream message's offset.
OFFSET_HEADER = "x-stream-offset"
#: Prefetch of the end-of-stream probe (deliveries it may see of RabbitMQ's last chunk).
TAIL_PREFETCH = 2000
#: Seconds without a further delivery after which the end-of-stream probe stops reading.
TAIL_SETTLE = 0.05
#: Longest an end-of-stream probe reads (a stream being written fast keeps delivering).
TAIL_MAX_SECONDS = 1.0

_KNOWN_OPTIONS = {
    "uri", "queue", "startingoffset", "starting_offset", "endingoffset", "ending_offset",
    "max_messages_per_batch", "messages_per_partition", "prefetch", "read_timeout",
    "probe_timeout", "fail_on_data_loss", "failover_timeout",
}


class SourceError(Exception):
    """A bad option, a queue that is missing or not a stream, a read that timed out, or messages
    of the requested range that are gone (retention) with ``fail_on_data_loss``."""


@dataclass(frozen=True)
class StartSpec:
    """Where reading starts: ``kind`` "first", "last", "next", "offset" (``offset``) or
    "timestamp" (``timestamp``, seconds precision as AMQP 0-9-1 timestamps)."""

    kind: str
    offset: int = 0
    timestamp: _dt.datetime | None = None

    def argument(self) -> Any:
        """The ``x-stream-offset`` consumer argument for this start."""
        if self.kind == "offset":
            return self.offset
        if self.kind == "timestamp":
            return self.timestamp
        return self.kind


def _int(name: str, value: str, lo: int, hi: int) -> int:
    return option_int(name, value, lo, hi, SourceError)


def _seconds(name: str, value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        raise SourceError(f"option {name}: expected seconds, got {value!r}") from None
    if not s > 0:
        raise SourceError(f"option {name}: must be > 0, got {s}")
    return s


def _bool(name: str, value: str) -> bool:
    return option_bool(name, value, SourceError)


def parse_start(value: str) -> StartSpec:
    """``startingOffset``: "first", "last", "next", an offset (integer >= 0) or an ISO-8601
    timestamp (UTC when it has no zone), e.g. ``2026-05-01T12:00:00Z``."""
    text = value.strip()
    low = text.lower()
    if low in ("first", "last", "next"):
        return StartSpec(low)
    try:
        n = int(text)
    except ValueError:
        pass
    else:
        if n < 0:
            raise SourceError(f"option startingOffset: an offset must be >= 0, got {n}")
        return StartSpec("offset", n)
    try:
        ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise SourceError(f'option startingOffset: "first", "last", "next", an offset or an '
                          f"ISO-8601 timestamp, got {value!r}") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.UTC)
    return StartSpec("timestamp", timestamp=ts)


def parse_end(value: str) -> int | None:
    """``endingOffset``: "latest" (None: the end of the stream when the read is planned) or an
    offset (integer >= 0, exclusive)."""
    text = value.strip()
    if text.lower() in ("latest", "next"):
        return None
    try:
        n = int(text)
    except ValueError:
        raise SourceError(f'option endingOffset: "latest" or an offset (exclusive), '
                          f"got {value!r}") from None
    if n < 0:
        raise SourceError(f"option endingOffset: must be >= 0, got {n}")
    return n


@dataclass(frozen=True)
class SourceOptions:
    """The ``.option(...)`` values of ``spark.read/readStream.format("amqp")`` (see ``parse``).
    Immutable and picklable."""

    uris: tuple[str, ...]
    queue: str
    starting: StartSpec = StartSpec("first")
    ending: int | None = None
    max_messages_per_batch: int | None = None
    messages_per_partition: int = 100_000
    prefetch: int = 1000
    read_timeout: float = 30.0
    probe_timeout: float = 0.5
    fail_on_data_loss: bool = True
    failover_timeout: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Options as Spark hands them (keys case-insensitive). Required: ``uri`` (several
        comma-separated: failover) and ``queue`` (a stream queue). ``failover_timeout``
        (seconds, default 60): how long a streaming query waits for a broker of the list to
        answer its probes before it fails (``spark.failover``). Raises ``SourceError`` for a
        missing or bad value, or an unknown option that looks like a typo of ours."""
        opts = lowered_options(options, _KNOWN_OPTIONS, SourceError)
        uris = option_uris(opts, SourceError)
        queue = opts.get("queue", "")
        if not queue:
            raise SourceError('option "queue" is required: the name of a stream queue '
                              "(x-queue-type: stream)")
        start = opts.get("startingoffset", opts.get("starting_offset", "first"))
        end = opts.get("endingoffset", opts.get("ending_offset", "latest"))
        mmpb = opts.get("max_messages_per_batch")
        return cls(
            uris=uris,
            queue=queue,
            starting=parse_start(start),
            ending=parse_end(end),
            max_messages_per_batch=(None if mmpb in (None, "") else
                                    _int("max_messages_per_batch", mmpb, 1, 1 << 62)),
            messages_per_partition=_int("messages_per_partition",
                                        opts.get("messages_per_partition", "100000"), 1, 1 << 62),
            prefetch=_int("prefetch", opts.get("prefetch", "1000"), 1, 65535),
            read_timeout=_seconds("read_timeout", opts.get("read_timeout", "30")),
            probe_timeout=_seconds("probe_timeout", opts.get("probe_timeout", "0.5")),
            fail_on_data_loss=_bool("fail_on_data_loss",
                                    opts.get("fail_on_data_loss", "true")),
            failover_timeout=_seconds("failover_timeout", opts.get("failover_timeout", "60")),
        )


def split_range(start: int, end: int, size: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into consecutive half-open pieces of at most ``size`` offsets; one
    empty piece when the range is empty (Spark wants at least one partition)."""
    if end <= start:
        return [(start, start)]
    return [(s, min(s + size, end)) for s in range(start, end, size)]


# --------------------------------------------------------------------------- connections
# (``spark.common.connect``: no reconnect, a lost connection fails the task and Spark re-reads
# the range)
def _consume(channel: Any, opts: SourceOptions, argument: Any) -> Any:
    from clients.errors import ChannelClosed

    try:
        return channel.consume(opts.queue, arguments={OFFSET_HEADER: argument})
    except ChannelClosed as exc:
        if exc.reply_code == 404:
            raise SourceError(f"queue {opts.queue!r} does not exist (declare it with "
                              f"x-queue-type: stream)") from exc
        raise SourceError(f"cannot consume queue {opts.queue!r} at {OFFSET_HEADER}="
                          f"{argument!r}: {exc} (is it a stream queue?)") from exc


def _offset_of(message: Any, queue: str) -> int:
    headers = message.properties.headers or {}
    offset = headers.get(OFFSET_HEADER)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise SourceError(f"queue {queue!r} delivered a message without an integer "
                          f"{OFFSET_HEADER} header: it is not a stream queue "
                          f"(declare it with x-queue-type: stream); nothing was acked")
    return offset


class StreamProbe(OwnsConnection):
    """One connection for learning offsets of ``opts.queue`` (see the module doc). Use as a
    context manager. ``timeout``: seconds per request and, shared by the addresses, for
    connecting (None: 10 s per request, the URIs' ``connection_timeout`` per address). Raises
    ``SourceError`` (missing queue, not a stream) and the client's errors
    (``NoBrokerAvailable``, ``ConnectionClosed``, ``TimeoutError``): ``spark.failover`` retries
    those through the rest of the ``uri`` list."""

    def __init__(self, opts: SourceOptions, client_name: str = "spark amqp source probe",
                 timeout: float | None = None) -> None:
        self.opts = opts
        if timeout is None:   # one round: ``spark.failover`` retries through the list
            self.conn = connect(opts.uris, client_name, max(opts.probe_timeout, 10.0), rounds=1)
        else:
            self.conn = connect(opts.uris, client_name, max(opts.probe_timeout, timeout),
                                rounds=1, connect_timeout=max(1.0, timeout / len(opts.uris)))

    def _deliveries(self, argument: Any, prefetch: int, first_wait: float, settle: float,
                    most: int) -> list[int]:
        """Offsets delivered to a consumer attached at ``argument``: the first within
        ``first_wait`` s, then each next within ``settle`` s, at most ``most`` of them and for
        at most ``TAIL_MAX_SECONDS`` after the first."""
        channel = self.conn.channel(prefetch=prefetch)
        try:
            consumer = _consume(channel, self.opts, argument)
            offsets: list[int] = []
            message = consumer.get(first_wait)
            deadline = time.monotonic() + TAIL_MAX_SECONDS
            while message is not None:
                offsets.append(_offset_of(message, self.opts.queue))
                if len(offsets) >= most or time.monotonic() > deadline:
                    break
                message = consumer.get(settle)
            return offsets
        finally:
            # Closing the channel cancels the consumer; unacked stream deliveries only held
            # its credit.
            if channel.is_open:
                channel.close()

    def first_offset(self, argument: Any = "first") -> int | None:
        """The offset of the first message a consumer attached at ``argument`` gets, None when
        none comes within ``probe_timeout`` (nothing there yet)."""
        got = self._deliveries(argument, 1, self.opts.probe_timeout, 0.0, 1)
        return got[0] if got else None

    def end_offset(self) -> int:
        """The stream's end: the offset after its last message (0 when it is empty)."""
        got = self._deliveries("last", TAIL_PREFETCH, self.opts.probe_timeout, TAIL_SETTLE,
                               TAIL_PREFETCH)
        return max(got) + 1 if got else 0

    def resolve_start(self, spec: StartSpec) -> int:
        """The first offset to read for ``spec``: "first" the oldest kept message, "last" the
        last message (so it is read; found with ``end_offset``, so the last message on RabbitMQ
        too, not the start of its last chunk), "next" the end (only messages published later),
        an offset itself but not before the oldest kept one, a timestamp the first message at or
        after it (RabbitMQ: the start of its chunk), else the end."""
        if spec.kind == "next":
            return self.end_offset()
        if spec.kind == "last":
            return max(self.end_offset() - 1, 0)
        if spec.kind == "offset":
            first = self.first_offset("first")
            return spec.offset if first is None else max(spec.offset, first)
        found = self.first_offset(spec.argument())
        if found is not None:
            return found
        return 0 if spec.kind == "first" else self.end_offset()


# --------------------------------------------------------------------------- rows
def _json_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)


def header_text(value: Any) -> str | None:
    """A header value as the ``map<string,string>`` column shows it: strings as they are, byte
    strings decoded as UTF-8 (invalid bytes replaced), booleans "true"/"false", numbers as
    Python prints them, timestamps ISO-8601, nested tables and arrays as JSON, void as NULL."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=_json_default, separators=(",", ":"),
                          ensure_ascii=False)
    return str(value)


def row_of(message: Any, offset: int) -> tuple:
    """The row (``ROW_FIELDS`` order) of a delivered stream message. ``timestamp``: the
    message's ``timestamp`` property (seconds since the epoch, UTC), NULL without one (AMQP 0-9-1
    deliveries do not carry the time the stream stored the message). ``headers``: the message's
    headers as text (``header_text``) without ``x-stream-offset`` (that is ``offset``), NULL when
    there are none."""
    props = message.properties
    ts = props.timestamp
    timestamp = (_dt.datetime.fromtimestamp(ts, _dt.UTC) if isinstance(ts, int) else None)
    headers = None
    if props.headers:
        headers = {str(k): header_text(v) for k, v in props.headers.items()
                   if k != OFFSET_HEADER} or None
    return (offset, timestamp, message.exchange, message.routing_key, bytes(message.body),
            props.content_type, props.message_id, headers)


async def _take(consumer: Any, first_wait: float, most: int) -> list[Any]:
    """In the connection's event loop: the next delivery of ``consumer`` (a
    ``clients.consumer.Consumer``) within ``first_wait`` s, then those that follow at once (each
    within ``_TAKE_GAP`` s), at most ``most``: one trip between threads per group of messages
    rather than per message."""
    message = await consumer.get(first_wait)
    out = []
    while message is not None:
        out.append(message)
        if len(out) >= most:
            break
        message = await consumer.get(_TAKE_GAP)
    return out


#: Seconds ``_take`` waits for a further delivery before it returns what it has.
_TAKE_GAP = 0.002


def read_range(opts: SourceOptions, start: int, end: int,
               client_name: str = "spark amqp source") -> Iterator[tuple]:
    """Rows of the offsets ``[start, end)`` of ``opts.queue``, in offset order, from a consumer
    attached at ``x-stream-offset: start`` (prefetch ``opts.prefetch``; deliveries are taken in
    groups of at most half the prefetch and each group is acked, after its headers were checked,
    with one multiple ack). Raises ``SourceError`` when no message came for ``opts.read_timeout``
    seconds before ``end``, the queue is not a stream (nothing acked then), or
    (``fail_on_data_loss``) offsets of the range are gone; the client's errors when the
    connection is lost or no broker of the list answered in ``CONNECT_ROUNDS`` rounds
    (Spark then retries the whole range: ``spark.source`` starts a retry one broker further
    on)."""
    if end <= start:
        return
    conn = connect(opts.uris, client_name, opts.read_timeout)   # CONNECT_ROUNDS rounds
    try:
        channel = conn.channel(prefetch=opts.prefetch)
        consumer = _consume(channel, opts, start)
        group = max(1, opts.prefetch // 2)
        expected = start
        while expected < end:
            messages = conn.portal.call(_take, consumer.consumer, opts.read_timeout, group)
            if not messages and consumer.consumer.cancelled_by_broker:
                raise SourceError(f"queue {opts.queue!r}: the broker cancelled the consumer at "
                                  f"offset {expected} (was the queue deleted?)")
            if not messages:
                raise SourceError(f"queue {opts.queue!r}: no message for {opts.read_timeout:g} s "
                                  f"at offset {expected} (reading {start}..{end - 1}); the "
                                  f"broker is slow or the stream lost its end")
            offsets = [_offset_of(m, opts.queue) for m in messages]
            channel.ack(messages[-1], multiple=True)  # stream acks only return credit
            for message, offset in zip(messages, offsets, strict=True):
                if offset < expected:  # RabbitMQ starts at the chunk holding `start`
                    continue
                if offset >= end:
                    expected = end
                    break
                if offset > expected == start:  # the head of the range is gone: retention
                    text = (f"queue {opts.queue!r}: offsets {start}..{offset - 1} are gone "
                            f"(removed by retention before they were read)")
                    if opts.fail_on_data_loss:
                        raise SourceError(text + "; set fail_on_data_loss=false to skip them")
                    log.warning("%s; skipped (fail_on_data_loss=false)", text)
                expected = offset + 1
                yield row_of(message, offset)
    finally:
        conn.close()
