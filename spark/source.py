"""The Spark side of the ``amqp`` source: a stream queue read as a DataFrame, in batch or streaming.

Owns the source's schema (``SCHEMA``), its input partitions (an offset range each), the batch
reader (``spark.read.format("amqp")``: the offsets ``[startingOffset, endingOffset)``, the end
found when the read is planned) and the stream reader (``spark.readStream.format("amqp")``:
offsets ``{"queue": <name>, "next": <first offset not read yet>}`` that Spark records in the
checkpoint, so a restarted query goes on from the end of its last batch). ``AmqpDataSource``
(``spark.datasource``) hands reads here; the AMQP side is ``spark.consume``.

Exactly once: a micro-batch is a fixed offset range of an append-only log, so re-running it (a
retried task, a batch replayed after a restart) reads the same rows; what the query writes is
exactly once when its sink is (files, Delta, our sink with a deduplicating queue, ...).
Readers are pickled to the Python workers: connections are opened inside the methods only.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import failover
from .common import uris_for_attempt
from .consume import ROW_FIELDS, SourceError, SourceOptions, read_range, split_range

try:  # Spark >= 4.2: read limits (admission control) and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    _LIMITS = True
except ImportError:  # Spark 4.0/4.1: latestOffset() has no arguments; no max_messages_per_batch
    _LIMITS = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Placeholder: this Spark has no Trigger.AvailableNow for Python sources."""

__all__ = ["SCHEMA", "AmqpInputPartition", "AmqpBatchReader", "AmqpStreamReader",
           "check_read_schema"]

log = logging.getLogger("spark.amqp.source")

#: The source's columns (names in ``spark.consume.ROW_FIELDS`` order).
SCHEMA = StructType([
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("exchange", StringType(), True),
    StructField("routing_key", StringType(), True),
    StructField("body", BinaryType(), True),
    StructField("content_type", StringType(), True),
    StructField("message_id", StringType(), True),
    StructField("headers", MapType(StringType(), StringType(), True), True),
])
assert tuple(SCHEMA.fieldNames()) == ROW_FIELDS


def check_read_schema(schema: StructType) -> None:
    """A schema given with ``.schema(...)`` must be ``SCHEMA`` (same names, same types)."""
    got = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    want = [(f.name, f.dataType.simpleString()) for f in SCHEMA.fields]
    if got != want:
        raise SourceError(f"the amqp source has a fixed schema {SCHEMA.simpleString()}; "
                          f"got {schema.simpleString()} (select/cast columns after loading)")


@dataclass
class AmqpInputPartition(InputPartition):
    """One Spark task's offsets: ``start`` (read) .. ``end`` (not read)."""

    start: int
    end: int


def _partitions(opts: SourceOptions, start: int, end: int) -> list[AmqpInputPartition]:
    return [AmqpInputPartition(s, e) for s, e in
            split_range(start, end, opts.messages_per_partition)]


def _task_name(kind: str, partition: AmqpInputPartition) -> str:
    ctx = TaskContext.get()
    where = f"partition {ctx.partitionId()}" if ctx is not None else "driver"
    return f"spark amqp source {kind} ({where}, offsets {partition.start}..{partition.end - 1})"


def _read(opts: SourceOptions, kind: str, partition: AmqpInputPartition) -> Iterator[tuple]:
    """The rows of one task; a retried task (its broker was lost) starts one broker further on
    in the ``uri`` list (``uris_for_attempt``), and re-reads the same offsets."""
    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber():
        opts = dataclasses.replace(opts, uris=uris_for_attempt(opts.uris, ctx.attemptNumber()))
    return read_range(opts, partition.start, partition.end, _task_name(kind, partition))


