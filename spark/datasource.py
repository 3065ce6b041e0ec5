"""``AmqpDataSource``: the ``amqp`` format of Spark 4's Python Data Source API (a sink and a
stream-queue source).

Owns the Spark side of the sink: the data source class Spark instantiates on the driver, the batch
writer (``df.write.format("amqp")``) and the streaming writer (``df.writeStream.format("amqp")``),
each publishing one task's rows with ``spark.publish.Publisher`` (our client, confirm mode) and
failing the task on a nack, a return (mandatory) or a lost connection. Exactly once for streaming:
every message id is derived from (query id, batch id, partition, row) so a retried task or a
restarted query re-sends the same ids, which a queue declared with
``x-message-deduplication: true`` drops; ``commit``/``abort`` append the batch's outcome to a
JSON-lines log in the checkpoint, and a batch found committed there is not published again.
The source side (a stream queue read in batch or as a stream) is ``spark.source``;
``AmqpDataSource`` hands ``spark.read``/``readStream`` there.
Writers are pickled to the executors: connections are opened inside ``write()`` only.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as _dt
import decimal
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .publish import (
    PROPERTY_COLUMNS,
    MessageBuilder,
    Publisher,
    SinkError,
    SinkOptions,
    chunks_from_rows,
    uris_for_attempt,
)

try:  # Spark >= 4.1: streaming writes get Arrow batches too (much faster than Rows)
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase

    _STREAM_ARROW = True
except ImportError:  # Spark 4.0
    _StreamBase = DataSourceStreamWriter
    _STREAM_ARROW = False

__all__ = ["AmqpDataSource", "AmqpCommitMessage", "BATCH_ID_PROPERTY", "QUERY_ID_PROPERTY"]

log = logging.getLogger("spark.amqp")

#: Local properties Spark sets on every task of a micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: Name of the commit log under the checkpoint when option commit_log is not given.
COMMIT_LOG_NAME = "amqp-sink-commits.jsonl"

_INT_TYPES = (ByteType, ShortType, IntegerType, LongType)
_TEXT_TYPES = (StringType,)


@dataclass
class AmqpCommitMessage(WriterCommitMessage):
    """What one task reports: rows published (and confirmed), its partition and attempt, and
    ``skipped`` when the batch was found committed already (nothing was sent)."""

    partition: int
    attempt: int
    published: int
    seconds: float
    skipped: bool = False


# --------------------------------------------------------------------------- schema checks
def _check_schema(opts: SinkOptions, schema: StructType) -> None:
    """Fail on the driver, before any task runs, for a schema the sink cannot publish."""
    types = {f.name: f.dataType for f in schema.fields}
    body = opts.resolve_body_column(list(types))
    if body is not None and not isinstance(types[body], StringType | BinaryType):
        raise SinkError(f"body column {body!r} must be binary or string, not "
                        f"{types[body].simpleString()}: cast it, or use option format=json")
    rk = opts.routing_key_column
    if rk is not None:
        if rk not in types:
            raise SinkError(f"routing_key_column {rk!r} is not a column of {list(types)}")
        if not isinstance(types[rk], StringType):
            raise SinkError(f"routing_key_column {rk!r} must be a string column")
    for name in PROPERTY_COLUMNS:
        t = types.get(name)
        if t is None:
            continue
        if name == "headers":
            ok = isinstance(t, MapType) and isinstance(t.keyType, StringType)
            want = "map<string, ...>"
        elif name in ("priority", "delivery_mode"):
            ok, want = isinstance(t, _INT_TYPES), "an integer"
        elif name == "expiration":
            ok, want = isinstance(t, _INT_TYPES + _TEXT_TYPES), "an integer (ms) or string"
        elif name == "timestamp":
            ok = isinstance(t, TimestampType | TimestampNTZType | LongType | IntegerType)
            want = "a timestamp or epoch seconds"
        else:
            ok, want = isinstance(t, StringType), "a string"
        if not ok:
            raise SinkError(f"property column {name!r} must be {want}, not {t.simpleString()}")


# --------------------------------------------------------------------------- JSON rows
def _json_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _converter(t: DataType) -> Callable[[Any], Any] | None:
    """Value converter for JSON: maps (Arrow gives pairs) to dicts, recursively; None: as is."""
    if isinstance(t, MapType):
        inner = _converter(t.valueType)
        if inner is None:
            return lambda v: None if v is None else {str(k): x for k, x in
                                                    (v.items() if isinstance(v, dict) else v)}
        return lambda v: None if v is None else {str(k): inner(x) for k, x in
                                                (v.items() if isinstance(v, dict) else v)}
    if isinstance(t, ArrayType):
        inner = _converter(t.elementType)
        if inner is None:
            return None
        return lambda v: None if v is None else [inner(x) for x in v]
    if isinstance(t, StructType):
        subs = [(f.name, _converter(f.dataType)) for f in t.fields]
        if all(c is None for _, c in subs):
            return lambda v: v if v is None or isinstance(v, dict) else v.asDict(recursive=True)

        def struct(v: Any) -> Any:
            if v is None:
                return None
            d = v if isinstance(v, dict) else v.asDict()
            return {n: (c(d.get(n)) if c is not None else d.get(n)) for n, c in subs}

        return struct
    return None


def _json_encoder(schema: StructType) -> Callable[[dict], bytes]:
    convs = [(f.name, _converter(f.dataType)) for f in schema.fields]
    convs = [(n, c) for n, c in convs if c is not None]
    dumps = json.JSONEncoder(default=_json_default, separators=(",", ":"),
                             ensure_ascii=False).encode

    def encode(row: dict) -> bytes:
        for name, conv in convs:
            row[name] = conv(row[name])
        return dumps(row).encode()

    return encode


# --------------------------------------------------------------------------- task body
def _arrow_chunks(batches: Iterator[Any], size: int) -> Iterator[dict[str, list]]:
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            part = batch.slice(start, size)
            yield {name: col.to_pylist() for name, col in
                   zip(part.schema.names, part.columns, strict=True)}


def _publish_task(opts: SinkOptions, schema: StructType, chunks: Iterator[dict[str, list]],
                  id_prefix: str | None) -> tuple[int, float]:
    """Publish every row of one task with confirms; returns (rows, seconds)."""
    started = time.monotonic()
    builder = MessageBuilder(
        opts, schema.fieldNames(),
        to_json=_json_encoder(schema) if opts.format == "json" else None,
        id_prefix=id_prefix)
    ctx = TaskContext.get()
    name = f"spark amqp sink (partition {ctx.partitionId() if ctx else '?'})"
    publisher: Publisher | None = None  # connect on the first row: empty tasks cost nothing
    with contextlib.ExitStack() as stack:
        for chunk in chunks:
            messages = builder.build(chunk)
            if not messages:
                continue
            if publisher is None:
                attempt = ctx.attemptNumber() if ctx else 0
                task_opts = dataclasses.replace(opts, uris=uris_for_attempt(opts.uris, attempt))
                publisher = stack.enter_context(Publisher(task_opts, client_name=name))
            publisher.send(messages)
        if publisher is not None:
            publisher.flush()
    count = publisher.published if publisher is not None else 0
    if opts.fail_first_attempt_for_test and ctx is not None and ctx.attemptNumber() == 0:
        # TEST HOOK (option fail_first_attempt_for_test): every task's first attempt fails
        # *after* its rows were published and confirmed, so the retry re-sends all of them.
        raise RuntimeError(f"fail_first_attempt_for_test: failing attempt 0 of partition "
                           f"{ctx.partitionId()} after publishing {count} rows")
    return count, time.monotonic() - started


def _summary(messages: list[AmqpCommitMessage | None]) -> tuple[int, int, int]:
    done = [m for m in messages if m is not None]
    return sum(m.published for m in done), len(done), len(messages) - len(done)


def _say(text: str) -> None:
    """Driver-side progress: to the ``spark.amqp`` logger and, so it shows in a console
    without logging set up, to stderr."""
    log.info("%s", text)
    if not log.handlers and not logging.getLogger().handlers:
        print(f"[amqp sink] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- batch
class AmqpBatchWriter(DataSourceArrowWriter):
    """``df.write.format("amqp")``: each task publishes its partition with confirms."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        # One id per write job, made on the driver and pickled to every task: a retried task
        # re-sends the same message ids (dedup queues drop the copies).
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> AmqpCommitMessage:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        prefix = f"{self.write_id}:{partition}"
        count, seconds = _publish_task(self.opts, self.schema,
                                       _arrow_chunks(iterator, self.opts.batch_size), prefix)
        return AmqpCommitMessage(partition, ctx.attemptNumber() if ctx else 0, count, seconds)

    def commit(self, messages: list[AmqpCommitMessage | None]) -> None:
        total, tasks, _ = _summary(messages)
        _say(f"write {self.write_id[:8]}: {total} messages published and confirmed by "
             f"{tasks} task(s) to exchange {self.opts.exchange!r}")

    def abort(self, messages: list[AmqpCommitMessage | None]) -> None:
        total, tasks, failed = _summary(messages)
        _say(f"write {self.write_id[:8]} ABORTED: {failed} task(s) failed; {tasks} task(s) had "
             f"published {total} messages, which stay published (AMQP has no rollback)")


