"""The Spark-free half of the source (``spark.consume``), against the broker process: options,
offsets learnt by probing, reading an offset range, refusing a classic queue without acking
anything, and a range whose head retention removed. No JVM needed."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from spark.consume import (
    SourceError,
    SourceOptions,
    StartSpec,
    StreamProbe,
    header_text,
    parse_start,
    read_range,
    split_range,
)

pika = pytest.importorskip("pika")

STREAM = {"x-queue-type": "stream"}


def _opts(broker, queue: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"uri": broker.uri, "queue": queue, **extra})


def test_options():
    o = SourceOptions.parse({"URI": "amqp://a/, amqp://b/", "Queue": "s"})
    assert o.uris == ("amqp://a/", "amqp://b/") and o.queue == "s"
    assert (o.starting, o.ending, o.max_messages_per_batch) == (StartSpec("first"), None, None)
    o = SourceOptions.parse({"uri": "amqp://a/", "queue": "s", "startingOffset": "42",
                             "endingOffset": "100", "max_messages_per_batch": "10",
                             "fail_on_data_loss": "false"})
    assert (o.starting, o.ending, o.max_messages_per_batch, o.fail_on_data_loss) == (
        StartSpec("offset", 42), 100, 10, False)
    assert parse_start("LAST") == StartSpec("last")
    assert parse_start("2026-05-01T12:00:00Z").timestamp == dt.datetime(2026, 5, 1, 12,
                                                                         tzinfo=dt.UTC)
    assert parse_start("2026-05-01T12:00:00").timestamp.tzinfo is dt.UTC
    for bad, needle in [({"queue": "s"}, '"uri" is required'),
                        ({"uri": "amqp://a/"}, '"queue" is required'),
                        ({"uri": "amqp://a/", "queue": "s", "startingOffset": "-1"}, ">= 0"),
                        ({"uri": "amqp://a/", "queue": "s", "startingOffset": "soon"}, "ISO"),
                        ({"uri": "amqp://a/", "queue": "s", "endingOffset": "last"}, "latest"),
                        ({"uri": "amqp://a/", "queue": "s", "prefetch": "0"}, "1..65535"),
                        ({"uri": "amqp://a/", "queue": "s", "max_messages_per_bach": "1"},
                         "did you mean 'max_messages_per_batch'")]:
        with pytest.raises(SourceError, match=needle):
            SourceOptions.parse(bad)


def test_split_range_and_header_text():
    assert split_range(10, 25, 4) == [(10, 14), (14, 18), (18, 22), (22, 25)]
    assert split_range(5, 5, 4) == [(5, 5)] and split_range(7, 5, 4) == [(7, 7)]
    assert [header_text(v) for v in (None, "s", b"\xffb", True, 3, 2.5)] == [
        None, "s", "\ufffdb", "true", "3", "2.5"]
    assert header_text({"a": [1, b"x"]}) == '{"a":[1,"x"]}'
    assert header_text(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05+00:00"


def test_probe_and_read_range(broker, amqp, unique):
    amqp.confirm_delivery()
    amqp.queue_declare(unique, durable=True, arguments=STREAM)
    opts = _opts(broker, unique, probe_timeout="0.2")
    with StreamProbe(opts) as probe:
        assert probe.end_offset() == 0  # empty: nothing within probe_timeout
        assert [probe.resolve_start(parse_start(s)) for s in ("first", "last", "next", "7")] == [
            0, 0, 0, 7]
    for i in range(50):
        amqp.basic_publish("", unique, b"b%d" % i,
                           pika.BasicProperties(headers={"n": i}, content_type="x/y"))
    with StreamProbe(opts) as probe:
        assert probe.end_offset() == 50
        assert [probe.resolve_start(parse_start(s)) for s in ("first", "last", "next", "7")] == [
            0, 49, 50, 7]
        future = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
        assert probe.resolve_start(parse_start(future)) == 50  # nothing after it yet
        assert probe.resolve_start(parse_start("2000-01-01T00:00:00Z")) == 0
    rows = list(read_range(_opts(broker, unique, prefetch="3"), 20, 30))
    assert [r[0] for r in rows] == list(range(20, 30))
    offset, ts, exchange, rk, body, ctype, mid, headers = rows[0]
    assert (offset, ts, exchange, rk, body, ctype, mid, headers) == (
        20, None, "", unique, b"b20", "x/y", None, {"n": "20"})
    assert list(read_range(opts, 30, 30)) == []


def test_a_classic_queue_is_refused_and_nothing_acked(broker, amqp, unique):
    amqp.queue_declare(unique)
    amqp.basic_publish("", unique, b"keep")
    with pytest.raises(SourceError, match="not a stream queue"):
        list(read_range(_opts(broker, unique), 0, 1))
    assert amqp.queue_declare(unique, passive=True).method.message_count == 1


def test_a_range_whose_head_retention_removed(broker, amqp, unique):
    amqp.confirm_delivery()
    amqp.queue_declare(unique, durable=True, arguments={
        **STREAM, "x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000})
    for i in range(300):
        amqp.basic_publish("", unique, b"%05d" % i + b"." * 495)
    opts = _opts(broker, unique, read_timeout="5")
    deadline = time.monotonic() + 10
    with StreamProbe(opts) as probe:
        while (first := probe.first_offset()) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first and first > 200
        assert probe.resolve_start(parse_start("5")) == first  # an offset before the head
    with pytest.raises(SourceError, match=f"offsets 0..{first - 1} are gone"):
        list(read_range(opts, 0, 300))
    lenient = _opts(broker, unique, fail_on_data_loss="false")
    assert [r[0] for r in read_range(lenient, 0, 300)] == list(range(first, 300))