class AmqpBatchReader(DataSourceReader):
    """``spark.read.format("amqp")``: the offsets ``[startingOffset, endingOffset)`` of the stream,
    ``endingOffset`` "latest" (default) meaning its end when the read is planned (each action
    plans again); an ``endingOffset`` past the end is cut to it. Split in partitions of
    ``messages_per_partition`` offsets, each read by its own consumer."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[AmqpInputPartition]:
        opts = self.opts
        start, end = failover.probe(opts, "spark amqp source (planning a batch read)",
                                    lambda p: (p.resolve_start(opts.starting), p.end_offset()))
        if opts.ending is not None:
            end = min(end, opts.ending)
        return _partitions(opts, start, max(start, end))

    def read(self, partition: AmqpInputPartition) -> Iterator[tuple]:  # type: ignore[override]
        return _read(self.opts, "batch", partition)


class AmqpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("amqp")``. Offsets: ``{"queue": q, "next": n}``, ``n`` the first
    offset not read yet; a micro-batch reads ``[start.next, end.next)``. ``initialOffset``: the
    start ``startingOffset`` resolves to (only for a new query: a restarted one goes on from its
    checkpoint). ``latestOffset``: the stream's end (see ``spark.consume``), at most
    ``max_messages_per_batch`` after the start (Spark >= 4.2), never before the start, and
    under ``Trigger.AvailableNow`` never past the end seen when the query started.

    Failover (``spark.failover``): each probe goes through the ``uri`` list and is tried again
    through the next members while its broker is lost, for at most ~6 s a call; when no broker
    answers, ``latestOffset`` answers its start (no new batch) and fails the query
    (``SourceUnavailable``) only after ``failover_timeout`` seconds without an answer."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._target: int | None = None  # Trigger.AvailableNow: the end when it started
        self._latest: int | None = None  # the last end probed (reportLatestOffset)
        self._outage = failover.Outage(opts)

    def _offset(self, n: int) -> dict:
        return {"queue": self.opts.queue, "next": n}

    def _next_of(self, offset: dict | None, what: str) -> int:
        if not isinstance(offset, dict) or not isinstance(offset.get("next"), int):
            raise SourceError(f"{what} offset {offset!r} is not an amqp source offset")
        if offset.get("queue") != self.opts.queue:
            raise SourceError(f"the checkpoint's {what} offset is for queue "
                              f"{offset.get('queue')!r}, this query reads {self.opts.queue!r}: "
                              f"use a new checkpoint location for another queue")
        return offset["next"]

    def _end(self) -> int:
        end = failover.probe(self.opts, "spark amqp source (latest offset)",
                             lambda p: p.end_offset())
        self._latest = end
        return end

    def initialOffset(self) -> dict:  # noqa: N802
        start = failover.probe(self.opts, "spark amqp source (initial offset)",
                               lambda p: p.resolve_start(self.opts.starting))
        log.info("queue %r: a new query starts at offset %d (startingOffset %s)",
                 self.opts.queue, start, self.opts.starting.kind)
        return self._offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_messages_per_batch is not None:
            return ReadMaxRows(self.opts.max_messages_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._end()

    def latestOffset(self, start: dict | None = None,  # noqa: N802
                     limit: ReadLimit | None = None) -> dict:
        began = time.monotonic()
        try:
            end = self._end()
            self._outage.ok()
        except failover.SourceUnavailable as exc:
            self._outage.failed(exc, began)  # raises after failover_timeout s
            if start is not None:  # no new batch until a broker answers
                return self._offset(self._next_of(start, "start"))
            if self._latest is None:  # Spark < 4.2, before any end was learnt
                raise
            end = self._latest  # Spark < 4.2: the end it was last given
        if self._target is not None:
            end = min(end, self._target)
        if start is None:  # Spark < 4.2 calls latestOffset() without the start
            return self._offset(end)
        base = self._next_of(start, "start")
        end = max(base, end)
        if _LIMITS and isinstance(limit, ReadMaxRows):
            end = min(end, base + limit.max_rows)
        elif _LIMITS and isinstance(limit, ReadMinRows) and end - base < limit.min_rows:
            end = base
        return self._offset(end)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return None if self._latest is None else self._offset(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[AmqpInputPartition]:
        first = self._next_of(start, "start")
        last = self._next_of(end, "end")
        return _partitions(self.opts, first, max(first, last))

    def read(self, partition: AmqpInputPartition) -> Iterator[tuple]:  # type: ignore[override]
        return _read(self.opts, "micro-batch", partition)

    def commit(self, end: dict) -> None:
        # Nothing to do on the broker: the stream keeps every message until retention, and
        # where this query is lives in Spark's checkpoint (offsets/ and commits/).
        log.debug("queue %r: committed up to offset %s", self.opts.queue, end.get("next"))
