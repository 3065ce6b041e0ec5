"""The Spark-free half of the sink (``spark.publish``): options, rows -> messages, publisher.

No JVM here: fast, and run even where pyspark is not installed. The publisher tests use the real
broker process of ``conftest.broker``.
"""

from __future__ import annotations

import json

import pytest

from clients import MessageReturned, PublishNacked
from clients.message import decode_properties
from spark.publish import (
    MessageBuilder,
    Publisher,
    SinkError,
    SinkOptions,
    chunks_from_rows,
    uris_for_attempt,
)
from spark.tests.conftest import drain

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _props(raw: bytes):
    # decode_properties takes a whole content header payload: class, weight, body size, flags...
    return decode_properties(b"\x00\x3c\x00\x00" + b"\x00" * 8 + raw)


def test_options_defaults_and_parsing():
    o = SinkOptions.parse({"URI": f" {URI} , amqp://h2/ ", "Exchange": "ex"})
    assert o.uris == (URI, "amqp://h2/")
    assert (o.exchange, o.routing_key, o.format, o.mandatory, o.delivery_mode) == \
        ("ex", "", "body", True, 2)
    assert o.message_id_mode == "position" and o.batch_size == 2000
    j = SinkOptions.parse({"uri": URI, "format": "JSON", "mandatory": "false",
                           "delivery_mode": "1", "checkpointLocation": "/x"})
    assert (j.format, j.content_type, j.mandatory, j.delivery_mode) == \
        ("json", "application/json", False, 1)


@pytest.mark.parametrize("options, error", [
    ({}, '"uri" is required'),
    ({"uri": URI, "format": "xml"}, "format"),
    ({"uri": URI, "mandatory": "maybe"}, "true or false"),
    ({"uri": URI, "delivery_mode": "3"}, "1..2"),
    ({"uri": URI, "routing_key": "a", "routing_key_column": "b"}, "not both"),
    ({"uri": URI, "exchage": "x"}, "did you mean 'exchange'"),
    ({"uri": URI, "message_id_mode": "random"}, "message_id_mode"),
])
def test_bad_options(options, error):
    with pytest.raises(SinkError, match=error):
        SinkOptions.parse(options)


def test_a_retried_task_starts_at_the_next_broker():
    uris = ("amqp://a/", "amqp://b/", "amqp://c/")
    assert uris_for_attempt(uris, 0) == uris
    assert uris_for_attempt(uris, 1) == ("amqp://b/", "amqp://c/", "amqp://a/")
    assert uris_for_attempt(uris, 5) == ("amqp://c/", "amqp://a/", "amqp://b/")
    assert uris_for_attempt(uris[:1], 3) == uris[:1]


def test_body_column_resolution():
    o = SinkOptions.parse({"uri": URI})
    assert o.resolve_body_column(["value", "x"]) == "value"
    assert o.resolve_body_column(["value", "body"]) == "body"
    with pytest.raises(SinkError, match="no body"):
        o.resolve_body_column(["x"])
    with pytest.raises(SinkError, match="not a column"):
        SinkOptions.parse({"uri": URI, "body_column": "b"}).resolve_body_column(["x"])


def test_position_ids_continue_across_chunks_and_properties_are_encoded():
    o = SinkOptions.parse({"uri": URI, "routing_key": "rk", "content_type": "text/plain"})
    b = MessageBuilder(o, ["body"], id_prefix="q:7:1")
    first = b.build({"body": ["a", b"b"]})
    second = b.build({"body": [None]})
    assert [(m[0], m[1]) for m in first + second] == [(b"a", "rk"), (b"b", "rk"), (b"", "rk")]
    props = [_props(m[2]) for m in first + second]
    assert [p.message_id for p in props] == ["q:7:1:0", "q:7:1:1", "q:7:1:2"]
    assert {(p.content_type, p.delivery_mode) for p in props} == {("text/plain", 2)}


def test_content_ids_do_not_depend_on_row_order():
    o = SinkOptions.parse({"uri": URI, "message_id_mode": "content",
                           "routing_key_column": "k"})
    rows = {"k": ["a", "a", "b", "a"], "body": ["x", "x", "x", "y"]}
    ids1 = [_props(m[2]).message_id for m in MessageBuilder(o, ["k", "body"], id_prefix="p")
            .build(rows)]
    rev = {c: list(reversed(v)) for c, v in rows.items()}
    ids2 = [_props(m[2]).message_id for m in MessageBuilder(o, ["k", "body"], id_prefix="p")
            .build(rev)]
    assert len(set(ids1)) == 4
    assert sorted(ids1) == sorted(ids2)


def test_own_message_id_column_wins_and_none_mode_sets_no_id():
    o = SinkOptions.parse({"uri": URI})
    b = MessageBuilder(o, ["body", "message_id", "headers", "priority", "expiration"],
                       id_prefix="p")
    (m,) = b.build({"body": ["x"], "message_id": ["mine"], "headers": [[("a", 1)]],
                    "priority": [3], "expiration": [1000]})
    p = _props(m[2])
    assert (p.message_id, p.headers, p.priority, p.expiration) == ("mine", {"a": 1}, 3, "1000")
    none = SinkOptions.parse({"uri": URI, "message_id_mode": "none"})
    (m,) = MessageBuilder(none, ["body"], id_prefix="p").build({"body": ["x"]})
    assert _props(m[2]).message_id is None


def test_json_format_and_bad_values():
    o = SinkOptions.parse({"uri": URI, "format": "json"})
    b = MessageBuilder(o, ["a", "b"], to_json=lambda row: json.dumps(row).encode())
    (m,) = b.build({"a": [1], "b": ["x"]})
    assert json.loads(m[0]) == {"a": 1, "b": "x"}
    with pytest.raises(SinkError, match="binary or string"):
        MessageBuilder(SinkOptions.parse({"uri": URI}), ["body"]).build({"body": [1]})
    with pytest.raises(SinkError, match="bad message property"):
        MessageBuilder(SinkOptions.parse({"uri": URI}), ["body", "priority"]).build(
            {"body": ["x"], "priority": [300]})


def test_chunks_from_rows():
    chunks = list(chunks_from_rows(iter([(1, "a"), (2, "b"), (3, "c")]), ["n", "s"], 2))
    assert chunks == [{"n": [1, 2], "s": ["a", "b"]}, {"n": [3], "s": ["c"]}]


def test_publisher_confirms_every_message(broker, amqp, unique):
    amqp.queue_declare(unique)
    o = SinkOptions.parse({"uri": broker.uri, "routing_key": unique, "batch_size": "7"})
    b = MessageBuilder(o, ["body"], id_prefix="t")
    with Publisher(o) as pub:
        for start in range(0, 50, 7):
            pub.send(b.build({"body": [str(i) for i in range(start, min(start + 7, 50))]}))
        pub.flush()
        assert pub.published == 50
    got = drain(amqp, unique, 50)
    assert [int(body) for _, body in got] == list(range(50))


def test_publisher_raises_on_return_and_nack(broker, amqp, unique):
    o = SinkOptions.parse({"uri": broker.uri, "routing_key": unique + ".nowhere"})
    with Publisher(o) as pub, pytest.raises(MessageReturned):
        pub.send([(b"x", unique + ".nowhere", b"\x00\x00")])
        pub.flush()
    amqp.queue_declare(unique, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    o = SinkOptions.parse({"uri": broker.uri, "routing_key": unique})
    with Publisher(o) as pub, pytest.raises(PublishNacked):
        pub.send([(b"1", unique, b"\x00\x00"), (b"2", unique, b"\x00\x00")])
        pub.flush()