# --------------------------------------------------------------------------- streaming
class _CommitLog:
    """JSON lines, one per committed or aborted micro-batch, under the checkpoint."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def committed(self) -> set[int]:
        if self.path is None or not os.path.exists(self.path):
            return set()
        out = set()
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line from a crash: that batch was not committed
                if rec.get("outcome") == "commit":
                    out.add(int(rec["batch_id"]))
        return out

    def append(self, record: dict) -> None:
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _commit_log_path(opts: SinkOptions, options: dict) -> str | None:
    if opts.commit_log:
        return opts.commit_log
    checkpoint = {str(k).lower(): v for k, v in options.items()}.get("checkpointlocation")
    if not checkpoint:
        return None
    if checkpoint.startswith("file:"):
        checkpoint = checkpoint[len("file:"):]
    if "://" in checkpoint:  # a remote file system: record nothing rather than guess
        return None
    return os.path.join(checkpoint, COMMIT_LOG_NAME)


class AmqpStreamWriter(_StreamBase):
    """``df.writeStream.format("amqp")``: each micro-batch task publishes with message ids
    ``<query id>:<batch id>:<partition>:<row>`` (``message_id_mode=content``: the row number is
    replaced by a hash of routing key + body and its occurrence count, for partitions whose row
    order is not deterministic, e.g. after a shuffle). Spark makes a new writer for every batch
    and for every commit, so the committed batch ids are read from the commit log here, on the
    driver, and a task of a batch already committed publishes nothing."""

    def __init__(self, opts: SinkOptions, schema: StructType, log_path: str | None) -> None:
        self.opts = opts
        self.schema = schema
        self.log = _CommitLog(log_path)
        # Only the latest batches can be replayed (Spark runs them in order): keep those, so
        # the pickled writer stays small on a long-running query.
        self.committed = set(sorted(self.log.committed())[-100:])

    def write(self, iterator: Iterator[Any]) -> AmqpCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise SinkError("the amqp stream writer must run inside a Spark task")
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        if batch is None or query is None:
            raise SinkError(f"no {BATCH_ID_PROPERTY}/{QUERY_ID_PROPERTY} local property: "
                            f"this Spark version does not tell the task its micro-batch")
        if int(batch) in self.committed:
            for _ in iterator:  # drain the input; send nothing: the batch is committed already
                pass
            return AmqpCommitMessage(partition, attempt, 0, 0.0, skipped=True)
        size = self.opts.batch_size
        chunks = (_arrow_chunks(iterator, size) if _STREAM_ARROW
                  else chunks_from_rows(iterator, self.schema.fieldNames(), size))
        count, seconds = _publish_task(self.opts, self.schema, chunks,
                                       f"{query}:{batch}:{partition}")
        return AmqpCommitMessage(partition, attempt, count, seconds)

    def commit(self, messages: list[AmqpCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if batchId in self.log.committed():
            total, tasks, _ = _summary(messages)
            self.log.append({"batch_id": batchId, "outcome": "repeat", "messages": total,
                             "time": time.time()})
            _say(f"batch {batchId}: committed already (replayed after a restart): "
                 f"{total} messages re-sent, nothing to commit")
            return
        total, tasks, _ = _summary(messages)
        skipped = sum(1 for m in messages if m is not None and m.skipped)
        retried = sum(1 for m in messages if m is not None and m.attempt > 0)
        self.log.append({"batch_id": batchId, "outcome": "commit", "messages": total,
                         "tasks": tasks, "retried_tasks": retried, "skipped_tasks": skipped,
                         "time": time.time()})
        _say(f"batch {batchId}: {total} messages published and confirmed by {tasks} task(s)")

    def abort(self, messages: list[AmqpCommitMessage | None], batchId: int) -> None:  # noqa: N803
        total, tasks, failed = _summary(messages)
        self.log.append({"batch_id": batchId, "outcome": "abort", "messages": total,
                         "tasks": tasks, "failed_tasks": failed, "time": time.time()})
        _say(f"batch {batchId} ABORTED ({failed} task(s) without result); the batch will be "
             f"re-run with the same message ids")


# --------------------------------------------------------------------------- the source
class AmqpDataSource(DataSource):
    """``format("amqp")``: a batch and streaming sink that publishes rows as AMQP messages, and
    a batch and streaming source that reads a stream queue (``spark.source``; options in
    ``spark.consume.SourceOptions.parse``: ``uri``, ``queue``, ``startingOffset``,
    ``endingOffset``, ``max_messages_per_batch``, ``failover_timeout``, ...; columns
    ``spark.source.SCHEMA``; failover over the ``uri`` list: ``spark.failover``).

    Register with ``spark.dataSource.register(AmqpDataSource)``. Options (all strings):
    ``uri`` (required; several comma-separated for failover), ``exchange`` (default ""),
    ``routing_key`` or ``routing_key_column``, ``format`` ("body": a ``body``/``value`` column,
    binary or string, or ``body_column``; "json": the whole row as a JSON object),
    ``mandatory`` (default true: an unroutable message fails the task), ``content_type``,
    ``delivery_mode`` (default 2, persistent), ``message_id_mode`` ("position" default,
    "content", "none"), ``batch_size`` (messages per confirm round, default 2000),
    ``confirm_timeout`` (seconds, default 30), ``commit_log`` (streaming; default a file in the
    checkpoint) and the test hook ``fail_first_attempt_for_test``. Columns named like message
    properties (content_type, content_encoding, headers map, delivery_mode, priority,
    correlation_id, reply_to, expiration, message_id, timestamp, type, app_id) set them per row.
    """

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> StructType:
        from .source import SCHEMA

        return SCHEMA

    def reader(self, schema: StructType) -> Any:
        from .consume import SourceOptions
        from .source import AmqpBatchReader, check_read_schema

        check_read_schema(schema)
        return AmqpBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802
        from .consume import SourceOptions
        from .source import AmqpStreamReader, check_read_schema

        check_read_schema(schema)
        return AmqpStreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> AmqpBatchWriter:
        opts = SinkOptions.parse(self.options)
        _check_schema(opts, schema)
        return AmqpBatchWriter(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> AmqpStreamWriter:  # noqa: N802
        opts = SinkOptions.parse(self.options)
        _check_schema(opts, schema)
        return AmqpStreamWriter(opts, schema, _commit_log_path(opts, dict(self.options)))
